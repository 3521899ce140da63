import TestSupport
import Testing

@testable import Transcoder

/// The browser delay rule, frame merging and loop semantics, checked on the reopened MP4.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct TimingTests {
    /// Two frames of different colours, both with `delay` centiseconds.
    private func twoFrames(delay: Int) -> GIFBuilder {
        var gif = GIFBuilder(width: 16, height: 16)
        gif.frames = [.filled(2, width: 16, height: 16, delay: delay), .filled(4, width: 16, height: 16, delay: delay)]
        return gif
    }

    @Test(arguments: [(0, 100), (1, 100), (2, 20), (7, 70), (65535, 655_350)])
    func delayRule(delay: Int, milliseconds: Int64) async throws {
        let result = try await convert(try self.twoFrames(delay: delay).build())
        #expect(result.video.ptsMilliseconds == [0, milliseconds])
        #expect(result.metadata.durationMs == Int(2 * milliseconds))
        #expect(result.video.streamDurationMilliseconds == 2 * milliseconds)
        #expect(result.video.formatDurationMilliseconds == 2 * milliseconds)
        #expect(result.video.sampleDurationTotalMilliseconds == Double(2 * milliseconds))
        #expect(result.video.sampleDurationsMilliseconds == [Double(milliseconds), Double(milliseconds)])
    }

    @Test func missingGraphicControlExtensionPlaysAs100ms() async throws {
        var gif = GIFBuilder(width: 16, height: 16)
        gif.frames = [.filled(2, width: 16, height: 16, delay: nil), .filled(3, width: 16, height: 16, delay: nil)]
        let result = try await convert(try gif.build())
        #expect(result.video.ptsMilliseconds == [0, 100])
        #expect(result.metadata.durationMs == 200)
    }

    @Test func variableDelaysKeepTheLastFrame() async throws {
        var gif = GIFBuilder(width: 16, height: 16)
        gif.frames = [0, 5, 1, 300].enumerated().map { index, delay in
            .filled(UInt8(2 + index), width: 16, height: 16, delay: delay)
        }
        let result = try await convert(try gif.build())
        #expect(result.video.ptsMilliseconds == [0, 100, 150, 250])
        #expect(result.metadata.durationMs == 3250)
        #expect(result.video.streamDurationMilliseconds == 3250)
        #expect(result.video.formatDurationMilliseconds == 3250)
        #expect(result.video.sampleDurationTotalMilliseconds == 3250)
        #expect(result.video.sampleDurationsMilliseconds == [100, 50, 100, 3000])
    }

    /// The case Chromium played for 1.02 s instead of 2.42 s while B-frames made the last `stts` delta a
    /// decode-order gap. Read from the boxes: each sample lasts its own frame's display time (Chromium
    /// takes frame durations from `stts`), decoded when presented, with no edit list to shift anything.
    @Test func sampleTableCarriesEveryDelay() async throws {
        var gif = GIFBuilder(width: 32, height: 32)
        gif.frames = [0, 1, 2, 3, 7, 10, 50, 150].enumerated().map { index, delay in
            .filled(UInt8(index), width: 32, height: 32, delay: delay)
        }
        let result = try await convert(try gif.build())
        #expect(result.video.ptsMilliseconds == [0, 100, 200, 220, 250, 320, 420, 920])
        #expect(result.video.sampleDurationTotalMilliseconds == 2420)
        #expect(result.video.sampleDurationsMilliseconds == [100, 100, 20, 30, 70, 100, 500, 1500])
        #expect(result.video.samplePresentationMilliseconds == [0, 100, 200, 220, 250, 320, 420, 920])
        #expect(!result.video.hasCompositionOffsets)
        // No edit list is needed to start at 0 (an identity one would do no harm).
        #expect(result.video.editMediaTimes.allSatisfy { $0 == 0 }, "\(result.video.editMediaTimes)")
        #expect(result.metadata.durationMs == 2420)
    }

    @Test func identicalConsecutiveFramesMerge() async throws {
        var gif = GIFBuilder(width: 16, height: 16)
        gif.frames = [(2, 10), (2, 20), (4, 30), (4, 5), (2, 10)].map { index, delay in
            .filled(UInt8(index), width: 16, height: 16, delay: delay)
        }
        let result = try await convert(try gif.build())
        #expect(result.metadata.sourceFrameCount == 5)
        #expect(result.metadata.encodedFrameCount == 3)
        #expect(result.video.ptsMilliseconds == [0, 300, 650])
        #expect(result.metadata.durationMs == 750)
        #expect(result.video.formatDurationMilliseconds == 750)
        #expect(result.video.sampleDurationTotalMilliseconds == 750)
        #expect(result.video.sampleDurationsMilliseconds == [300, 350, 100])
    }

    @Test func singleFrameKeepsItsDelay() async throws {
        var gif = GIFBuilder(width: 8, height: 8)
        gif.frames = [.filled(2, width: 8, height: 8, delay: 250)]
        let result = try await convert(try gif.build())
        #expect(result.video.ptsMilliseconds == [0])
        #expect(result.metadata.durationMs == 2500)
        #expect(result.video.formatDurationMilliseconds == 2500)
        #expect(result.video.sampleDurationsMilliseconds == [2500])
    }

    @Test(arguments: [
        (Int?.none, Int?.some(1), false), (0, nil, true), (1, 2, false), (3, 4, false), (65535, 65536, false),
    ])
    func loopCount(written: Int?, plays: Int?, forever: Bool) async throws {
        var gif = self.twoFrames(delay: 10)
        gif.loopCount = written
        let result = try await convert(try gif.build())
        #expect(result.metadata.loopCount == written)
        #expect(result.metadata.playCount == plays)
        #expect(result.metadata.loopsForever == forever)
    }
}
