import Transcoder

/// The one owner of takedowns: what is buried, here and (in a fleet) in the shared store, and the rule of what
/// a stored object is buried under (`Tombstone.of`: its key and its source's bytes, plus the URL that
/// led to it when there is one). Every answer that serves or converts something asks here.
struct Takedowns: Sendable {
    let cache: DiskCache
    /// The fleet's shared store; nil on a single node.
    let shared: SharedResults?

    /// Whether any of `tombstones` is recorded, on this disk or in the shared store.
    /// - Parameter recently: a cache hit: trust a "not buried" the shared store gave in the last
    ///   `tombstoneCheckSeconds`, and serve if the store is down.
    func isBuried(_ tombstones: [Tombstone], recently: Bool = false) async throws -> Bool {
        if self.cache.tombstones.isBuried(anyOf: tombstones) { return true }
        return try await self.shared?.isBuried(tombstones, recently: recently) ?? false
    }

    /// Whether `tombstone` is recorded on this disk: asked, without the shared store, of an object this disk
    /// lacks, before the shared store is asked for it (a local purge with a takedown removes the files and
    /// leaves the tombstone).
    func isBuriedHere(_ tombstone: Tombstone) -> Bool {
        self.cache.tombstones.isBuried(tombstone)
    }

    /// Throws `taken-down` when object `key`, the bytes it was made from, or any of `also` is buried.
    func check(
        _ key: ObjectKey, metadata: TranscodeMetadata, also: [Tombstone] = [], recently: Bool = false
    ) async throws {
        if try await self.isBuried(Tombstone.of(key, metadata: metadata) + also, recently: recently) {
            throw ServiceError.takenDown("this was taken down")
        }
    }

    /// Whether object `key` may be served without an `await` (a hit answered on an event loop): nothing of it is
    /// buried on this disk, and the shared store said so recently. `false` leaves the request to the route,
    /// which asks `check`.
    func isClearNow(_ key: ObjectKey, metadata: TranscodeMetadata, also: [Tombstone] = []) -> Bool {
        // Built only when there is something to compare with: nothing taken down is the common case, and a hit
        // asks this on every request.
        if self.cache.tombstones.isBuried(lazily: { Tombstone.of(key, metadata: metadata) + also }) { return false }
        guard let shared = self.shared else { return true }
        return shared.notBuriedRecently(Tombstone.of(key, metadata: metadata) + also)
    }

    /// Whether the URL with `sourceHash` may be answered from a link without an `await`: not buried here (the
    /// caller asks with the object's tombstones, `isClearNow`) and the shared store said so recently.
    func isURLClearNow(_ sourceHash: SourceHash) -> Bool {
        self.shared?.notBuriedRecently([.source(sourceHash)]) ?? true
    }
}
