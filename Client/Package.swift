// swift-tools-version: 6.1
import PackageDescription

// The client of transcode-server for apps and Swift backends: sign, ask, choose, cache and play.
//
// A package of its own, beside the server's, so that an app that adds it resolves swift-crypto alone. A product of
// the root package would not do: SwiftPM resolves every dependency a root manifest declares, whatever product the
// app uses (an app package depending on the root package's dependency-free `Transcoder` product resolved Hummingbird,
// SwiftNIO, postgres-nio and 20 more; see docs/embedding.md).
let package = Package(
    name: "gif2mp4-client",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .visionOS(.v1)],
    products: [
        .library(name: "TranscodeClient", targets: ["TranscodeClient"])
    ],
    dependencies: [
        // CryptoKit's API on Linux (HMAC-SHA256 for signed URLs and webhooks, SHA-256 for the cache).
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.0"..<"5.0.0")
    ],
    targets: [
        .target(
            name: "TranscodeClient",
            dependencies: [.product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // A child process the tests kill with SIGKILL mid-download: the cache must never read a cut file as complete.
        .executableTarget(
            name: "media-cache-probe",
            dependencies: ["TranscodeClient"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "TranscodeClientTests",
            dependencies: ["TranscodeClient"],
            // A loopback server the tests start with python3 (scripted answers, a webhook receiver).
            exclude: ["Fixtures"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
