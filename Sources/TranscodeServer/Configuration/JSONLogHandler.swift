import Foundation
import Logging
import Synchronization
import TranscodeCore
import TranscodeHTTP

/// `log.format: json`: one JSON object per line, for log shippers that parse rather than read:
/// `{"time": ISO 8601 with milliseconds, "level", "label", "message", ...metadata}`. Metadata keys keep their
/// dotted names (`request.id`, `http.status`). Values keep their types: a number or a boolean passed as one
/// (`.stringConvertible(200)`) is written as a JSON number or boolean, lists and dictionaries as JSON arrays and
/// objects, anything else as a string.
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
        var object: [String: Any] = [:]
        for (key, value) in self.metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 }) {
            object[key] = Self.json(value)
        }
        object["time"] = Date().formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
        object["level"] = event.level.rawValue
        object["label"] = self.label
        object["message"] = "\(event.message)"
        if let error = event.error { object["error"] = "\(error)" }
        guard
            let data = try? JSONSerialization.data(
                withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed])
        else { return }
        self.write(String(decoding: data, as: UTF8.self) + "\n")
    }

    /// A metadata value as a JSON value: numbers and booleans given as such stay typed.
    static func json(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let text): return text
        case .stringConvertible(let convertible):
            switch convertible {
            case let bool as Bool: return bool
            case let integer as any BinaryInteger: return NSNumber(value: Int64(clamping: integer))
            case let double as Double where double.isFinite: return double
            case let float as Float where float.isFinite: return Double(float)
            default: return convertible.description
            }
        case .array(let values): return values.map(Self.json)
        case .dictionary(let values): return values.mapValues(Self.json)
        }
    }

    /// One `write(2)` per line, so lines from several threads do not interleave.
    static let standardError: @Sendable (String) -> Void = { line in
        FileHandle.standardError.write(Data(line.utf8))
    }
}
