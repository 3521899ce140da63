import Foundation
import TestSupport
import Testing

@testable import Transcoder

/// An object's manifest lists its files (version 2), and every manifest stored before the list (version 1) is
/// still read, as a manifest of its video and poster.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct ManifestTests {
    static func metadata() -> TranscodeMetadata {
        var metadata = TranscodeMetadata(
            sourceFormat: .gif, sourceWidth: 40, sourceHeight: 30, outputWidth: 40, outputHeight: 30,
            sourceFrameCount: 8, encodedFrameCount: 7, durationMs: 800, loopCount: 0, playCount: nil,
            loopsForever: true, hasTransparency: false, truncated: false, background: .white, sourceBytes: 9000,
            mp4Bytes: 4000, posterBytes: 700, recommendation: .video)
        metadata.mp4Sha256 = String(repeating: "a1", count: 32)
        metadata.posterSha256 = String(repeating: "b2", count: 32)
        metadata.sourceSha256 = String(repeating: "c3", count: 32)
        return metadata
    }

    static func json(_ metadata: TranscodeMetadata) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: JSONEncoder().encode(metadata)) as? [String: Any])
    }

    @Test func theManifestListsItsFiles() throws {
        let metadata = Self.metadata()
        let json = try Self.json(metadata)
        #expect(json["manifestVersion"] as? Int == TranscodeMetadata.currentManifestVersion)
        let listed = try #require(json["artifacts"] as? [[String: Any]])
        #expect(listed.map { $0["format"] as? String } == [ObjectFiles.video.name, ObjectFiles.poster.name])
        #expect(listed.map { $0["role"] as? String } == ObjectFiles.roles.prefix(2).map(\.role.rawValue))
        #expect(listed.map { $0["bytes"] as? Int } == [4000, 700])
        #expect(listed.map { $0["sha256"] as? String } == [metadata.mp4Sha256, metadata.posterSha256])
        // The fields clients read stay.
        #expect(json["mp4Bytes"] as? Int == 4000 && json["posterBytes"] as? Int == 700)
        let decoded = try JSONDecoder().decode(TranscodeMetadata.self, from: JSONEncoder().encode(metadata))
        #expect(decoded == metadata)
        #expect(ObjectFiles.recordedSize(of: ObjectFiles.video, in: decoded) == 4000)
        #expect(ObjectFiles.recordedSha256(of: ObjectFiles.poster, in: decoded) == metadata.posterSha256)
        #expect(ObjectFiles.recordedSize(of: ObjectFiles.manifest, in: decoded) == nil)
    }

    /// The JSON every stored object had before the list: no `artifacts`, no version.
    @Test func aVersionOneManifestIsReadAsItsVideoAndPoster() throws {
        var json = try Self.json(Self.metadata())
        json["artifacts"] = nil
        json["manifestVersion"] = nil
        let decoded = try JSONDecoder().decode(
            TranscodeMetadata.self, from: JSONSerialization.data(withJSONObject: json))
        #expect(decoded == Self.metadata())
        #expect(decoded.artifacts.map(\.bytes) == [4000, 700])
        #expect(decoded.otherArtifacts.isEmpty)
    }

    /// Files of other roles are kept through a round trip, whatever their format (a second video rendition too):
    /// what a node that knows them writes, a node that does not yet know them reads and passes on.
    @Test func otherArtifactsAreKept() throws {
        var metadata = Self.metadata()
        let webm = ManifestEntry(
            role: .extra(.webm), format: "webm", bytes: 3000, sha256: String(repeating: "d4", count: 32))
        let small = ManifestEntry(
            role: ObjectRole(rawValue: "mp4-480"), format: ObjectFiles.video.name, bytes: 2000,
            sha256: String(repeating: "e5", count: 32))
        metadata.otherArtifacts = [webm, small]
        let decoded = try JSONDecoder().decode(TranscodeMetadata.self, from: JSONEncoder().encode(metadata))
        #expect(decoded.otherArtifacts == [webm, small])
        #expect(decoded.artifacts.count == 4)
        #expect(decoded == metadata)
        // The video the stores check is the one of the video's role.
        #expect(ObjectFiles.recordedSize(of: ObjectFiles.video, in: decoded) == 4000)
    }

    /// The video's and the poster's entries are the fields': a list that says otherwise (a newer writer, a hand
    /// edit) changes nothing, and the object is not refused for it (refusing would quarantine it on this disk).
    /// The manifest never lists a size for itself.
    @Test func theFieldsWinOverTheList() throws {
        var json = try Self.json(Self.metadata())
        var listed = try #require(json["artifacts"] as? [[String: Any]])
        listed[0]["bytes"] = 4001
        listed[1]["role"] = "still"
        listed.append(["role": "self", "format": ObjectFiles.manifest.name, "bytes": 1, "sha256": NSNull()])
        json["artifacts"] = listed
        let decoded = try JSONDecoder().decode(
            TranscodeMetadata.self, from: JSONSerialization.data(withJSONObject: json))
        #expect(decoded.mp4Bytes == 4000)
        #expect(ObjectFiles.recordedSize(of: ObjectFiles.video, in: decoded) == 4000)
        #expect(ObjectFiles.recordedSize(of: ObjectFiles.manifest, in: decoded) == nil)
        // The renamed poster entry is kept as another file; the fields' poster stays.
        #expect(decoded.otherArtifacts.map(\.role.rawValue) == ["still"])
        #expect(ObjectFiles.recordedSize(of: ObjectFiles.poster, in: decoded) == 700)
    }
}
