import NIOCore
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// `RequestFraming` with bytes alone: where requests begin and end, across reads, and when framing gives up.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct RequestFramingTests {
    /// What the front would do with every step, passing every head on: the parts passed (`H:` a head, `B:` body
    /// bytes, `P:` bytes passed on after framing ended).
    static func passEverything(_ reads: [String], framing: inout RequestFraming) -> [String] {
        var parts: [String] = []
        for read in reads {
            framing.read(ByteBuffer(string: read))
            loop: while true {
                switch framing.next() {
                case .done: break loop
                case .body(let bytes): parts.append("B:" + String(buffer: bytes))
                case .passOn(let bytes): parts.append("P:" + String(buffer: bytes))
                case .head: parts.append("H:" + String(buffer: framing.passHead()))
                case .tooLong(let requestLine):
                    // The front answers it and closes.
                    parts.append(requestLine ? "T:line" : "T:head")
                    framing.close()
                }
            }
        }
        return parts
    }

    static let get = "GET /media/a.mp4 HTTP/1.1\r\nHost: x\r\n\r\n"
    static let post = "POST /transcode HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"

    @Test func pipelinedRequestsComeApartAtTheirEnds() {
        var framing = RequestFraming()
        let parts = Self.passEverything([Self.get + Self.post + Self.get], framing: &framing)
        #expect(
            parts == [
                "H:" + Self.get, "H:POST /transcode HTTP/1.1\r\nContent-Length: 5\r\n\r\n", "B:hello", "H:" + Self.get,
            ])
        #expect(framing.mode == .framing)
    }

    /// The same requests cut into reads at every place give the same heads, and the bodies' bytes in order.
    @Test func readsCutAnywhereFrameTheSame() {
        let text = Self.get + Self.post + Self.get
        for cut in 1..<text.utf8.count {
            let bytes = Array(text.utf8)
            let reads = [
                String(decoding: bytes[..<cut], as: UTF8.self), String(decoding: bytes[cut...], as: UTF8.self),
            ]
            var framing = RequestFraming()
            let parts = Self.passEverything(reads, framing: &framing)
            #expect(parts.filter { $0.hasPrefix("H:") }.count == 3, "cut at \(cut)")
            #expect(parts.map { $0.dropFirst(2) }.joined() == text, "cut at \(cut)")
            #expect(framing.mode == .framing)
        }
    }

    /// A request answered here leaves nothing behind: with its body when that came whole in the read.
    @Test func anAnsweredRequestIsConsumed() throws {
        var framing = RequestFraming()
        framing.read(ByteBuffer(string: Self.post + Self.get))
        guard case .head(let head, _, let bodyLength) = framing.next() else {
            Issue.record("expected a head")
            return
        }
        #expect(head.mayBeTranscodeHit && bodyLength == 5)
        #expect(framing.wholeBody.map { String(decoding: $0, as: UTF8.self) } == "hello")
        framing.answered(withBody: true)
        guard case .head(let next, _, _) = framing.next() else {
            Issue.record("expected the GET")
            return
        }
        #expect(next.mayBeAnswered && next.target == "/media/a.mp4")
        framing.answered()
        guard case .done = framing.next() else {
            Issue.record("expected the end of the read")
            return
        }
    }

    @Test func aBodyNotAllReadIsNotWhole() {
        var framing = RequestFraming()
        framing.read(ByteBuffer(string: "POST /transcode HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel"))
        guard case .head = framing.next() else {
            Issue.record("expected a head")
            return
        }
        #expect(framing.wholeBody == nil)
        _ = framing.passHead()
        guard case .body(let part) = framing.next() else {
            Issue.record("expected body bytes")
            return
        }
        #expect(String(buffer: part) == "hel")
    }

    /// What cannot be framed for certain goes to the decoder whole, from that byte on, and so does every later
    /// read.
    @Test(arguments: [
        "POST /transcode HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "GET / HTTP/1.1\nHost: x\n\n",
        "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
    ])
    func whatCannotBeFramedGoesToTheDecoder(text: String) {
        var framing = RequestFraming()
        let parts = Self.passEverything([Self.get + text, Self.get], framing: &framing)
        #expect(parts == ["H:" + Self.get, "P:" + text])
        #expect(framing.mode == .passing)
    }

    /// A head longer than `maxHeadBytes` is too long, told by whether its request line ended, in one read or
    /// many; a head just under the bound is framed; nothing after a head too long is read.
    @Test func aHeadOverTheBoundIsTooLong() {
        let longField =
            "GET / HTTP/1.1\r\nX-Long: " + String(repeating: "v", count: RequestFraming.maxHeadBytes) + "\r\n\r\n"
        let longLine = "GET /" + String(repeating: "a", count: RequestFraming.maxHeadBytes) + " HTTP/1.1\r\n\r\n"
        for (text, expected) in [(longField, "T:head"), (longLine, "T:line")] {
            var whole = RequestFraming()
            #expect(Self.passEverything([Self.get + text + Self.get], framing: &whole) == ["H:" + Self.get, expected])
            #expect(whole.mode == .closed)
            // 1 KB reads: held until the bound, then too long.
            var cut = RequestFraming()
            let bytes = Array(text.utf8)
            let reads = stride(from: 0, to: bytes.count, by: 1024).map {
                String(decoding: bytes[$0..<min(bytes.count, $0 + 1024)], as: UTF8.self)
            }
            #expect(Self.passEverything(reads, framing: &cut) == [expected])
        }
        let fits =
            "GET / HTTP/1.1\r\nX-Long: " + String(repeating: "v", count: RequestFraming.maxHeadBytes - 30) + "\r\n\r\n"
        var framing = RequestFraming()
        #expect(Self.passEverything([fits + Self.get], framing: &framing) == ["H:" + fits, "H:" + Self.get])
    }

    /// A request that ends the connection: what follows it is the decoder's to refuse.
    @Test func theRestAfterAClosingRequestIsPassedOn() {
        var framing = RequestFraming()
        framing.read(ByteBuffer(string: "GET / HTTP/1.0\r\n\r\n" + Self.get))
        guard case .head(let head, _, _) = framing.next() else {
            Issue.record("expected a head")
            return
        }
        #expect(head.endsConnection)
        _ = framing.passHead()
        guard case .passOn(let rest) = framing.passRest() else {
            Issue.record("expected the rest")
            return
        }
        #expect(String(buffer: rest) == Self.get)
        #expect(framing.mode == .passing)
    }

    /// The input ends with a head unfinished: it goes to the decoder (which answers it with its error).
    @Test func aHeldHeadIsGivenUpAtTheEnd() {
        var framing = RequestFraming()
        framing.read(ByteBuffer(string: "GET /media/a.mp4 HTTP/1.1\r\nHo"))
        guard case .done = framing.next() else {
            Issue.record("expected the head to be held")
            return
        }
        #expect(framing.takeHeld().map { String(buffer: $0) } == "GET /media/a.mp4 HTTP/1.1\r\nHo")
        #expect(framing.takeHeld() == nil)
        #expect(framing.mode == .passing)
    }

    /// An answer that closes the connection: nothing after it is read.
    @Test func afterCloseNothingIsRead() {
        var framing = RequestFraming()
        framing.read(ByteBuffer(string: Self.get + Self.get))
        guard case .head = framing.next() else {
            Issue.record("expected a head")
            return
        }
        framing.close()
        framing.answered()
        guard case .done = framing.next() else {
            Issue.record("expected nothing more")
            return
        }
        #expect(framing.mode == .closed)
    }
}
