import Foundation
import Synchronization
import Testing

@testable import TranscodeServer

/// A key names bytes: the same GIF with the same options gives the same MP4 whether its job ran alone or beside
/// another. Its ETag is the key, strong, and its answers are `immutable`: two different files under one key would
/// let a browser's cached first half and a later range of the other make one broken video.
@Suite struct TranscodePoolTests {
    @Test func aKeysBytesDoNotDependOnTheLoad() async throws {
        let gif = try corpusBytes("cartoon_hotdog.gif")
        let alone = try await Self.mp4(of: gif, beside: nil)
        // Converted again in a fresh cache while a 1080x1080 GIF keeps the other worker busy for seconds.
        let loaded = try await Self.mp4(of: gif, beside: try corpusBytes("huge_1080_interlaced_transparent_15f.gif"))
        #expect(alone.key == loaded.key)
        let same = alone.bytes == loaded.bytes
        #expect(same, "\(alone.bytes.count) bytes alone, \(loaded.bytes.count) under load")
    }

    /// Uploads `gif` to a new server (its own cache), after starting `other` when given, and returns the key and
    /// the MP4. - Throws: when `other`'s job did not run through the whole of `gif`'s.
    static func mp4(of gif: [UInt8], beside other: [UInt8]?) async throws -> (key: String, bytes: [UInt8]) {
        let result = Mutex<(key: String, bytes: [UInt8])?>(nil)
        try await withHarness { harness in
            var busy: Task<Reply, any Error>?
            if let other {
                busy = Task { try await harness.upload(other) }
                // Admitted, then its 1 MB body read on loopback: it is encoding well before the second upload.
                for _ in 0..<500 where harness.services.pool.load == 0 { try await Task.sleep(for: .milliseconds(2)) }
                try await Task.sleep(for: .milliseconds(300))
            }
            let reply = try await harness.upload(gif)
            try #require(reply.status == 200, "\(reply.text)")
            if let busy {
                #expect(harness.services.pool.load == 1, "the other job ended first: the test saw no load")
                #expect(try await busy.value.status == 200)
            }
            let key = try #require(try reply.json()["key"] as? String)
            let media = try await harness.request(.GET, "/media/\(key).mp4")
            try #require(media.status == 200)
            result.withLock { $0 = (key, media.body) }
        }
        return try #require(result.withLock { $0 })
    }
}
