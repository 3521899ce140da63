// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "gif2mp4",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "transcode-server", targets: ["TranscodeServer"]),
        .library(name: "Transcoder", targets: ["Transcoder"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        // LogEvent (`LogHandler.log(event:)`); the older entry point is deprecated.
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.20.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.3.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.1.0"),
        // The fleet's job queue (issue 34): PostgreSQL's wire protocol, pure Swift (no libpq).
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.0"),
        .package(
            url: "https://github.com/apple/swift-configuration.git", from: "1.0.0",
            traits: [.defaults, "CommandLineArguments"]),
        // Spans (issue 55): the tracing API, and swift-otel's exporter over OTLP/HTTP only (its gRPC exporter
        // would bring gRPC Swift for nothing).
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.1.0"),
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        .systemLibrary(
            name: "CFFmpeg",
            pkgConfig: "libavcodec libavformat libavutil libswscale libwebpdemux libwebpmux libavif",
            providers: [
                .apt([
                    "libavcodec-dev", "libavformat-dev", "libavutil-dev", "libswscale-dev", "libgif-dev", "libwebp-dev",
                    "libavif-dev",
                ])
            ]
        ),
        // Google's gumbo, the HTML5 parser with source positions that POST /v1/rewrite needs.
        .systemLibrary(
            name: "CGumbo",
            pkgConfig: "gumbo",
            providers: [.apt(["libgumbo-dev"])]
        ),
        // gumbo parses that stop at a deadline (its allocator looks at the clock): POST /v1/rewrite's bound.
        .target(name: "CGumboDeadline", dependencies: ["CGumbo"]),
        .target(
            name: "Transcoder",
            dependencies: ["CFFmpeg"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The core: keys, storage, jobs, conversion, fetch, rewrite, signing, delivery (Services/). Its storage
        // internals are internal; what the layers above use is `package`.
        .target(
            name: "TranscodeCore",
            dependencies: [
                "Transcoder",
                "CGumbo",
                "CGumboDeadline",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                .product(name: "OTel", package: "swift-otel"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The HTTP layer: the routes (Controllers/) and the ahead-of-codec hit front (HTTP/), over the core.
        .target(
            name: "TranscodeHTTP",
            dependencies: [
                "TranscodeCore",
                "Transcoder",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Configuration", package: "swift-configuration"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The thin executable: the commands, the whole configuration, and the wiring (App+build.swift). The
        // resources the HTTP layer serves ship with it (ServerResources looks them up beside the binary).
        .executableTarget(
            name: "TranscodeServer",
            dependencies: [
                "TranscodeCore",
                "TranscodeHTTP",
                "Transcoder",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "OTel", package: "swift-otel"),
            ],
            resources: [
                .copy("Resources/openapi.yaml"), .copy("Resources/sample.gif"), .copy("Resources/favicon.ico"),
                .copy("Resources/player.js"), .copy("Resources/demo.css"), .copy("Resources/demo.js"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)],
            // EncoderHeap's memalign (TranscodeCore) must be the one libx264 finds at run time.
            linkerSettings: [.unsafeFlags(["-Xlinker", "--export-dynamic-symbol=memalign"])]
        ),
        // libFuzzer targets (scripts/fuzz-coverage); built plainly, they replay the inputs named on the command
        // line.
        .executableTarget(
            name: "FuzzGIFPrescan", dependencies: ["Transcoder"], path: "Tests/Fuzz/GIFPrescan",
            swiftSettings: [.swiftLanguageMode(.v6)]),
        .executableTarget(
            name: "FuzzDecodePath", dependencies: ["Transcoder"], path: "Tests/Fuzz/DecodePath",
            swiftSettings: [.swiftLanguageMode(.v6)]),
        // What both test targets use to start programs (see ChildProcess), and the tests' pixel arithmetic
        // (PSNR, 2x2 averages), built optimised even in a debug build: it runs over every corpus frame.
        .target(name: "CTestSupport", path: "Tests/CTestSupport", cSettings: [.unsafeFlags(["-O2"])]),
        .target(
            name: "TestSupport", dependencies: ["CTestSupport"], path: "Tests/TestSupport",
            swiftSettings: [.swiftLanguageMode(.v6)]),
        .testTarget(
            name: "TranscoderTests",
            dependencies: ["Transcoder", "CFFmpeg", "TestSupport", "CTestSupport"],
            // The headless-Chromium oracle (WebCodecs ImageDecoder, <video> playback) the tests run.
            exclude: ["Browser"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "TranscodeServerTests",
            dependencies: [
                "TranscodeServer",
                "TranscodeCore",
                "TranscodeHTTP",
                "TestSupport",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                // MediaHitFront's framing against NIO's decoder, in an embedded channel.
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            // The Selenium script the browser test runs (with Debian's python3-selenium).
            exclude: ["Browser"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
