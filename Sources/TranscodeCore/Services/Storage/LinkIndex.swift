import Foundation
import Transcoder

/// A URL as it was last fetched: written beside its link (`urls/<url-key>.source`).
struct SourceRecord: Codable, Equatable, Sendable {
    /// The normalized URL (`NormalizedURL.text`).
    var url: String
    var etag: String?
    var lastModified: String?
    /// When the origin last confirmed these bytes (a download or a 304), seconds since 1970.
    var validatedAt: Double? = nil
    /// The SHA-256 of the bytes fetched (lower-case hex): what a takedown of the URL buries, even once the
    /// object made from them is gone. Nil in records written before it was kept.
    var sourceSha256: String? = nil

    /// The digest of the bytes fetched, when the record keeps it.
    var contentDigest: ContentDigest? { self.sourceSha256.flatMap(ContentDigest.init(rawValue:)) }
}

/// The links of the local disk, from URL keys to objects, and what is known of each URL:
///
/// ```
/// urls/<url-key> -> ../objects/ab/<key>.json    url-key = SHA-256 of the normalized URL and the options
/// urls/<url-key>.source                 the URL and its validators (ETag, Last-Modified), for revalidation
/// sources/ab/<source-hash>/<url-key>    every link of one URL (all its options), for a purge by URL
/// sources/ab/<source-hash>/object-<key>, gif-<sha256>   every object it led to, the bytes fetched
/// ```
/// Links are created under a temporary name and renamed over. A dangling or malformed link is a miss; whether
/// its object is complete is the objects' to say (`DiskCache.lookup`).
final class LinkIndex: Sendable {
    let urlsDirectory: String
    let sourcesDirectory: String
    /// Link targets as last read, by the link's identity.
    let memory: HitMemory

    /// Opens (or creates) `urls/` and `sources/` under `root`. - Parameter cleanUp: remove the temporary links
    /// a killed process left behind. - Throws: when the directories cannot be created.
    init(root: String, cleanUp: Bool, memory: HitMemory) throws {
        (self.urlsDirectory, self.sourcesDirectory) = (root + "/urls", root + "/sources")
        self.memory = memory
        for directory in [self.urlsDirectory, self.sourcesDirectory] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        for name in (try? FileManager.default.contentsOfDirectory(atPath: self.urlsDirectory)) ?? []
        where cleanUp && name.contains(".tmp-") {
            unlink("\(self.urlsDirectory)/\(name)")
        }
    }

    func urlLinkPath(_ urlKey: URLKey) -> String { "\(self.urlsDirectory)/\(urlKey.rawValue)" }

    private func sourceRecordPath(_ urlKey: URLKey) -> String { self.urlLinkPath(urlKey) + ".source" }

    private func sourceIndexDirectory(_ sourceHash: SourceHash) -> String {
        "\(self.sourcesDirectory)/\(sourceHash.shard)/\(sourceHash.rawValue)"
    }

    // MARK: Links

    /// The object `urlKey` links to, if the link exists and is well formed (whether the object is complete is
    /// not looked at).
    func target(urlKey: URLKey) -> ObjectKey? {
        guard let target = Self.readLink(self.urlLinkPath(urlKey)) else { return nil }
        let name = target.split(separator: "/").last ?? ""
        let suffix = "." + ObjectFiles.manifest.fileExtension
        guard name.hasSuffix(suffix) else { return nil }
        return ObjectKey(name.dropLast(suffix.count))
    }

    /// The object a URL key links to and the link's age, from one `lstat` of the link while it is the link read
    /// before (the same `FileIdentity`: a link's target never changes in place, relinking makes a new one, and
    /// renewing it changes its times), else `lstat` and `readlink`. For a hit answered from
    /// memory, which checks the object's files itself.
    func freshLink(urlKey: URLKey) -> (key: ObjectKey, age: TimeInterval)? {
        var info = stat()
        let path = self.urlLinkPath(urlKey)
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFLNK else { return nil }
        let age = Self.age(info)
        let identity = FileIdentity(info)
        if let known = self.memory.linkTarget(urlKey, identity: identity) { return (known, age) }
        guard let key = self.target(urlKey: urlKey) else { return nil }
        // Read after the lstat: a link replaced in between is stored under the old identity, which no later
        // lstat matches.
        self.memory.rememberLink(urlKey, identity: identity, target: key)
        return (key, age)
    }

