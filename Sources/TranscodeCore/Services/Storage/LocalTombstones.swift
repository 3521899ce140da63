import Foundation
import Synchronization
import Transcoder

/// What a tombstone names.
package enum Tombstone: Hashable, Sendable {
    /// A result object, by key (`/media/<key>.*`).
    case object(ObjectKey)
    /// A GIF's bytes, by SHA-256, whatever URL or upload brings them.
    case gif(ContentDigest)
    /// A URL, by source hash, whatever the options.
    case source(SourceHash)

    /// What a stored object is buried under: its key, and the bytes it was made from (when its metadata
    /// records them). Every check of an object asks these, here and in a fleet's shared store.
    static func of(_ key: ObjectKey, metadata: TranscodeMetadata) -> [Tombstone] {
        [.object(key)] + (metadata.sourceSha256.flatMap(ContentDigest.init(rawValue:)).map { [.gif($0)] } ?? [])
    }

    var fileName: String {
        switch self {
        case .object(let key): "object-\(key.rawValue)"
        case .gif(let hash): "gif-\(hash.rawValue)"
        case .source(let hash): "source-\(hash.rawValue)"
        }
    }
}

/// The takedowns recorded on the local disk: `tombstones/<kind>-<hash>`, never removed. What is buried where, and
/// what a stored object is buried under, is `Takedowns`' rule; this is where the local ones are kept.
final class LocalTombstones: Sendable {
    let directory: String
    /// The names in `tombstones/` as last read, and the directory's stamp then (`settledTombstones`).
    let lastRead = Mutex<(stamp: DirectoryStamp, names: Set<String>)?>(nil)
    /// The real-time clock the kernel stamps files with (a test moves it instead of waiting).
    private let now: @Sendable () -> Date

    /// Opens (or creates) `tombstones/` under `root`. - Throws: when it cannot be created.
    init(root: String, now: @escaping @Sendable () -> Date = { Date() }) throws {
        self.directory = root + "/tombstones"
        self.now = now
        try FileManager.default.createDirectory(atPath: self.directory, withIntermediateDirectories: true)
    }

    /// Records takedowns: from now on these are answered 451 and never converted again.
    func bury(_ tombstones: [Tombstone], reason: String) throws {
        struct Stone: Encodable {
            let reason: String
            let at: String
        }
        let data = try JSONEncoder().encode(Stone(reason: reason, at: ISO8601DateFormatter().string(from: Date())))
        for tombstone in tombstones {
            let path = "\(self.directory)/\(tombstone.fileName)"
            guard FileManager.default.createFile(atPath: path, contents: data) else {
                throw TranscodeError(.io, "cannot write \(path)")
            }
        }
    }

    /// Whether any of `tombstones` was recorded: looked up in the directory's names as last read while the
    /// directory is unchanged (one `stat`, for a cache hit that asks this on an event loop), else one `access`
    /// per name.
    func isBuried(_ tombstones: Tombstone...) -> Bool {
        self.isBuried(anyOf: tombstones)
    }

    func isBuried(anyOf tombstones: [Tombstone]) -> Bool {
        self.isBuried(lazily: { tombstones })
    }

    /// `tombstones` are made only when there are any in the directory: nothing taken down is the common case,
    /// and a cache hit asks this with names it would otherwise build for nothing.
    func isBuried(lazily tombstones: () -> [Tombstone]) -> Bool {
        if let names = self.settledTombstones() {
            return !names.isEmpty && tombstones().contains { names.contains($0.fileName) }
        }
        return tombstones().contains { access("\(self.directory)/\($0.fileName)", F_OK) == 0 }
    }

    /// The names in `tombstones/`, read again whenever the directory's stamp (inode, size, modification and
    /// change times) differs from the last read. Any file created, renamed or removed there (by this process,
    /// `cache` commands beside it, an operator) changes the directory's times. They are coarse (a clock tick),
    /// so names are read only from a directory unchanged for the last two seconds: a change in the same tick as
    /// the read could not be told from it. `nil` while it is not settled: ask the disk.
    private func settledTombstones() -> Set<String>? {
        let directory = self.directory
        guard let stamp = DirectoryStamp(directory) else { return nil }
        if let names = self.lastRead.withLock({ $0?.stamp == stamp ? $0?.names : nil }) { return names }
        guard stamp.isSettled(at: self.now()),
            let listed = try? FileManager.default.contentsOfDirectory(atPath: directory),
            DirectoryStamp(directory) == stamp
        else { return nil }
        let names = Set(listed)
        self.lastRead.withLock { $0 = (stamp, names) }
        return names
    }
}

/// What tells whether a directory's entries changed: its identity (device, inode, size, modification and change
/// times), as for a file.
struct DirectoryStamp: Equatable, Sendable {
    let identity: FileIdentity

    init?(_ path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        self.identity = FileIdentity(info)
    }

    /// Unchanged for the two seconds before `now`, by the real-time clock the kernel stamps files with.
    func isSettled(at now: Date) -> Bool {
        Int(now.timeIntervalSince1970) - max(self.identity.modified.tv_sec, self.identity.changed.tv_sec) >= 2
    }
}
