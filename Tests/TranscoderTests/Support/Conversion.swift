import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// A converted GIF: its metadata and the reopened MP4 (the files are gone once this exists).
struct Conversion: Sendable {
    var metadata: TranscodeMetadata
    var video: MP4Probe
}

/// Converts `gif` into a temporary directory and probes the result, on a thread of its own (`onOwnThread`).
func convert(_ gif: [UInt8], options: TranscodeOptions = TranscodeOptions()) async throws -> Conversion {
    try await onOwnThread {
        try withTemporaryDirectorySync { directory in
            let metadata = try Transcoder(options: options).convert(gif, directory: directory, name: "out")
            let video = try MP4Probe(path: directory + "/out.mp4")
            return Conversion(metadata: metadata, video: video)
        }
    }
}

/// `Transcoder(options:).convert` on a thread of its own (`onOwnThread`).
@discardableResult
func convertFiles(
    _ source: [UInt8], options: TranscodeOptions = TranscodeOptions(), directory: String, name: String
) async throws -> TranscodeMetadata {
    try await onOwnThread { try Transcoder(options: options).convert(source, directory: directory, name: name) }
}

/// `Transcoder(options:).render` on a thread of its own (`onOwnThread`).
func renderFiles(
    _ source: [UInt8], options: TranscodeOptions = TranscodeOptions(), into directory: String, name: String
) async throws -> RenderResult {
    try await onOwnThread { try Transcoder(options: options).render(source, into: directory, name: name) }
}

/// Converts and expects `code`, on a thread of its own; also checks that nothing was left in the directory.
func expectFailure(
    _ gif: [UInt8], _ code: TranscodeError.Code, options: TranscodeOptions = TranscodeOptions(),
    sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    let (outcome, left) = try await onOwnThread {
        try withTemporaryDirectorySync { directory in
            let outcome: Result<TranscodeMetadata, TranscodeError>
            do {
                outcome = .success(try Transcoder(options: options).convert(gif, directory: directory, name: "out"))
            } catch let error as TranscodeError {
                outcome = .failure(error)
            }
            return (outcome, try FileManager.default.contentsOfDirectory(atPath: directory))
        }
    }
    switch outcome {
    case .success: Issue.record("expected \(code), the conversion succeeded", sourceLocation: sourceLocation)
    case .failure(let error): #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
    }
    #expect(left.isEmpty, "files left behind: \(left)", sourceLocation: sourceLocation)
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
