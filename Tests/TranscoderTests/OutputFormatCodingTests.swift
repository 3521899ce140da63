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

    /// A name the registry does not know does not decode, and says which; a format that is not an extra (the video's)
    /// is a violation of the options, named.
    @Test func anUnknownOrWrongFormatIsRefused() throws {
        let json = String(decoding: try JSONEncoder().encode(RenditionSpec()), as: UTF8.self)
        let unknown = json.replacingOccurrences(of: #""extraFormats":[]"#, with: #""extraFormats":["webm","gif"]"#)
        #expect(unknown != json)
        #expect(throws: DecodingError.self) {
            _ = try JSONDecoder().decode(RenditionSpec.self, from: Data(unknown.utf8))
        }
        var options = TranscodeOptions()
        options.rendition.extraFormats = [.mp4]
        #expect(options.violations.map(\.field) == ["extraFormats"])
        #expect(options.violations.first?.value == "mp4")
    }
}
