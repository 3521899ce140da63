import Foundation
import HTTPTypes
import NIOCore
import Transcoder

/// A failure the API reports: a stable `code` (also the metric label), the HTTP status it maps to, and
/// a message for humans. The one place that maps errors to statuses.
package struct ServiceError: Error, Sendable, CustomStringConvertible {
    package let code: ErrorCode
    package let status: HTTPResponse.Status
    package let message: String
    /// Seconds a client should wait before retrying (429, 503, 507).
    package var retryAfterSeconds: Int?
    /// The methods the resource takes (405's `Allow`).
    package var allowedMethods: [HTTPRequest.Method]?

    /// A failure with `code`'s status and `Retry-After` (`ErrorCode`).
    package init(_ code: ErrorCode, _ message: String) {
        self.init(code: code, status: code.status, message: message, retryAfterSeconds: code.retryAfterSeconds)
    }

    private init(code: ErrorCode, status: HTTPResponse.Status, message: String, retryAfterSeconds: Int?) {
        self.code = code
        self.status = status
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
    }

    package var description: String { "\(self.code) (\(self.status.code)): \(self.message)" }

    /// `/readyz` when the node should get no traffic: 503 whatever the reason, which `code` names (a readiness
    /// probe reads the status; an operator reads the code).
    package static func notReady(_ code: ErrorCode, _ message: String) -> ServiceError {
        .init(code: code, status: .serviceUnavailable, message: message, retryAfterSeconds: code.retryAfterSeconds)
    }

    /// An error Hummingbird raised itself with a status no code is registered for: its status is kept, and the
    /// code says whose fault it is.
    package static func framework(_ status: HTTPResponse.Status, _ message: String) -> ServiceError {
        .init(
            code: status.code < 500 ? .badRequest : .internal, status: status, message: message,
            retryAfterSeconds: nil)
    }

    /// A path the service has, asked with a method it does not take there: 405 with `Allow`.
    package static func methodNotAllowed(_ method: HTTPRequest.Method, allowed: [HTTPRequest.Method]) -> ServiceError {
        var error = ServiceError(
            .methodNotAllowed,
            "\(method.rawValue) is not allowed here; this path takes "
                + allowed.map(\.rawValue).joined(separator: ", "))
        error.allowedMethods = allowed
        return error
    }

    package static func badRequest(_ message: String) -> ServiceError { .init(.badRequest, message) }
    static func invalidURL(_ message: String) -> ServiceError { .init(.invalidURL, message) }
    static func destinationNotAllowed(_ message: String) -> ServiceError { .init(.destinationNotAllowed, message) }
    package static func tooLarge(_ message: String) -> ServiceError { .init(.tooLarge, message) }
    package static func requestTimeout(_ message: String) -> ServiceError { .init(.requestTimeout, message) }
    static func queueFull() -> ServiceError { .init(.queueFull, "every transcode worker is busy") }
    static func originNotFound(_ message: String) -> ServiceError { .init(.originNotFound, message) }
    static func originError(_ message: String) -> ServiceError { .init(.originError, message) }
    /// The origin refused the GIF (401, 403, 451): unlike a failure, an answer about the resource.
    static func originRefused(_ message: String) -> ServiceError { .init(.originRefused, message) }
    static func originTimeout(_ message: String) -> ServiceError { .init(.originTimeout, message) }
    package static let shuttingDown = ServiceError(.shuttingDown, "the service is shutting down")
    package static let unauthorized = ServiceError(.unauthorized, "a valid bearer token is required")
    package static func notFound(_ message: String) -> ServiceError { .init(.notFound, message) }
    package static func `internal`(_ message: String) -> ServiceError { .init(.internal, message) }
    /// A takedown's tombstone (RFC 7725): the same bytes or URL are not converted or served again.
    package static func takenDown(_ message: String) -> ServiceError { .init(.takenDown, message) }
    package static let invalidSignature = ServiceError(
        .invalidSignature, "the URL's signature is missing or does not match")
    static func insufficientStorage(_ message: String) -> ServiceError { .init(.insufficientStorage, message) }

    /// The shared result store (S3) failed or cannot be reached: nothing was lost, try again shortly.
    static func storageUnavailable(_ message: String) -> ServiceError { .init(.storageUnavailable, message) }
    /// The process ran short of a resource (file descriptors, memory) for a moment: nothing was lost, try again.
    package static func overloaded(_ message: String) -> ServiceError { .init(.overloaded, message) }

    /// Whether `errno` value `code` says the process ran short of something for a moment (descriptors of its
    /// own or the system's, memory, buffers), not that a file or a peer is at fault: such a failure answers
    /// `overloaded` (503, `Retry-After`) and never marks a stored object damaged.
    static func isShortage(errno code: CInt) -> Bool {
        [EMFILE, ENFILE, ENOMEM, ENOBUFS, EAGAIN].contains(code)
    }

    /// A file operation of this node that failed with `errno` value `code`: `insufficient-storage` when the disk or
    /// quota is full, `overloaded` on a shortage (`isShortage`), `internal` otherwise; `message` says what failed.
    static func file(errno code: CInt, _ message: String) -> ServiceError {
        if code == ENOSPC || code == EDQUOT { return .insufficientStorage("the disk is full") }
        let detail = "\(message): \(String(cString: strerror(code)))"
        return Self.isShortage(errno: code) ? .overloaded(detail) : .internal(detail)
    }

    /// The transcoder's errors: bad input is 422 (413 for size), our own failures 500 (`ErrorCode.status`).
    init(_ error: TranscodeError) {
        self.init(ErrorCode(error.code), error.message)
    }

    /// Any error, as the API reports it.
    package static func from(_ error: any Error) -> ServiceError {
        switch error {
        case let error as ServiceError: return error
        case let error as TranscodeError: return ServiceError(error)
        case let error as S3Error: return .storageUnavailable("the shared result store failed: \(error)")
        case let error as ObjectFilesDisagree: return ServiceError(.io, error.description)
        case let error as IOError where Self.isShortage(errno: error.errnoCode):
            return .overloaded("\(error)")
        default: return .internal("\(error)")
        }
    }
}
