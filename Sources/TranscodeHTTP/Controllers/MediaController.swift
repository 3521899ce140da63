import Foundation
import HTTPTypes
import Hummingbird
import TranscodeCore

/// `GET` and `HEAD /media/{key}.mp4|.jpg|.json`: immutable, content-addressed files with strong ETags
/// and byte ranges (Safari and AVPlayer fetch video with `Range` and need 206 answers). Only files the cache
/// wrote are served (`LocalObjects.verifiedObject`), read from the descriptor that was checked, so a link
/// planted after the check changes nothing.
package struct MediaController<Context: RequestContext>: Sendable {
    /// This node's disk, read through to the fleet's shared store: what the disk lacks is pulled from it (or
    /// redirected to it).
    let results: ReadThroughResults
    let bytesServed: @Sendable (Int) -> Void

    /// `Cache-Control` of `/media`: content-addressed, so immutable (`http.mediaMaxAgeSeconds`).
    var maxAgeSeconds = 31_536_000

    package init(
        results: ReadThroughResults, bytesServed: @escaping @Sendable (Int) -> Void, maxAgeSeconds: Int = 31_536_000
    ) {
        self.results = results
        self.bytesServed = bytesServed
        self.maxAgeSeconds = maxAgeSeconds
    }
    /// `Cache-Control` of `/media`.
    package static func cacheControl(maxAgeSeconds: Int) -> String {
        "public, max-age=\(maxAgeSeconds), immutable"
    }

    /// Bytes read from disk per write to the client. Under glibc's `mmap` threshold, which `EncoderHeap` holds at
    /// 128 KB: a chunk buffer of 128 KB was a fresh mapping each time, faulted in and unmapped again (a 1.5 MB
    /// MP4 served whole this way: 350-470 requests/s against 1,257 before the threshold was held).
    static var chunkLength: Int { 64 * 1024 }

    package func addRoutes(to router: Router<Context>) {
        router.get(RouterPath(ResponsePolicy.media.routerPath), use: self.get)
        router.head(RouterPath(ResponsePolicy.media.routerPath), use: self.head)
    }

    @Sendable func get(_ request: Request, context: Context) async throws -> Response {
        try await self.serve(request, context: context, includeBody: true)
    }

    @Sendable func head(_ request: Request, context: Context) async throws -> Response {
        try await self.serve(request, context: context, includeBody: false)
    }

    private func serve(_ request: Request, context: Context, includeBody: Bool) async throws -> Response {
        let name = try context.parameters.require("file")
        // The one spelling of a file's URL: the router also matches `//media/…` and `/media/…/` (it skips empty
        // path segments), which would give a file several URLs (split caches, and a second name to purge).
        guard request.uri.path == ResponsePolicy.media.prefix + name, let file = MediaAnswer.File(name: Substring(name))
        else {
            throw ServiceError.notFound("no such media")
        }
        return try await self.respond(
            key: file.key, fileExtension: file.fileExtension, contentType: file.contentType, request: request,
            includeBody: includeBody, cacheControl: Self.cacheControl(maxAgeSeconds: self.maxAgeSeconds))
    }

    /// Answers with one file of the object `key`: ETag and `304`, byte ranges, HEAD. Shared by `/media` and
    /// `GET /v1/...`, which differ only in `Cache-Control`.
    /// - Throws: `not-found` when the object is not stored; `taken-down` when it, or its GIF, was taken down.
    /// - Parameter checked: the object, when the caller has just checked its files
    ///   (`LocalObjects.verifiedObject`) and its tombstones (`Takedowns.check`): not checked again.
    func respond(
        key: ObjectKey, fileExtension: String, contentType: String, request: Request, includeBody: Bool,
        cacheControl: String, checked: LocalObjects.CheckedObject? = nil
    ) async throws -> Response {
        let file: ServedFile
        switch try await self.results.serve(key, fileExtension: fileExtension, checked: checked) {
        case .file(let served):
            file = served
        case .redirect(let url, let cacheSeconds):
            return Response(
                status: .found,
                headers: [
                    .location: url,
                    // The presigned URL expires: this answer must not outlive it.
                    .cacheControl: "private, max-age=\(cacheSeconds)",
                ])
        }
        var released = false
        defer { if !released { file.release() } }

        let answer = MediaAnswer(
            contentType: contentType, size: file.size, etag: file.etag, request: request.headers,
            cacheControl: cacheControl)
        let (status, headers) = (answer.status, answer.headers)
        guard answer.sendsBody else { return Response(status: status, headers: headers) }
        let length = answer.bytes.map { $0.count } ?? 0
        guard includeBody, let bytes = answer.bytes else {
            return Response(status: status, headers: headers, body: .init())
        }
        if bytes.upperBound < file.keptLength {
            // A small file is read whole once, a larger one's head (players' probes, the `moov`), then served
            // from memory.
            let kept = try await file.keptBytes()
            guard let slice = kept.getSlice(at: bytes.lowerBound, length: length) else {
                throw ServiceError.notFound("the file shrank while being served")
            }
            self.bytesServed(length)
            return Response(status: status, headers: headers, body: .init(byteBuffer: slice))
        }
        // Past the head. Keep the head too: from then on requests for this file are answered ahead of the HTTP
        // codec, the rest sent from the file (`MediaHitFront`). Without it a file only ever asked for whole (curl,
        // a CDN filling its cache) came here every time.
        _ = try await file.keptBytes()
        released = true
        // The object stays pinned (not evictable) until the last byte has been written.
        return Response(
            status: status, headers: headers,
            body: Self.body(file.reader, bytes, counted: self.bytesServed) { file.release() })
    }

    /// The bytes `range` of an opened file, read a chunk at a time as the client takes them; `done` runs when the
    /// body ends, sent or not.
    static func body(
        _ file: any ObjectFileReader, _ range: ClosedRange<Int>, counted: @escaping @Sendable (Int) -> Void,
        done: @escaping @Sendable () -> Void
    ) -> ResponseBody {
        ResponseBody(contentLength: range.count) { writer in
            defer { done() }
            var offset = range.lowerBound
            while offset <= range.upperBound {
                let count = min(Self.chunkLength, range.upperBound - offset + 1)
                try await writer.write(try await file.read(at: offset, length: count))
                offset += count
            }
            try await writer.finish(nil)
            counted(range.count)
        }
    }
}

/// Entity-tag comparison, shared by every route that answers `304`.
enum EntityTag {
    /// `If-None-Match`: `*` or a list of entity tags (weak comparison, RFC 9110 §13.1.2).
    static func matches(_ header: String, _ etag: String) -> Bool {
        if header.trimmingCharacters(in: .whitespaces) == "*" { return true }
        return header.split(separator: ",").contains { candidate in
            var tag = candidate.trimmingCharacters(in: .whitespaces)
            if tag.hasPrefix("W/") { tag.removeFirst(2) }
            return tag == etag
        }
    }
}
