import Foundation
import Testing

@testable import Transcoder

/// Formats travel as themselves (`OutputFormat`) from a request to the encoder, and as their names on the wire: the
/// options a fleet queued and the keys objects were stored under read the same as when the list was `[String]`.
@Suite(.tags(.unit), .timeLimit(.minutes(1))) struct OutputFormatCodingTests {
    /// The registry's order, whatever the order asked, and each once.
    @Test func extrasAreKeptInTheRegistrysOrder() {
        let spec = RenditionSpec().withExtraFormats([.avifPoster, .webp, .webp])
        #expect(spec.extraFormats == [.webp, .avifPoster])
        #expect(spec.withExtraFormats([.webm]).extraFormats == [.webp, .webm, .avifPoster])
    }

    /// A format is its name in JSON; the fingerprint that keys an object is the one spelled before the type.
    @Test func theWireAndTheKeyAreWhatTheyWere() throws {
        var options = TranscodeOptions()
        options.rendition = options.rendition.withExtraFormats([.avif, .webp])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let json = String(decoding: try encoder.encode(options.rendition), as: UTF8.self)
        #expect(json.contains(#""extraFormats":["webp","avif"]"#), "\(json)")
        #expect(
            options.outputFingerprint == TranscodeOptions().outputFingerprint + ";extra=webp,avif;avif=2")
        let read = try JSONDecoder().decode(RenditionSpec.self, from: Data(json.utf8))
        #expect(read.extraFormats == [.webp, .avif])
        var stills = TranscodeOptions()
        stills.rendition = stills.rendition.withExtraFormats([.webpPoster])
        #expect(stills.outputFingerprint == TranscodeOptions().outputFingerprint + ";extra=poster.webp")
    }

    /// A name the registry does not know (a job a newer node queued) is kept by its name, as when the list was
    /// `[String]`: the options encode and key as they came, and the conversion refuses them (`invalid-options`).
    /// A format that is not an extra (the video's) is a violation too.
    @Test func anUnknownFormatIsKeptByItsNameAndRefused() async throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let json = String(decoding: try encoder.encode(RenditionSpec()), as: UTF8.self)
        let newer = json.replacingOccurrences(of: #""extraFormats":[]"#, with: #""extraFormats":["webm","thumb.jxl"]"#)
        #expect(newer != json)
        var options = TranscodeOptions()
        options.rendition = try JSONDecoder().decode(RenditionSpec.self, from: Data(newer.utf8))
        #expect(options.rendition.extraFormats.map(\.name) == ["webm", "thumb.jxl"])
        #expect(String(decoding: try encoder.encode(options.rendition), as: UTF8.self) == newer)
        #expect(options.outputFingerprint.hasSuffix(";extra=webm,thumb.jxl"))
        #expect(options.violations.map(\.value) == ["webm,thumb.jxl"])
        #expect(ObjectFiles.extra(named: "thumb.jxl") == nil && OutputFormat.named("thumb.jxl") == nil)
        var gif = GIFBuilder(width: 8, height: 8)
        gif.frames = [.filled(1, width: 8, height: 8, delay: 10)]
        try await expectFailure(try gif.build(), .invalidOptions, options: options)
        var video = TranscodeOptions()
        video.rendition.extraFormats = [.mp4]
        #expect(video.violations.map(\.field) == ["extraFormats"])
        #expect(video.violations.first?.value == "mp4")
    }
}
