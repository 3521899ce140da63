import Foundation
import NIOCore
import NIOPosix

/// A temporary file that a download or an upload streams into, chunk by chunk: memory holds one chunk at a
/// time, and writes run on the I/O pool, never on the async executor. The descriptor closes when the last
/// reference goes; the caller removes the file.
package final class ReceivingFile: Sendable {
    package let path: String
    private let descriptor: CInt

    /// Creates `directory/prefix-<random><suffix>`.
    /// - Throws: `internal` when the file cannot be created (`insufficient-storage` when the disk is full,
    ///   `overloaded` when the process is out of descriptors).
    package init(in directory: String, prefix: String, suffix: String = "") throws {
        self.path = "\(directory)/\(prefix)-\(UInt64.random(in: 0...UInt64.max))\(suffix)"
        self.descriptor = open(self.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard self.descriptor >= 0 else { throw ServiceError.file(errno: errno, "cannot create \(self.path)") }
    }

    deinit {
        if self.descriptor >= 0 { close(self.descriptor) }
    }

    /// Writes `chunk` at `offset`.
    /// - Throws: `insufficient-storage` (507) when the disk or quota is full, `internal` otherwise.
    package func write(_ chunk: ByteBuffer, at offset: Int) async throws {
        try await NIOThreadPool.singleton.runIfActive {
            try chunk.withUnsafeReadableBytes { bytes in
                var written = 0
                while written < bytes.count {
                    let result = pwrite(
                        self.descriptor, bytes.baseAddress! + written, bytes.count - written, off_t(offset + written))
                    if result < 0 {
                        if errno == EINTR { continue }
                        throw ServiceError.file(errno: errno, "writing \(self.path) failed")
                    }
                    written += result
                }
            }
        }
    }

    /// The whole of a received file (at most the download or upload limit), read on the I/O pool straight into the
    /// array a conversion takes: one copy of the GIF in memory, the one memory admission counts.
    /// - Throws: `internal` saying `what` vanished when the file is gone or cannot be read whole.
    package static func readAll(_ path: String, what: String) async throws -> [UInt8] {
        try await NIOThreadPool.singleton.runIfActive {
            guard let bytes = StoredFile.opening(path)?.readAll(limit: .max) else {
                throw ServiceError.internal("the \(what) vanished")
            }
            return bytes
        }
    }
}
