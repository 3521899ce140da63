import HTTPTypes
import TranscodeCore
import Transcoder

/// What is answered for one stored file of `size` bytes, before any byte is read: status, headers (ETag,
/// `304`, byte ranges, `If-Range`) and which bytes to send. Shared by the `/media` route, `GET /v1/...` and
/// `MediaHitHandler`, so the three cannot answer the same request differently.
struct MediaAnswer {
    private(set) var status: HTTPResponse.Status
    /// The bytes of the file to send (`nil` for an empty file, `304` and `416`).
    private(set) var bytes: ClosedRange<Int>?
    private let contentType: String
    private let etag: String
    private let cacheControl: String
    /// `Content-Range`, for `206` and `416`.
    private var contentRange: String?
    /// `Content-Length` (none on `304`).
    private var contentLength: Int?

    private static let contentTypeOptions = HTTPField.Name("X-Content-Type-Options")!

    /// A stored file's name, `<64 hex>.<mp4|jpg|json>`: its key is checked before anything touches the disk.
    struct File {
        let key: ObjectKey
        let fileExtension: String
        let contentType: String

        init?(name: Substring) {
            // By UTF-8 code units: a cache hit reads this, and Character indexing was a visible part of its cost.
            guard let dot = name.utf8.firstIndex(of: UInt8(ascii: ".")), let key = ObjectKey(name[..<dot]) else {
                return nil
            }
            let fileExtension = String(name[name.utf8.index(after: dot)...])
            guard let contentType = OutputFormat.withExtension(fileExtension)?.mediaType else { return nil }
            self.key = key
            self.fileExtension = fileExtension
            self.contentType = contentType
        }
    }

    /// `false` for `304` and `416`, whose answers have no body even for `GET`.
    var sendsBody: Bool { self.status == .ok || self.status == .partialContent }

    /// The answer to a request with these fields (`request`, as the router has them).
    init(
        contentType: String, size: Int, etag: String, request: HTTPFields, cacheControl: String
    ) {
        self.init(
            contentType: contentType, size: size, etag: etag, range: request[.range], ifRange: request[.ifRange],
            ifNoneMatch: request[.ifNoneMatch], cacheControl: cacheControl)
    }

    /// The answer to a request whose `Range`, `If-Range` and `If-None-Match` are these, for a file whose entity
    /// tag is `etag` (`ObjectKey.entityTag`).
    init(
        contentType: String, size: Int, etag: String, range: String?, ifRange: String?, ifNoneMatch: String?,
        cacheControl: String
    ) {
        (self.contentType, self.etag, self.cacheControl) = (contentType, etag, cacheControl)
        if let match = ifNoneMatch, EntityTag.matches(match, etag) {
            self.status = .notModified
            self.bytes = nil
            return
        }
        var range = ByteRange(header: range, size: size)
        // If-Range with another validator: the client's partial copy is stale, send everything.
        if let ifRange, ifRange != etag { range = .whole }

        switch range {
        case .whole:
            self.status = .ok
            self.bytes = size > 0 ? 0...(size - 1) : nil
        case .partial(let partial):
            self.status = .partialContent
            self.bytes = partial
            self.contentRange = "bytes \(partial.lowerBound)-\(partial.upperBound)/\(size)"
        case .unsatisfiable:
            self.status = .rangeNotSatisfiable
            self.bytes = nil
            self.contentRange = "bytes */\(size)"
        }
        self.contentLength = self.bytes.map { $0.count } ?? 0
    }

    /// The answer's header fields, as the router sends them.
    var headers: HTTPFields {
        HTTPFields(adding: self.addHeaders)
    }

    /// Adds the answer's header fields to `sink`, in the order the router sends them. A cache hit answered ahead
    /// of the HTTP codec writes them as bytes (`ResponseHeadBytes`): building `HTTPFields` and encoding them was
    /// a fifth of its time.
    func addHeaders(to sink: inout some HeaderFieldSink) {
        sink.add(.contentType, self.contentType)
        sink.add(.eTag, self.etag)
        sink.add(.cacheControl, self.cacheControl)
        sink.add(.acceptRanges, "bytes")
        sink.add(Self.contentTypeOptions, "nosniff")
        if let contentRange = self.contentRange { sink.add(.contentRange, contentRange) }
        if let contentLength = self.contentLength { sink.add(.contentLength, contentLength) }
    }
}

/// Where a response's header fields go: `HTTPFields`, for the HTTP codec, or the bytes of a response head
/// (`ResponseHeadBytes`). The bytes are written as given, without `HTTPField`'s checks: only values the server
/// made or checked may be added (a value from the client as it came would allow response splitting).
protocol HeaderFieldSink {
    mutating func add(_ name: HTTPField.Name, _ value: String)
    mutating func add(_ name: HTTPField.Name, _ value: Int)
}

extension HeaderFieldSink {
    mutating func add(_ name: HTTPField.Name, _ value: Int) { self.add(name, String(value)) }
}

extension HTTPFields: HeaderFieldSink {
    /// Appended, not set by name: the answers built this way have each field once, and setting by name
    /// searched the fields each time.
    mutating func add(_ name: HTTPField.Name, _ value: String) { self.append(HTTPField(name: name, value: value)) }

    /// The fields `add` adds, in its order.
    init(adding add: (inout HTTPFields) -> Void) {
        self.init()
        self.reserveCapacity(12)
        add(&self)
    }
}
