import Foundation

/// The preview rendition (`RenditionSpec.previewSeconds`): the animation's first seconds, its video within
/// `RenditionSpec.previewMaxBytes`, the teaser a grid of thumbnails plays (Giphy's and Tenor's `preview`).
extension Transcoder {
    /// The highest CRF a preview is encoded at before its box shrinks instead: past it, blocks and smears show
    /// more than a smaller picture loses.
    static let previewHighestCRF = 33

    /// The most encodes a preview tries before giving up (`encode-failed`); each shrink takes the box down by at
    /// least a tenth, so a 1920-px box reaches the smallest in fewer.
    static let previewMostAttempts = 12

    /// Encodes the preview into `mp4Path` (the first attempt) or a temporary beside it (added to `temporaries`,
    /// which the caller removes): at the rendition's CRF and box first; while the video is over the budget, at the
    /// CRF expected to fit (the size guard's estimate, `SizeGuardPolicy.nextCRF`) when that is at most
    /// `previewHighestCRF`, else at that CRF in a box whose area is the budget's share of the size expected there
    /// (aspect kept, even sides, at least 16 px).
    /// Every attempt's bytes are recorded in the metadata's `preview`.
    /// - Parameter plan: the plan of a preview (its header cut at the preview's length: `plan(_:)`).
    /// - Returns: the metadata, the poster (of the kept attempt's size), the path of the file to keep, and the plan
    ///   of its size, which the object's other files are made at.
    func encodePreview(
        _ bytes: UnsafeRawBufferPointer, plan: Plan, seconds: Int, mp4Path: String, temporaries: inout [String]
    ) throws -> (metadata: (result: TranscodeMetadata, poster: [UInt8]), mp4Path: String, plan: Plan) {
        let budget = RenditionSpec.previewMaxBytes
        var plan = plan
        var crf = self.options.crf
        var attempts: [Preview.Attempt] = []
        var poster: [UInt8]?
        for index in 0..<Self.previewMostAttempts {
            let path = index == 0 ? mp4Path : OutputFile.temporaryPath(for: mp4Path)
            if index > 0 { temporaries.append(path) }
            let encoded = try self.encode(bytes, plan: plan, crf: crf, mp4Path: path, poster: &poster)
            let size = try OutputFile.size(path)
            attempts.append(
                Preview.Attempt(width: plan.output.width, height: plan.output.height, crf: crf, bytes: size))
            if size <= budget {
                var result = encoded.result
                result.crf = crf
                result.preview = Preview(seconds: seconds, maxBytes: budget, attempts: attempts)
                return ((result, encoded.poster), path, plan)
            }
            let next = SizeGuardPolicy.nextCRF(
                after: [SizeGuard.Attempt(crf: crf, bytes: size, ssim: nil)], target: Double(budget))
            if next <= Self.previewHighestCRF {
                crf = next
                continue
            }
            // No CRF up to the highest is expected to fit: the highest, in a box for the size it is expected to
            // give at this one (the size guard's first slope, half the bytes every 12 steps), not one more encode
            // of the whole box (a 1080x1080 GIF's took 3 encodes and 3.6x ffmpeg's time, 2 and 2.2x this way).
            let expected = Double(size) * pow(2, -Double(max(0, Self.previewHighestCRF - crf)) / 12)
            crf = max(crf, Self.previewHighestCRF)
            guard let smaller = Self.previewBox(after: plan.output, bytes: Int(expected), budget: budget) else {
                break
            }
            plan = Plan(
                header: plan.header,
                output: Self.outputSize(
                    width: plan.header.width, height: plan.header.height, maxWidth: smaller.width,
                    maxHeight: smaller.height))
            // The poster is the first picture at the video's size.
            poster = nil
        }
        let tried = attempts.map { "\($0.width)x\($0.height) CRF \($0.crf): \($0.bytes) bytes" }
        throw TranscodeError(
            .encodeFailed,
            "no preview fits in \(budget) bytes (\(tried.joined(separator: "; ")))")
    }

    /// The box the next attempt of a preview fits in, after one of `output`'s size came out `bytes` long: an area
    /// `budget / bytes` of the last, aimed 10% under (bytes follow the area about linearly at one CRF), and at least
    /// a tenth smaller on each side, the shorter side at least 16 px (a strip's longer side, at least 16 px, alone);
    /// nil when both sides are 16 px or less.
    static func previewBox(after output: (width: Int, height: Int, scaled: Bool), bytes: Int, budget: Int) -> (
        width: Int, height: Int
    )? {
        let smallest = 16
        guard max(output.width, output.height) > smallest else { return nil }
        let factor = min(0.9, (0.9 * Double(budget) / Double(max(1, bytes))).squareRoot())
        if min(output.width, output.height) <= smallest {
            // A strip (1920x16): its longer side bounds the next box, down to the smallest; the picture keeps its
            // aspect inside it (`outputSize`), its shorter side under 16 px.
            let longer = max(smallest, Int((Double(max(output.width, output.height)) * factor).rounded(.down)))
            return output.width >= output.height ? (longer, output.height) : (output.width, longer)
        }
        // The shorter side no smaller than the smallest: the other side keeps the aspect.
        let floor = Double(smallest) / Double(min(output.width, output.height))
        let scale = max(factor, floor)
        return (
            max(2, Int((Double(output.width) * scale).rounded(.down))),
            max(2, Int((Double(output.height) * scale).rounded(.down)))
        )
    }
}

/// An animation's headers cut at a preview's length: the frames that start before `milliseconds`, the last of
/// them shown only until it. Every pass over the animation (the video, the poster, the extras) reads the frames the
/// header lists, so the decoder stops at the cut.
struct PreviewHeader: AnimationHeader {
    let base: any AnimationHeader
    let frameMilliseconds: [Int]

    init(_ base: any AnimationHeader, milliseconds: Int) {
        self.base = base
        var kept: [Int] = []
        var start = 0
        for duration in base.frameMilliseconds {
            guard start < milliseconds else { break }
            kept.append(min(duration, milliseconds - start))
            start += duration
        }
        self.frameMilliseconds = kept
    }

    var format: SourceFormat { self.base.format }
    var width: Int { self.base.width }
    var height: Int { self.base.height }
    var loopCount: Int? { self.base.loopCount }
    var playCount: Int? { self.base.playCount }
    /// Cut short before the preview's end (the headers announced fewer frames than its length).
    var truncated: Bool { self.base.truncated && self.frameMilliseconds.count == self.base.frameMilliseconds.count }
    var frameSourceEnds: [Int]? { self.base.frameSourceEnds.map { Array($0.prefix(self.frameMilliseconds.count)) } }

    func makeFrameSource(_ bytes: UnsafeRawBufferPointer) throws -> any FrameSource {
        try self.base.makeFrameSource(bytes)
    }
}
