import CFFmpeg
import Foundation

/// SHA-256 of the outputs, recorded in the metadata so that a cache can check its files byte for byte
/// (`transcode-server cache verify`). Computed with libavutil's `av_sha`, which the transcoder links
/// already; the server checks with swift-crypto, an independent implementation.
enum ContentHash {
    /// Lower-case hex SHA-256 of `bytes`.
    static func sha256(_ bytes: [UInt8]) throws -> String {
        try self.hash { update in bytes.withUnsafeBufferPointer { update($0) } }
    }

    /// Lower-case hex SHA-256 of the file at `path`, read in 1 MiB blocks.
    static func sha256(ofFile path: String) throws -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw OutputFile.error("open", path) }
        defer { close(descriptor) }
        var block = [UInt8](repeating: 0, count: 1 << 20)
        var failure: TranscodeError?
        let digest = try self.hash { update in
            while true {
                let count = block.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                if count < 0, errno == EINTR { continue }
                if count < 0 { failure = OutputFile.error("read", path) }
                guard count > 0 else { return }
                block.withUnsafeBufferPointer { update(UnsafeBufferPointer(rebasing: $0[0..<count])) }
            }
        }
        if let failure { throw failure }
        return digest
    }

    /// Runs `feed` with a function that adds bytes to a SHA-256 context, then returns the digest.
    private static func hash(
        _ feed: ((UnsafeBufferPointer<UInt8>) -> Void) throws -> Void
    ) throws -> String {
        guard let context = av_sha_alloc() else {
            throw TranscodeError(.encodeFailed, "av_sha_alloc failed")
        }
        defer { av_free(UnsafeMutableRawPointer(context)) }
        av_sha_init(context, 256)
        try feed { buffer in
            if let base = buffer.baseAddress { av_sha_update(context, base, buffer.count) }
        }
        var digest = [UInt8](repeating: 0, count: 32)
        av_sha_final(context, &digest)
        let digits = Array("0123456789abcdef")
        return String(digest.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] })
    }
}
