import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix

/// Where an S3-compatible store is and how to address it. Credentials come from the environment only
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optionally `AWS_SESSION_TOKEN`).
package struct S3Configuration: Sendable, Equatable {
    /// `http(s)://host[:port]`, e.g. `http://127.0.0.1:8333` or `https://s3.eu-west-1.amazonaws.com`.
    var endpoint: URL
    var bucket: String
    var region = Self.defaultRegion
    /// `endpoint/bucket/name` (most self-hosted stores) instead of `bucket.endpoint/name`.
    var pathStyle = Self.defaultPathStyle
    var accessKey: String
    var secretKey: String
    var sessionToken: String? = nil
    /// Each request's time limit.
    var timeoutSeconds: Double = Self.defaultTimeoutSeconds

    static var defaultRegion: String { "us-east-1" }
    static var defaultPathStyle: Bool { true }
    static var defaultTimeoutSeconds: Double { 10 }
}

/// A failed S3 request: the store's error code and message (from its XML body), or `unavailable` when the
/// store could not be reached or answered 5xx.
struct S3Error: Error, Sendable, CustomStringConvertible {
    /// The HTTP status, nil when there was no answer.
    let status: Int?
    /// S3's code (`NoSuchKey`, `AccessDenied`, `SignatureDoesNotMatch`…), or `unavailable`.
    let code: String
    let message: String

    /// The store did not answer, or answered that it cannot now (5xx, `SlowDown`): worth retrying later.
    var isUnavailable: Bool { self.status.map { $0 >= 500 } ?? true }

    var description: String { "S3 \(self.status.map(String.init) ?? "-") \(self.code): \(self.message)" }
}

/// The body of an S3 error answer, `<Error><Code>…</Code><Message>…</Message>…</Error>`: its child elements'
/// text. A small reader of exactly that shape (no XML package is available to this build).
struct S3ErrorBody: Equatable, Sendable {
    var fields: [String: String]

    var code: String? { self.fields["Code"] }
    var message: String? { self.fields["Message"] }

    /// nil when `bytes` is not an `<Error>` document.
    init?(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let rootStart = text.range(of: "<Error>"),
            let rootEnd = text.range(of: "</Error>", options: String.CompareOptions.backwards),
            rootStart.upperBound <= rootEnd.lowerBound
        else { return nil }
        // Before the root: nothing, or the XML declaration.
        let prolog = text[..<rootStart.lowerBound].trimmingCharacters(in: .whitespacesAndNewlines)
        guard prolog.isEmpty || (prolog.hasPrefix("<?xml") && prolog.hasSuffix("?>")) else { return nil }
        var body = text[rootStart.upperBound..<rootEnd.lowerBound]
        var fields: [String: String] = [:]
        while let open = body.firstIndex(of: "<") {
            guard let tagEnd = body[open...].firstIndex(of: ">") else { return nil }
            let tag = body[body.index(after: open)..<tagEnd]
            let rest = body[body.index(after: tagEnd)...]
            if tag.hasSuffix("/") {  // <Empty/>
                fields[String(tag.dropLast())] = ""
                body = rest
                continue
            }
            let name = String(tag)
            guard !name.isEmpty, !name.contains(" "), !name.hasPrefix("/"),
                let close = rest.range(of: "</\(name)>")
            else { return nil }
            fields[name] = Self.unescape(rest[..<close.lowerBound])
            body = rest[close.upperBound...]
        }
        self.fields = fields
    }

    /// The five predefined entities and numeric character references.
    static func unescape(_ text: Substring) -> String {
        guard text.contains("&") else { return String(text) }
        var result = ""
        var rest = text
        while let ampersand = rest.firstIndex(of: "&") {
            result += rest[..<ampersand]
            guard let semicolon = rest[ampersand...].firstIndex(of: ";") else { break }
            let entity = rest[rest.index(after: ampersand)..<semicolon]
            let named = ["lt": "<", "gt": ">", "amp": "&", "quot": "\"", "apos": "'"]
            if let value = named[String(entity)] {
                result += value
            } else if entity.hasPrefix("#x") || entity.hasPrefix("#X"),
                let code = UInt32(entity.dropFirst(2), radix: 16), let scalar = Unicode.Scalar(code)
            {
                result.unicodeScalars.append(scalar)
            } else if entity.hasPrefix("#"), let code = UInt32(entity.dropFirst()), let scalar = Unicode.Scalar(code) {
                result.unicodeScalars.append(scalar)
            } else {
                result += rest[ampersand...semicolon]
            }
            rest = rest[rest.index(after: semicolon)...]
        }
        return result + rest
    }
}

