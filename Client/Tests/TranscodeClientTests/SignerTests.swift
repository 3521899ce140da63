import Foundation
import Testing

@testable import TranscodeClient

@Suite struct SignerTests {
    /// A generator whose sequence is the same every run (SplitMix64), so a failure is found again.
    struct Seeded: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            self.state &+= 0x9E37_79B9_7F4A_7C15
            var z = self.state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// A GIF URL of every shape a CMS has: hosts, ports, paths with escapes and non-ASCII, queries, fragments.
    static func randomURL(_ random: inout Seeded) -> String {
        let schemes = ["http", "https", "HTTPS"]
        let hosts = ["example.com", "cdn.example.org:8443", "127.0.0.1:8080", "[::1]:9000", "blog.xn--exmple-cua.com"]
        let words = ["cat", "a b", "naïve", "%20x", "emoji😀", "UPPER", "a+b", "q=1&r=2", "~tilde", "ß"]
        var path = ""
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            path +=
                "/" + words.randomElement(using: &random)!.addingPercentEncoding(
                    withAllowedCharacters: .urlPathAllowed)!
        }
        var url = schemes.randomElement(using: &random)! + "://" + hosts.randomElement(using: &random)! + path + ".gif"
        if Bool.random(using: &random) { url += "?v=\(Int.random(in: 0...99999, using: &random))&s=x" }
        if Int.random(in: 0..<5, using: &random) == 0 { url += "#frag" }
        return url
    }

    /// Option lists as `sign --option` takes them, valid and not: every name, both spellings, values at the edges.
    static let optionSets: [[String]] = [
        [], ["bg:000000"], ["background:#FFaa00"], ["w:480"], ["width:16", "height:8192"], ["h:720", "bg:0a0B0c"],
        ["preview:1"], ["preview:2", "w:320"], ["also:webp"], ["also:webp,avif"], ["also:avif,webm,poster.webp"],
        ["bg:ffffff", "w:480", "h:480", "also:webm"],
        // Refused, by both:
        ["crf:20"], ["w:15"], ["w:0480"], ["w:+480"], ["h:8193"], ["bg:12345"], ["bg:gggggg"], ["preview:3"],
        ["also:avif,webp"], ["also:webp,webp"], ["also:gif"], ["also:"], ["w:480", "width:480"],
    ]

    /// 1,000 random URLs with random options and extensions: the client's path is byte for byte what
    /// `transcode-server sign` prints, and what it refuses, the client refuses too.
    @Test func signaturesAreTheServersFor1000RandomURLs() throws {
        let binary = try Paths.serverBinary()
        let signer = try TranscodeURLSigner(hexKey: Service.key, hexSalt: Service.salt)
        var random = Seeded(state: 2026)
        var groups: [[String]: [String]] = [:]
        var keys: [[String]] = []
        for _ in 0..<1000 {
            let options = Self.optionSets.randomElement(using: &random)!
            let file = MediaFile.allCases.randomElement(using: &random)!
            let key = options + ["." + file.rawValue]
            if groups[key] == nil { keys.append(key) }
            groups[key, default: []].append(Self.randomURL(&random))
        }
        var compared = 0, refused = 0
        for key in keys {
            let urls = groups[key]!
            let options = Array(key.dropLast()), fileExtension = String(key.last!.dropFirst())
            let ours = urls.map { try? signer.path(of: $0, options: options, fileExtension: fileExtension) }
            let arguments =
                [
                    "sign", "-", "--extension", fileExtension, "--signing-keys", Service.key, "--signing-salts",
                    Service.salt,
                ]
                + options.flatMap { ["--option", $0] }
            let theirs = try run(binary, arguments, input: urls.joined(separator: "\n") + "\n")
            if ours.contains(nil) {
                // The server signs a list whole or not at all: refused there, refused here.
                #expect(theirs.status != 0, "\(key): the server signed what the client refused: \(urls)")
                refused += urls.count
                continue
            }
            #expect(theirs.status == 0, "\(key): \(theirs.stderr)")
            let lines = theirs.stdout.split(separator: "\n").map(String.init)
            #expect(lines == ours.compactMap { $0 }, "\(key)")
            compared += urls.count
        }
        #expect(compared + refused == 1000)
        #expect(compared > 300 && refused > 100, "compared \(compared), refused \(refused)")
    }

    /// An option the server does not take is refused with the server's own words.
    @Test(arguments: [
        (["crf:20"], "unknown option \"crf\""), (["w:15"], "w must be a number of pixels, 16-8192, got 15"),
        (["width:0480"], "width must be a number of pixels, 16-8192, got 0480"),
        (["bg:12345"], "bg must be RRGGBB, got 12345"), (["preview:3"], "preview must be a number of seconds, 1-2"),
        (["also:avif,webp"], "also must name extras of webp,avif,webm,poster.webp,poster.avif, each once"),
        (["w:480", "width:480"], "option w is given twice"),
    ])
    func refusesAsTheServerDoes(options: [String], words: String) throws {
        let binary = try Paths.serverBinary()
        let signer = try TranscodeURLSigner(hexKey: Service.key, hexSalt: Service.salt)
        var message = ""
        do {
            _ = try signer.path(of: "https://example.com/a.gif", options: options, fileExtension: "mp4")
        } catch let error as TranscodeClientError {
            if case .badRequest(let text) = error { message = text }
        }
        #expect(message.contains(words), "\(message)")
        let server = try run(
            binary,
            ["sign", "https://example.com/a.gif", "--signing-keys", Service.key, "--signing-salts", Service.salt]
                + options.flatMap { ["--option", $0] })
        #expect(server.status != 0)
        #expect(server.stderr.contains(message), "server: \(server.stderr) client: \(message)")
    }

    @Test func refusesWhatCannotBeSigned() throws {
        #expect(throws: TranscodeClientError.self) { try TranscodeURLSigner(hexKey: "xyz", hexSalt: "00") }
        #expect(throws: TranscodeClientError.self) { try TranscodeURLSigner(hexKey: "", hexSalt: "00") }
        #expect(throws: TranscodeClientError.self) { try TranscodeURLSigner(hexKey: "00", hexSalt: "0") }
        let signer = try TranscodeURLSigner(hexKey: "AbCd", hexSalt: "")
        for bad in [
            "ftp://example.com/a.gif", "not a url", "https:///a.gif", "https://" + String(repeating: "a", count: 8200),
        ] {
            #expect(throws: TranscodeClientError.self) { try signer.path(of: bad) }
        }
        let preview = try RenditionOptions(preview: 1)
        #expect(throws: TranscodeClientError.self) {
            try signer.path(of: "https://e.com/a.gif", options: preview, file: .auto)
        }
        let also = try RenditionOptions(also: [.webp])
        #expect(throws: TranscodeClientError.self) {
            try signer.path(of: "https://e.com/a.gif", options: also, file: .webp)
        }
        #expect(throws: TranscodeClientError.self) {
            try signer.path(of: "https://e.com/a.gif", options: also, file: .auto)
        }
        #expect(throws: TranscodeClientError.self) {
            try signer.path(of: "https://e.com/a.gif", options: [], fileExtension: "gif")
        }
        #expect(throws: TranscodeClientError.self) { try RenditionOptions(also: [.mp4]) }
        #expect(throws: TranscodeClientError.self) { try RenditionOptions(width: 8193) }
        #expect(throws: TranscodeClientError.self) { try RenditionOptions(background: "#12") }
        #expect(throws: TranscodeClientError.self) { try RenditionOptions(parsing: ["w"]) }
        // The typed options write the canonical path: the registry's order of extras, lower-case colours.
        let options = try RenditionOptions(background: "#ABCDEF", width: 480, also: [.webm, .webp])
        #expect(options.segments == ["bg:abcdef", "w:480", "also:webp,webm"])
    }
}