    /// The target of the symbolic link at `path` (`readlink`), nil when it is not a link.
    static func readLink(_ path: String) -> String? {
        var buffer = [UInt8](repeating: 0, count: 512)
        let count = buffer.withUnsafeMutableBufferPointer { pointer in
            pointer.withMemoryRebound(to: CChar.self) { readlink(path, $0.baseAddress!, $0.count) }
        }
        guard count > 0, count < buffer.count else { return nil }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }

    /// Points `urlKey` at the object `key`: a symlink made under a temporary name and renamed over. The
    /// link's own modification time is when the URL was last fetched or revalidated (`linkAge`).
    /// - Parameter source: the URL and its validators, written beside the link first, and indexed under
    ///   the URL's source hash for a purge by URL; nil for tests that only need the link.
    func link(urlKey: URLKey, to key: ObjectKey, source: SourceRecord? = nil) throws {
        if let source { try self.writeSource(source, urlKey: urlKey, key: key) }
        let target = "../objects/\(key.shard)/" + key.fileName(ObjectFiles.manifest)
        let temporary = "\(self.urlsDirectory)/.\(urlKey).tmp-\(UInt64.random(in: 0...UInt64.max))"
        guard symlink(target, temporary) == 0 else {
            throw TranscodeError(
                .io, "cannot create a link in \(self.urlsDirectory): \(String(cString: strerror(errno)))")
        }
        guard rename(temporary, self.urlLinkPath(urlKey)) == 0 else {
            unlink(temporary)
            throw TranscodeError(.io, "cannot rename a link in \(self.urlsDirectory)")
        }
    }

    // MARK: Source records

    /// Writes the record of `urlKey` (temporary name, renamed over) and indexes, under the URL, the link, the
    /// object `key` it is about to point to and the digest of the bytes fetched: every object a URL ever led to,
    /// and the bytes it was made from, are found by a purge of the URL, also after a revalidation moved the link
    /// on or the object was evicted. - Throws: when the index cannot be written (a link
    /// a purge could not find must not exist).
    func writeSource(_ source: SourceRecord, urlKey: URLKey, key: ObjectKey) throws {
        let data = try JSONEncoder().encode(source)
        let path = self.sourceRecordPath(urlKey)
        let temporary = "\(self.urlsDirectory)/.\(urlKey).source.tmp-\(UInt64.random(in: 0...UInt64.max))"
        guard FileManager.default.createFile(atPath: temporary, contents: data), rename(temporary, path) == 0 else {
            unlink(temporary)
            throw TranscodeError(.io, "cannot write \(path)")
        }
        try self.addToIndex(
            [urlKey.rawValue, "object-\(key)"] + (source.contentDigest.map { ["gif-\($0)"] } ?? []),
            source: SourceHash(NormalizedURL(normalized: source.url)))
    }