/// A small S3 client: PUT, GET (whole or a range), HEAD, DELETE, bucket creation and presigned GET URLs, signed
/// with Signature Version 4, over a shared client without AsyncHTTPClient's own tracing (`HTTPClient.sharedUntraced`).
package struct S3Client: Sendable {
    let configuration: S3Configuration
    let signer: SigV4Signer
    private let client: HTTPClient
    /// The largest body a GET collects: objects are videos and posters of at most this size.
    static var maxObjectBytes: Int { 512 << 20 }

    package init(configuration: S3Configuration, client: HTTPClient = .sharedUntraced) {
        self.configuration = configuration
        self.client = client
        self.signer = SigV4Signer(
            accessKey: configuration.accessKey, secretKey: configuration.secretKey,
            sessionToken: configuration.sessionToken, region: configuration.region)
    }

    /// An object read back.
    struct Object: Sendable {
        var bytes: [UInt8]
        /// The whole object's size (from `Content-Range` for a range).
        var totalSize: Int
        var contentType: String?
    }

    /// Stores `bytes` under `name`, replacing what was there.
    func put(_ name: String, _ bytes: [UInt8], contentType: String) async throws {
        _ = try await self.send(
            "PUT", name: name, headers: [("Content-Type", contentType)], body: bytes, expecting: [200])
    }

    /// The object `name`, or the bytes `range` of it (inclusive); nil when there is no such object.
    func get(_ name: String, range: ClosedRange<Int>? = nil) async throws -> Object? {
        var headers: [(String, String)] = []
        if let range { headers.append(("Range", "bytes=\(range.lowerBound)-\(range.upperBound)")) }
        guard let (response, body) = try await self.send("GET", name: name, headers: headers, expecting: [200, 206])
        else { return nil }
        var total = body.count
        if response.status == .partialContent, let contentRange = response.headers.first(name: "Content-Range"),
            let size = contentRange.split(separator: "/").last.flatMap({ Int($0) })
        {
            total = size
        }
        return Object(bytes: body, totalSize: total, contentType: response.headers.first(name: "Content-Type"))
    }

    /// The size of object `name`; nil when there is no such object.
    func head(_ name: String) async throws -> Int? {
        guard let (response, _) = try await self.send("HEAD", name: name, expecting: [200]) else { return nil }
        return response.headers.first(name: "Content-Length").flatMap { Int($0) } ?? 0
    }

    /// Deletes object `name` (S3 answers 204 whether or not it existed).
    func delete(_ name: String) async throws {
        _ = try await self.send("DELETE", name: name, expecting: [200, 204])
    }

    /// Creates the bucket unless it exists already.
    package func createBucket() async throws {
        do {
            _ = try await self.send("PUT", name: nil, expecting: [200])
        } catch let error as S3Error where ["BucketAlreadyOwnedByYou", "BucketAlreadyExists"].contains(error.code) {
            return
        }
    }

    /// A URL that GETs object `name` without credentials until it expires.
    package func presignedURL(_ name: String, expiresSeconds: Int, now: Date = Date()) -> String {
        let (host, path) = self.address(name)
        let query = self.signer.presignedQuery(
            method: "GET", host: host, path: path, expiresSeconds: expiresSeconds, date: now)
        return "\(self.configuration.endpoint.scheme ?? "http")://\(host)\(SigV4Signer.encodePath(path))?\(query)"
    }

    // MARK: -

    /// The `Host` header and the unencoded path of object `name` (nil: the bucket itself).
    private func address(_ name: String?) -> (host: String, path: String) {
        let endpoint = self.configuration.endpoint
        var host = endpoint.host ?? "localhost"
        if host.contains(":") { host = "[\(host)]" }  // an IPv6 literal
        if let port = endpoint.port { host += ":\(port)" }
        let base = endpoint.path.hasSuffix("/") ? String(endpoint.path.dropLast()) : endpoint.path
        if self.configuration.pathStyle {
            return (host, "\(base)/\(self.configuration.bucket)" + (name.map { "/\($0)" } ?? "/"))
        }
        return ("\(self.configuration.bucket).\(host)", "\(base)/" + (name ?? ""))
    }

    /// Sends a signed request. - Returns: the answer and its body; nil on 404.
    /// - Throws: `S3Error`: the store's error, or `unavailable` when it cannot be reached in time.
    private func send(
        _ method: String, name: String?, headers: [(String, String)] = [], body: [UInt8]? = nil,
        expecting: Set<UInt>
    ) async throws -> (HTTPClientResponse, [UInt8])? {
        // A small body (a manifest, a record) is hashed here; a larger one on the I/O pool.
        let payloadHash: String
        if let body, body.count > 64 << 10 {
            payloadHash = try await NIOThreadPool.singleton.runIfActive { HexDigest.encode(SHA256.hash(data: body)) }
        } else {
            payloadHash = body.map { HexDigest.encode(SHA256.hash(data: $0)) } ?? SigV4Signer.emptyPayloadHash
        }
        let response = try await self.execute(
            method, name: name, headers: headers, payloadHash: payloadHash,
            body: body.map { .bytes(ByteBuffer(bytes: $0)) })
        return try await self.finish(response, method, name: name, expecting: expecting)
    }

    /// Signs and sends a request whose body's SHA-256 is `payloadHash`, and returns the answer's head.
    /// - Throws: `S3Error` `unavailable` when the store cannot be reached in time.
    func execute(
        _ method: String, name: String?, headers: [(String, String)] = [], payloadHash: String,
        body: HTTPClientRequest.Body?
    ) async throws -> HTTPClientResponse {
        let (host, path) = self.address(name)
        let signed = self.signer.authorizationHeaders(
            method: method, path: path, headers: [("Host", host)] + headers, payloadHash: payloadHash, date: Date())
        var request = HTTPClientRequest(
            url: "\(self.configuration.endpoint.scheme ?? "http")://\(host)\(SigV4Signer.encodePath(path))")
        request.method = HTTPMethod(rawValue: method)
        for (field, value) in [("Host", host)] + headers + signed { request.headers.add(name: field, value: value) }
        if let body { request.body = body }
        Traces.inject(into: &request.headers)
        do {
            return try await self.client.execute(
                request, timeout: .milliseconds(Int64(self.configuration.timeoutSeconds * 1000)))
        } catch let error where error is S3Error || Self.isLocalFault(error) {
            throw error
        } catch {
            throw S3Error(status: nil, code: "unavailable", message: "\(method) \(path): \(error)")
        }
    }

    /// A fault of this node while a request body streamed (`FileBlocks`: a file that cannot be read, or is not
    /// what its manifest says), not of the store: it passes through as itself, and does not mark the store down.
    static func isLocalFault(_ error: any Error) -> Bool {
        error is ServiceError || error is ObjectFilesDisagree
    }

    /// Collects the answer's body (an object's up to `maxObjectBytes`, any other up to 1 MiB).
    /// - Returns: the answer and its body when its status is one of `expecting`; nil on 404.
    /// - Throws: `S3Error`: the store's error, or `unavailable` when the body cannot be read.
    func finish(
        _ response: HTTPClientResponse, _ method: String, name: String?, expecting: Set<UInt>
    ) async throws -> (HTTPClientResponse, [UInt8])? {
        let bytes: [UInt8]
        do {
            let limit = method == "GET" && expecting.contains(200) ? Self.maxObjectBytes : 1 << 20
            bytes = Array(buffer: try await response.body.collect(upTo: limit))
        } catch let error where Self.isLocalFault(error) {
            throw error
        } catch {
            throw S3Error(status: nil, code: "unavailable", message: "\(method) \(self.address(name).path): \(error)")
        }
        if expecting.contains(response.status.code) { return (response, bytes) }
        let parsed = S3ErrorBody(bytes)
        // A missing bucket is a configuration error, not a missing object.
        if response.status == .notFound, name != nil, parsed?.code != "NoSuchBucket" { return nil }
        let path = self.address(name).path
        throw S3Error(
            status: Int(response.status.code), code: parsed?.code ?? "HTTP\(response.status.code)",
            message: parsed?.message ?? "\(method) \(path) answered \(response.status.code)")
    }
}
