/// Why an `.auto` URL answered the source: a bounded label (`X-Fallback`, the log, the metric).
package enum AutoFallback: Sendable, Equatable {
    /// Its better formats are being made (queued at upgrade priority); the next view gets them.
    case upgrading
    /// Its better formats are not made and could not be queued (the upgrades' queue full, shutting down).
    case upgradeRefused
    /// Made, and nothing beats the GIF (no file smaller than it, or none the client shows that is).
    case keptGIF
    /// Made, and a smaller file exists, but the client names none of its types (`*/*`: curl, crawlers).
    case notAccepted
    /// The conversion or the answer failed with this code.
    case failed(ErrorCode)

    package var label: String {
        switch self {
        case .upgrading: "upgrading"
        case .upgradeRefused: "upgrade-refused"
        case .keptGIF: "keep-gif"
        case .notAccepted: "not-accepted"
        case .failed(let code): code.rawValue
        }
    }
}
