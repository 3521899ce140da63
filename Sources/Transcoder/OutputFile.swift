import Foundation

/// Files that appear whole or not at all: written under a temporary name in the target's directory,
/// flushed to disk, then renamed over the target. Readers never see a partial file.
enum OutputFile {
    /// A temporary path beside `path`, recognisable by its `.tmp-` infix so leftovers can be swept.
    static func temporaryPath(for path: String) -> String {
        let url = URL(fileURLWithPath: path)
        let random = UInt64.random(in: 0...UInt64.max)
        return url.deletingLastPathComponent()
            .appendingPathComponent(".\(url.lastPathComponent).tmp-\(String(random, radix: 16))").path
    }

    /// Writes `bytes` to a new temporary file beside `path` and syncs it; returns the temporary path.
    static func writeTemporary(_ bytes: [UInt8], beside path: String) throws -> String {
        let temporary = self.temporaryPath(for: path)
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw self.error("open", temporary) }
        defer { close(descriptor) }
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress! + written, bytes.count - written) }
            if result < 0 {
                if errno == EINTR { continue }
                let failure = self.error("write", temporary)
                unlink(temporary)
                throw failure
            }
            written += result
        }
        guard fsync(descriptor) == 0 else {
            let failure = self.error("fsync", temporary)
            unlink(temporary)
            throw failure
        }
        return temporary
    }

    /// Flushes a file another library wrote (libavformat's MP4) to disk.
    static func sync(_ path: String) throws {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw self.error("open", path) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw self.error("fsync", path) }
    }

    /// Renames `temporary` over `path` (atomic on one file system).
    static func commit(_ temporary: String, to path: String) throws {
        guard rename(temporary, path) == 0 else { throw self.error("rename", path) }
    }

    /// Size of a file in bytes.
    static func size(_ path: String) throws -> Int {
        var info = stat()
        guard stat(path, &info) == 0 else { throw self.error("stat", path) }
        return Int(info.st_size)
    }

    static func error(_ operation: String, _ path: String) -> TranscodeError {
        let code = errno
        return TranscodeError(
            self.isStorageFull(code) ? .insufficientStorage : .io,
            "\(operation) \(path): \(String(cString: strerror(code)))")
    }

    /// Whether a POSIX error means the disk or the quota is full.
    static func isStorageFull(_ code: Int32) -> Bool {
        code == ENOSPC || code == EDQUOT
    }
}
