import Foundation
import HTTPTypes
import Hummingbird
import TranscodeCore

/// `POST /v1/batches`, `GET /v1/batches/{id}`, `GET /v1/batches/{id}/results` and `DELETE /v1/batches/{id}`
/// (bearer token when tokens are configured): backfilling many GIFs (`BatchStore`).
package struct BatchController<Context: RequestContext>: Sendable {
    let batches: any BatchStore
    let webhooks: WebhookDispatcher
    let links: PublicLinks
    /// Most URLs in one batch (`batch.maxURLs`).
    let maxURLs: Int
    let maxBodyBytes: Int

    package init(
        batches: any BatchStore, webhooks: WebhookDispatcher, links: PublicLinks, maxURLs: Int, maxBodyBytes: Int
    ) {
        self.batches = batches
        self.webhooks = webhooks
        self.links = links
        self.maxURLs = maxURLs
        self.maxBodyBytes = maxBodyBytes
    }

    package func addRoutes(to router: Router<Context>, authenticator: BearerAuthenticator<Context>) {
        let group = router.group("v1/batches").add(middleware: authenticator)
        group.post(use: self.create)
        group.get("{id}", use: self.status)
        group.get("{id}/results", use: self.results)
        group.delete("{id}", use: self.delete)
    }

    /// Deletes a batch now (its status and results; what it converted stays in the cache): 204.
    @Sendable func delete(_ request: Request, context: Context) async throws -> Response {
        let id = try context.parameters.require("id")
        guard try await self.batches.delete(id) else { throw ServiceError.notFound("no batch \(id)") }
        return Response(status: .noContent, headers: [.cacheControl: "no-store"])
    }

    private struct Body: Decodable {
        let urls: [String]
        let background: String?
        let callbackURL: String?
        let output: String?

        static var fields: [String] { ["urls", "background", "callbackURL", "output"] }

        private struct AnyKey: CodingKey {
            let stringValue: String
            init(stringValue: String) { self.stringValue = stringValue }
            var intValue: Int? { nil }
            init?(intValue: Int) { nil }
        }

        private enum CodingKeys: String, CodingKey {
            case urls, background, callbackURL, output
        }

        /// Refuses a field it does not know, in the same pass (the body is read once: a batch of 10,000 URLs is
        /// megabytes of strings).
        init(from decoder: any Decoder) throws {
            let names = try decoder.container(keyedBy: AnyKey.self).allKeys.map(\.stringValue)
            if let unknown = names.sorted().first(where: { !Self.fields.contains($0) }) {
                throw ServiceError.badRequest(
                    "unknown field \"\(unknown)\"; the fields are \(Self.fields.joined(separator: ", "))")
            }
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.urls = try container.decode([String].self, forKey: .urls)
            self.background = try container.decodeIfPresent(String.self, forKey: .background)
            self.callbackURL = try container.decodeIfPresent(String.self, forKey: .callbackURL)
            self.output = try container.decodeIfPresent(String.self, forKey: .output)
        }
    }

    @Sendable func create(_ request: Request, context: Context) async throws -> Response {
        guard (request.headers[.contentType] ?? "").lowercased().hasPrefix("application/json") else {
            throw ServiceError(
                .unsupportedMediaType,
                #"send JSON (application/json): {"urls": ["https://..."], "callbackURL": "https://..."}"#)
        }
        let (id, bodyBytes) = try await self.submit(request)
        #if canImport(Glibc)
            // The body's URLs were read into memory and are on disk now: what they took goes back to the kernel, so
            // that batches cost no resident memory for their URLs (without this, 4 batches of 10,000 URLs of 2,000
            // characters left the process 86 MiB larger).
            if bodyBytes >= 256 << 10 { EncoderHeap.releaseFreedMemory() }
        #endif
        guard let status = try await self.batches.status(id) else { throw ServiceError.internal("the batch vanished") }
        var response = try TranscodeController<Context>.json(status, status: .accepted)
        response.headers[.location] = self.links.absolute("/v1/batches/\(id)")
        return response
    }

    /// Reads, checks and records a new batch. - Returns: its id and the body's size.
    private func submit(_ request: Request) async throws -> (id: String, bodyBytes: Int) {
        let buffer = try await TranscodeController<Context>.collect(request, upTo: self.maxBodyBytes)
        let body: Body
        do {
            body = try JSONDecoder().decode(Body.self, from: buffer)
        } catch let error as ServiceError {
            throw error
        } catch {
            throw ServiceError.badRequest(#"expected JSON {"urls": ["https://..."]}"#)
        }
        guard !body.urls.isEmpty else { throw ServiceError.badRequest("urls is empty") }
        guard body.urls.count <= self.maxURLs else {
            throw ServiceError(
                .tooManyURLs,
                "\(body.urls.count) URLs; a batch takes at most \(self.maxURLs) (batch.maxUrls): split the list")
        }
        _ = try TranscodeController<Context>.background(body.background)
        if let output = body.output, BatchOutput(rawValue: output) == nil {
            throw ServiceError.badRequest("output must be img, video or mp4, got \(output)")
        }
        if let callback = body.callbackURL { _ = try await self.webhooks.validate(callback) }
        let id = try await self.batches.submit(
            BatchRequest(
                urls: body.urls, background: body.background, callbackURL: body.callbackURL, output: body.output))
        return (id, buffer.readableBytes)
    }

    @Sendable func status(_ request: Request, context: Context) async throws -> Response {
        let id = try context.parameters.require("id")
        guard BatchID.isValid(id), let status = try await self.batches.status(id) else {
            throw ServiceError.notFound("no batch \(id)")
        }
        return try TranscodeController<Context>.json(status)
    }

    /// NDJSON, one finished URL per line in the order they finished; `offset` (0) and `limit` (1000, at most
    /// 10000) page through them, `X-Next-Offset` says where the next page starts while there is one.
    @Sendable func results(_ request: Request, context: Context) async throws -> Response {
        let id = try context.parameters.require("id")
        try StrictQuery.check(request, allowed: ["offset", "limit"], route: "GET /v1/batches/{id}/results")
        let offset = try Self.number(request, "offset", default: 0, range: 0...Int.max)
        let limit = try Self.number(request, "limit", default: 1000, range: 1...10_000)
        guard BatchID.isValid(id), let page = try await self.batches.results(id, offset: offset, limit: limit) else {
            throw ServiceError.notFound("no batch \(id)")
        }
        var body: [UInt8] = []
        for line in page.lines { body += line + [UInt8(ascii: "\n")] }
        var headers: HTTPFields = [.contentType: "application/x-ndjson", .cacheControl: "no-store"]
        if offset + page.lines.count < page.total {
            headers[HTTPField.Name("X-Next-Offset")!] = String(offset + page.lines.count)
        }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    private static func number(_ request: Request, _ name: String, default value: Int, range: ClosedRange<Int>) throws
        -> Int
    {
        guard let text = request.uri.queryParameters.get(name) else { return value }
        guard let number = Int(text), range.contains(number) else {
            throw ServiceError.badRequest("\(name) must be an integer in \(range.lowerBound)...\(range.upperBound)")
        }
        return number
    }
}
