import NIOCore
import Synchronization
import Transcoder

/// What a cache hit is answered from without reading the disk, each entry tied to the identity of the file it
/// was read from (objects are immutable; a file replaced or rewritten has another identity, so what is kept is
/// what was checked):
/// - the metadata decoded from an object's JSON (decoding was the largest cost of a hit after the network), with
///   the entity tags of the object's files derived from it;
/// - the bytes of object files: all of a file of at most `smallFileLimit` bytes, the head of a larger one, up to
///   `smallFilesCapacity` bytes in all, the least recently used dropped first (a hit on a small file then costs
///   no read at all: every read is a hop to the I/O thread pool, which cost most of a hit's time);
/// - the object each URL link was last read to point to, by the link's identity.
///
/// It holds no rule of its own: `DiskCache` decides what is checked, and asks here only for what it checked.
final class HitMemory: Sendable {
    private let decoded = Mutex<[ObjectKey: (identity: FileIdentity, object: RememberedObject)]>([:])
    private let smallFiles = Mutex(SmallFiles())
    private let linkTargets = Mutex<[URLKey: (identity: FileIdentity, key: ObjectKey)]>([:])

    private struct SmallFiles {
        var entries: [FileName: (identity: FileIdentity, bytes: ByteBuffer, lastUse: UInt64)] = [:]
        var total = 0
        var clock: UInt64 = 0
    }

    /// An object file's name: hashed as it is, where joining the two was an allocation per hit.
    struct FileName: Hashable {
        let key: ObjectKey
        let fileExtension: String
    }

    /// Decoded metadata and link targets kept: a few hundred bytes each.
    static var decodedCapacity: Int { 16_384 }
    static var smallFileLimit: Int { 256 * 1024 }
    static var smallFilesCapacity: Int { 64 * 1024 * 1024 }
    /// Of a larger file, its first bytes are kept: players' first probes (`bytes=0-1`) and the `moov` box
    /// (written first, `faststart`) are read from there.
    static var headLength: Int { 64 * 1024 }

    /// How many bytes of a file of `size` bytes are kept in memory: all of a small file, the head of another.
    static func keptLength(ofFileOfSize size: Int) -> Int {
        size <= Self.smallFileLimit ? size : min(size, Self.headLength)
    }

    // MARK: Metadata

    /// An object's decoded metadata, and what every hit on it derives from the metadata, derived once.
    struct RememberedObject: Sendable {
        let metadata: TranscodeMetadata
        /// The entity tag of each of the object's files (`ObjectKey.entityTag`): building it on every hit (the
        /// digest looked up, the string joined) was a visible part of a `Range: bytes=0-1` hit's cost.
        private let entityTags: [(fileExtension: String, tag: String)]

        init(_ metadata: TranscodeMetadata, of key: ObjectKey) {
            self.metadata = metadata
            self.entityTags = (ObjectFiles.stored(in: metadata).map(\.format) + [ObjectFiles.manifest]).map {
                ($0.fileExtension, key.entityTag(fileExtension: $0.fileExtension, metadata: metadata))
            }
        }

        /// The entity tag of the object's `.fileExtension` file; `nil` for a file the object does not have.
        func entityTag(_ fileExtension: String) -> String? {
            self.entityTags.first { $0.fileExtension == fileExtension }?.tag
        }
    }

    /// The object decoded from object `key`'s JSON while it is still the file `identity` names.
    func object(_ key: ObjectKey, identity: FileIdentity) -> RememberedObject? {
        self.decoded.withLock({ $0[key] }).flatMap({ $0.identity == identity ? $0.object : nil })
    }

    func remember(_ metadata: TranscodeMetadata, of key: ObjectKey, identity: FileIdentity) {
        let object = RememberedObject(metadata, of: key)
        self.decoded.withLock { decoded in
            if decoded.count >= Self.decodedCapacity { decoded.removeAll(keepingCapacity: true) }
            decoded[key] = (identity, object)
        }
    }

    /// Forgets object `key`'s metadata (a quarantine, a removal).
    func forget(_ key: ObjectKey) {
        _ = self.decoded.withLock { $0.removeValue(forKey: key) }
    }

    // MARK: Bytes

    /// The bytes kept of `name` while it is still the file `identity` names.
    func bytes(_ name: FileName, identity: FileIdentity) -> ByteBuffer? {
        self.smallFiles.withLock { cache in
            guard let index = cache.entries.index(forKey: name), cache.entries.values[index].identity == identity
            else { return nil }
            cache.clock += 1
            cache.entries.values[index].lastUse = cache.clock
            return cache.entries.values[index].bytes
        }
    }

    /// Keeps the bytes just read of a file of `size` bytes, when they are what is kept of it (`keptLength`).
    func keep(_ bytes: ByteBuffer, of name: FileName, identity: FileIdentity, size: Int) {
        guard bytes.readableBytes == Self.keptLength(ofFileOfSize: size) else { return }
        self.smallFiles.withLock { cache in
            if let old = cache.entries.removeValue(forKey: name) { cache.total -= old.bytes.readableBytes }
            while cache.total + bytes.readableBytes > Self.smallFilesCapacity,
                let oldest = cache.entries.min(by: { $0.value.lastUse < $1.value.lastUse })
            {
                cache.total -= oldest.value.bytes.readableBytes
                cache.entries[oldest.key] = nil
            }
            cache.clock += 1
            cache.entries[name] = (identity, bytes, cache.clock)
            cache.total += bytes.readableBytes
        }
    }

    // MARK: Links

    /// The object the link of `urlKey` pointed to when it was the file `identity` names (a link's target never
    /// changes in place: relinking makes a new one, and renewing it changes its times).
    func linkTarget(_ urlKey: URLKey, identity: FileIdentity) -> ObjectKey? {
        self.linkTargets.withLock { $0[urlKey] }.flatMap { $0.identity == identity ? $0.key : nil }
    }

    func rememberLink(_ urlKey: URLKey, identity: FileIdentity, target key: ObjectKey) {
        self.linkTargets.withLock { targets in
            if targets.count >= Self.decodedCapacity { targets.removeAll(keepingCapacity: true) }
            targets[urlKey] = (identity, key)
        }
    }
}
