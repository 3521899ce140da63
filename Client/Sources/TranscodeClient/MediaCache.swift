import Crypto
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A disk cache of a service's files for an app, as the apps that started this kept theirs:
///
/// - each file is stored once, under its content's SHA-256 (`files/<sha256>.<ext>`), whatever URLs name it;
/// - each GIF URL (with its options and file) is a symbolic link to it (`links/<digest of the name>.<ext>`);
/// - concurrent requests for one URL share one manifest request, and those for one content share one download;
/// - a byte cap, least recently used files evicted first (room is made before a file is added, so the files on disk
///   never pass it);
/// - crash-safe: a file is written to `tmp/`, synced, checked against the manifest's SHA-256 and only then renamed
///   into `files/`; a link is made in `tmp/` and renamed over its name. A process killed at any moment leaves
///   nothing that reads as complete but is not; `tmp/` is emptied when a cache opens.
///
/// One process owns a directory at a time.
public actor MediaCache {
    public nonisolated let directory: URL
    public nonisolated let maxBytes: Int
    public nonisolated let client: TranscodeClient

    private struct Entry {
        var bytes: Int
        var lastUse: Date
    }

    /// The files in `files/`, by name.
    private var entries: [String: Entry] = [:]
    private var manifestFlights: [String: Task<Manifest, any Error>] = [:]
    private var downloadFlights: [String: Task<Void, any Error>] = [:]

    /// The bytes of the files kept.
    public var totalBytes: Int { self.entries.values.reduce(0) { $0 + $1.bytes } }

    /// Opens (or makes) a cache in `directory`: empties `tmp/`, drops links whose file is gone, and evicts down to
    /// `maxBytes`. - Throws: when the directory cannot be made or read.
    public init(directory: URL, maxBytes: Int, client: TranscodeClient) throws {
        self.directory = directory
        self.maxBytes = maxBytes
        self.client = client
        let manager = FileManager.default
        for folder in ["files", "links", "manifests", "tmp"] {
            try manager.createDirectory(at: directory.appendingPathComponent(folder), withIntermediateDirectories: true)
        }
        for name in try manager.contentsOfDirectory(atPath: directory.appendingPathComponent("tmp").path) {
            try? manager.removeItem(at: directory.appendingPathComponent("tmp").appendingPathComponent(name))
        }
        var entries: [String: Entry] = [:]
        let files = directory.appendingPathComponent("files")
        for name in try manager.contentsOfDirectory(atPath: files.path) {
            let attributes = try manager.attributesOfItem(atPath: files.appendingPathComponent(name).path)
            entries[name] = Entry(
                bytes: (attributes[.size] as? NSNumber)?.intValue ?? 0,
                lastUse: attributes[.modificationDate] as? Date ?? .distantPast)
        }
        try Self.evict(&entries, toFit: 0, maxBytes: maxBytes, files: files)
        self.entries = entries
        let links = directory.appendingPathComponent("links")
        for name in try manager.contentsOfDirectory(atPath: links.path) {
            let link = links.appendingPathComponent(name).path
            if let target = try? manager.destinationOfSymbolicLink(atPath: link),
                entries[(target as NSString).lastPathComponent] != nil
            {
                continue
            }
            try? manager.removeItem(atPath: link)
        }
    }

    // MARK: Lookups

    /// The local file of a GIF's `file`, fetched (manifest, then bytes) unless it is cached.
    /// - Returns: the link's path (a symbolic link to the content's file): read it, do not keep it past an eviction.
    /// - Throws: the service's error (`TranscodeClientError.service`), `.invalidResponse` when the bytes differ from
    ///   the manifest's digest, `.badRequest` for a file the object does not have or larger than the whole cache.
    public func file(for gifURL: String, _ file: MediaFile = .mp4, options: RenditionOptions = .none) async throws
        -> URL
    {
        if let cached = self.cachedFile(for: gifURL, file, options: options) { return cached }
        let manifest = try await self.manifest(for: gifURL, options: options)
        guard let artifact = manifest.artifact(file) else {
            throw TranscodeClientError.badRequest("the object of \(gifURL) has no .\(file.rawValue) file")
        }
        let name = (artifact.sha256 ?? Self.digest(Self.linkName(gifURL, file, options))) + "." + file.fileExtension
        if self.entries[name] == nil {
            let flight: Task<Void, any Error>
            if let running = self.downloadFlights[name] {
                flight = running
            } else {
                var fileOptions = options
                fileOptions.also.removeAll { $0 == file }
                let url = try self.client.url(of: gifURL, options: fileOptions, file: file)
                let (client, directory, expected) = (self.client, self.directory, artifact.sha256)
                flight = Task.detached {
                    let temporary = try await Self.download(url, client: client, directory: directory, sha256: expected)
                    try await self.admit(temporary, as: name)
                }
                self.downloadFlights[name] = flight
            }
            do {
                try await flight.value
                self.downloadFlights[name] = nil
            } catch {
                self.downloadFlights[name] = nil
                throw error
            }
        }
        return try self.link(Self.linkName(gifURL, file, options), to: name)
    }

    /// The file of a GIF already in the cache, without asking the service; nil when it is not (or was evicted).
    public func cachedFile(for gifURL: String, _ file: MediaFile = .mp4, options: RenditionOptions = .none) -> URL? {
        let link = self.directory.appendingPathComponent("links").appendingPathComponent(
            Self.linkName(gifURL, file, options))
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: link.path) else { return nil }
        let name = (target as NSString).lastPathComponent
        guard self.entries[name] != nil else {
            try? FileManager.default.removeItem(at: link)
            return nil
        }
        self.touch(name)
        return link
    }

    /// The manifest of a GIF's object: from disk when known, else from the service (one request per URL and
    /// options however many ask at once).
    public func manifest(for gifURL: String, options: RenditionOptions = .none) async throws -> Manifest {
        let key = Self.digest(Self.linkName(gifURL, .json, options))
        let path = self.directory.appendingPathComponent("manifests").appendingPathComponent(key + ".json")
        if let data = try? Data(contentsOf: path), let manifest = try? JSONDecoder().decode(Manifest.self, from: data) {
            return manifest
        }
        if let running = self.manifestFlights[key] { return try await running.value }
        let (client, directory) = (self.client, self.directory)
        let flight = Task.detached { () async throws -> Manifest in
            let manifest = try await client.manifest(of: gifURL, options: options)
            let data = try JSONEncoder().encode(manifest)
            try Self.writeDurably(data, to: path, temporaryDirectory: directory.appendingPathComponent("tmp"))
            return manifest
        }
        self.manifestFlights[key] = flight
        defer { self.manifestFlights[key] = nil }
        return try await flight.value
    }

    /// Fetches the files of `gifURLs` in the background, at most `concurrency` at a time, at background priority;
    /// failures are dropped (a later `file(for:)` asks again). Cancel the task to stop.
    @discardableResult
    public nonisolated func prefetch(
        _ gifURLs: [String], _ file: MediaFile = .mp4, options: RenditionOptions = .none, concurrency: Int = 2
    ) -> Task<Void, Never> {
        Task(priority: .background) {
            await withTaskGroup(of: Void.self) { group in
                var next = 0
                func add() {
                    guard next < gifURLs.count, !Task.isCancelled else { return }
                    let url = gifURLs[next]
                    next += 1
                    group.addTask { _ = try? await self.file(for: url, file, options: options) }
                }
                for _ in 0..<max(concurrency, 1) { add() }
                while await group.next() != nil { add() }
            }
        }
    }

    // MARK: Storing

    /// Makes room for a downloaded file, then renames it into `files/` (kept: it is complete and checked).
    private func admit(_ temporary: URL, as name: String) throws {
        let files = self.directory.appendingPathComponent("files")
        let bytes =
            (try FileManager.default.attributesOfItem(atPath: temporary.path)[.size] as? NSNumber)?.intValue ?? 0
        guard bytes <= self.maxBytes else {
            try? FileManager.default.removeItem(at: temporary)
            throw TranscodeClientError.badRequest(
                "\(name) (\(bytes) bytes) is larger than the cache (\(self.maxBytes))")
        }
        if self.entries[name] != nil {
            try? FileManager.default.removeItem(at: temporary)
            return
        }
        try Self.evict(&self.entries, toFit: bytes, maxBytes: self.maxBytes, files: files)
        guard rename(temporary.path, files.appendingPathComponent(name).path) == 0 else {
            let error = errno
            try? FileManager.default.removeItem(at: temporary)
            throw TranscodeClientError.invalidResponse("cannot keep \(name): \(String(cString: strerror(error)))")
        }
        Self.syncDirectory(files)
        self.entries[name] = Entry(bytes: bytes, lastUse: Date())
    }

    /// Points the link `linkName` at the file `name`: made in `tmp/` and renamed over, so a reader sees the old link
    /// or the new one, never none.
    private func link(_ linkName: String, to name: String) throws -> URL {
        let links = self.directory.appendingPathComponent("links")
        let link = links.appendingPathComponent(linkName)
        let temporary = self.directory.appendingPathComponent("tmp").appendingPathComponent(UUID().uuidString)
        try FileManager.default.createSymbolicLink(atPath: temporary.path, withDestinationPath: "../files/" + name)
        guard rename(temporary.path, link.path) == 0 else {
            try? FileManager.default.removeItem(at: temporary)
            throw TranscodeClientError.invalidResponse("cannot link \(linkName)")
        }
        self.touch(name)
        return link
    }

    /// Marks a file used now (kept in the file's modification time, which a cache reopened reads).
    private func touch(_ name: String) {
        let now = Date()
        self.entries[name]?.lastUse = now
        try? FileManager.default.setAttributes(
            [.modificationDate: now],
            ofItemAtPath: self.directory.appendingPathComponent("files").appendingPathComponent(name).path)
    }

    /// Removes the least recently used files until `bytes` more fit under `maxBytes`.
    private static func evict(_ entries: inout [String: Entry], toFit bytes: Int, maxBytes: Int, files: URL) throws {
        var total = entries.values.reduce(0) { $0 + $1.bytes }
        guard total + bytes > maxBytes else { return }
        for (name, entry) in entries.sorted(by: { $0.value.lastUse < $1.value.lastUse }) {
            guard total + bytes > maxBytes else { break }
            try? FileManager.default.removeItem(at: files.appendingPathComponent(name))
            entries[name] = nil
            total -= entry.bytes
        }
    }

    /// Downloads `url` into `tmp/`, synced; checks its SHA-256 when the manifest gave one.
    /// - Returns: the temporary file (the caller renames or removes it).
    private static func download(_ url: URL, client: TranscodeClient, directory: URL, sha256: String?) async throws
        -> URL
    {
        let (data, _) = try await client.send(URLRequest(url: url), purpose: "file")
        if let sha256 {
            let actual = Self.hex(SHA256.hash(data: data))
            guard actual == sha256 else {
                throw TranscodeClientError.invalidResponse(
                    "\(url.lastPathComponent): SHA-256 \(actual), the manifest says \(sha256)")
            }
        }
        let temporary = directory.appendingPathComponent("tmp").appendingPathComponent(UUID().uuidString)
        try Self.write(data, to: temporary)
        return temporary
    }

    /// Writes and syncs a new file.
    private static func write(_ data: Data, to path: URL) throws {
        guard FileManager.default.createFile(atPath: path.path, contents: nil) else {
            throw TranscodeClientError.invalidResponse("cannot write \(path.path)")
        }
        let handle = try FileHandle(forWritingTo: path)
        defer { try? handle.close() }
        try handle.write(contentsOf: data)
        try handle.synchronize()
    }

    /// `write`, then renamed over `path`.
    private static func writeDurably(_ data: Data, to path: URL, temporaryDirectory: URL) throws {
        let temporary = temporaryDirectory.appendingPathComponent(UUID().uuidString)
        try Self.write(data, to: temporary)
        guard rename(temporary.path, path.path) == 0 else {
            try? FileManager.default.removeItem(at: temporary)
            throw TranscodeClientError.invalidResponse("cannot write \(path.path)")
        }
    }

    /// Syncs a directory, so that a rename into it survives a power loss as well as a killed process.
    private static func syncDirectory(_ directory: URL) {
        let descriptor = open(directory.path, O_RDONLY)
        guard descriptor >= 0 else { return }
        _ = fsync(descriptor)
        _ = close(descriptor)
    }

    // MARK: Names

    /// A link's name: a digest of the GIF's URL, the options and the file, with the file's extension.
    static func linkName(_ gifURL: String, _ file: MediaFile, _ options: RenditionOptions) -> String {
        Self.digest(gifURL + "\n" + options.segments.joined(separator: "/")) + "." + file.fileExtension
    }

    static func digest(_ text: String) -> String { Self.hex(SHA256.hash(data: Data(text.utf8))) }

    static func hex(_ digest: SHA256.Digest) -> String {
        digest.map { String(format: "%02x", $0) }.joined()
    }
}
