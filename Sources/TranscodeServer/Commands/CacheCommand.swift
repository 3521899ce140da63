import ArgumentParser
import Foundation
import TranscodeCore
import TranscodeHTTP

/// `transcode-server cache verify [--repair]`: checks every stored object byte for byte.
/// `transcode-server cache purge KEY... [--url URL...] [--takedown]`: deletes objects, leaves tombstones.
struct CacheCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cache",
        abstract: "Inspect the result cache.",
        subcommands: [Verify.self, Purge.self]
    )

    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract: "Check every object: regular files, sizes and SHA-256 as the metadata records them.",
            discussion: """
                Prints one line per damaged object (KEY: damaged: reason) and a summary. Exits 0 when every \
                object is sound (or was repaired with --repair), 1 when damaged objects remain. Safe beside a \
                running server: it touches nothing but, with --repair, the damaged objects, which it moves to \
                quarantine/ (the server converts them again on the next request).
                """
        )

        @Option(name: .long, help: "The cache directory (the server's cache.directory).")
        var cacheDirectory: String = ServerConfiguration().cache.directory

        @Flag(name: .long, help: "Move damaged objects to quarantine/.")
        var repair = false

        func run() throws {
            guard FileManager.default.fileExists(atPath: self.cacheDirectory + "/objects") else {
                FileHandle.standardError.write(Data("\(self.cacheDirectory): io: no cache here\n".utf8))
                throw ExitCode.failure
            }
            let cache = try DiskCache(root: self.cacheDirectory, maxBytes: .max, cleanUp: false)
            var sound = 0
            var unhashed = 0
            var damaged = 0
            var unreadable = 0
            cache.verifyObjects(repair: self.repair) { key, verdict in
                switch verdict {
                case .sound:
                    sound += 1
                case .unhashed:
                    unhashed += 1
                case .unreadable(let reason):
                    // Out of descriptors: nothing is known of the object, so it is neither counted sound nor
                    // quarantined; the run fails and is worth repeating.
                    unreadable += 1
                    print("\(key): not checked: \(reason)")
                case .damaged(let reason):
                    damaged += 1
                    print("\(key): damaged: \(reason)\(self.repair ? " (quarantined)" : "")")
                }
            }
            print(
                "\(sound + unhashed + damaged) objects: \(sound) sound, \(damaged) damaged"
                    + (unhashed > 0 ? ", \(unhashed) without recorded hashes (sizes and files checked)" : "")
                    + (self.repair && damaged > 0 ? "; damaged objects moved to quarantine/" : ""))
            if unreadable > 0 { print("\(unreadable) objects could not be opened (out of descriptors or memory)") }
            if (damaged > 0 && !self.repair) || unreadable > 0 { throw ExitCode.failure }
        }
    }

    struct Purge: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "purge",
            abstract: "Delete objects by key or by source URL; with --takedown, refuse them from then on.",
            discussion: """
                What DELETE /v1/objects/{key} and DELETE /v1/sources?url= do, on the cache directory: prints \
                what was deleted and the tombstones written, as JSON. Safe beside a running server, which \
                finds the files gone (a response already streaming finishes) and the tombstones on disk.
                """
        )

        @Argument(help: "Object keys (64 hex digits).")
        var keys: [String] = []

        @Option(name: .long, help: "A source URL: every option variant of it; repeatable.")
        var url: [String] = []

        @Flag(name: .long, help: "Leave tombstones: the objects, their GIFs and the URLs answer 451 from now on.")
        var takedown = false

        @Option(name: .long, help: "The takedown's reason, recorded in the tombstones.")
        var reason = ""

        @Option(name: .long, help: "The cache directory (the server's cache.directory).")
        var cacheDirectory: String = ServerConfiguration().cache.directory

        func validate() throws {
            guard !self.keys.isEmpty || !self.url.isEmpty else { throw ValidationError("give keys or --url") }
            for key in self.keys where ObjectKey(key) == nil {
                throw ValidationError("\(key) is not an object key (64 lowercase hex digits)")
            }
            for url in self.url {
                do { _ = try Downloader.validate(url) } catch let error as ServiceError {
                    throw ValidationError("\(url): \(error.message)")
                }
            }
        }

        func run() throws {
            guard FileManager.default.fileExists(atPath: self.cacheDirectory + "/objects") else {
                FileHandle.standardError.write(Data("\(self.cacheDirectory): io: no cache here\n".utf8))
                throw ExitCode.failure
            }
            let cache = try DiskCache(root: self.cacheDirectory, maxBytes: .max, cleanUp: false)
            let reason = self.takedown ? self.reason : nil
            var reports: [DiskCache.PurgeReport] = []
            for key in self.keys.compactMap(ObjectKey.init(rawValue:)) {
                reports.append(try cache.purge(key: key, takedown: reason))
            }
            for url in self.url {
                reports.append(try cache.purge(url: NormalizedURL(try Downloader.validate(url)), takedown: reason))
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            for report in reports { print(String(decoding: try encoder.encode(report), as: UTF8.self)) }
        }
    }
}
