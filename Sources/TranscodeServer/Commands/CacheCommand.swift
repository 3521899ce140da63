import ArgumentParser
import Foundation

/// `transcode-server cache verify [--repair]`: checks every stored object byte for byte.
struct CacheCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cache",
        abstract: "Inspect the result cache.",
        subcommands: [Verify.self]
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
        var cacheDirectory: String = ServerConfiguration().cacheDirectory

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
            for key in cache.keys {
                switch cache.verify(key) {
                case .sound:
                    sound += 1
                case .unhashed:
                    unhashed += 1
                case .damaged(let reason):
                    damaged += 1
                    print("\(key): damaged: \(reason)\(self.repair ? " (quarantined)" : "")")
                    if self.repair { cache.quarantine(key) }
                }
            }
            print(
                "\(sound + unhashed + damaged) objects: \(sound) sound, \(damaged) damaged"
                    + (unhashed > 0 ? ", \(unhashed) without recorded hashes (sizes and files checked)" : "")
                    + (self.repair && damaged > 0 ? "; damaged objects moved to quarantine/" : ""))
            if damaged > 0, !self.repair { throw ExitCode.failure }
        }
    }
}
