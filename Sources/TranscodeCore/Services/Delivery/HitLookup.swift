import NIOCore
import Transcoder

/// The one rule of a hit answered without an `await` (on an event loop, by `MediaHitHandler` ahead of the
/// router): the object is on this disk, its files are still the very files checked and read before
/// (`LocalObjects.memoryHit`, `memoryObject`), nothing of it is taken down (`Takedowns.isClearNow`) and, for a URL,
/// its link is fresh (`TranscodeService.freshHitKey`). `nil` from any of these sends the request to the route,
/// which decides everything afresh.
package struct HitLookup: Sendable {
    let cache: DiskCache
    let takedowns: Takedowns

    package init(results: ReadThroughResults) {
        self.cache = results.local
        self.takedowns = results.takedowns
    }

    /// A file answerable from memory: the object's metadata, the file's entity tag and identity (and size), and
    /// the bytes of it kept in memory (all of a small file, the head of another).
    package typealias FileHit = LocalObjects.MemoryHit

    /// `/media/<key>.<extension>`.
    package func media(_ key: ObjectKey, fileExtension: String) -> FileHit? {
        self.file(key, fileExtension: fileExtension, also: [])
    }

    /// A signed `GET /v1/...` whose path the route verified: the file of the object the URL's fresh link leads
    /// to, unless the URL is taken down too.
    package func signed(_ keys: SourceKeys, fileExtension: String, service: TranscodeService) -> (
        key: ObjectKey, hit: FileHit
    )? {
        guard let key = service.freshHitKey(keys: keys),
            let hit = self.file(key, fileExtension: fileExtension, also: [.source(keys.sourceHash)])
        else { return nil }
        return (key, hit)
    }

    /// A cache-hit `POST /transcode` of a body the route answered before: the object the URL's fresh link leads
    /// to, its three files unchanged, nothing of it or of the URL taken down.
    package func transcode(_ keys: SourceKeys, service: TranscodeService) -> (
        key: ObjectKey, metadata: TranscodeMetadata
    )? {
        guard let key = service.freshHitKey(keys: keys), let metadata = self.cache.objects.memoryObject(key),
            self.takedowns.isClearNow(key, metadata: metadata, also: [.source(keys.sourceHash)])
        else { return nil }
        return (key, metadata)
    }

    private func file(_ key: ObjectKey, fileExtension: String, also: [Tombstone]) -> FileHit? {
        guard let hit = self.cache.objects.memoryHit(key, fileExtension: fileExtension),
            self.takedowns.isClearNow(key, metadata: hit.metadata, also: also)
        else { return nil }
        return hit
    }
}
