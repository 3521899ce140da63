import Foundation
import Logging
import Synchronization

/// `log.format: json`: one JSON object per line, for log shippers that parse rather than read:
/// `{"time": ISO 8601 with milliseconds, "level", "label", "message", ...metadata}`. Metadata keys keep their
/// dotted names (`request.id`, `http.status`); nested values are written as their text.
struct JSONLogHandler: LogHandler {
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info
    let label: String
    /// Where each line goes (standard error by default; tests capture it).
    let write: @Sendable (String) -> Void

    init(label: String, write: @escaping @Sendable (String) -> Void = JSONLogHandler.standardError) {
        self.label = label
        self.write = write
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var object: [String: String] = [:]
        for (key, value) in self.metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 }) {
            object[key] = "\(value)"
        }
        object["time"] = Date().formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
        object["level"] = event.level.rawValue
        object["label"] = self.label
        object["message"] = "\(event.message)"
        if let error = event.error { object["error"] = "\(error)" }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(object) else { return }
        self.write(String(decoding: data, as: UTF8.self) + "\n")
    }

    /// One `write(2)` per line, so lines from several threads do not interleave.
    static let standardError: @Sendable (String) -> Void = { line in
        FileHandle.standardError.write(Data(line.utf8))
    }
}
