import Foundation
import Testing

@testable import Transcoder

/// The size guard's decisions, over an encoder made up for the test: the policy knows only CRFs, sizes and SSIMs,
/// so any encoder (H.264 today, AV1 or VP9 next) plugs into it through one closure.
@Suite(.tags(.unit), .timeLimit(.minutes(1))) struct SizeGuardPolicyTests {
    /// A made-up encoder: its size and SSIM at each CRF, and whether a first attempt given a `Stop` stops (at its
    /// key frame, projecting `keyFrameProjection`, when that is set and the stop judges key frames).
    final class Scripted {
        let sizes: (Int) -> Int
        let ssims: (Int) -> Double
        let keyFrameProjection: Int?
        var calls: [(crf: Int, stop: SizeGuardPolicy.Stop?, measure: Bool)] = []

        init(
            sizes: @escaping (Int) -> Int, ssims: @escaping (Int) -> Double = { _ in 0.99 },
            keyFrameProjection: Int? = nil
        ) {
            self.sizes = sizes
            self.ssims = ssims
            self.keyFrameProjection = keyFrameProjection
        }

        func encode(_ crf: Int, _ stop: SizeGuardPolicy.Stop?, _ measure: Bool) throws -> SizeGuardPolicy.Encoded<Int> {
            self.calls.append((crf, stop, measure))
            if let stop, stop.judgesTheKeyFrame, let keyFrameProjection {
                throw SizeGuardPolicy.StoppedAboveTarget(
                    bytes: 1000, projectedBytes: keyFrameProjection, atTheKeyFrame: true)
            }
            let bytes = self.sizes(crf)
            if let stopAbove = stop?.above, bytes > stopAbove {
                throw SizeGuardPolicy.StoppedAboveTarget(bytes: stopAbove + 1, projectedBytes: bytes)
            }
            return SizeGuardPolicy.Encoded(output: crf, bytes: bytes, ssim: measure ? self.ssims(crf) : nil)
        }
    }

    /// Half the size every 12 CRF steps from `atFirst` at CRF 25.
    static func halving(from atFirst: Int) -> (Int) -> Int {
        { crf in Int(Double(atFirst) * pow(0.5, Double(crf - 25) / 12)) }
    }

    @Test func aSmallFirstEncodeIsKeptWithNoRecord() throws {
        let encoder = Scripted(sizes: { _ in 40_000 })
        let choice = try SizeGuardPolicy().run(firstCRF: 25, sourceBytes: 50_000, encode: encoder.encode)
        #expect(choice.output == 25 && choice.crf == 25 && choice.record == nil)
        // Under the stopping size the first attempt is not stopped; it is never measured.
        #expect(encoder.calls.count == 1 && encoder.calls[0].stop == nil && !encoder.calls[0].measure)
    }

    @Test func aStoppedFirstEncodeLeadsToASmallerOne() throws {
        let encoder = Scripted(sizes: Self.halving(from: 300_000))
        let choice = try SizeGuardPolicy().run(firstCRF: 25, sourceBytes: 200_000, encode: encoder.encode)
        let record = try #require(choice.record)
        #expect(encoder.calls[0].stop == .init(above: 200_000, judgesTheKeyFrame: true) && !encoder.calls[0].measure)
        #expect(record.attempts[0].projectedBytes == 300_000)
        #expect(choice.crf > 25 && choice.output == choice.crf && record.outcome == .smaller)
        #expect(encoder.sizes(choice.crf) < 200_000)
    }

    @Test func underTheQualityFloorTheFirstEncodeIsKeptWhole() throws {
        // Smaller only at CRFs whose SSIM is under the floor.
        let encoder = Scripted(sizes: Self.halving(from: 300_000), ssims: { crf in crf > 25 ? 0.9 : 0.99 })
        let choice = try SizeGuardPolicy().run(firstCRF: 25, sourceBytes: 200_000, encode: encoder.encode)
        let record = try #require(choice.record)
        #expect(choice.crf == 25 && choice.output == 25 && record.outcome == .qualityFloor)
        // The stopped first attempt was encoded again, whole and unmeasured; its real size recorded.
        #expect(encoder.calls.last?.crf == 25 && encoder.calls.last?.stop == nil)
        #expect(record.attempts[0].bytes == 300_000)
    }

    @Test func offTheGuardEncodesOnce() throws {
        var policy = SizeGuardPolicy()
        policy.maxExtraAttempts = 0
        let encoder = Scripted(sizes: { _ in 900_000 })
        let choice = try policy.run(firstCRF: 25, sourceBytes: 200_000, encode: encoder.encode)
        #expect(choice.record == nil && encoder.calls.count == 1 && encoder.calls[0].stop == nil)
    }

    /// Under the stopping size the first attempt runs whole; it is not measured either (measuring would change the
    /// settings x264 writes into every file), and when no later attempt qualifies it is kept as it is, not
    /// encoded again.
    @Test func anUnmeasuredWholeFirstEncodeIsKeptWithoutAnotherEncode() throws {
        let encoder = Scripted(sizes: Self.halving(from: 60_000), ssims: { _ in 0.9 })
        let choice = try SizeGuardPolicy().run(firstCRF: 25, sourceBytes: 50_000, encode: encoder.encode)
        let record = try #require(choice.record)
        #expect(encoder.calls[0].stop == nil && !encoder.calls[0].measure)
        #expect(!encoder.calls.dropFirst().contains { !$0.measure })
        #expect(encoder.calls.count == 2, "\(encoder.calls)")
        #expect(choice.crf == 25 && choice.output == 25 && record.outcome == .qualityFloor)
        #expect(record.attempts[0].ssim == nil && record.attempts[0].projectedBytes == nil)
    }

    /// Stopped at its key frame, the first attempt is projected from it, and the next attempt, chosen from the
    /// projection, is kept; the first is not encoded again when the attempt kept, carried back to the first CRF,
    /// confirms it would have been too large.
    @Test func aKeyFrameStopLeadsToASmallerOne() throws {
        let encoder = Scripted(sizes: Self.halving(from: 300_000), keyFrameProjection: 290_000)
        let choice = try SizeGuardPolicy().run(firstCRF: 25, sourceBytes: 200_000, encode: encoder.encode)
        let record = try #require(choice.record)
        #expect(record.attempts[0].projectedBytes == 290_000 && record.outcome == .smaller)
        #expect(choice.crf > 25 && choice.output == choice.crf && encoder.sizes(choice.crf) < 200_000)
        #expect(encoder.calls.count == 2 && encoder.calls[1].measure, "\(encoder.calls)")
    }

    /// A key frame that overstated the whole: the attempt kept, carried back to the first CRF, shows the first
    /// would have fitted (`keyFrameMisled`), so the guard runs again judging packets only, and keeps the first
    /// whole: what the guard would have made without the key-frame rule, for the encodes the key frame cost, all
    /// of them recorded.
    @Test func aMisjudgedKeyFrameCostsEncodesNotThePicture() throws {
        let encoder = Scripted(sizes: Self.halving(from: 150_000), keyFrameProjection: 300_000)
        let choice = try SizeGuardPolicy().run(firstCRF: 25, sourceBytes: 200_000, encode: encoder.encode)
        let record = try #require(choice.record)
        #expect(choice.crf == 25 && choice.output == 25 && record.chosenCRF == 25 && record.outcome == .smaller)
        #expect(choice.bytes == 150_000)
        #expect(record.attempts.map(\.crf).count == 3 && record.attempts[1].crf > 25)
        #expect(record.attempts[0].projectedBytes == 300_000)
        #expect(record.attempts[2].bytes == 150_000 && record.attempts[2].projectedBytes == nil)
        #expect(encoder.calls.count == 3, "\(encoder.calls)")
        #expect(encoder.calls[2].crf == 25 && !encoder.calls[2].measure)
        #expect(encoder.calls[2].stop == .init(above: 200_000, judgesTheKeyFrame: false))
    }

    /// A key frame that overstated the whole so far that the next attempt falls under the quality floor: the
    /// guard runs again judging packets only, and finds the CRF it would have found without the key-frame rule.
    @Test func aKeyFrameStopThatLeadsUnderTheFloorIsRunAgain() throws {
        let encoder = Scripted(
            sizes: Self.halving(from: 300_000), ssims: { crf in crf > 36 ? 0.9 : 0.99 }, keyFrameProjection: 900_000)
        let choice = try SizeGuardPolicy().run(firstCRF: 25, sourceBytes: 200_000, encode: encoder.encode)
        let record = try #require(choice.record)
        #expect(record.outcome == .smaller && choice.crf > 25 && choice.crf <= 36 && record.chosenCRF == choice.crf)
        #expect(encoder.sizes(choice.crf) < 200_000 && choice.bytes == encoder.sizes(choice.crf))
        #expect(record.attempts.map(\.crf).first == 25 && record.attempts[1].crf > 36)
        #expect(record.attempts[2].crf == 25 && record.attempts[2].projectedBytes == 300_000)
        #expect(record.attempts.last?.crf == choice.crf)
        #expect(encoder.calls[2].stop == .init(above: 200_000, judgesTheKeyFrame: false), "\(encoder.calls)")
    }

    /// A misled-looking choice whose run again finds nothing that qualifies (sizes fall faster than 12 steps per
    /// halving, then the quality floor): the first run's qualifying attempt is kept, every encode recorded.
    @Test func aQualifyingAttemptIsKeptWhenTheRunAgainFindsNone() throws {
        let encoder = Scripted(
            sizes: { crf in crf == 25 ? 300_000 : 100_000 }, ssims: { crf in crf >= 34 ? 0.9 : 0.99 },
            keyFrameProjection: 250_000)
        let choice = try SizeGuardPolicy().run(firstCRF: 25, sourceBytes: 200_000, encode: encoder.encode)
        let record = try #require(choice.record)
        #expect(choice.crf == 31 && choice.output == 31 && choice.bytes == 100_000, "\(encoder.calls)")
        #expect(record.chosenCRF == 31 && record.outcome == .smaller)
        #expect(record.attempts.map(\.crf) == [25, 31, 25, 34], "\(record.attempts)")
    }

    /// The key-frame rule: the first packet at 1.4x to 2.5x the target's share of the source through the first
    /// picture, or the source's share when the target is smaller.
    @Test func aKeyFrameThatOverrunsItsPictureStops() {
        #expect(SizeGuardPolicy.keyFrameOverruns(bytes: 141, sourceShare: 0.1, target: 1000, sourceBytes: 1000))
        #expect(!SizeGuardPolicy.keyFrameOverruns(bytes: 139, sourceShare: 0.1, target: 1000, sourceBytes: 1000))
        #expect(!SizeGuardPolicy.keyFrameOverruns(bytes: 900, sourceShare: 0, target: 1000, sourceBytes: 1000))
        #expect(SizeGuardPolicy.keyFrameOverruns(bytes: 211, sourceShare: 0.1, target: 1500, sourceBytes: 1000))
        #expect(!SizeGuardPolicy.keyFrameOverruns(bytes: 209, sourceShare: 0.1, target: 1500, sourceBytes: 1000))
        #expect(!SizeGuardPolicy.keyFrameOverruns(bytes: 139, sourceShare: 0.1, target: 500, sourceBytes: 1000))
        // From 2.5x on a key frame tells nothing (a pattern LZW packs well, then moved: the video predicts it).
        #expect(SizeGuardPolicy.keyFrameOverruns(bytes: 249, sourceShare: 0.1, target: 1000, sourceBytes: 1000))
        #expect(!SizeGuardPolicy.keyFrameOverruns(bytes: 251, sourceShare: 0.1, target: 1000, sourceBytes: 1000))
        #expect(SizeGuardPolicy.projectedFromTheKeyFrame(bytes: 150, sourceShare: 0.25) == 480)
        let kept = SizeGuard.Attempt(crf: 49, bytes: 40_000, ssim: 0.99)
        // 40,000 at CRF 49 carries back to 160,000 at CRF 25 (two halvings).
        #expect(SizeGuardPolicy.keyFrameMisled(kept: kept, firstCRF: 25, target: 200_000))
        #expect(!SizeGuardPolicy.keyFrameMisled(kept: kept, firstCRF: 25, target: 180_000))
    }

    /// The source rule: from 30% of the source's bytes on, a video at 1.15x the target's share of them; not
    /// before 30%, not under 1.15x.
    @Test func anEncodeThatOverrunsItsSourceStops() {
        #expect(SizeGuardPolicy.overrunsTheSource(bytes: 345, sourceShare: 0.3, target: 1000))
        #expect(SizeGuardPolicy.overrunsTheSource(bytes: 600, sourceShare: 0.5, target: 1000))
        #expect(!SizeGuardPolicy.overrunsTheSource(bytes: 340, sourceShare: 0.3, target: 1000))
        #expect(!SizeGuardPolicy.overrunsTheSource(bytes: 900, sourceShare: 0.29, target: 1000))
        #expect(!SizeGuardPolicy.overrunsTheSource(bytes: 900, sourceShare: 0, target: 1000))
    }
}
