import Foundation
import Hummingbird
import NIOCore
import NIOPosix
import TranscodeCore

/// Receives an uploaded GIF into a temporary file (`ReceivingFile`), as downloads are received: memory
/// holds one chunk at a time, however large the upload and however many arrive at once. The body must end
/// within `timeout` of the start and stay within `limit` bytes.
enum UploadReceiver {
    /// - Returns: the path of the temporary file; the caller removes it.
    /// - Throws: `too-large` (413), `request-timeout` (408), or `internal` when the file cannot be written
    ///   (`insufficient-storage` when the disk is full).
    static func receive(
        _ body: RequestBody, limit: Int, timeout: Duration, into directory: String
    ) async throws -> String {
        let file = try ReceivingFile(in: directory, prefix: "upload")
        var complete = false
        defer { if !complete { unlink(file.path) } }
        let deadline = ContinuousClock.now + timeout
        var offset = 0
        // A client that drips its body is cut off at the first chunk past the deadline; one that stops
        // sending altogether is closed by the idle timeout.
        for try await chunk in body {
            guard ContinuousClock.now <= deadline else {
                throw ServiceError.requestTimeout("the request body did not arrive within \(timeout)")
            }
            guard offset + chunk.readableBytes <= limit else {
                throw ServiceError.tooLarge("the request body is larger than \(limit) bytes")
            }
            try await file.write(chunk, at: offset)
            offset += chunk.readableBytes
        }
        complete = true
        return file.path
    }
}
