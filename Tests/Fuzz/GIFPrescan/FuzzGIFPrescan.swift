import Foundation
import Transcoder

// A libFuzzer target: scripts/fuzz-coverage builds it with -sanitize=fuzzer,address and -D FUZZING.
// Built plainly, it replays each file named on the command line once (a reproducer for a crashing input).

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzEntry.prescan(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

#if FUZZING
    // SwiftPM links an executable's entry point as `<Target>_main`: this one runs libFuzzer's driver.
    @_cdecl("FuzzGIFPrescan_main")
    func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
        FuzzEntry.runDriver(argc, argv, fuzz)
    }
#else
    @main
    struct Replay {
        static func main() {
            exit(FuzzEntry.replay(CommandLine.arguments.dropFirst(), FuzzEntry.prescan))
        }
    }
#endif
