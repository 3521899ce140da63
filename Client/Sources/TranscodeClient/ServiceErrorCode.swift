/// The service's error codes (`{"error": {"code": ...}}` and `X-Error-Code`), the server's `ErrorCode` registry.
/// `ErrorCodeTests` checks this list against the one the running server publishes in `/openapi.yaml`.
public enum ServiceErrorCode: String, CaseIterable, Sendable, Hashable, Codable {
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

    /// Whether the same request may succeed later (the service was busy, or something on the way failed): the
    /// client retries these, after the answer's `Retry-After` when it has one.
    public var isTransient: Bool {
        switch self {
        case .queueFull, .quotaExceeded, .shuttingDown, .storageUnavailable, .queueUnavailable, .overloaded,
            .originTimeout, .requestTimeout:
            true
        default: false
        }
    }

    /// Whether the GIF itself is the reason (it will fail the same way every time): show the GIF.
    public var isTheSource: Bool {
        switch self {
        case .unsupportedFormat, .notAnimated, .corrupt, .tooManyFrames, .dimensionsTooLarge, .tooManyPixels, .tooDeep,
            .tooComplex, .tooLarge, .originNotFound, .originRefused, .takenDown:
            true
        default: false
        }
    }
}

/// What a call of the client failed with.
public enum TranscodeClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The service answered an error: its HTTP status, its code (nil when the body named a code this client does not
    /// know, or none), its message, and its `Retry-After` in seconds.
    case service(status: Int, code: ServiceErrorCode?, message: String, retryAfter: Double?)
    /// Refused before anything was sent, as the server would refuse it.
    case badRequest(String)
    /// The answer was not what the API promises (not JSON, a field missing, bytes that differ from their digest).
    case invalidResponse(String)
    /// The job did not end within the time given.
    case timedOut(String)

    /// The service's error code, when the service answered one.
    public var code: ServiceErrorCode? {
        if case .service(_, let code, _, _) = self { return code }
        if case .badRequest = self { return .badRequest }
        return nil
    }

    public var description: String {
        switch self {
        case .service(let status, let code, let message, _):
            "the service answered \(status) \(code?.rawValue ?? "(no code)"): \(message)"
        case .badRequest(let message): "bad request: \(message)"
        case .invalidResponse(let message): "invalid response: \(message)"
        case .timedOut(let message): "timed out: \(message)"
        }
    }
}
