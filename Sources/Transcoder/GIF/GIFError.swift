import CFFmpeg

/// A giflib failure: its `D_GIF_ERR_*` code, the function that reported it, and giflib's own text.
struct GIFError: Error, CustomStringConvertible, Sendable {
    let code: Int32
    let function: String

    var description: String {
        let text = GifErrorString(self.code).map { String(cString: $0) } ?? "unknown giflib error"
        return "\(self.function): \(text) (\(self.code))"
    }
}
