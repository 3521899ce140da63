import Configuration
import Logging
import TranscodeCore
import TranscodeHTTP

/// `log.*`: how much is logged, and as what.
struct LogConfiguration: Sendable, Equatable {
    /// `log.level`, default info.
    var level: Logger.Level = .info
    /// `text` (human-readable lines) or `json` (one JSON object per line, `JSONLogHandler`). `log.format`.
    var format = "text"
}

extension LogConfiguration {
    /// Reads `section` (`log`); a key not set keeps its default.
    init(_ section: ConfigSection) {
        self.init()
        self.format = section.reader.string(forKey: "format", default: self.format)
        section.check("format", ["text", "json"].contains(self.format), "text or json")
        let level = section.reader.string(forKey: "level", default: self.level.rawValue)
        if let parsed = Logger.Level(rawValue: level.lowercased()) {
            self.level = parsed
        } else {
            section.refuse("level", "must be one of trace, debug, info, notice, warning, error, critical")
        }
    }
}
