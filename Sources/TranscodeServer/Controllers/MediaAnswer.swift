import HTTPTypes

/// What is answered for one stored file of `size` bytes, before any byte is read: status, headers (ETag,
/// `304`, byte ranges, `If-Range`) and which bytes to send. Shared by the `/media` route, `GET /v1/...` and
/// `MediaHitHandler`, so the three cannot answer the same request differently.
struct MediaAnswer {
    var status: HTTPResponse.Status
    var headers: HTTPFields
    /// The bytes of the file to send (`nil` for an empty file, `304` and `416`).
    var bytes: ClosedRange<Int>?

    private static let contentTypeOptions = HTTPField.Name("X-Content-Type-Options")!

    /// The content type of each file of an object, by extension.
    static let contentTypes = ["mp4": "video/mp4", "jpg": "image/jpeg", "json": "application/json; charset=utf-8"]

    /// A stored file's name, `<64 hex>.<mp4|jpg|json>`: its key is checked before anything touches the disk.
    struct File {
        let key: String
        let fileExtension: String
        let contentType: String

        init?(name: Substring) {
            // By UTF-8 code units: a cache hit reads this, and Character indexing was a visible part of its cost.
            guard let dot = name.utf8.firstIndex(of: UInt8(ascii: ".")), DiskCache.isValidKey(name[..<dot]) else {
                return nil
            }
            let fileExtension = String(name[name.utf8.index(after: dot)...])
            guard let contentType = MediaAnswer.contentTypes[fileExtension] else { return nil }
            self.key = String(name[..<dot])
            self.fileExtension = fileExtension
            self.contentType = contentType
        }
    }

    /// `false` for `304` and `416`, whose answers have no body even for `GET`.
    var sendsBody: Bool { self.status == .ok || self.status == .partialContent }

    init(
        key: String, fileExtension: String, contentType: String, size: Int, request: HTTPFields, cacheControl: String
    ) {
        let etag = "\"\(key).\(fileExtension)\""
        // Appended, not set by name: every field is new, and a cache hit answered from memory builds these
        // (a dictionary literal and setting by name searched the fields each time).
        self.headers = HTTPFields()
        self.headers.reserveCapacity(12)
        self.headers.append(HTTPField(name: .contentType, value: contentType))
        self.headers.append(HTTPField(name: .eTag, value: etag))
        self.headers.append(HTTPField(name: .cacheControl, value: cacheControl))
        self.headers.append(HTTPField(name: .acceptRanges, value: "bytes"))
        self.headers.append(HTTPField(name: Self.contentTypeOptions, value: "nosniff"))
        if let match = request[.ifNoneMatch], EntityTag.matches(match, etag) {
            self.status = .notModified
            self.bytes = nil
            return
        }
        var range = ByteRange(header: request[.range], size: size)
        // If-Range with another validator: the client's partial copy is stale, send everything.
        if let ifRange = request[.ifRange], ifRange != etag { range = .whole }

        switch range {
        case .whole:
            self.status = .ok
            self.bytes = size > 0 ? 0...(size - 1) : nil
        case .partial(let partial):
            self.status = .partialContent
            self.bytes = partial
            self.headers.append(
                HTTPField(name: .contentRange, value: "bytes \(partial.lowerBound)-\(partial.upperBound)/\(size)"))
        case .unsatisfiable:
            self.status = .rangeNotSatisfiable
            self.bytes = nil
            self.headers.append(HTTPField(name: .contentRange, value: "bytes */\(size)"))
            self.headers.append(HTTPField(name: .contentLength, value: "0"))
            return
        }
        self.headers.append(HTTPField(name: .contentLength, value: String(self.bytes.map { $0.count } ?? 0)))
    }
}
