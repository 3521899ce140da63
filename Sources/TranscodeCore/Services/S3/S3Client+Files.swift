import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// Objects moved between a file and the store a block at a time: a video goes up or comes down with one block in
/// memory, not the whole file, and every read, write and hash of its bytes runs on the I/O pool, never on the event
/// loops that await the transfer.
extension S3Client {
    /// The size of the blocks a file is read and hashed in.
    static var blockBytes: Int { 256 << 10 }

    /// Stores the file at `path` under `name`: `size` bytes whose SHA-256 is `sha256` (lower-case hex, as a
    /// manifest records it). The request is signed with it, and the blocks are hashed as they are read: a file
    /// that no longer agrees never has its last block sent, so nothing is stored (whether or not the store checks
    /// the signed digest: AWS S3 does, SeaweedFS does not).
    func put(_ name: String, file path: String, size: Int, sha256: String, contentType: String) async throws {
        let response = try await self.execute(
            "PUT", name: name, headers: [("Content-Type", contentType)], payloadHash: sha256,
            body: .stream(FileBlocks(path: path, size: size, sha256: sha256), length: .known(Int64(size))))
        _ = try await self.finish(response, "PUT", name: name, expecting: [200])
    }

    /// Writes object `name` to a new file at `path`, streamed as it arrives.
    /// - Returns: its size; nil when there is no such object (then no file is left).
    /// - Throws: `S3Error` as `get` does; the file is removed when the transfer fails.
    func download(_ name: String, to path: String) async throws -> Int? {
        let response = try await self.execute("GET", name: name, payloadHash: SigV4Signer.emptyPayloadHash, body: nil)
        guard response.status == .ok else {
            _ = try await self.finish(response, "GET", name: name, expecting: [])
            return nil
        }
        let directory = (path as NSString).deletingLastPathComponent
        let file = try ReceivingFile(in: directory, prefix: ".download")
        defer { unlink(file.path) }
        var size = 0
        do {
            for try await block in response.body {
                guard size + block.readableBytes <= Self.maxObjectBytes else {
                    throw S3Error(status: nil, code: "unavailable", message: "GET \(name): larger than an object")
                }
                try await file.write(block, at: size)
                size += block.readableBytes
            }
        } catch let error as S3Error {
            throw error
        } catch let error as ServiceError {
            throw error
        } catch {
            throw S3Error(status: nil, code: "unavailable", message: "GET \(name): \(error)")
        }
        guard rename(file.path, path) == 0 else { throw ServiceError.internal("cannot write \(path)") }
        return size
    }
}

/// A file's bytes as `ByteBuffer` blocks, each read (and hashed) on the I/O pool when the request body asks for it.
/// Each iteration reads from the start (a retried request sends the file again); the descriptor closes at the end of
/// the file or when the iteration is dropped. The last block is handed over only when the file's SHA-256 is
/// `sha256`: otherwise the iteration throws `ObjectFilesDisagree`, and the request is cut short.
struct FileBlocks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let path: String
    let size: Int
    let sha256: String

    struct AsyncIterator: AsyncIteratorProtocol {
        let source: FileBlocks
        var offset = 0
        var file: Descriptor?

        /// The open file and the hash of what was read so far; closes the file when the last reference goes.
        final class Descriptor: Sendable {
            let value: CInt
            let hash = Mutex(SHA256())
            init(opening path: String) throws {
                self.value = open(path, O_RDONLY | O_CLOEXEC)
                guard self.value >= 0 else { throw ServiceError.internal("cannot open \(path)") }
            }
            deinit { if self.value >= 0 { close(self.value) } }
        }

        mutating func next() async throws -> ByteBuffer? {
            guard self.offset < self.source.size else {
                self.file = nil
                return nil
            }
            let (path, offset, size, expected) = (self.source.path, self.offset, self.source.size, self.source.sha256)
            let count = Swift.min(S3Client.blockBytes, self.source.size - self.offset)
            let opened = self.file
            let (file, block) = try await NIOThreadPool.singleton.runIfActive { () throws -> (Descriptor, ByteBuffer) in
                let file = try opened ?? Descriptor(opening: path)
                var buffer = ByteBufferAllocator().buffer(capacity: count)
                let read = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { bytes in
                    var done = 0
                    while done < count {
                        let result = pread(file.value, bytes.baseAddress! + done, count - done, off_t(offset + done))
                        if result < 0, errno == EINTR { continue }
                        guard result > 0 else { throw ObjectFilesDisagree("\(path) is shorter than its manifest") }
                        done += result
                    }
                    return done
                }
                precondition(read == count)
                let digest = file.hash.withLock { hash -> String? in
                    buffer.withUnsafeReadableBytes { hash.update(bufferPointer: $0) }
                    return offset + count == size ? HexDigest.encode(hash.finalize()) : nil
                }
                if let digest, digest != expected {
                    throw ObjectFilesDisagree("\(path) is not the file its manifest describes (SHA-256 \(digest))")
                }
                return (file, buffer)
            }
            self.file = file
            self.offset += block.readableBytes
            return block
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(source: self) }
}
