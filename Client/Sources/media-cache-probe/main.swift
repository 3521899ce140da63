// Downloads GIFs' files into a MediaCache until it is killed: the child process of
// `MediaCacheCrashTests`, which kills it with SIGKILL at random moments and then checks that nothing in the cache
// reads as complete but differs from the server's bytes.
//
// media-cache-probe BASE_URL HEX_KEY HEX_SALT CACHE_DIRECTORY MAX_BYTES GIF_URL...
import Foundation
import TranscodeClient

let arguments = CommandLine.arguments
guard arguments.count >= 7, let base = URL(string: arguments[1]), let maxBytes = Int(arguments[5]) else {
    FileHandle.standardError.write(Data("usage: media-cache-probe BASE_URL KEY SALT DIRECTORY MAX_BYTES URL...\n".utf8))
    exit(64)
}
let client = TranscodeClient(
    baseURL: base, signer: try TranscodeURLSigner(hexKey: arguments[2], hexSalt: arguments[3]))
let cache = try MediaCache(directory: URL(fileURLWithPath: arguments[4]), maxBytes: maxBytes, client: client)
let urls = Array(arguments[6...])
while true {
    // Both files of each GIF, in an order that changes each round, so the kills land on every step.
    for url in urls.shuffled() {
        for file in [MediaFile.mp4, .jpg].shuffled() {
            _ = try? await cache.file(for: url, file)
        }
    }
}
