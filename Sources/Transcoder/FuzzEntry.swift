import Foundation

/// Entry points of the libFuzzer targets (`Tests/Fuzz`, `scripts/fuzz-coverage`): each runs one input path
/// of the transcoder on arbitrary bytes as far as the bytes allow and drops the result. Thrown errors are
/// the expected outcome for most inputs; a crash, a hang, a leak or a sanitizer report is a bug.
package enum FuzzEntry {
    /// Limits small enough that one input costs milliseconds and megabytes, not the production ones.
    static var options: TranscodeOptions {
        var options = TranscodeOptions()
        options.limits.maxWidth = 1024
        options.limits.maxHeight = 1024
        options.limits.maxFrames = 256
        options.limits.maxTotalPixels = 16_000_000
        return options
    }

    /// The GIF pre-scan alone: block structure, limits and the frame table.
    package static func prescan(_ bytes: UnsafeRawBufferPointer) {
        _ = try? GIFPrescan(bytes: bytes, limits: Self.options.limits)
    }

    /// The whole decoding path up to the encoder, for whichever format the signature names: pre-scan
    /// (GIF blocks, APNG chunks, WebP RIFF chunks), decoding and compositing (giflib and ours; libavformat's
    /// and libavcodec's APNG; libwebp's WebPAnimDecoder), flattening, edge padding and conversion to yuv420p.
    /// Each
    /// picture goes to a cheap sink instead of x264 (x264 and libavcodec are fuzzed upstream, on OSS-Fuzz),
    /// reading every luma byte so that a picture with unset memory would show.
    package static func decodeAndComposite(_ bytes: UnsafeRawBufferPointer) {
        let transcoder = Transcoder(options: Self.options)
        guard let plan = try? transcoder.plan(bytes) else { return }
        var checksum: UInt8 = 0
        _ = try? transcoder.composite(
            bytes, plan: plan, first: { picture, _, _ in checksum ^= UInt8(truncatingIfNeeded: picture.first ?? 0) }
        ) {
            frame, _ in
            frame.withUnsafeMutablePointer { frame in
                let luma = frame.pointee.data.0!
                for row in 0..<Int(frame.pointee.height) {
                    let line = luma + row * Int(frame.pointee.linesize.0)
                    for column in 0..<Int(frame.pointee.width) { checksum ^= line[column] }
                }
            }
        }
        Self.sink = checksum
    }

    /// A fuzz target built plainly: runs `body` once on each file named in `paths` (a reproducer for a
    /// crashing input). - Returns: the exit status, 2 when a file does not read.
    package static func replay(_ paths: some Sequence<String>, _ body: (UnsafeRawBufferPointer) -> Void) -> Int32 {
        for path in paths {
            guard let bytes = FileManager.default.contents(atPath: path) else {
                FileHandle.standardError.write(Data("cannot read \(path)\n".utf8))
                return 2
            }
            bytes.withUnsafeBytes { body($0) }
            print("\(path): ok")
        }
        return 0
    }

    #if FUZZING
        /// A fuzz target's entry point (`<Target>_main`: SwiftPM links an executable's `main` under that name,
        /// so libFuzzer's own `main` is never pulled in) hands control to libFuzzer's driver with this.
        package static func runDriver(
            _ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
            _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
        ) -> CInt {
            var count = argc
            var arguments = argv
            return runFuzzerDriver(&count, &arguments, callback)
        }
    #endif

    /// Where the sink's checksum goes, so the reads are not optimised away.
    nonisolated(unsafe) static var sink: UInt8 = 0
}

#if FUZZING
    @_silgen_name("LLVMFuzzerRunDriver")
    private func runFuzzerDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    ) -> CInt
#endif
