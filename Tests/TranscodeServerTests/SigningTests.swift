import Foundation
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct SigningTests {
    /// imgproxy's published example (docs "Signing a URL"): the scheme is the one people already know.
    @Test func imgproxyPublishedVector() throws {
        let signer = try #require(URLSigner(hexKeys: ["736563726574"], hexSalts: ["68656C6C6F"]))
        let path = "/rs:fill:300:400:0/g:sm/aHR0cDovL2V4YW1w/bGUuY29tL2ltYWdl/cy9jdXJpb3NpdHku/anBn.png"
        #expect(signer.signature(of: path) == "oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH8")
        #expect(signer.isValid(signature: "oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH8", path: path))
        // Other spellings of the same bytes (padding; the last character's two unused bits set) are refused:
        // one URL, one name.
        for other in [
            "oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH8=", "oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH9",
            "oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH-", "oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH_",
        ] {
            #expect(
                URLSigner.decodeBase64URL(other)
                    == URLSigner.decodeBase64URL("oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH8"))
            #expect(!signer.isValid(signature: other, path: path), "\(other)")
        }
    }

    /// Every configured pair is accepted; the first signs; a removed pair no longer works.
    @Test func keyRotation() throws {
        let old = (key: String(repeating: "ab", count: 32), salt: "01020304")
        let new = (key: String(repeating: "cd", count: 32), salt: "0a0b0c0d")
        let path = SourcePath(sourceURL: "https://example.com/a.gif").path
        let before = try #require(URLSigner(hexKeys: [old.key], hexSalts: [old.salt]))
        let during = try #require(URLSigner(hexKeys: [new.key, old.key], hexSalts: [new.salt, old.salt]))
        let after = try #require(URLSigner(hexKeys: [new.key], hexSalts: [new.salt]))
        let oldSignature = before.signature(of: path)
        #expect(during.isValid(signature: oldSignature, path: path))
        #expect(during.signature(of: path) == after.signature(of: path))
        #expect(!after.isValid(signature: oldSignature, path: path))
        #expect(after.isValid(signature: during.signature(of: path), path: path))
    }

    /// Signatures of Python's `hmac` (an independent implementation), for paths of every shape.
    @Test(.tags(.childProcess)) func agreesWithPythonHMAC() async throws {
        let key = "8f1d0e3c5b7a99214466aa55cc00ee11", salt = "73616c74"
        let signer = try #require(URLSigner(hexKeys: [key], hexSalts: [salt]))
        let paths = [
            SourcePath(sourceURL: "https://example.com/a.gif").path,
            SourcePath(sourceURL: "http://cdn.example.org/x/y z.gif?w=1&h=2", background: .init(hex: "#102030")).path,
            SourcePath(sourceURL: "https://例え.jp/ü.gif", fileExtension: "jpg").path,
        ]
        let script = """
            import base64, hashlib, hmac, sys
            key, salt = bytes.fromhex(sys.argv[1]), bytes.fromhex(sys.argv[2])
            for path in sys.argv[3:]:
                mac = hmac.new(key, salt + path.encode(), hashlib.sha256).digest()
                print(base64.urlsafe_b64encode(mac).rstrip(b"=").decode())
            """
        let run = try await runProcess("/usr/bin/python3", ["-c", script, key, salt] + paths, timeout: .seconds(30))
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.split(separator: "\n").map(String.init) == paths.map { signer.signature(of: $0) })
    }

    /// The shell recipe of docs/api.md (openssl), run as written there, gives the server's signature.
    @Test(.tags(.childProcess)) func readmeShellRecipeAgrees() async throws {
        let readme = try PackagingTests.read("docs/api.md")
        let start = try #require(readme.range(of: "```sh sign-url\n"), "docs/api.md has no ```sh sign-url block")
        let end = try #require(readme.range(of: "```", range: start.upperBound..<readme.endIndex))
        let recipe = String(readme[start.upperBound..<end.lowerBound])
        let key = String(repeating: "5e", count: 32), salt = "6d79736174"
        let source = "https://example.com/cats/dancing.gif"
        let run = try await runProcess(
            "/bin/bash", ["-c", "KEY=\(key) SALT=\(salt) GIF_URL='\(source)'\n" + recipe], timeout: .seconds(30))
        #expect(run.status == 0, "\(run.stderr)")
        let signer = try #require(URLSigner(hexKeys: [key], hexSalts: [salt]))
        let expected = signer.signedPath(SourcePath(sourceURL: source).path)
        #expect(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == expected)
    }

    /// `transcode-server sign` prints the path the server accepts, with keys read like the server reads them.
    @Test(.tags(.childProcess)) func signCommand() async throws {
        let binary = try OperationsTests.debugBinary()
        let key = String(repeating: "7f", count: 20), salt = "00ff"
        let source = "https://example.com/a.gif"
        let run = try await runProcess(
            binary,
            [
                "sign", source, "--option", "bg:000000", "--extension", "jpg", "--signing-keys", key,
                "--signing-salts", salt,
            ], timeout: .seconds(30))
        #expect(run.status == 0, "\(run.stderr)")
        let signer = try #require(URLSigner(hexKeys: [key], hexSalts: [salt]))
        let expected = signer.signedPath(
            SourcePath(sourceURL: source, background: .init(hex: "#000000"), fileExtension: "jpg").path)
        #expect(run.stdout == expected + "\n")
        #expect(expected.hasPrefix("/v1/"))
        // A bad option is refused as the server would refuse it; no key is a configuration error.
        let bad = try await runProcess(
            binary, ["sign", source, "--option", "crf:20", "--signing-keys", key, "--signing-salts", salt],
            timeout: .seconds(30))
        #expect(bad.status != 0 && bad.stderr.contains("unknown option"), "\(bad.stderr)")
        let unsigned = try await runProcess(binary, ["sign", source], timeout: .seconds(30))
        #expect(unsigned.status == 78, "\(unsigned.stderr)")
        // It says how to make a key and a salt, and the command that then works.
        #expect(unsigned.stderr.contains("openssl rand -hex 32"), "\(unsigned.stderr)")
        #expect(unsigned.stderr.contains("sign URL --signing-keys $KEY --signing-salts $SALT"), "\(unsigned.stderr)")
    }

    /// `sign -` signs each line of standard input as `sign URL` signs one, in order; one bad line refuses the list.
    @Test(.tags(.childProcess)) func signCommandReadsALineList() async throws {
        let binary = try OperationsTests.debugBinary()
        let key = String(repeating: "7f", count: 20), salt = "00ff"
        let sources = ["https://example.com/a.gif", "http://127.0.0.1:8080/b.gif?x=1&y=%20"]
        let flags = "--option w:480 --extension webp --signing-keys \(key) --signing-salts \(salt)"
        let run = try await runProcess(
            "/bin/sh",
            [
                "-c",
                "printf 'https://example.com/a.gif\\r\\n\\nhttp://127.0.0.1:8080/b.gif?x=1&y=%%20\\n' | \"$0\" sign - \(flags)",
                binary,
            ],
            timeout: .seconds(30))
        #expect(run.status == 0, "\(run.stderr)")
        let signer = try #require(URLSigner(hexKeys: [key], hexSalts: [salt]))
        let expected = sources.map {
            signer.signedPath(SourcePath(sourceURL: $0, width: 480, format: .webp).path)
        }
        #expect(run.stdout == expected.joined(separator: "\n") + "\n")
        let bad = try await runProcess(
            "/bin/sh",
            ["-c", "printf 'https://example.com/a.gif\\nftp://example.com/b.gif\\n' | \"$0\" sign - \(flags)", binary],
            timeout: .seconds(30))
        #expect(bad.status != 0 && bad.stdout.isEmpty, "\(bad.stdout)")
        #expect(bad.stderr.contains("ftp://example.com/b.gif: only http and https"), "\(bad.stderr)")
    }

    @Test func pathsRoundTrip() throws {
        let source = SourcePath(sourceURL: "https://example.com/a b.gif?x=1", background: .init(hex: "#00ff7f"))
        #expect(source.path.hasPrefix("/bg:00ff7f/"))
        #expect(try SourcePath.parse(source.path) == source)
        // Chunked, padded, with the long option name: the same request.
        let encoded = URLSigner.base64URL(Array("https://example.com/a.gif".utf8))
        let chunked = "/background:00FF7F/" + encoded.prefix(10) + "/" + encoded.dropFirst(10) + "==.jpg"
        let parsed = try SourcePath.parse(chunked)
        #expect(parsed.sourceURL == "https://example.com/a.gif")
        #expect(parsed.background == .init(hex: "#00ff7f"))
        #expect(parsed.fileExtension == "jpg")
        // A rendition's box: canonical after the colour; the long names read the same.
        let box = SourcePath(sourceURL: "https://example.com/a.gif", background: .white, width: 480, height: 270)
        #expect(box.path.hasPrefix("/bg:ffffff/w:480/h:270/"))
        #expect(try SourcePath.parse(box.path) == box)
        let long = try SourcePath.parse("/height:270/width:480/bg:ffffff/" + encoded + ".mp4")
        #expect(long == box)
        // A preview: after the box, before the extras.
        let preview = SourcePath(sourceURL: "https://example.com/a.gif", width: 480, preview: 2, extras: [.webp])
        #expect(preview.path == "/w:480/preview:2/also:webp/" + encoded + ".mp4")
        #expect(try SourcePath.parse(preview.path) == preview)
        #expect(try SourcePath.parse("/also:webp/preview:2/w:480/" + encoded + ".mp4") == preview)
        // An object's extras: each file's path names those besides its own, so all are one object.
        let video = SourcePath(sourceURL: "https://example.com/a.gif", format: .mp4, extras: [.webm, .webp])
        #expect(video.path == "/also:webp,webm/" + encoded + ".mp4")
        #expect(try SourcePath.parse(video.path) == video)
        let webm = SourcePath(sourceURL: "https://example.com/a.gif", format: .webm, extras: [.webp, .webm])
        #expect(webm.path == "/also:webp/" + encoded + ".webm")
        #expect(video.extras == [.webp, .webm] && webm.extras == [.webp, .webm])
        #expect(SourcePath(sourceURL: "https://example.com/a.gif", format: .webm).extras == [.webm])
        // An extension of two parts: the still WebP poster, an extra like the others.
        let still = SourcePath(sourceURL: "https://example.com/a.gif", format: .webpPoster, extras: [.webm])
        #expect(still.path == "/also:webm/" + encoded + ".poster.webp")
        #expect(try SourcePath.parse(still.path) == still)
        #expect(still.extras == [.webm, .webpPoster])
        #expect(try SourcePath.parse("/also:webm,poster.webp/" + encoded + ".mp4").also == [.webm, .webpPoster])
    }

    @Test(arguments: [
        "/aHR0cHM6Ly9hLmNvbS94LmdpZg.mkv",  // unknown file
        "/aHR0cHM6Ly9hLmNvbS94LmdpZg.poster.jpg",  // unknown file of two parts
        "/aHR0cHM6Ly9hLmNvbS94LmdpZg.webp.webp",  // nor this
        "/aHR0cHM6Ly9hLmNvbS94.LmdpZg.mp4",  // a dot in the source
        "/also:poster.webp/aHR0cHM6Ly9hLmNvbS94LmdpZg.poster.webp",  // the file's own
        "/aHR0cHM6Ly9hLmNvbS94LmdpZg",  // no extension
        "/crf:20/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // unknown option
        "/bg:fff/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // bad colour
        "/bg:ffffff/bg:000000/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // twice
        "/aHR0cHM6Ly9h/bg:ffffff/LmNvbS94LmdpZg.mp4",  // option after the source
        "/bg:ffffff/.mp4",  // no source
        "//aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // empty segment
        "/aHR0cHM6Ly9hLmNvbS9+LmdpZg.mp4",  // not base64url
        "/w:0/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // no box
        "/w:15/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // below 16
        "/w:8193/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // above 8192
        "/w:0480/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // another spelling of 480
        "/w:+480/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // another spelling of 480
        "/h:12.5/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // not whole pixels
        "/w:480/width:320/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // twice, by two names
        "/preview:3/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // longer than a preview
        "/preview:0/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // no preview
        "/preview:02/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // another spelling of 2
        "/preview:/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // no length
        "/preview:2/preview:1/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // twice
        "/preview:2/aHR0cHM6Ly9hLmNvbS94LmdpZg.auto",  // .auto may answer the whole GIF
        "/also:gif/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // not an extra
        "/also:mp4/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // not an extra either
        "/also:webm,webp/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // another spelling of webp,webm
        "/also:webp,webp/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // twice
        "/also:/aHR0cHM6Ly9hLmNvbS94LmdpZg.mp4",  // none
        "/also:webm/aHR0cHM6Ly9hLmNvbS94LmdpZg.webm",  // the file's own: another spelling of .webm
        "/also:webp/aHR0cHM6Ly9hLmNvbS94LmdpZg.auto",  // .auto's object is the negotiated one
    ])
    func malformedPathsAreRefused(path: String) {
        #expect(throws: ServiceError.self) { try SourcePath.parse(path) }
    }
}
