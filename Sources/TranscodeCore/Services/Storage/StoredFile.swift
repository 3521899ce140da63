import Crypto
import Foundation
import NIOCore
import NIOPosix
import Transcoder

/// A stored file opened for reading, with the size and identity `fstat` gave when it was opened: what is
/// served, hashed or copied is what was checked. The descriptor is closed when the last reference goes.
final class StoredFile: ObjectFileReader {
    let descriptor: CInt
    let size: Int
    /// A file rewritten in place or replaced has another identity.
    let identity: FileIdentity

    /// Takes ownership of `descriptor`.
    init(descriptor: CInt, size: Int, identity: FileIdentity) {
        self.descriptor = descriptor
        self.size = size
        self.identity = identity
    }

    deinit {
        close(self.descriptor)
    }

    /// `length` bytes from `offset`, read (`pread`) on the I/O thread pool: never a blocking read on the caller's
    /// executor. - Throws: `not-found` when the file holds fewer (it shrank while being served).
    func read(at offset: Int, length: Int) async throws -> ByteBuffer {
        let descriptor = self.descriptor
        return try await NIOThreadPool.singleton.runIfActive {
            var buffer = ByteBuffer()
            let read = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: max(1, length)) { pointer in
                max(0, pread(descriptor, pointer.baseAddress, length, off_t(offset)))
            }
            guard read == length else { throw ServiceError.notFound("the file shrank while being served") }
            return buffer
        }
    }

    /// The whole file, read straight into the array (no second copy, no zero fill), when it holds at most `limit`
    /// bytes: metadata (a few hundred bytes; anything much larger was not written by the cache) or a received GIF.
    /// - Returns: nil when it is larger, or shrank while being read.
    func readAll(limit: Int = 1 << 20) -> [UInt8]? {
        guard self.size <= limit else { return nil }
        var complete = false
        let bytes = [UInt8](unsafeUninitializedCapacity: self.size) { buffer, initialized in
            var offset = 0
            while offset < self.size {
                let count = pread(self.descriptor, buffer.baseAddress! + offset, self.size - offset, off_t(offset))
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                offset += count
            }
            initialized = offset
            complete = offset == self.size
        }
        return complete ? bytes : nil
    }

    /// The file at `path`, opened for reading; nil when it cannot be opened.
    static func opening(_ path: String) -> StoredFile? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            close(descriptor)
            return nil
        }
        return StoredFile(descriptor: descriptor, size: Int(info.st_size), identity: FileIdentity(info))
    }

    /// Lower-case hex SHA-256 of the file at `path`, read on the I/O pool; nil when it cannot be read whole.
    static func sha256(ofFile path: String) async throws -> String? {
        try await NIOThreadPool.singleton.runIfActive { Self.opening(path)?.sha256() }
    }

    /// Lower-case hex SHA-256 of the file, read in 1 MiB blocks; nil when it cannot be read whole.
    func sha256() -> String? {
        var hash = SHA256()
        var block = [UInt8](repeating: 0, count: 1 << 20)
        var offset = 0
        while offset < self.size {
            let count = block.withUnsafeMutableBytes {
                pread(self.descriptor, $0.baseAddress, min($0.count, self.size - offset), off_t(offset))
            }
            guard count > 0 else { return nil }
            hash.update(data: block[0..<count])
            offset += count
        }
        return HexDigest.encode(hash.finalize())
    }

    /// Copies the file to `path` (created, or truncated). - Throws: `TranscodeError` `.io`.
    func copy(to path: String) throws {
        let output = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard output >= 0 else { throw TranscodeError(.io, "cannot create \(path)") }
        defer { close(output) }
        var block = [UInt8](repeating: 0, count: 1 << 20)
        var offset = 0
        while offset < self.size {
            let count = block.withUnsafeMutableBytes {
                pread(self.descriptor, $0.baseAddress, min($0.count, self.size - offset), off_t(offset))
            }
            guard count > 0,
                block.withUnsafeBytes({ write(output, $0.baseAddress, count) }) == count
            else { throw TranscodeError(.io, "cannot copy to \(path)") }
            offset += count
        }
    }
}

/// Device, inode, size, modification and change times: the same identity means the very file that was
/// checked, unchanged (a rename, a new link or a write changes the change time). A value, not an array: a
/// cache hit takes two or three of them.
package struct FileIdentity: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64
    package let size: Int
    let modified: timespec
    let changed: timespec

    init(_ info: stat) {
        (self.device, self.inode, self.size) = (UInt64(info.st_dev), UInt64(info.st_ino), Int(info.st_size))
        (self.modified, self.changed) = (info.st_mtim, info.st_ctim)
    }

    /// The identity of the regular file with one link at `path` (`lstat`, no link followed).
    static func current(_ path: String) -> FileIdentity? {
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_nlink == 1 else { return nil }
        return FileIdentity(info)
    }

    package static func == (a: Self, b: Self) -> Bool {
        a.device == b.device && a.inode == b.inode && a.size == b.size
            && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
            && a.changed.tv_sec == b.changed.tv_sec && a.changed.tv_nsec == b.changed.tv_nsec
    }
}
