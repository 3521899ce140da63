import HTTPTypes
import Transcoder

/// A failure the API reports: a stable `code` (also the metric label), the HTTP status it maps to, and
/// a message for humans. The one place that maps errors to statuses.
struct ServiceError: Error, Sendable, CustomStringConvertible {
    let code: String
    let status: HTTPResponse.Status
    let message: String
    /// Seconds a client should wait before retrying (429, 503).
    var retryAfterSeconds: Int?

    init(_ code: String, _ status: HTTPResponse.Status, _ message: String, retryAfterSeconds: Int? = nil) {
        self.code = code
        self.status = status
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
    }

    var description: String { "\(self.code) (\(self.status.code)): \(self.message)" }

    /// 507 (RFC 4918), which HTTPTypes does not name.
    static let insufficientStorageStatus = HTTPResponse.Status(code: 507, reasonPhrase: "Insufficient Storage")

    static func badRequest(_ message: String) -> ServiceError { .init("bad-request", .badRequest, message) }
    static func invalidURL(_ message: String) -> ServiceError { .init("invalid-url", .badRequest, message) }
    static func destinationNotAllowed(_ message: String) -> ServiceError {
        .init("destination-not-allowed", .forbidden, message)
    }
    static func tooLarge(_ message: String) -> ServiceError { .init("too-large", .contentTooLarge, message) }
    static func requestTimeout(_ message: String) -> ServiceError {
        .init("request-timeout", .requestTimeout, message)
    }
    static func queueFull(retryAfter: Int) -> ServiceError {
        .init("queue-full", .tooManyRequests, "every transcode worker is busy", retryAfterSeconds: retryAfter)
    }
    static func originNotFound(_ message: String) -> ServiceError { .init("origin-not-found", .notFound, message) }
    static func originError(_ message: String) -> ServiceError { .init("origin-error", .badGateway, message) }
    /// The origin refused the GIF (401, 403, 451): unlike a failure, an answer about the resource.
    static func originRefused(_ message: String) -> ServiceError { .init("origin-refused", .badGateway, message) }
    static func originTimeout(_ message: String) -> ServiceError {
        .init("origin-timeout", .gatewayTimeout, message)
    }
    static let shuttingDown = ServiceError(
        "shutting-down", .serviceUnavailable, "the service is shutting down", retryAfterSeconds: 5)
    static let unauthorized = ServiceError("unauthorized", .unauthorized, "a valid bearer token is required")
    static func notFound(_ message: String) -> ServiceError { .init("not-found", .notFound, message) }
    static func `internal`(_ message: String) -> ServiceError { .init("internal", .internalServerError, message) }
    /// A takedown's tombstone (RFC 7725): the same bytes or URL are not converted or served again.
    static func takenDown(_ message: String) -> ServiceError {
        .init("taken-down", .unavailableForLegalReasons, message)
    }
    static let invalidSignature = ServiceError(
        "invalid-signature", .forbidden, "the URL's signature is missing or does not match")
    static func insufficientStorage(_ message: String) -> ServiceError {
        .init("insufficient-storage", Self.insufficientStorageStatus, message, retryAfterSeconds: 60)
    }

    /// The shared result store (S3) failed or cannot be reached: nothing was lost, try again shortly.
    static func storageUnavailable(_ message: String) -> ServiceError {
        .init("storage-unavailable", .serviceUnavailable, message, retryAfterSeconds: 5)
    }

    /// The transcoder's errors: bad input is 422 (413 for size), our own failures 500.
    init(_ error: TranscodeError) {
        let status: HTTPResponse.Status
        switch error.code {
        case .tooLarge: status = .contentTooLarge
        case .invalidOptions: status = .badRequest
        case .unsupportedFormat, .notAnimated, .corrupt, .tooManyFrames, .dimensionsTooLarge, .tooManyPixels:
            status = .unprocessableContent
        case .insufficientStorage: status = Self.insufficientStorageStatus
        default: status = .internalServerError
        }
        self.init(
            error.code.rawValue, status, error.message,
            retryAfterSeconds: error.code == .insufficientStorage ? 60 : nil)
    }

    /// Any error, as the API reports it.
    static func from(_ error: any Error) -> ServiceError {
        switch error {
        case let error as ServiceError: return error
        case let error as TranscodeError: return ServiceError(error)
        case let error as S3Error: return .storageUnavailable("the shared result store failed: \(error)")
        default: return .internal("\(error)")
        }
    }
}
