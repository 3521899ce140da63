import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// What a rewritten page weighs, as each engine's `<img>` requests fetch it: the page-fidelity article
/// (`PageFidelityTests.article`, twelve placements of nine GIFs), rewritten in the default output, every `.auto` URL
/// of it fetched with a real engine's `Accept` (a redirect to the GIF counted as the GIF's bytes), against the
/// original page's GIF bytes (each `src` the original loads, once per URL, as a browser's cache has it).
///
/// On a first view, nothing waits on an expensive encode: Chromium's requests are answered at once (the GIF, while
/// the upgrades are made behind them), and only a client whose `<img>` plays video has an MP4 made for it. After the
/// background work has settled, the page weighs a fraction of the original.
@Suite(.tags(.integration, .heavy), .serialized, .timeLimit(.minutes(20))) struct PageBytesTests {
    static let engines: [(name: String, accept: String)] = [
        ("Chromium 156", "image/jxl,image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"),
        ("Firefox ESR 153", "image/avif,image/webp,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5"),
        ("WebKitGTK 2.50", "image/webp,image/avif,video/*;q=0.8,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5"),
        ("Safari 17", NegotiatedImageTests.safari17),
        ("Safari 15", NegotiatedImageTests.safari15),
    ]

    /// The `src` (else the first `srcset` candidate, else `data-src`) of each `<img>` of `html`, in order: the URL
    /// a browser loads for it at a phone's width.
    static func imageURLs(_ html: String) -> [String] {
        var urls: [String] = []
        let tags = html.components(separatedBy: "<img").dropFirst()
        for tag in tags {
            let element = String(tag.prefix { $0 != ">" })
            func attribute(_ name: String) -> String? {
                guard let start = element.range(of: " \(name)=\"") else { return nil }
                let rest = element[start.upperBound...]
                return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
            }
            let dataSource = attribute("data-src")
            let source = attribute("src").flatMap { $0.hasPrefix("data:") ? nil : $0 }
            let candidate = attribute("srcset")?.split(separator: ",").first?.split(separator: " ").first.map(
                String.init)
            if let url = dataSource ?? source ?? candidate { urls.append(url) }
        }
        return urls
    }

    /// The bytes a client sending `accept` fetches for `urls` (each once): an answer's body, or, for a redirect to
    /// the GIF, the GIF's bytes. - Returns: the bytes and how many answers were the GIF.
    static func weigh(
        _ urls: [String], accept: String, harness: Harness
    ) async throws -> (bytes: Int, gifs: Int, fallbacks: [String]) {
        var bytes = 0
        var gifs = 0
        var fallbacks: [String] = []
        for url in Set(urls).sorted() {
            let path = String(url[try #require(url.range(of: "/v1/")).lowerBound...])
            let reply = try await harness.request(.GET, path, headers: [("Accept", accept)])
            if reply.status == 302, let location = reply.headers.first(name: "Location") {
                let gif = try Data(contentsOf: URL(fileURLWithPath: Self.corpusPath(location)))
                bytes += gif.count
                gifs += 1
                fallbacks.append(reply.headers.first(name: "X-Fallback") ?? "?")
            } else {
                #expect(reply.status == 200, "\(url): \(reply.status)")
                bytes += reply.body.count
            }
        }
        return (bytes, gifs, fallbacks)
    }

    /// The corpus file an origin URL names.
    static func corpusPath(_ url: String) -> String {
        corpusDirectory + "/" + (url.components(separatedBy: "/corpus/").last ?? "")
    }

    @Test func aRewrittenArticleWeighsAFractionOfTheOriginal() async throws {
        try await withHarness(configure: NegotiatedImageTests.configure) { harness in
            let original = PageFidelityTests.article(origin: harness.originURL(""))
            let originalURLs = Set(Self.imageURLs(original).filter { $0.hasSuffix(".gif") })
            let originalBytes = try originalURLs.reduce(0) {
                $0 + (try Data(contentsOf: URL(fileURLWithPath: Self.corpusPath($1)))).count
            }
            let reply = try await harness.rewrite(original, timeout: .seconds(120))
            #expect(reply.status == 200, "\(reply.text)")
            let autoURLs = Self.imageURLs(reply.text).filter { $0.hasSuffix(".auto") }
            #expect(autoURLs.count >= 9)

            // First view, as the rewrite answered (its upgrades queued behind it): Chromium's requests convert
            // nothing at interactive priority; each is the GIF or a file already made.
            let first = try await Self.weigh(autoURLs, accept: Self.engines[0].accept, harness: harness)
            #expect(harness.services.transcodes.pool.startedByPriority[.interactive] == nil)
            print(
                "first view, Chromium: \(first.bytes) of \(originalBytes) bytes, \(first.gifs) GIFs \(first.fallbacks)")

            try await NegotiatedImageTests.settle(harness)
            var ratios: [String: Double] = [:]
            for engine in Self.engines {
                let settled = try await Self.weigh(autoURLs, accept: engine.accept, harness: harness)
                let ratio = Double(settled.bytes) / Double(originalBytes)
                ratios[engine.name] = ratio
                print(
                    "second view, \(engine.name): \(settled.bytes) of \(originalBytes) bytes ("
                        + String(format: "%.3f", ratio) + "x), \(settled.gifs) GIFs \(settled.fallbacks)")
            }
            // The targets are 0.20x for Chromium's Accept and 0.25x for Safari's, on articles held out from
            // us; this article of flat, transparent drawings reads 0.24x and 0.24x (docs/benchmarks.md, "Page
            // bytes"): held here, so that a change that makes the page heavier fails.
            #expect(try #require(ratios["Chromium 156"]) <= 0.25)
            #expect(try #require(ratios["Safari 17"]) <= 0.25)
        }
    }
}
