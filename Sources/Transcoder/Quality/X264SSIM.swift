import CFFmpeg
import Foundation

/// x264's own SSIM of each picture of one encode (x264's `ssim=1`): the luma of every reconstructed picture,
/// which is what a decoder shows, scored against the picture x264 was given, in x264's frame threads beside the
/// encode. It replaces decoding every packet again to measure it (`LumaSSIM` on the decoded pictures): that cost
/// 0.09-0.15 s of a guarded re-encode's 0.4-0.9 s (docs/benchmarks.md, "Never bigger than the GIF").
///
/// x264 reports each picture's score only on the line it logs per picture, which libavcodec forwards to `av_log`;
/// the process's log callback (`CFFmpeg_LogCallback`) finds the encoder's sink through the codec context's
/// `opaque` and records the score here. Its 8x8 windows are placed 2 pixels in from the top-left corner (away from
/// the transform blocks' edges); the score is written with five decimals.
final class X264SSIM: @unchecked Sendable {
    /// The sink the codec context's `opaque` points at. Allocated here, freed with this object.
    let sink: UnsafeMutablePointer<CFFmpeg_X264SSIMSink>
    private let lock = NSLock()
    private var recorded: [Double?] = []

    init() {
        self.sink = .allocate(capacity: 1)
        self.sink.initialize(
            to: CFFmpeg_X264SSIMSink(
                record: { owner, frame, ssim in
                    guard let owner else { return }
                    Unmanaged<X264SSIM>.fromOpaque(owner).takeUnretainedValue().record(frame: Int(frame), ssim: ssim)
                },
                owner: nil))
        self.sink.pointee.owner = Unmanaged.passUnretained(self).toOpaque()
    }

    deinit {
        self.sink.deinitialize(count: 1)
        self.sink.deallocate()
    }

    /// The scores by picture number (coding order, which is the order sent: no B-frames); nil for a picture not
    /// (yet) reported, NaN for one x264 could not score (under 10 pixels wide or high: no whole 8x8 window 2
    /// pixels in from the corner).
    var scores: [Double?] {
        self.lock.withLock { self.recorded }
    }

    private func record(frame: Int, ssim: Double) {
        guard frame >= 0 else { return }
        self.lock.withLock {
            if frame >= self.recorded.count {
                self.recorded.append(contentsOf: repeatElement(nil, count: frame + 1 - self.recorded.count))
            }
            self.recorded[frame] = ssim
        }
    }

    /// The mean of `scores`, each picture weighted by how long it shows: picture `i` from `starts[i]` to the next
    /// one's start, the last to `end` (milliseconds); nil when x264 could not score the pictures (too small).
    /// - Throws: `TranscodeError.encodeFailed` when a picture sent has no score.
    static func weightedMean(_ scores: [Double?], starts: [Int64], end: Int64) throws -> Double? {
        let reported = scores.compactMap { $0 }
        guard scores.count == starts.count, reported.count == starts.count else {
            throw TranscodeError(
                .encodeFailed, "x264 scored \(reported.count) of the \(starts.count) pictures encoded (SSIM)")
        }
        guard !reported.contains(where: \.isNaN) else { return nil }
        var weighted = 0.0
        for (index, start) in starts.enumerated() {
            let next = index + 1 < starts.count ? starts[index + 1] : end
            weighted += reported[index] * Double(next - start)
        }
        return end > 0 ? weighted / Double(end) : 1
    }
}