    /// Adds the empty files `names` to the index of the URL whose hash is `source`. - Throws: when one cannot be made.
    private func addToIndex(_ names: [String], source: SourceHash) throws {
        let index = self.sourceIndexDirectory(source)
        try? FileManager.default.createDirectory(atPath: index, withIntermediateDirectories: true)
        for name in names {
            let descriptor = open("\(index)/\(name)", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            guard descriptor >= 0 else {
                throw TranscodeError(.io, "cannot index \(index)/\(name): \(String(cString: strerror(errno)))")
            }
            close(descriptor)
        }
    }

    /// The record of `urlKey`, if one was written.
    func sourceRecord(urlKey: URLKey) -> SourceRecord? {
        guard let data = FileManager.default.contents(atPath: self.sourceRecordPath(urlKey))
        else { return nil }
        return try? JSONDecoder().decode(SourceRecord.self, from: data)
    }

    /// Seconds since the URL was last fetched or revalidated (the link's own modification time).
    func linkAge(urlKey: URLKey) -> TimeInterval? {
        var info = stat()
        guard lstat(self.urlLinkPath(urlKey), &info) == 0 else { return nil }
        return Self.age(info)
    }

    /// Seconds since the file of `info` was modified.
    static func age(_ info: stat) -> TimeInterval {
        Date().timeIntervalSince1970 - (Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
    }

    /// Marks `urlKey` as just revalidated: the link's modification time becomes now.
    /// - Parameter age: make the link this many seconds old instead (a backoff after a failed revalidation:
    ///   fresh again for a short while, then stale).
    func renewLink(urlKey: URLKey, age: TimeInterval = 0) {
        // Times of the link itself, not of the object it points to.
        let when = Date().timeIntervalSince1970 - age
        let seconds = Int(when.rounded(.down))
        let stamp = timespec(tv_sec: seconds, tv_nsec: Int((when - Double(seconds)) * 1e9))
        var times = [stamp, stamp]
        utimensat(AT_FDCWD, self.urlLinkPath(urlKey), &times, AT_SYMLINK_NOFOLLOW)
    }

    /// Removes the link of `urlKey` and its record.
    func removeLink(urlKey: URLKey) {
        unlink(self.urlLinkPath(urlKey))
        unlink(self.sourceRecordPath(urlKey))
    }

    // MARK: The index of a URL

    /// What the index of `url` holds: its links (whatever the options), every object it led to (also through a
    /// link's current target, for links indexed before objects were) and the digests of the bytes fetched.
    func indexed(url: NormalizedURL) -> (links: [URLKey], objects: Set<ObjectKey>, gifHashes: [ContentDigest]) {
        self.indexed(source: SourceHash(url))
    }

    /// `indexed(url:)` by the URL's hash.
    func indexed(source: SourceHash) -> (links: [URLKey], objects: Set<ObjectKey>, gifHashes: [ContentDigest]) {
        var links: [URLKey] = []
        var objects: Set<ObjectKey> = []
        var gifHashes: [ContentDigest] = []
        for name in (try? FileManager.default.contentsOfDirectory(atPath: self.sourceIndexDirectory(source))) ?? [] {
            if name.hasPrefix("object-"), let key = ObjectKey(name.dropFirst(7)) {
                objects.insert(key)
            } else if name.hasPrefix("gif-"), let hash = ContentDigest(String(name.dropFirst(4))) {
                if !gifHashes.contains(hash) { gifHashes.append(hash) }
            } else if let urlKey = URLKey(name) {
                if let key = self.target(urlKey: urlKey) { objects.insert(key) }
                links.append(urlKey)
            }
        }
        return (links, objects, gifHashes)
    }

    /// Adds `digests` to the bytes the URL whose hash is `source` was fetched as (`gif-` records of its index).
    /// - Throws: when a record cannot be written.
    func recordGIFs(_ digests: [ContentDigest], source: SourceHash) throws {
        try self.addToIndex(digests.map { "gif-\($0)" }, source: source)
    }

    /// Removes the links from the index of `url` (after the links themselves were removed). The records of the
    /// objects it led to and of the bytes it was fetched as stay: a takedown of the URL after a purge still buries
    /// those bytes (uploaded, or found at another URL), where removing the whole index once lost them.
    func removeLinks(fromIndexOf url: NormalizedURL) {
        let index = self.sourceIndexDirectory(SourceHash(url))
        for name in (try? FileManager.default.contentsOfDirectory(atPath: index)) ?? [] where URLKey(name) != nil {
            unlink("\(index)/\(name)")
        }
    }
}
