import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// A converted GIF: its metadata and the reopened MP4 (the files are gone once this exists).
struct Conversion {
    var metadata: TranscodeMetadata
    var video: MP4Probe
}

/// Converts `gif` into a temporary directory and probes the result.
func convert(_ gif: [UInt8], options: TranscodeOptions = TranscodeOptions()) throws -> Conversion {
    try withTemporaryDirectorySync { directory in
        let metadata = try Transcoder(options: options).convert(gif, directory: directory, name: "out")
        let video = try MP4Probe(path: directory + "/out.mp4")
        return Conversion(metadata: metadata, video: video)
    }
}

/// Converts and expects `code`; also checks that nothing was left in the directory.
func expectFailure(
    _ gif: [UInt8], _ code: TranscodeError.Code, options: TranscodeOptions = TranscodeOptions(),
    sourceLocation: SourceLocation = #_sourceLocation
) throws {
    try withTemporaryDirectorySync { directory in
        do {
            try Transcoder(options: options).convert(gif, directory: directory, name: "out")
            Issue.record("expected \(code), the conversion succeeded", sourceLocation: sourceLocation)
        } catch let error as TranscodeError {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: directory)
        #expect(left.isEmpty, "files left behind: \(left)", sourceLocation: sourceLocation)
    }
}

/// An expected picture: the canvas filled with `base`, then rectangles painted over it (0xRRGGBB).
func picture(
    width: Int, height: Int, base: UInt32, _ rectangles: [(x: Int, y: Int, w: Int, h: Int, color: UInt32)] = []
)
    -> [UInt32]
{
    var pixels = [UInt32](repeating: rgba(base), count: width * height)
    for rectangle in rectangles {
        for y in rectangle.y..<(rectangle.y + rectangle.h) {
            for x in rectangle.x..<(rectangle.x + rectangle.w) {
                pixels[y * width + x] = rgba(rectangle.color)
            }
        }
    }
    return pixels
}
