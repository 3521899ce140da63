import Testing

/// What a test is and what it needs. A suite's tags apply to each of its tests; a test adds its own.
///
/// `make test` runs three tiers, derived from these tags by `scripts/test-tiers` (this Swift cannot filter by tag):
/// tier 1 (the tests that run in the test process alone), then the system tier (those that start another program:
/// `browser`, `database`, `objectStore`, `childProcess`), then the `heavy` ones. So browsers timing a video do not
/// share two cores with every other test, and timing-bound tests do not share them with AVIF encoders.
extension Tag {
    // What a suite exercises (each suite has one).

    /// Pure logic: no file system beyond a temporary directory, no network, no child process.
    @Tag public static var unit: Self
    /// The real app or transcoder, in process, on loopback (local origins, the router, the cache), or the programs
    /// below around it.
    @Tag public static var integration: Self

    // What a test needs: another program puts it in the system tier.

    /// Headless Chromium, WebKitGTK or Firefox ESR.
    @Tag public static var browser: Self
    /// A PostgreSQL server (`initdb` in a temporary directory).
    @Tag public static var database: Self
    /// SeaweedFS, the S3 store.
    @Tag public static var objectStore: Self
    /// Another program run as a child process: the built binary, nginx, wrk, ffmpeg, python3, node, git.
    @Tag public static var childProcess: Self

    // How it runs.

    /// Passes or fails by real time: a deadline, a lease or a back-off that must run out, a sleep of a second or
    /// more, playback watched in a browser. `swift test --skip-build $(scripts/test-tiers --tag wallClock)`
    /// runs them, beside a busy machine.
    @Tag public static var wallClock: Self
    /// Tens of CPU-seconds in a debug build (AVIF ladders, batches of conversions): run last, in a tier of their own.
    @Tag public static var heavy: Self
}
