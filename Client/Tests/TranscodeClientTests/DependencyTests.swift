import Foundation
import Testing

/// An app that adds the package resolves swift-crypto and what it needs, nothing of the server's.
@Suite struct DependencyTests {
    @Test func anAppResolvesSwiftCryptoAlone() async throws {
        try await withTemporaryDirectory { directory in
            try FileManager.default.createDirectory(
                at: directory.appendingPathComponent("Sources/App"), withIntermediateDirectories: true)
            try """
            // swift-tools-version: 6.1
            import PackageDescription
            let package = Package(
                name: "App",
                dependencies: [.package(path: "\(Paths.client.path)")],
                targets: [.executableTarget(name: "App", dependencies: [.product(name: "TranscodeClient", package: "Client")])]
            )
            """.write(to: directory.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)
            try "import TranscodeClient\nprint(MediaFile.allCases)\n".write(
                to: directory.appendingPathComponent("Sources/App/main.swift"), atomically: true, encoding: .utf8)
            let swift = try #require(
                ["/opt/swift/usr/bin/swift", "/usr/bin/swift", "/opt/swift/bin/swift"].first {
                    FileManager.default.isExecutableFile(atPath: $0)
                }, "no swift binary")
            let result = try run(
                swift,
                [
                    "package", "--package-path", directory.path, "--scratch-path",
                    directory.appendingPathComponent(".build").path,
                    "show-dependencies", "--format", "json",
                ])
            #expect(result.status == 0, "\(result.stderr)")
            let tree = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
            var identities: Set<String> = []
            func walk(_ node: [String: Any]) {
                for child in node["dependencies"] as? [[String: Any]] ?? [] {
                    identities.insert(child["identity"] as? String ?? "?")
                    walk(child)
                }
            }
            walk(tree)
            #expect(identities == ["client", "swift-crypto", "swift-asn1"], "\(identities)")
        }
    }
}
