import Foundation

/// One file a render produced, not yet in any store: a store moves it where it belongs.
public struct Artifact: Sendable, Hashable {
    /// What the file is (the registry entry: its extension and media type).
    public let format: OutputFormat
    /// Where the render left it.
    public let path: String
    /// Its size, as the manifest records it (the manifest's own size as written).
    public let bytes: Int
    /// Its SHA-256 in lower-case hex, as the manifest records it (none for the manifest itself).
    public let sha256: String?
}

/// What a render made: the metadata (the object's manifest) and the files, in the order a store commits them
/// (the manifest last: an object exists exactly when its manifest does).
public struct RenderResult: Sendable {
    public let metadata: TranscodeMetadata
    public let artifacts: [Artifact]

    /// The artifacts of an object whose files are `directory/name.<extension>` and whose manifest is `metadata`
    /// (a render's output, or an object copied out of another store): the files the manifest lists, then the
    /// manifest (`ObjectFiles.stored`: those of a format this build does not know are left out). Their sizes and
    /// digests are the manifest's; whether the files agree is for the store to check before it commits them.
    /// - Throws: `TranscodeError` `.io` when the manifest file is missing.
    public init(metadata: TranscodeMetadata, directory: String, name: String) throws {
        self.metadata = metadata
        var artifacts: [Artifact] = []
        for (entry, format) in ObjectFiles.stored(in: metadata) {
            let path = directory + "/" + name + "." + format.fileExtension
            artifacts.append(Artifact(format: format, path: path, bytes: entry.bytes, sha256: entry.sha256))
        }
        let manifest = directory + "/" + name + "." + ObjectFiles.manifest.fileExtension
        artifacts.append(
            Artifact(format: ObjectFiles.manifest, path: manifest, bytes: try OutputFile.size(manifest), sha256: nil))
        self.artifacts = artifacts
    }
}

extension Transcoder {
    /// Renders `source` into `directory/name.<extension>`, one file per `ObjectFiles.commitOrder` entry, and
    /// commits nothing: the caller's store moves the artifacts into place (`LocalObjects.commit`). Each file is
    /// complete and synced when this returns; a failure leaves none of them.
    /// - Parameters:
    ///   - source: the whole GIF, APNG or animated WebP.
    ///   - directory: an existing directory on the file system the store's objects are on, so that a rename
    ///     moves them.
    ///   - name: the files' base name (not a path).
    /// - Throws: `TranscodeError`.
    public func render(_ source: [UInt8], into directory: String, name: String) throws -> RenderResult {
        let metadata = try self.convert(source, directory: directory, name: name)
        return try RenderResult(metadata: metadata, directory: directory, name: name)
    }
}
