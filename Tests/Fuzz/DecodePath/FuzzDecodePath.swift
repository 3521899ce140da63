import Foundation
import Transcoder

// A libFuzzer target: scripts/fuzz-coverage builds it with -sanitize=fuzzer,address and -D FUZZING.
// Built plainly, it replays each file named on the command line once (a reproducer for a crashing input).

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzEntry.decodeAndComposite(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

#if FUZZING
    // SwiftPM links an executable's entry point as `<Target>_main` (`--defsym main=...`), so libFuzzer's own
    // main is never pulled in: this entry point hands control to libFuzzer's driver instead.
    @_silgen_name("LLVMFuzzerRunDriver")
    func runFuzzerDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    ) -> CInt

    @_cdecl("FuzzDecodePath_main")
    func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
        var count = argc
        var arguments = argv
        return runFuzzerDriver(&count, &arguments, fuzz)
    }
#else
    @main
    struct Replay {
        static func main() {
            exit(FuzzEntry.replay(CommandLine.arguments.dropFirst(), FuzzEntry.decodeAndComposite))
        }
    }
#endif
