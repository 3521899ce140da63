import Configuration
import TranscodeCore

/// `rewrite.*`: what `POST /v1/rewrite` takes.
package struct RewriteConfiguration: Sendable, Equatable {
    package init() {}

    /// Largest document. `rewrite.maxBodyBytes`, default 5 MB.
    package var maxBodyBytes = 5_000_000
    /// Most GIFs one document may have; beyond, 422 `too-many-gifs`. `rewrite.maxGifs`, default 500.
    package var maxGIFs = 500
    /// Longest a document's parse may take; beyond, 422 `too-complex`. `rewrite.parseTimeoutSeconds`, default 5.
    package var parseTimeoutSeconds = 5.0
    /// Most documents taken for parsing at once (running, waiting, or past their deadline); beyond, 503
    /// `overloaded`. `rewrite.maxParses`, default 0: 8 per parser thread, at least 16.
    package var maxParses = 0
}

extension RewriteConfiguration {
    /// Reads `section` (`rewrite`); a key not set keeps its default.
    package init(_ section: ConfigSection) {
        self.init()
        self.maxBodyBytes = section.reader.int(forKey: "maxBodyBytes", default: self.maxBodyBytes)
        section.check("maxBodyBytes", self.maxBodyBytes > 0, "positive")
        self.maxGIFs = section.reader.int(forKey: "maxGifs", default: self.maxGIFs)
        section.check("maxGifs", self.maxGIFs > 0, "positive")
        self.parseTimeoutSeconds = section.reader.double(
            forKey: "parseTimeoutSeconds", default: self.parseTimeoutSeconds)
        section.check("parseTimeoutSeconds", (0.001...3600).contains(self.parseTimeoutSeconds), "0.001-3600")
        self.maxParses = section.reader.int(forKey: "maxParses", default: self.maxParses)
        section.check("maxParses", self.maxParses >= 0, "0 (automatic) or more")
    }
}
