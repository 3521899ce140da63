#if canImport(Glibc)
    import Glibc

    /// Same bytes for the same GIF in every process: the small blocks x264 allocates are handed out zeroed.
    ///
    /// In one process, a GIF converted after others could come out a few bytes different from the same GIF
    /// converted alone (cartoon_hotdog.gif after the ten corpus files before it: 7,964-7,977 bytes over six runs),
    /// though the pictures and settings handed to x264 were the same. What decides it is what an earlier x264
    /// encoder in the process left in the blocks a later one gets: zeroing x264's blocks (it allocates with
    /// `memalign`) makes the output that of the file converted alone, zeroing FFmpeg's (`posix_memalign`) or our
    /// frames does not (docs/open-questions.md). The read itself, somewhere in x264, is not found, and a later host
    /// (AMD EPYC, AVX2, no AVX-512) shows no variation with or without this: kept for hosts like the earlier ones.
    ///
    /// Zeroing every block would make memory x264 allocates but never touches resident (up to 8 MiB more peak RSS
    /// at 1080x1080), so only blocks under 128 KB are zeroed here, and glibc's `mmap` threshold is held at 128 KB
    /// (`enable()`), so that larger blocks always come fresh from the kernel, zero and untouched, instead of from
    /// memory freed by an earlier job.
    package enum EncoderHeap {
        /// Blocks under this size are zeroed; from it on they are fresh mappings.
        static let threshold = 128 * 1024

        /// Holds glibc's `mmap` threshold at `threshold` (by default it rises with the largest block freed, and
        /// large blocks then come from reused heap). Call before the first conversion.
        package static func enable() {
            // M_MMAP_THRESHOLD, from <malloc.h> (not in the Glibc module).
            let mmapThreshold: Int32 = -3
            _ = mallopt(mmapThreshold, Int32(Self.threshold))
        }

        /// Gives the memory a finished conversion freed back to the kernel, from every thread's arena
        /// (`malloc_trim(0)`). Without it each pool thread's arena kept its last conversion's freed small blocks: 8
        /// `.avif` requests of a 1080x1080 GIF, run one at a time by the memory budget on two threads, peaked at
        /// 1,155 MiB where one takes 620 (`scripts/bench-avif-admission`).
        /// The predicted peak from which a conversion gives its memory back (`releaseFreedMemory`): the AVIF of a
        /// canvas of about 400x400 and more.
        static let trimAfterBytes = 128 << 20

        package static func releaseFreedMemory() {
            _ = mallocTrim(0)
        }

        typealias Memalign = @convention(c) (Int, Int) -> UnsafeMutableRawPointer?

        /// glibc's own `memalign`, the next definition after ours.
        static let libraryMemalign: Memalign = {
            guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: -1), "memalign") else {
                fatalError("glibc has no memalign")
            }
            return unsafeBitCast(symbol, to: Memalign.self)
        }()
    }

    /// `memalign` for the whole process (the executable exports it: see Package.swift), which `x264_malloc` calls:
    /// glibc's, with blocks under `EncoderHeap.threshold` zeroed.
    @_cdecl("memalign")
    public func encoderHeapMemalign(_ alignment: Int, _ size: Int) -> UnsafeMutableRawPointer? {
        let block = EncoderHeap.libraryMemalign(alignment, size)
        if let block, size < EncoderHeap.threshold { memset(block, 0, size) }
        return block
    }

    @_silgen_name("mallopt")
    private func mallopt(_ parameter: Int32, _ value: Int32) -> Int32

    @_silgen_name("malloc_trim")
    private func mallocTrim(_ pad: Int) -> Int32
#endif
