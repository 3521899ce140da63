import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// The animated AVIF's file, byte for byte: libavif writes the clock into its `mvhd`, `tkhd` and `mdhd` boxes,
/// which the encoder zeroes (`AnimatedAVIFEncoder.clearTimestamps`), so the same GIF and options make the same
/// bytes on every node and every day. (Chromium's reading of the pictures: `AnimatedWebPOutputTests`.)
@Suite(.tags(.integration, .heavy), .timeLimit(.minutes(10))) struct AnimatedAVIFFileTests {
    /// Each `mvhd`/`tkhd`/`mdhd` box's creation and modification times, read on their own here.
    static func boxTimes(_ file: [UInt8]) -> [(type: String, times: [UInt8])] {
        var found: [(String, [UInt8])] = []
        func walk(_ start: Int, _ end: Int) {
            var position = start
            while position + 8 <= end {
                let size = file[position..<position + 4].reduce(0) { $0 << 8 | Int($1) }
                let type = String(decoding: file[position + 4..<position + 8], as: UTF8.self)
                guard size >= 8, position + size <= end else { return }
                if ["moov", "trak", "mdia"].contains(type) { walk(position + 8, position + size) }
                if ["mvhd", "tkhd", "mdhd"].contains(type) {
                    let length = file[position + 8] == 1 ? 16 : 8
                    found.append((type, Array(file[position + 12..<position + 12 + length])))
                }
                position += size
            }
        }
        walk(0, file.count)
        return found
    }

    @Test(.tags(.wallClock)) func theSameGIFMakesTheSameAVIF() async throws {
        let path = CorpusTests.corpusDirectory + "/cartoon_hotdog.gif"
        let gif = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        var options = TranscodeOptions()
        options.rendition = options.rendition.withExtraFormats([.avif])
        var files: [[UInt8]] = []
        for round in 0..<2 {
            // A second apart: libavif's clock is in seconds.
            if round > 0 { try await Task.sleep(for: .milliseconds(1100)) }
            try await withTemporaryDirectory { directory in
                _ = try await convertFiles(gif, options: options, directory: directory, name: "a")
                files.append(try [UInt8](Data(contentsOf: URL(fileURLWithPath: directory + "/a.avif"))))
            }
        }
        let times = Self.boxTimes(files[0])
        // The sequence's header and, per track (colour, alpha when there is one), its header and its media's.
        #expect(times.count >= 3, "\(times.map(\.type))")
        #expect(times.allSatisfy { $0.times.allSatisfy { $0 == 0 } }, "\(times)")
        // By digest: a difference is then one line, not two files of bytes.
        #expect(try ContentHash.sha256(files[0]) == ContentHash.sha256(files[1]))
    }

    /// The `trak` boxes of an image sequence: one per track (colour, and alpha when there is one).
    static func trackCount(_ file: [UInt8]) -> Int {
        var count = 0
        var position = 0
        while position + 8 <= file.count {
            let size = file[position..<position + 4].reduce(0) { $0 << 8 | Int($1) }
            let type = String(decoding: file[position + 4..<position + 8], as: UTF8.self)
            guard size >= 8, position + size <= file.count else { break }
            if type == "moov" {
                var inner = position + 8
                while inner + 8 <= position + size {
                    let innerSize = file[inner..<inner + 4].reduce(0) { $0 << 8 | Int($1) }
                    guard innerSize >= 8 else { break }
                    if String(decoding: file[inner + 4..<inner + 8], as: UTF8.self) == "trak" { count += 1 }
                    inner += innerSize
                }
            }
            position += size
        }
        return count
    }

    /// The ladder keeps an AVIF at or above 35 dB over black and over white (the manifest's reading), smaller than
    /// the GIF, and writes an alpha track only for a GIF that shows a transparent pixel: an opaque cartoon's AVIF
    /// has one track, a transparent one's two.
    @Test(arguments: ["cartoon_hotdog.gif", "cartoon_dancing_banana.gif"])
    func theLadderKeepsTheFloorAndAlphaOnlyWhenTransparent(name: String) async throws {
        let gif = try [UInt8](Data(contentsOf: URL(fileURLWithPath: CorpusTests.corpusDirectory + "/" + name)))
        var options = TranscodeOptions()
        options.rendition = options.rendition.withExtraFormats([.avif])
        try await withTemporaryDirectory { directory in
            let metadata = try await convertFiles(gif, options: options, directory: directory, name: "a")
            let entry = try #require(ObjectFiles.recorded(.avif, in: metadata), "\(name): no AVIF kept")
            #expect((entry.psnr ?? 0) >= 35, "\(name)")
            #expect(entry.bytes < gif.count, "\(name)")
            let file = try [UInt8](Data(contentsOf: URL(fileURLWithPath: directory + "/a.avif")))
            #expect(Self.trackCount(file) == (metadata.hasTransparency ? 2 : 1), "\(name)")
        }
    }
}
