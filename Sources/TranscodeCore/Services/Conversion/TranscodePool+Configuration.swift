import Configuration
import Foundation
import Transcoder

/// `transcode.*` and `limits.*`: how many conversions run and wait, how long a request waits for one, and the
/// options every conversion gets (its output, its input limits).
package struct TranscodeConfiguration: Sendable, Equatable {
    package init() {}

    /// Threads that run transcodes. `transcode.workers`, default 0: one per core.
    package var workers = ProcessInfo.processInfo.activeProcessorCount
    /// Jobs that may wait for a worker; beyond, requests get 429. `transcode.queueLength`, default 32.
    package var queueLength = 32
    /// Format upgrades (`.auto`'s AVIF and WebP, made when no reader waits) that may be queued; beyond, an `.auto` URL
    /// answers its interim file and queues the upgrade on a later request. `transcode.upgradeQueueLength`, default 64.
    package var upgradeQueueLength = 64
    /// The process's memory budget: conversions start only while their predicted peaks (`MemoryPrediction`) fit it,
    /// less the process's own share (96 MiB); one predicted above it alone is refused `overloaded`. 0: no memory
    /// admission. `transcode.memoryBudgetBytes`, default 1 GiB (one AVIF of a 1080x1080 canvas with alpha, about
    /// 650 MiB, with the videos of others beside it).
    package var memoryBudgetBytes = 1 << 30
    /// How long `POST /transcode` waits before answering 202. `transcode.syncWaitSeconds`, default 30.
    package var syncWaitSeconds: Double = 30
    /// Output options (`transcode.background`, `.crf`, `.preset`, `.threads`, `.maxOutputWidth`,
    /// `.maxOutputHeight`, `.maxSizeRatio`, `.maxExtraAttempts`, `.minSSIM`) and input limits (`limits.*`); their
    /// defaults and ranges are `TranscodeOptions`'.
    package var options = TranscodeOptions()
}

extension TranscodeConfiguration {
    /// Reads `transcode` and `limits`; a key not set keeps its default. Ranges are checked by
    /// `TranscodeOptions.violations` and `TranscodeLimits.violations`, each reported under its key.
    package init(transcode: ConfigSection, limits: ConfigSection) {
        self.init()
        let reader = transcode.reader
        let workers = reader.int(forKey: "workers", default: 0)
        transcode.check("workers", (0...256).contains(workers), "0 (one per core) to 256")
        if workers > 0 { self.workers = workers }
        self.queueLength = reader.int(forKey: "queueLength", default: self.queueLength)
        transcode.check("queueLength", self.queueLength >= 0, "0 or more")
        self.upgradeQueueLength = reader.int(forKey: "upgradeQueueLength", default: self.upgradeQueueLength)
        transcode.check("upgradeQueueLength", self.upgradeQueueLength >= 0, "0 or more")
        self.memoryBudgetBytes = reader.int(forKey: "memoryBudgetBytes", default: self.memoryBudgetBytes)
        transcode.check(
            "memoryBudgetBytes", self.memoryBudgetBytes == 0 || self.memoryBudgetBytes >= 256 << 20,
            "0 (no memory admission) or at least 268435456 (256 MiB)")
        self.syncWaitSeconds = reader.double(forKey: "syncWaitSeconds", default: self.syncWaitSeconds)
        transcode.check("syncWaitSeconds", self.syncWaitSeconds >= 0, "0 or more")

        var options = self.options
        let background = reader.string(forKey: "background", default: options.background.description)
        if let color = RGBColor(hex: background) {
            options.background = color
        } else {
            transcode.refuse("background", "must be #RRGGBB, got \(background)")
        }
        options.crf = reader.int(forKey: "crf", default: options.crf)
        options.preset = reader.string(forKey: "preset", default: options.preset)
        options.threads = reader.int(forKey: "threads", default: options.threads)
        options.maxOutputWidth = reader.int(forKey: "maxOutputWidth", default: options.maxOutputWidth)
        options.maxOutputHeight = reader.int(forKey: "maxOutputHeight", default: options.maxOutputHeight)
        options.maxSizeRatio = reader.double(forKey: "maxSizeRatio", default: options.maxSizeRatio)
        options.maxExtraAttempts = reader.int(forKey: "maxExtraAttempts", default: options.maxExtraAttempts)
        options.minSSIM = reader.double(forKey: "minSSIM", default: options.minSSIM)
        let limitsReader = limits.reader
        options.limits.maxInputBytes = limitsReader.int(forKey: "maxInputBytes", default: options.limits.maxInputBytes)
        options.limits.maxWidth = limitsReader.int(forKey: "maxWidth", default: options.limits.maxWidth)
        options.limits.maxHeight = limitsReader.int(forKey: "maxHeight", default: options.limits.maxHeight)
        options.limits.maxFrames = limitsReader.int(forKey: "maxFrames", default: options.limits.maxFrames)
        options.limits.maxTotalPixels = Int64(
            limitsReader.int(forKey: "maxTotalPixels", default: Int(options.limits.maxTotalPixels)))
        for violation in options.violations { transcode.check(violation.field, false, violation.expectation) }
        for violation in options.limits.violations { limits.check(violation.field, false, violation.expectation) }
        self.options = options
    }
}
