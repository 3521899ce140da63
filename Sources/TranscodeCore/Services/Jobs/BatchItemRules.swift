import Foundation
import Transcoder

/// How a job or a batch's URL stands: `GET /jobs/{id}`'s `status`, a batch result line's, a batch's counts, and a
/// job webhook's. The one place these words are spelled.
package enum ItemStatus: String, Codable, CaseIterable, Sendable {
    case pending
    case done
    /// Converted, but the GIF is the better file (`recommendation: keep-gif`).
    case keptGIF = "kept-gif"
    case failed

    /// The status of a conversion that ended with `outcome`.
    init(_ outcome: TranscodeOutcome) {
        self = outcome.metadata.recommendation == .keepGIF ? .keptGIF : .done
    }
}

/// A failure as jobs, batch lines and webhooks report it: `{"code", "message"}`.
package struct ReportedFailure: Codable, Sendable, Equatable {
    package let code: ErrorCode
    package let message: String

    init(code: ErrorCode, message: String) {
        self.code = code
        self.message = message
    }

    package init(_ failure: ServiceError) {
        self.init(code: failure.code, message: failure.message)
    }

    /// A code this version does not know (written by a newer node into the fleet's database) reads as `internal`.
    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.code = ErrorCode(rawValue: try container.decode(String.self, forKey: .code)) ?? .internal
        self.message = try container.decode(String.self, forKey: .message)
    }
}

/// The rules both batch stores follow for one item (`BatchRunner` on one node, `PostgresBatches` across a fleet),
/// so that a batch's lines and counts do not depend on where it ran.
enum BatchItemRules {
    /// Failures that are not the URL's own (shutting down, the shared store down, the pool full): the item is tried
    /// again later, here or on another node, and the attempt is not counted.
    static let passingFailures: Set<ErrorCode> = [.shuttingDown, .storageUnavailable, .queueFull, .overloaded]

    /// Whether `failure` passes (`passingFailures`) rather than ends the item.
    static func passes(_ failure: ServiceError) -> Bool {
        Self.passingFailures.contains(failure.code)
    }

    /// The options of the job that converts an item of a batch making `output` on `background`.
    /// - Throws: 400 `bad-request` for a background that is not a colour (the batch route refuses one first).
    static func options(background: String?, output: BatchOutput, service: TranscodeService) throws
        -> TranscodeOptions
    {
        let color = try background.map {
            guard let color = RGBColor(hex: $0) else { throw ServiceError.badRequest("bad background") }
            return color
        }
        return output.options(service, background: color)
    }

    /// The result line of item `index` (URL `url`) of a batch making `output` on `background`, ended with `status`:
    /// its links from the object `key` when it has one, its failure when it failed.
    static func line(
        index: Int, url: String, status: ItemStatus, key: ObjectKey?, recommendation: String?, error: ReportedFailure?,
        output: BatchOutput, background: String?, links: PublicLinks
    ) -> BatchResult {
        var line = BatchResult(index: index, url: url, status: status)
        line.error = error
        if let key {
            output.fill(&line, key: key, recommendation: recommendation, background: background, links: links)
        }
        return line
    }
}
