import Foundation
import Hummingbird
import NIOCore
import NIOPosix

/// Receives an uploaded GIF into a temporary file, as downloads are received: memory holds one chunk at a
/// time, however large the upload and however many arrive at once. The body must end within `timeout` of
/// the start and stay within `limit` bytes.
enum UploadReceiver {
    /// - Returns: the path of the temporary file; the caller removes it.
    /// - Throws: `too-large` (413), `request-timeout` (408), or `internal` when the file cannot be written
    ///   (`insufficient-storage` when the disk is full).
    static func receive(
        _ body: RequestBody, limit: Int, timeout: Duration, into directory: String
    ) async throws -> String {
        let path = "\(directory)/upload-\(UInt64.random(in: 0...UInt64.max))"
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw ServiceError.internal("cannot create \(path)") }
        let file = Descriptor(descriptor)
        var complete = false
        defer { if !complete { unlink(path) } }
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
            let start = offset
            try await NIOThreadPool.singleton.runIfActive { try file.write(chunk, at: start) }
            offset += chunk.readableBytes
        }
        complete = true
        return path
    }

    /// Closes its descriptor when released.
    private final class Descriptor: Sendable {
        let value: CInt
        init(_ value: CInt) { self.value = value }
        deinit { close(self.value) }

        func write(_ chunk: ByteBuffer, at offset: Int) throws {
            try chunk.withUnsafeReadableBytes { bytes in
                var written = 0
                while written < bytes.count {
                    let result = pwrite(
                        self.value, bytes.baseAddress! + written, bytes.count - written, off_t(offset + written))
                    if result < 0 {
                        if errno == EINTR { continue }
                        if errno == ENOSPC || errno == EDQUOT {
                            throw ServiceError.insufficientStorage("the disk is full")
                        }
                        throw ServiceError.internal("writing the upload failed: \(String(cString: strerror(errno)))")
                    }
                    written += result
                }
            }
        }
    }
}
