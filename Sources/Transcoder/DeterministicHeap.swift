import CFFmpeg

/// Makes the bytes of every heap block the same in every process, so that a conversion's output depends only on
/// its input and options.
///
/// Without it, the same GIF converted with the same settings came out a few bytes different from process to
/// process when other files had been converted before it in the same process (cartoon_hotdog.gif after the
/// ten corpus files before it: 7,964-7,977 bytes over six runs, its first packet already different), though
/// the pictures and settings handed to x264 were the same, their padding too. Something below libavcodec's
/// `libx264` encoder reads heap memory it has not written (not found: valgrind cannot run the binary, and
/// AddressSanitizer does not see reads of uninitialised memory). glibc's `M_PERTURB` fills every block
/// `malloc` hands out with one byte value (and freed ones with another), so whatever was there before no
/// longer reaches the encoder: the whole corpus converted three times in one process gave the same bytes
/// each time, equal to each file converted in a process of its own (README, "Byte-identical output"). The
/// corpus took 18.3-19.1 s either way.
///
/// A setting of the whole process, so the library does not make it on its own: the programs that convert
/// (`transcode-server serve` and `convert`) call `enable()` first.
public enum DeterministicHeap {
    /// Call before the first conversion; it applies to blocks allocated from then on.
    public static func enable() {
        _ = mallopt(M_PERTURB, 0x55)
    }
}
