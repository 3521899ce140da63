import Foundation
import Testing

@testable import TranscodeClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite struct ChooserTests {
    /// What each profile plays, written out as the test's own table.
    static let table: [String: [String]] = [
        "avplayer": ["mp4", "gif"], "transparent-image": ["avif", "webp", "gif"], "webp-image": ["webp", "gif"],
        "data-saver": ["preview", "gif"],
    ]

    /// For each GIF and profile, the chooser's pick is the smallest of what the table says the profile plays and
    /// the object has, read from the service's manifests (the object with its WebP and AVIF, and the preview's).
    @Test func picksTheSmallestRenditionEachProfilePlays() async throws {
        let gifs = [
            "cartoon_hotdog.gif", "loop_1.gif", "transp_flag_estonia.gif", "cartoon_spinner_loading.gif",
            "tiny_2x2.gif",
        ].filter { FileManager.default.fileExists(atPath: Paths.corpus.appendingPathComponent($0).path) }
        var files: [String: String] = [:]
        for gif in gifs { files[gif] = gif }
        try await Service.with(files: files) { service in
            var picks: [String: Int] = [:]
            for gif in gifs {
                let url = service.origin(gif)
                let manifest = try await service.client.manifest(
                    of: url, options: RenditionOptions(also: [.webp, .avif]))
                let preview = try await service.client.manifest(of: url, options: RenditionOptions(preview: 1))
                #expect(preview.mp4Bytes <= RenditionChooser.previewBudget)
                for profile in PlaybackProfile.all {
                    var sizes: [(String, Int)] = []
                    for name in Self.table[profile.name] ?? [] {
                        switch name {
                        case "gif": sizes.append((name, manifest.sourceBytes))
                        case "preview": sizes.append((name, preview.mp4Bytes))
                        default:
                            if let entry = manifest.artifacts?.first(where: { $0.role == name }) {
                                sizes.append((name, entry.bytes))
                            }
                        }
                    }
                    let smallest = try #require(sizes.map(\.1).min())
                    let pick = try #require(RenditionChooser.choose(for: profile, manifest: manifest, preview: preview))
                    #expect(pick.bytes == smallest, "\(gif) \(profile.name): \(pick) of \(sizes)")
                    let name: String =
                        switch pick.playable {
                        case .gif: "gif"
                        case .preview: "preview"
                        case .file(let file): file == .jpg ? "poster" : file.rawValue
                        }
                    #expect(sizes.contains { $0.0 == name && $0.1 == pick.bytes }, "\(gif) \(profile.name): \(name)")
                    picks[profile.name + " " + name, default: 0] += 1
                    // The pick can be fetched: its signed URL answers with those bytes.
                    if let (file, options) = pick.signedFile(options: try RenditionOptions(also: [.webp, .avif])) {
                        let path = try service.signer.path(
                            of: url, options: pick.playable == .preview ? try RenditionOptions(preview: 1) : options,
                            file: file)
                        let (data, _) = try await URLSession.shared.data(
                            from: URL(string: service.baseURL.absoluteString + path)!)
                        #expect(data.count == pick.bytes, "\(gif) \(profile.name) \(path)")
                    }
                }
            }
            // The table is exercised: the GIF is kept somewhere, and converted files are picked elsewhere.
            #expect(
                picks["avplayer mp4", default: 0] > 0 && picks["transparent-image avif", default: 0] > 0, "\(picks)")
        }
    }

    /// Every corpus GIF of up to 30 KB (99 of the 143; the larger ones' AVIFs would add minutes to the suite): the
    /// chooser's pick for each profile is the smallest the table allows, or the GIF itself when the service refuses
    /// the file (a corrupt or hostile GIF: an app keeps its `<img>`, and a profile without the GIF shows nothing).
    /// `CHOOSER_MAX_GIF_BYTES` raises the bound (the whole corpus: 100000000, with `GIF2MP4_SERVER_BINARY` a release
    /// build).
    @Test func picksForEveryCorpusGIFOfUpTo30KB() async throws {
        let maxBytes = ProcessInfo.processInfo.environment["CHOOSER_MAX_GIF_BYTES"].flatMap(Int.init) ?? 30_000
        try Paths.requireCorpus()
        let manifest = try String(
            contentsOf: Paths.corpus.appendingPathComponent("MANIFEST.tsv"), encoding: .utf8)
        let gifs = manifest.split(separator: "\n").dropFirst().compactMap { line -> String? in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard fields.count > 1, fields[0].hasSuffix(".gif"), let bytes = Int(fields[1]), bytes <= maxBytes else {
                return nil
            }
            return String(fields[0])
        }
        #expect(gifs.count >= 90)
        var files: [String: String] = [:]
        for gif in gifs { files[gif] = gif }
        try await Service.with(files: files) { service in
            let client = service.client
            let outcomes = try await withThrowingTaskGroup(of: (String, Manifest?, Manifest?, String?).self) { group in
                var next = 0
                func add() {
                    guard next < gifs.count else { return }
                    let gif = gifs[next]
                    next += 1
                    group.addTask {
                        let url = service.origin(gif)
                        do {
                            let object = try await client.manifest(
                                of: url, options: RenditionOptions(also: [.webp, .avif]))
                            let preview = try await client.manifest(of: url, options: RenditionOptions(preview: 1))
                            return (gif, object, preview, nil)
                        } catch let error as TranscodeClientError {
                            return (gif, nil, nil, error.code?.rawValue ?? "\(error)")
                        }
                    }
                }
                for _ in 0..<4 { add() }
                var outcomes: [(String, Manifest?, Manifest?, String?)] = []
                while let outcome = try await group.next() {
                    outcomes.append(outcome)
                    add()
                }
                return outcomes
            }
            var checked = 0
            var refused: [String: String] = [:]
            for (gif, object, preview, failure) in outcomes {
                guard let object, let preview else {
                    // Refused: the GIF's own fault, never the service's (a 5xx would be a failure here).
                    let code = ServiceErrorCode(rawValue: failure ?? "")
                    #expect(code?.isTheSource == true || code == .badRequest, "\(gif): \(failure ?? "")")
                    refused[gif] = failure
                    continue
                }
                for profile in PlaybackProfile.all {
                    var sizes: [Int] = []
                    for name in Self.table[profile.name] ?? [] {
                        switch name {
                        case "gif": sizes.append(object.sourceBytes)
                        case "preview": sizes.append(preview.mp4Bytes)
                        default:
                            if let entry = object.artifacts?.first(where: { $0.role == name }) {
                                sizes.append(entry.bytes)
                            }
                        }
                    }
                    let pick = RenditionChooser.choose(for: profile, manifest: object, preview: preview)
                    #expect(
                        pick?.bytes == sizes.min(), "\(gif) \(profile.name): \(String(describing: pick)) of \(sizes)")
                    checked += 1
                }
            }
            #expect(checked + refused.count * PlaybackProfile.all.count == gifs.count * PlaybackProfile.all.count)
            #expect(checked > 200, "\(checked) picks; refused: \(refused)")
        }
    }

    @Test func aProfileWithoutWhatTheObjectHasPicksNothing() throws {
        let manifest = try JSONDecoder().decode(
            Manifest.self,
            from: Data(
                #"{"sourceWidth":1,"sourceHeight":1,"outputWidth":2,"outputHeight":2,"durationMs":100,"loopsForever":true,"hasTransparency":false,"sourceBytes":100,"mp4Bytes":100,"posterBytes":5,"recommendation":"keep-gif"}"#
                    .utf8))
        #expect(
            RenditionChooser.choose(for: PlaybackProfile(name: "webm", plays: [.file(.webm)]), manifest: manifest)
                == nil)
        // At equal sizes the converted file is picked; a manifest without artifacts lists its video and poster.
        let pick = RenditionChooser.choose(for: .avPlayer, manifest: manifest)
        #expect(pick == Rendition(playable: .file(.mp4), bytes: 100))
        #expect(manifest.files.map(\.role) == ["mp4", "poster"])
        #expect(RenditionChooser.choose(for: .dataSaver, manifest: manifest)?.playable == .gif)
        let preview = Rendition(playable: .preview, bytes: 1).signedFile(options: try RenditionOptions(also: [.webp]))
        #expect(preview?.file == .mp4 && preview?.options.preview == 1 && preview?.options.also == [])
    }
}
