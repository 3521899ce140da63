import Foundation
import TranscodeCore

/// The files shipped with the executable (SwiftPM resources of the `TranscodeServer` target: the OpenAPI document,
/// the demo's sample GIF, the favicon, the scripts the routes here serve). Looked up by hand rather than through
/// `Bundle.module`, which stops the process when the bundle is missing: in `gif2mp4_TranscodeServer.resources/`
/// beside the executable (a build, the Docker image), or under `../share/transcode-server/` (the `make dist`
/// tarball: `bin/` and `share/`), or in the working directory.
enum ServerResources {
    /// The bundle's directory name, as SwiftPM writes it.
    static let bundleName = "gif2mp4_TranscodeServer.resources"

    /// Where resources are looked for, in order.
    static let directories: [URL] = {
        // The arguments can be empty (a static binary without /proc cannot read them): no index, no trap.
        let executable = CommandLine.arguments.first.map { URL(fileURLWithPath: $0).resolvingSymlinksInPath() }
        let bin = executable?.deletingLastPathComponent()
        var directories: [URL] = []
        if let bin {
            directories.append(bin.appendingPathComponent(Self.bundleName))
            directories.append(bin.deletingLastPathComponent().appendingPathComponent("share/transcode-server"))
        }
        directories.append(
            URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(Self.bundleName))
        directories.append(Bundle.main.bundleURL.appendingPathComponent(Self.bundleName))
        return directories
    }()

    /// The bytes of resource `name`, nil when no directory has it.
    static func bytes(_ name: String) -> [UInt8]? {
        for directory in Self.directories {
            if let data = FileManager.default.contents(atPath: directory.appendingPathComponent(name).path) {
                return [UInt8](data)
            }
        }
        return nil
    }
}
