import Foundation
import TestSupport
import Testing

/// The Dockerfile cannot be built here (no container engine), so what can drift is checked as text:
/// its package lists against the ones CI and the quick start install, and its runtime settings.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct PackagingTests {
    static func read(_ path: String) throws -> String {
        try String(contentsOf: ConfigurationTests.repositoryRoot.appendingPathComponent(path), encoding: .utf8)
    }

    /// The packages of the first `apt-get install` line in `text` after `marker`.
    static func packages(in text: String, after marker: String = "") throws -> Set<String> {
        let start = try #require(text.range(of: marker)).upperBound
        let line = try #require(
            text[start...].split(separator: "\n").first { $0.contains("apt-get install") })
        let words = line.split(separator: " ").map(String.init)
        let index = try #require(words.firstIndex(of: "install"))
        return Set(
            words[(index + 1)...].filter { !$0.hasPrefix("-") && $0 != "\\" && $0 != "&&" }
                .prefix { !$0.hasPrefix("&&") && $0 != "rm" })
    }

    @Test func buildPackageListsAreIdentical() throws {
        let docker = try Self.packages(in: try Self.read("Dockerfile"), after: "AS build")
        let ci = try Self.packages(in: try Self.read(".ci/run"), after: "# Build packages")
        let script = try Self.read("scripts/install-deps")
        let line = try #require(script.split(separator: "\n").first { $0.hasPrefix("BUILD_PACKAGES=") })
        let quickStart = Set(
            line.dropFirst("BUILD_PACKAGES=".count).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
                .split(separator: " ").map(String.init))
        #expect(docker == ci, "Dockerfile \(docker.sorted()) vs .ci/run \(ci.sorted())")
        #expect(docker == quickStart, "Dockerfile \(docker.sorted()) vs scripts/install-deps \(quickStart.sorted())")
        #expect(
            docker.isSuperset(of: [
                "libavcodec-dev", "libavformat-dev", "libavutil-dev", "libswscale-dev", "libgif-dev", "libwebp-dev",
                "libavif-dev",
            ]))
    }

    @Test func runtimeImage() throws {
        let docker = try Self.read("Dockerfile")
        let runtime = try Self.packages(in: docker, after: "FROM debian:bookworm-slim")
        #expect(
            runtime.isSuperset(of: [
                "libavcodec59", "libavformat59", "libavutil57", "libswscale6", "libgif7", "libwebp7", "libwebpdemux2",
                "libwebpmux3", "libavif15",
                "libgumbo1",
            ]))
        #expect(!runtime.contains { $0.hasSuffix("-dev") })
        #expect(docker.contains("FROM swift:6.3-bookworm AS build"))
        #expect(docker.contains("--static-swift-stdlib"))
        #expect(docker.contains("\nUSER transcode"))
        #expect(docker.contains("VOLUME /var/cache/transcode-server"))
        #expect(docker.contains("EXPOSE 8080"))
        #expect(docker.contains("HEALTHCHECK"))
        #expect(docker.contains("TRANSCODE_HOST=0.0.0.0"))
    }

    /// CI and `make test` install the same SeaweedFS, Marionette client and Kubernetes schema checker (the S3 and page tests fail, never
    /// skip, without them).
    @Test func testDependenciesAreTheSame() throws {
        let ci = try Self.read(".ci/run")
        let script = try Self.read("scripts/install-deps")
        for variable in ["SEAWEEDFS=", "MARIONETTE=", "KUBERNETES_VALIDATE="] {
            let pinned = try #require(script.split(separator: "\n").first { $0.hasPrefix(variable) })
            let version = pinned.dropFirst(variable.count).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            #expect(ci.contains("\"\(version)\""), "\(version) is not what .ci/run installs")
        }
        let ciTest = try Self.packages(in: ci, after: "# Test packages")
        let line = try #require(script.split(separator: "\n").first { $0.hasPrefix("TEST_PACKAGES=") })
        let scriptTest = Set(
            line.dropFirst("TEST_PACKAGES=".count).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
                .split(separator: " ").map(String.init))
        #expect(ciTest == scriptTest)
    }

    /// Every path the architecture and layout documents name in backticks is in the repository (issue 54: stale
    /// names outlived their files). A path is a token with a source file's extension and a slash, one under a
    /// top-level directory, or a directory name (`Commands/`); it may be written from any directory down
    /// (`Services/Jobs/PostgresQueue.swift`), and `...` stands for any directories.
    @Test(.tags(.childProcess)) func theDocumentsNameOnlyPathsThatExist() async throws {
        let root = ConfigurationTests.repositoryRoot.path
        let listing = try await runProcess("/usr/bin/git", ["-C", root, "ls-files"], timeout: .seconds(60))
        try #require(listing.status == 0, "\(listing.stderr)")
        let files = listing.stdout.split(separator: "\n").map(String.init)
        var directories: Set<String> = []
        for file in files {
            var path = ""
            for part in file.split(separator: "/").dropLast() {
                path += part + "/"
                directories.insert(path)
            }
        }
        let extensions = [".swift", ".c", ".h", ".py", ".yaml", ".json", ".md", ".js", ".html", ".sh", ".modulemap"]
        func isPath(_ token: String) -> Bool {
            guard !token.contains(" "), !token.hasPrefix("/"), !token.hasPrefix("http"), !token.hasPrefix("<") else {
                return false
            }
            if token.contains("/"), extensions.contains(where: token.hasSuffix) { return true }
            if ["Sources/", "Tests/", "scripts/", "deploy/", "config/", "docs/", "Client/", ".ci/"].contains(
                where: token.hasPrefix)
            {
                return true
            }
            return token.hasSuffix("/") && token.first?.isUppercase == true
                && token.dropLast().allSatisfy { $0.isLetter || $0.isNumber || $0 == "+" }
        }
        func resolves(_ token: String) throws -> Bool {
            let pattern = NSRegularExpression.escapedPattern(for: token).replacingOccurrences(
                of: "\\.\\.\\.", with: ".+")
            let expression = try NSRegularExpression(pattern: "(^|/)" + pattern + "/?$")
            func matches(_ path: String) -> Bool {
                expression.firstMatch(in: path, range: NSRange(path.startIndex..., in: path)) != nil
            }
            return (!token.hasSuffix("/") && files.contains(where: matches)) || directories.contains(where: matches)
        }
        var checked = 0
        for document in ["docs/ARCHITECTURE.md", "docs/layout.md"] {
            let text = try Self.read(document)
            let tokens = Set(
                text.split(separator: "`", omittingEmptySubsequences: false).enumerated().filter { $0.offset % 2 == 1 }
                    .map { String($0.element) }.filter { !$0.contains("\n") })
            for token in tokens.sorted() where isPath(token) {
                checked += 1
                #expect(try resolves(token), "\(document) names `\(token)`, which is not in the repository")
            }
        }
        #expect(checked > 50, "\(checked) paths checked")
        #expect(try !resolves("Services/NoSuchFile.swift"))
    }

    /// The corpus the suite converts is beside the repository; without it every test that converts fails, so
    /// say so once, plainly.
    @Test func theCorpusIsThere() throws {
        try requireCorpus()
    }

    /// CI runs the README's test command.
    @Test func ciRunsTheReadmeTestCommand() throws {
        let readme = try Self.read("README.md")
        let ci = try Self.read(".ci/run")
        #expect(readme.contains("make test"))
        #expect(ci.split(separator: "\n").contains("make test"))
    }
}
