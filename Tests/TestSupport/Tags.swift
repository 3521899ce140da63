import Testing

/// The tiers of the suite. `make test` runs unit and integration tests together, then the system tier alone
/// (`swift test --filter`... see the Makefile), so the tests that start browsers, S3 servers or binaries do not
/// share two cores with everything else.
extension Tag {
    /// Pure logic: no file system beyond a temporary directory, no network, no child process.
    @Tag public static var unit: Self
    /// The real app or transcoder, in process, on loopback (local origins, the router, the cache).
    @Tag public static var integration: Self
    /// Other programs: headless Chromium, SeaweedFS, nginx, the built binary run as a child process.
    @Tag public static var system: Self
}
