import HTTPTypes
import TranscodeCore

/// A request head as `MediaHitFront` reads it: its framing, and what a hit needs. `nil` for a head that is
/// not plain CRLF-ended lines of visible ASCII (RFC 9112 §2.2, §3, §5 without their leniencies).
struct RawRequestHead {
    var method: HTTPRequest.Method
    /// The request target as sent.
    var target: String
    /// The fields a hit reads (`MediaAnswer`, `MediaHitHandler`); the others are skipped.
    var fields: HitFields
    /// `GET` or `HEAD` of HTTP/1.1 without a body: may be answered ahead of the decoder.
    var mayBeAnswered: Bool
    /// `POST /transcode` of HTTP/1.1 with a body by `Content-Length`: may be a cache hit answered ahead.
    var mayBeTranscodeHit = false
    /// HTTP/1.0, or a `close` in `Connection`: llhttp reads nothing after this request.
    var endsConnection: Bool {
        self.isHTTP10 || self.fields.asksToClose
    }
    var isHTTP10: Bool
    /// The body's length (`Content-Length`, else 0); `nil` when it is not known here: `Transfer-Encoding`,
    /// `Upgrade`, `CONNECT`, several or a malformed `Content-Length`.
    var bodyLength: Int?

    private static let read = HitFields.read.map { Array($0.name.canonicalName.utf8) }
    private static let contentLength = Array("content-length".utf8)
    private static let transferEncoding = Array("transfer-encoding".utf8)
    private static let upgrade = Array("upgrade".utf8)

    /// - Parameter bytes: the head, up to and including its empty line.
    init?(_ bytes: UnsafeRawBufferPointer) {
        var start = 0
        /// The next line, without its CRLF; `nil` at a CR not followed by LF.
        func nextLine() -> Range<Int>? {
            guard let cr = bytes[start...].firstIndex(of: 0x0D), cr + 1 < bytes.count, bytes[cr + 1] == 0x0A else {
                return nil
            }
            defer { start = cr + 2 }
            return start..<cr
        }
        // Request line: method SP target SP version.
        guard let line = nextLine(), let space = bytes[line].firstIndex(of: 0x20),
            let second = bytes[(space + 1)..<line.upperBound].firstIndex(of: 0x20)
        else { return nil }
        let method = bytes[line.lowerBound..<space]
        let target = bytes[(space + 1)..<second]
        let version = bytes[(second + 1)..<line.upperBound]
        guard !method.isEmpty, method.allSatisfy(Self.isTokenByte), !target.isEmpty,
            target.allSatisfy({ (0x21...0x7E).contains($0) }), version.count == 8,
            version.starts(with: "HTTP/1.".utf8), version.last == 0x31 || version.last == 0x30
        else { return nil }
        let isGet = method.elementsEqual("GET".utf8)
        let isHead = !isGet && method.elementsEqual("HEAD".utf8)
        let isPost = method.elementsEqual("POST".utf8)
        self.method = isHead ? .head : isPost ? .post : .get
        self.isHTTP10 = version.last == 0x30
        self.target = String(decoding: target, as: UTF8.self)
        self.fields = HitFields()
        var length: Int? = nil
        var framed = !method.elementsEqual("CONNECT".utf8)
        // Field lines: name ":" OWS value OWS, up to the empty line.
        while let line = nextLine() {
            if line.isEmpty {
                self.bodyLength = framed ? length ?? 0 : nil
                self.mayBeAnswered = (isGet || isHead) && version.last == 0x31 && length == nil && framed
                self.mayBeTranscodeHit =
                    isPost && version.last == 0x31 && length != nil && framed
                    && target.elementsEqual(ResponsePolicy.transcode.template.utf8)
                return
            }
            guard let colon = bytes[line].firstIndex(of: 0x3A), colon > line.lowerBound else { return nil }
            let name = bytes[line.lowerBound..<colon]
            var value = bytes[(colon + 1)..<line.upperBound]
            guard name.allSatisfy(Self.isTokenByte), value.allSatisfy({ $0 == 0x09 || (0x20...0x7E).contains($0) })
            else { return nil }
            while let first = value.first, first == 0x20 || first == 0x09 { value = value.dropFirst() }
            while let last = value.last, last == 0x20 || last == 0x09 { value = value.dropLast() }
            if Self.equalsLowercased(name, Self.contentLength) {
                guard length == nil, (1...15).contains(value.count), value.allSatisfy({ (0x30...0x39).contains($0) })
                else {
                    framed = false
                    continue
                }
                length = value.reduce(0) { $0 * 10 + Int($1 - 0x30) }
            } else if Self.equalsLowercased(name, Self.transferEncoding) || Self.equalsLowercased(name, Self.upgrade) {
                framed = false
            } else if let index = Self.read.firstIndex(where: { Self.equalsLowercased(name, $0) }) {
                self.fields.append(String(decoding: value, as: UTF8.self), at: index)
            }
        }
        return nil
    }

    /// A `tchar` (RFC 9110 §5.6.2).
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
        case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E, 0x5F, 0x60, 0x7C, 0x7E: true
        default: false
        }
    }

    private static func equalsLowercased(_ bytes: Slice<UnsafeRawBufferPointer>, _ lowercase: [UInt8]) -> Bool {
        bytes.count == lowercase.count
            && zip(bytes, lowercase).allSatisfy { ($0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0) == $1 }
    }
}
