import Crypto
import Foundation
import Testing

@testable import TranscodeClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

@Suite(.serialized) struct MediaCacheTests {
    /// Ten small corpus GIFs (ten contents), each served under two URLs.
    static let contents = [
        "cartoon_hotdog.gif", "loop_1.gif", "cartoon_spinner_loading.gif", "transp_flag_estonia.gif",
        "cartoon_dancing_banana.gif", "cartoon_flag_delaware.gif", "cartoon_gifjs_logo.gif", "photo_hopper.gif",
        "cartoon_floppybuddy.gif", "cartoon_spam_text.gif",
    ]
    static var files: [String: String] {
        var files: [String: String] = [:]
        for (index, name) in Self.contents.enumerated() {
            files["one/\(index).gif"] = name
            files["two/\(index).gif"] = name
        }
        return files
    }
    static let urlNames = (0..<10).flatMap { ["one/\($0).gif", "two/\($0).gif"] }

    static func sha256(_ data: Data) -> String { SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined() }

    static func names(_ directory: URL, _ folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent(folder).path)) ?? [])
            .sorted()
    }

    /// Every file kept is named by its bytes' SHA-256; returns their total size.
    static func checkFiles(_ directory: URL, sourceLocation: SourceLocation = #_sourceLocation) throws -> Int {
        var total = 0
        for name in Self.names(directory, "files") {
            let data = try Data(contentsOf: directory.appendingPathComponent("files").appendingPathComponent(name))
            #expect(name.hasPrefix(Self.sha256(data) + "."), "\(name)", sourceLocation: sourceLocation)
            total += data.count
        }
        return total
    }

    /// 200 requests at once for 20 GIF URLs of 10 contents: one manifest request per URL, one download per content,
    /// ten files and twenty links on disk.
    @Test func concurrentRequestsShareManifestsAndDownloads() async throws {
        try await Service.with(files: Self.files) { service in
            try await withTemporaryDirectory { directory in
                let cache = try MediaCache(directory: directory, maxBytes: 50 << 20, client: service.client)
                let urls = Self.urlNames.map(service.origin)
                let paths = try await withThrowingTaskGroup(of: (String, URL).self) { group in
                    for round in 0..<200 {
                        let url = urls[round % urls.count]
                        group.addTask { (url, try await cache.file(for: url)) }
                    }
                    return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
                }
                #expect(paths.count == 20)
                let log = try service.accessLog()
                let manifests = log.filter { $0.id.hasPrefix("manifest-") }
                let downloads = log.filter { $0.id.hasPrefix("file-") }
                #expect(manifests.count <= 20, "\(manifests.count) manifest requests")
                #expect(downloads.count == 10, "\(downloads.count) downloads")
                #expect(Self.names(directory, "files").count == 10)
                #expect(Self.names(directory, "links").count == 20)
                _ = try Self.checkFiles(directory)
                // Each link reads the service's bytes of its own URL.
                for (url, path) in paths {
                    let signed = try service.client.url(of: url)
                    let (served, _) = try await URLSession.shared.data(from: signed)
                    #expect(try Data(contentsOf: path) == served, "\(url)")
                }
                // Asked again: from disk, nothing sent.
                let before = try service.accessLog().count
                for url in urls { _ = try await cache.file(for: url) }
                #expect(try service.accessLog().count == before)
            }
        }
    }

    /// Over the cap, the least recently used files go first; a cache opened again knows its files, and answers
    /// without the service; a link whose file was evicted is a miss.
    @Test func evictsTheLeastRecentlyUsedAndReopens() async throws {
        try await Service.with(files: Self.files) { service in
            try await withTemporaryDirectory { directory in
                let urls = Self.urlNames.filter { $0.hasPrefix("one/") }.map(service.origin)
                // The posters' sizes, to set a cap that holds about three of them.
                let probe = try MediaCache(
                    directory: directory.appendingPathComponent("probe"), maxBytes: 1 << 30, client: service.client)
                var sizes: [Int] = []
                for url in urls.prefix(4) { sizes.append(try await probe.manifest(for: url).posterBytes) }
                let cap = sizes.prefix(3).reduce(0, +) + sizes.min()! / 2
                let cache = try MediaCache(
                    directory: directory.appendingPathComponent("cache"), maxBytes: cap, client: service.client)
                for url in urls.prefix(3) { _ = try await cache.file(for: url, .jpg) }
                // The first is used again: the second is now the least recently used.
                #expect(await cache.cachedFile(for: urls[0], .jpg) != nil)
                try await Task.sleep(for: .milliseconds(20))
                _ = try await cache.file(for: urls[3], .jpg)
                #expect(await cache.totalBytes <= cap)
                // Evicted oldest first: the second, then the third, then the first.
                #expect(await cache.cachedFile(for: urls[1], .jpg) == nil)
                let kept = [0, 2].map { index in { await cache.cachedFile(for: urls[index], .jpg) != nil } }
                let (first, third) = (await kept[0](), await kept[1]())
                #expect(first || !third, "the third was kept and the first, used since, was not")
                #expect(await cache.cachedFile(for: urls[3], .jpg) != nil)
                // Reopened with a smaller cap: evicted down to it at once, the newest kept.
                let reopened = try MediaCache(
                    directory: directory.appendingPathComponent("cache"), maxBytes: sizes[3] + 1, client: service.client
                )
                #expect(await reopened.totalBytes <= sizes[3] + 1)
                #expect(await reopened.cachedFile(for: urls[3], .jpg) != nil)
                #expect(Self.names(directory.appendingPathComponent("cache"), "links").count == 1)
                // A file larger than the whole cache is refused, not kept.
                let tiny = try MediaCache(
                    directory: directory.appendingPathComponent("tiny"), maxBytes: 10, client: service.client)
                await #expect(throws: TranscodeClientError.self) { _ = try await tiny.file(for: urls[0]) }
                #expect(Self.names(directory.appendingPathComponent("tiny"), "files").isEmpty)
                #expect(Self.names(directory.appendingPathComponent("tiny"), "tmp").isEmpty)
                // A file the object does not have.
                await #expect(throws: TranscodeClientError.self) { _ = try await cache.file(for: urls[0], .avif) }
            }
        }
    }

    /// Prefetch fills the cache in the background; the extras of an object are links to files of their own.
    @Test func prefetchesAndKeepsExtras() async throws {
        try await Service.with(files: Self.files) { service in
            try await withTemporaryDirectory { directory in
                let cache = try MediaCache(directory: directory, maxBytes: 50 << 20, client: service.client)
                let urls = Self.urlNames.prefix(6).map(service.origin)
                await cache.prefetch(urls, concurrency: 3).value
                for url in urls { #expect(await cache.cachedFile(for: url) != nil, "\(url)") }
                let options = try RenditionOptions(also: [.webp])
                let webp = try await cache.file(for: urls[0], .webp, options: options)
                let mp4 = try await cache.file(for: urls[0], .mp4, options: options)
                #expect(try Data(contentsOf: webp).prefix(4) == Data("RIFF".utf8))
                #expect(try Data(contentsOf: mp4).dropFirst(4).prefix(4) == Data("ftyp".utf8))
                _ = try Self.checkFiles(directory)
            }
        }
    }

    /// Bytes that differ from the manifest's digest are refused and never kept.
    @Test func bytesThatDifferFromTheManifestAreRefused() async throws {
        let signer = try TranscodeURLSigner(hexKey: Service.key, hexSalt: Service.salt)
        let gif = "http://origin.example/a.gif"
        let manifest = """
            {"sourceWidth":1,"sourceHeight":1,"outputWidth":2,"outputHeight":2,"durationMs":100,"loopsForever":true,
             "hasTransparency":false,"sourceBytes":100,"mp4Bytes":5,"posterBytes":5,"recommendation":"video",
             "mp4Sha256":"\(String(repeating: "0", count: 64))","posterSha256":null}
            """
        try await ScriptedServer.with([
            try signer.path(of: gif, file: .json): [["body": manifest]],
            try signer.path(of: gif, file: .mp4): [["body": "hello"]],
        ]) { server in
            try await withTemporaryDirectory { directory in
                let cache = try MediaCache(
                    directory: directory, maxBytes: 1 << 20,
                    client: TranscodeClient(baseURL: server.baseURL, signer: signer))
                do {
                    _ = try await cache.file(for: gif)
                    Issue.record("kept bytes that differ from their digest")
                } catch let error as TranscodeClientError {
                    #expect(error.description.contains("SHA-256"), "\(error)")
                }
                #expect(Self.names(directory, "files").isEmpty && Self.names(directory, "links").isEmpty)
                #expect(Self.names(directory, "tmp").isEmpty)
                #expect(await cache.cachedFile(for: gif) == nil)
            }
        }
    }

    /// 100 SIGKILLs of a process downloading into the cache: nothing reads as complete but differs from the
    /// service's bytes, and the files on disk never pass the cap by more than 1%.
    @Test func killedMidDownloadLeavesNothingHalf() async throws {
        let probe = try Paths.probeBinary()
        try await Service.with(files: Self.files) { service in
            try await withTemporaryDirectory { directory in
                let urls = Self.urlNames.map(service.origin)
                // The service's bytes, and a cap that holds about half of them.
                var served: [String: Data] = [:]
                for url in urls {
                    for file in [MediaFile.mp4, .jpg] {
                        served[url + " " + file.rawValue] = try await URLSession.shared.data(
                            from: service.client.url(of: url, file: file)
                        ).0
                    }
                }
                let total = Set(served.values).reduce(0) { $0 + $1.count }
                let cap = total / 2
                let cacheDirectory = directory.appendingPathComponent("cache")
                var random = SignerTests.Seeded(state: 9)
                var complete = 0
                for _ in 0..<100 {
                    let child = try Child(
                        probe,
                        [service.baseURL.absoluteString, Service.key, Service.salt, cacheDirectory.path, "\(cap)"]
                            + urls)
                    try await Task.sleep(for: .milliseconds(Int.random(in: 20...400, using: &random)))
                    child.kill(SIGKILL)
                    // As the killed process left it: files named by their bytes, under the cap.
                    let bytes = try Self.checkFiles(cacheDirectory)
                    #expect(Double(bytes) <= Double(cap) * 1.01, "\(bytes) bytes on disk, cap \(cap)")
                    // What reads as complete is the service's bytes.
                    let cache = try MediaCache(directory: cacheDirectory, maxBytes: cap, client: service.client)
                    for url in urls {
                        for file in [MediaFile.mp4, .jpg] {
                            guard let path = await cache.cachedFile(for: url, file) else { continue }
                            complete += 1
                            #expect(try Data(contentsOf: path) == served[url + " " + file.rawValue], "\(url) \(file)")
                        }
                    }
                }
                // The kills landed while entries were being made: some were complete, not all.
                #expect(complete > 0)
            }
        }
    }
}
