import Foundation
import Transcoder

/// What a batch was asked to do: `POST /v1/batches`' body, kept in a `BatchFolder` (`BatchRunner`) or the database
/// (`PostgresBatches`).
package struct BatchRequest: Codable, Sendable {
    var urls: [String]
    var background: String?
    var callbackURL: String?
    /// Which rewrite's objects the batch prepares (`BatchOutput`); nil (requests recorded before) is `img`.
    var output: String? = nil
    var createdAt: Double = Date().timeIntervalSince1970

    package init(
        urls: [String], background: String?, callbackURL: String?, output: String? = nil,
        createdAt: Double = Date().timeIntervalSince1970
    ) {
        self.urls = urls
        self.background = background
        self.callbackURL = callbackURL
        self.output = output
        self.createdAt = createdAt
    }

    /// What its items make.
    var outputKind: BatchOutput { self.output.flatMap(BatchOutput.init(rawValue:)) ?? .img }
}

/// The objects a batch prepares: those a rewritten page then asks for, so that no GIF of a backfilled archive converts
/// again on its first view. The rules both batch stores follow (`BatchRunner`, `PostgresBatches`).
package enum BatchOutput: String, Sendable {
    /// `POST /v1/rewrite`'s default: the `.auto` URLs' object (video, poster, animated WebP and AVIF).
    case img
    /// `output=video`: the `<video>`'s object (video, poster, the VP9 WebM and its still WebP poster).
    case video
    /// The plain object of a signed `.mp4` URL (video and poster): what an app that plays the MP4 asks for.
    case mp4

    /// The extras of the object its items make.
    var extras: [OutputFormat] {
        switch self {
        case .img: ImageNegotiation.objectFormats
        case .video: HTMLRewriter.videoExtras
        case .mp4: []
        }
    }

    /// The options of an item's job.
    func options(_ service: TranscodeService, background: RGBColor?) -> TranscodeOptions {
        service.options(background: background, extraFormats: self.extras)
    }

    /// An item's result line's links and status from its outcome: the signed URLs of its object's files (the `.mp4`
    /// and poster of the one object, and, for `img`, the `.auto` URL a rewrite writes), or `/media` ones.
    func fill(
        _ result: inout BatchResult, key: ObjectKey, recommendation: String?, background: String?, links: PublicLinks
    ) {
        let background = background.flatMap(RGBColor.init(hex:))
        let signed = links.signed(sourceURL: result.url, background: background, extras: self.extras)
        result.key = key
        result.mp4 = signed?[.video] ?? links.absolute(key.mediaPath(ObjectFiles.video))
        result.poster = signed?[.poster] ?? links.absolute(key.mediaPath(ObjectFiles.poster))
        if self == .img, links.signer.canSign {
            let path = SourcePath(
                sourceURL: result.url, background: background, fileExtension: SourcePath.negotiated
            ).path
            result.auto = links.absolute(links.signer.signedPath(path))
        }
        result.recommendation = recommendation
    }
}

/// One URL of a batch, finished: a line of `batches/<id>/results.ndjson` and of the results route.
package struct BatchResult: Codable, Sendable {
    /// The URL's position in the batch.
    package var index: Int
    package var url: String
    /// `done`, `kept-gif` (converted, but the GIF is the better file) or `failed`.
    package var status: ItemStatus
    var key: ObjectKey?
    package var mp4: String?
    package var poster: String?
    /// The signed `.auto` URL of an `img` batch's item: what a rewritten page's `<img>` asks for.
    var auto: String?
    package var recommendation: String?
    package var error: ReportedFailure?
}

/// The counts of `GET /v1/batches/{id}`.
package struct BatchStatus: Encodable, Sendable {
    let id: String
    let total: Int
    let pending: Int
    let done: Int
    let failed: Int
    let keptGif: Int
    let complete: Bool
    let createdAt: String

    /// - Parameters:
    ///   - counts: the items finished, by how they ended; those not counted are pending.
    ///   - createdAt: seconds since 1970.
    init(id: String, total: Int, counts: [ItemStatus: Int], complete: Bool, createdAt: Double) {
        self.id = id
        self.total = total
        self.done = counts[.done] ?? 0
        self.failed = counts[.failed] ?? 0
        self.keptGif = counts[.keptGIF] ?? 0
        self.pending = total - self.done - self.failed - self.keptGif
        self.complete = complete
        self.createdAt = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: createdAt))
    }
}

/// Where batches are kept and who runs their items: this node alone (`BatchRunner`, the default) or every node
/// of a fleet that shares a database (`PostgresBatches`). The batch routes talk to this only.
package protocol BatchStore: Sendable {
    /// Records a new batch and queues its URLs. - Returns: its id (`BatchID`).
    func submit(_ request: BatchRequest) async throws -> String
    /// Its counts; nil for an unknown batch.
    func status(_ id: String) async throws -> BatchStatus?
    /// Result lines `offset..<offset+limit` in the order they finished, and how many there are.
    /// - Returns: nil for an unknown batch.
    func results(_ id: String, offset: Int, limit: Int) async throws -> (lines: [[UInt8]], total: Int)?
    /// Deletes a batch now. - Returns: whether there was such a batch.
    func delete(_ id: String) async throws -> Bool
}

/// A batch's id: 32 lowercase hex digits, random.
package enum BatchID {
    package static func isValid(_ id: String) -> Bool {
        id.utf8.count == 32 && id.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    package static func random() -> String {
        HexDigest.encode((0..<16).map { _ in UInt8.random(in: 0...255) })
    }
}
