import CFFmpeg
import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// The encoder's side of a pass runs on a thread of its own (`PictureHandoff`): it must get the pictures one
/// thread would have given it, in the same order, and a failure on either side must end the pass with that
/// failure, the encoder's thread joined.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct PictureHandoffTests {
    /// 64x48, 9 frames: moving stripes, two repeats (merged into a longer picture) and mixed delays.
    static func gif() throws -> [UInt8] {
        let (width, height) = (64, 48)
        var gif = GIFBuilder(width: width, height: height)
        gif.frames = [0, 1, 1, 2, 3, 3, 4, 5, 6].map { step in
            var pixels = [UInt8](repeating: 0, count: width * height)
            for y in 0..<height {
                for x in 0..<width { pixels[y * width + x] = UInt8((x / 4 + y / 6 + step) % 8) }
            }
            return GIFBuilder.Frame(width: width, height: height, pixels: pixels, delay: [2, 7, 10][step % 3])
        }
        return try gif.build()
    }

    /// Each picture's start and a hash of its three planes, as `composite` hands them over.
    static func pictures(pipelined: Bool, slowEncoder: Bool = false) throws -> (seen: [String], pass: Transcoder.Pass) {
        let bytes = try Self.gif()
        let transcoder = Transcoder()
        var seen: [String] = []
        let pass = try bytes.withUnsafeBytes { bytes in
            let plan = try transcoder.plan(bytes)
            return try transcoder.composite(bytes, plan: plan, pipelined: pipelined, first: { _, _, _ in }) {
                frame, start in
                // An encoder slower than the compositing side: the compositing side waits for a free picture.
                if slowEncoder { usleep(2000) }
                seen.append("\(start): \(Self.hash(frame, width: plan.output.width, height: plan.output.height))")
            }
        }
        return (seen, pass)
    }

    static func hash(_ frame: VideoFrame, width: Int, height: Int) -> UInt64 {
        frame.withUnsafeMutablePointer { frame in
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            let planes = [
                (frame.pointee.data.0, frame.pointee.linesize.0, width, height),
                (frame.pointee.data.1, frame.pointee.linesize.1, width / 2, height / 2),
                (frame.pointee.data.2, frame.pointee.linesize.2, width / 2, height / 2),
            ]
            for (data, stride, planeWidth, planeHeight) in planes {
                guard let data else { return 0 }
                for row in 0..<planeHeight {
                    for column in 0..<planeWidth {
                        hash = (hash ^ UInt64(data[row * Int(stride) + column])) &* 0x100_0000_01b3
                    }
                }
            }
            return hash
        }
    }

    @Test func theEncoderGetsWhatOneThreadWouldHaveGivenIt() throws {
        let single = try Self.pictures(pipelined: false)
        let pipelined = try Self.pictures(pipelined: true)
        let waiting = try Self.pictures(pipelined: true, slowEncoder: true)
        #expect(single.seen.count == 7, "\(single.seen)")
        #expect(Set(single.seen.map { $0.split(separator: " ")[1] }).count == 7, "every picture differs")
        #expect(pipelined.seen == single.seen)
        #expect(waiting.seen == single.seen)
        #expect(pipelined.pass.encodedFrames == single.pass.encodedFrames)
        #expect(pipelined.pass.time == single.pass.time)
    }

    struct EncoderFailed: Error, Equatable {}

    /// The error the encoder throws is the pass's: nothing more is encoded after it, and the compositing side
    /// stops.
    @Test func anEncoderErrorEndsThePass() throws {
        let bytes = try Self.gif()
        let transcoder = Transcoder()
        var calls = 0
        #expect(throws: EncoderFailed.self) {
            try bytes.withUnsafeBytes { bytes in
                let plan = try transcoder.plan(bytes)
                _ = try transcoder.composite(bytes, plan: plan, pipelined: true, first: { _, _, _ in }) { _, _ in
                    calls += 1
                    guard calls == 3 else { return }
                    // Time for the compositing side to hand the next picture over: it must be dropped.
                    usleep(50_000)
                    throw EncoderFailed()
                }
            }
        }
        #expect(calls == 3)
    }

    /// `finish()` returns only once the picture being encoded is done: what the encoder uses may be freed after
    /// it (the encoder, the muxer, the SSIM check, the pictures).
    @Test func finishWaitsForThePictureBeingEncoded() throws {
        let frames = try (0..<2).map { _ in try VideoFrame(width: 16, height: 16, format: AV_PIX_FMT_YUV420P) }
        let started = DispatchSemaphore(value: 0)
        var returned = false
        let handoff = try #require(
            PictureHandoff(frames: frames) { _, _ in
                started.signal()
                usleep(100_000)
                returned = true
            })
        let (index, _) = try handoff.nextFree()
        handoff.submit(index, start: 0)
        started.wait()
        try handoff.finish()
        #expect(returned)
    }

    /// The encoder fails on the last picture, after the compositing side has handed everything over and asks
    /// for no further picture: the pass still ends with that error, from `finish()`.
    @Test func anEncoderErrorOnTheLastPictureEndsThePass() throws {
        let bytes = try Self.gif()
        let transcoder = Transcoder()
        var calls = 0
        #expect(throws: EncoderFailed.self) {
            try bytes.withUnsafeBytes { bytes in
                let plan = try transcoder.plan(bytes)
                _ = try transcoder.composite(bytes, plan: plan, pipelined: true, first: { _, _, _ in }) { _, _ in
                    calls += 1
                    if calls == 7 { throw EncoderFailed() }
                }
            }
        }
        #expect(calls == 7)
    }
}
