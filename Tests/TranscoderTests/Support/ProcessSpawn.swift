import Foundation

// Shared by both test targets (TranscodeServerTests links to this file).

extension Process {
    /// `run()`, once this test process has fewer than 1,000 descriptors open (waiting up to 30 s).
    ///
    /// Why: on Linux, Foundation's `run()` lists `/proc/self/fd` copying all 256 bytes of every entry's name,
    /// past the end of glibc's 32 KB readdir buffer once the listing fills it (about 1,350 descriptors), and
    /// crashed a full parallel run that way (swift-corelibs-foundation #5472, fixed upstream, not in the 6.3.1
    /// toolchain). The suites' servers brought the process to 1,350 descriptors at its peak.
    func runWithFewDescriptorsOpen() throws {
        let deadline = ContinuousClock.now + .seconds(30)
        // FileManager reads directory entries by their length, not past them.
        while ContinuousClock.now < deadline,
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"))?.count ?? 0) >= 1000
        {
            usleep(50_000)
        }
        try self.run()
    }
}
