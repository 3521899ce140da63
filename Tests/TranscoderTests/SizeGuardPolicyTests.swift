import Foundation
import Testing

@testable import Transcoder

/// The size guard's decisions, over an encoder made up for the test: the policy knows only CRFs, sizes and SSIMs,
/// so any encoder (H.264 today, AV1 or VP9 next) plugs into it through one closure.
@Suite(.tags(.unit), .timeLimit(.minutes(1))) struct SizeGuardPolicyTests {
    /// A made-up encoder: its size and SSIM at each CRF, and whether a first attempt given `stopAbove` stops.
    final class Scripted {
        let sizes: (Int) -> Int
        let ssims: (Int) -> Double
        var calls: [(crf: Int, stopAbove: Int?, measure: Bool)] = []

        init(sizes: @escaping (Int) -> Int, ssims: @escaping (Int) -> Double = { _ in 0.99 }) {
            self.sizes = sizes
            self.ssims = ssims
        }

        func encode(_ crf: Int, _ stopAbove: Int?, _ measure: Bool) throws -> SizeGuardPolicy.Encoded<Int> {
            self.calls.append((crf, stopAbove, measure))
            let bytes = self.sizes(crf)
            if let stopAbove, bytes > stopAbove {
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
        #expect(encoder.calls.count == 1 && encoder.calls[0].stopAbove == nil && !encoder.calls[0].measure)
    }

    @Test func aStoppedFirstEncodeLeadsToASmallerOne() throws {
        let encoder = Scripted(sizes: Self.halving(from: 300_000))
        let choice = try SizeGuardPolicy().run(firstCRF: 25, sourceBytes: 200_000, encode: encoder.encode)
        let record = try #require(choice.record)
        #expect(encoder.calls[0].stopAbove == 200_000 && !encoder.calls[0].measure)
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
        #expect(encoder.calls.last?.crf == 25 && encoder.calls.last?.stopAbove == nil)
        #expect(record.attempts[0].bytes == 300_000)
    }

    @Test func offTheGuardEncodesOnce() throws {
        var policy = SizeGuardPolicy()
        policy.maxExtraAttempts = 0
        let encoder = Scripted(sizes: { _ in 900_000 })
        let choice = try policy.run(firstCRF: 25, sourceBytes: 200_000, encode: encoder.encode)
        #expect(choice.record == nil && encoder.calls.count == 1 && encoder.calls[0].stopAbove == nil)
    }

    /// Under the stopping size the first attempt runs whole; it is not measured either (measuring would change the
    /// settings x264 writes into every file), and when no later attempt qualifies it is kept as it is, not
    /// encoded again.
    @Test func anUnmeasuredWholeFirstEncodeIsKeptWithoutAnotherEncode() throws {
        let encoder = Scripted(sizes: Self.halving(from: 60_000), ssims: { _ in 0.9 })
        let choice = try SizeGuardPolicy().run(firstCRF: 25, sourceBytes: 50_000, encode: encoder.encode)
        let record = try #require(choice.record)
        #expect(encoder.calls[0].stopAbove == nil && !encoder.calls[0].measure)
        #expect(!encoder.calls.dropFirst().contains { !$0.measure })
        #expect(encoder.calls.count == 2, "\(encoder.calls)")
        #expect(choice.crf == 25 && choice.output == 25 && record.outcome == .qualityFloor)
        #expect(record.attempts[0].ssim == nil && record.attempts[0].projectedBytes == nil)
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
