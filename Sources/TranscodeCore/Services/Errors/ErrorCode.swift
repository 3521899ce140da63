import HTTPTypes
import Transcoder

/// Every error code the API answers with, its HTTP status and what it means: the registry. A code is never
/// spelled at a call site or compared as a string; the error table of docs/api.md and the OpenAPI document's are
/// checked against `allCases` by a test (`ErrorCodeTests`).
///
/// The same codes label `transcode_errors_total`, fill `X-Error-Code`, and are what a job, a webhook and a batch
/// line report for a failure.
package enum ErrorCode: String, CaseIterable, Sendable, Codable, CustomStringConvertible {
    case badRequest = "bad-request"
    case invalidURL = "invalid-url"
    case invalidOptions = "invalid-options"
    case unauthorized
    case destinationNotAllowed = "destination-not-allowed"
    case invalidSignature = "invalid-signature"
    case notFound = "not-found"
    case originNotFound = "origin-not-found"
    case methodNotAllowed = "method-not-allowed"
    case requestTimeout = "request-timeout"
    case uriTooLong = "uri-too-long"
    case headerTooLarge = "header-too-large"
    case tooLarge = "too-large"
    case tooManyURLs = "too-many-urls"
    case unsupportedMediaType = "unsupported-media-type"
    case unsupportedFormat = "unsupported-format"
    case notAnimated = "not-animated"
    case corrupt
    case tooManyFrames = "too-many-frames"
    case dimensionsTooLarge = "dimensions-too-large"
    case tooManyPixels = "too-many-pixels"
    case tooDeep = "too-deep"
    case tooComplex = "too-complex"
    case tooManyGIFs = "too-many-gifs"
    case queueFull = "queue-full"
    case quotaExceeded = "quota-exceeded"
    case takenDown = "taken-down"
    case `internal`
    case encodeFailed = "encode-failed"
    case io
    case signingNotConfigured = "signing-not-configured"
    case webhooksNotConfigured = "webhooks-not-configured"
    case originError = "origin-error"
    case originRefused = "origin-refused"
    case shuttingDown = "shutting-down"
    case cacheNotWritable = "cache-not-writable"
    case storageUnavailable = "storage-unavailable"
    case queueUnavailable = "queue-unavailable"
    case originTimeout = "origin-timeout"
    case insufficientStorage = "insufficient-storage"
    case overloaded

    package var description: String { self.rawValue }

    /// 507 (RFC 4918), which HTTPTypes does not name.
    static let insufficientStorageStatus = HTTPResponse.Status(code: 507, reasonPhrase: "Insufficient Storage")

    /// The status a request that fails with this code is answered with. (`/readyz` answers 503 whatever
    /// the reason it names: `ServiceError.notReady`.)
    var status: HTTPResponse.Status {
        switch self {
        case .badRequest, .invalidURL, .invalidOptions: .badRequest
        case .unauthorized: .unauthorized
        case .destinationNotAllowed, .invalidSignature: .forbidden
        case .notFound, .originNotFound: .notFound
        case .methodNotAllowed: .methodNotAllowed
        case .requestTimeout: .requestTimeout
        case .uriTooLong: .uriTooLong
        case .headerTooLarge: .requestHeaderFieldsTooLarge
        case .tooLarge, .tooManyURLs: .contentTooLarge
        case .unsupportedMediaType: .unsupportedMediaType
        case .unsupportedFormat, .notAnimated, .corrupt, .tooManyFrames, .dimensionsTooLarge, .tooManyPixels, .tooDeep,
            .tooComplex, .tooManyGIFs:
            .unprocessableContent
        case .queueFull, .quotaExceeded: .tooManyRequests
        case .takenDown: .unavailableForLegalReasons
        case .internal, .encodeFailed, .io: .internalServerError
        case .signingNotConfigured, .webhooksNotConfigured: .notImplemented
        case .originError, .originRefused: .badGateway
        case .shuttingDown, .cacheNotWritable, .storageUnavailable, .queueUnavailable, .overloaded: .serviceUnavailable
        case .originTimeout: .gatewayTimeout
        case .insufficientStorage: Self.insufficientStorageStatus
        }
    }

    /// Seconds a client should wait before trying again (`Retry-After`), for the codes that are about the
    /// service's state rather than the request.
    var retryAfterSeconds: Int? {
        switch self {
        case .queueFull, .overloaded: 2
        case .shuttingDown, .storageUnavailable, .queueUnavailable: 5
        case .insufficientStorage: 60
        default: nil
        }
    }

    /// What it means, for the tables of docs/api.md and the OpenAPI document.
    var meaning: String {
        switch self {
        case .badRequest: "the request is malformed: an unknown field or parameter, bad JSON, a bad colour or path"
        case .invalidURL: "the source or callback URL is not an absolute http(s) URL with a host"
        case .invalidOptions: "the output options are out of range (the server checks its own at startup)"
        case .unauthorized: "a valid bearer token is required (`auth.tokens`)"
        case .destinationNotAllowed:
            "the URL's scheme, host or address is not allowed (`download.allowedHosts`; a loopback origin needs "
                + "`download.allowLoopback`; private addresses are never fetched)"
        case .invalidSignature: "the signed URL's signature is missing or does not match"
        case .notFound: "no such route, object, job or batch"
        case .originNotFound: "the origin answered 404 or 410"
        case .methodNotAllowed: "the path exists but not with this method; `Allow` lists those it takes"
        case .requestTimeout: "the upload did not arrive within `http.bodyTimeoutSeconds`"
        case .uriTooLong: "the request line is longer than 64 KB (the connection is closed)"
        case .headerTooLarge: "the request head is longer than 64 KB (the connection is closed)"
        case .tooLarge: "the body, download or input is over its size limit"
        case .tooManyURLs: "a batch with more URLs than `batch.maxUrls`"
        case .unsupportedMediaType: "the Content-Type is not one the route takes"
        case .unsupportedFormat: "the data is not a GIF, APNG or animated WebP (told by its signature)"
        case .notAnimated: "a still PNG or WebP: nothing to animate"
        case .corrupt: "the data starts like a supported format but no frame decodes"
        case .tooManyFrames: "more frames than `limits.maxFrames`"
        case .dimensionsTooLarge: "the canvas or a frame is larger than `limits.maxWidth` x `limits.maxHeight`"
        case .tooManyPixels: "decoding would produce more than `limits.maxTotalPixels` pixels"
        case .tooDeep: "a rewrite's HTML nests deeper than the parser allows"
        case .tooComplex:
            "a rewrite's HTML took longer than `rewrite.parseTimeoutSeconds` to parse, or has an element with more than 500 attributes or more than 2,000,000 tags"
        case .tooManyGIFs: "a rewrite's HTML has more GIFs than `rewrite.maxGifs`"
        case .queueFull: "every transcode worker is busy and the queue is full"
        case .quotaExceeded:
            "the client's quota (`quota.limits`) has no token left; `Retry-After` gives the seconds until its next, "
                + "`RateLimit` and `RateLimit-Policy` the bucket"
        case .takenDown: "the URL, object or GIF was taken down"
        case .internal: "the service failed unexpectedly"
        case .encodeFailed: "libavcodec or libavformat failed while encoding"
        case .io: "reading or writing a file failed"
        case .signingNotConfigured: "the route needs `signing.keys` and `signing.salts`"
        case .webhooksNotConfigured: "`callbackURL` needs `webhooks.secrets`"
        case .originError: "the origin failed: a 5xx or unexpected status, a bad redirect, DNS or transport failure"
        case .originRefused: "the origin refused the GIF: 401, 403 or 451"
        case .shuttingDown: "the service is draining for shutdown"
        case .cacheNotWritable: "`/readyz`: the cache directory is not writable"
        case .storageUnavailable: "the shared result store (S3) failed or cannot be reached"
        case .queueUnavailable: "the fleet's job database (`queue.kind: postgres`) cannot be reached: batch routes only"
        case .originTimeout: "the origin did not answer in time"
        case .insufficientStorage: "the disk or quota is full (`/readyz`: free space under `cache.minFreeBytes`)"
        case .overloaded:
            "the process ran short of file descriptors or memory for a moment, or too many connections or rewrite "
                + "parses are in progress; nothing was lost or marked damaged"
        }
    }

    /// The code of a transcoder failure.
    init(_ code: TranscodeError.Code) {
        // Every transcoder code is one of ours; a new one the server does not know yet is ours to fix.
        self = ErrorCode(rawValue: code.rawValue) ?? .internal
    }
}

extension ErrorCode {
    /// The error table of docs/api.md: one row per code, in the registry's order.
    static var markdownTable: String {
        var lines = ["| code | status | meaning |", "|---|---|---|"]
        for code in Self.allCases {
            let retry = code.retryAfterSeconds.map { " (with `Retry-After: \($0)`)" } ?? ""
            lines.append("| `\(code.rawValue)` | \(code.status.code) | \(code.meaning)\(retry) |")
        }
        return lines.joined(separator: "\n")
    }
}
