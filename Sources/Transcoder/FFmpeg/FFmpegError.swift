import CFFmpeg

/// A failing FFmpeg call: the negative `AVERROR` code, the function that returned it, and
/// `av_strerror`'s text.
struct FFmpegError: Error, CustomStringConvertible, Sendable {
    let code: Int32
    let function: String

    var description: String {
        var buffer = [CChar](repeating: 0, count: 256)
        av_strerror(self.code, &buffer, buffer.count)
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return "\(self.function): \(text) (\(self.code))"
    }

    /// Throws when `result` is negative, the FFmpeg convention for failure.
    @discardableResult
    static func check(_ result: Int32, _ function: String) throws -> Int32 {
        guard result >= 0 else { throw FFmpegError(code: result, function: function) }
        return result
    }
}

/// FFmpeg's global log level and callback, set once per process: libraries print to stderr by default, and a
/// service's log stream is no place for x264's per-file statistics. Errors still show. The callback
/// (`CFFmpeg_LogCallback`) hands x264's per-picture SSIM to the encoder that asked for it (`X264SSIM`).
enum FFmpegLogging {
    static let configured: Void = {
        av_log_set_level(AV_LOG_ERROR)
        CFFmpeg_InstallLogCallback()
    }()
}
