import Configuration

/// `download.*`: limits of the downloader, what it may reach and for how long.
package struct DownloadConfiguration: Sendable, Equatable {
    package init() {}

    /// Largest GIF fetched, checked on Content-Length and on the bytes streamed. `download.maxBytes`,
    /// default 50 MB.
    var maxBytes = 50_000_000
    /// `download.connectTimeoutSeconds`, default 5.
    var connectTimeoutSeconds: Double = 5
    /// The whole download, redirects included, must finish within this. `download.timeoutSeconds`, default 30.
    var timeoutSeconds: Double = 30
    /// `download.maxRedirects`, default 5.
    var maxRedirects = 5
    /// Allow 127.0.0.0/8 and ::1 as destinations (tests use it; never in production).
    /// `download.allowLoopback`, default false.
    package var allowLoopback = false
    /// When not empty, only these host names (exact, case-insensitive) may be fetched.
    /// `download.allowedHosts`.
    var allowedHosts: [String] = []
    /// A URL whose origin answered 404 or 410 is answered so again, without asking it, for this long.
    /// `download.notFoundTTLSeconds`, default 60; 0 asks every time.
    package var notFoundTTLSeconds: Double = 60
    /// A URL whose origin failed (5xx, a timeout, a transport or DNS failure) is answered so again, without
    /// asking it, for this long. `download.failureTTLSeconds`, default 30; 0 asks every time.
    package var failureTTLSeconds: Double = 30
}

extension DownloadConfiguration {
    /// Reads `section` (`download`); a key not set keeps its default.
    package init(_ section: ConfigSection) {
        self.init()
        let reader = section.reader
        self.maxBytes = reader.int(forKey: "maxBytes", default: self.maxBytes)
        section.check("maxBytes", self.maxBytes > 0, "positive")
        self.connectTimeoutSeconds = reader.double(forKey: "connectTimeoutSeconds", default: self.connectTimeoutSeconds)
        section.check("connectTimeoutSeconds", self.connectTimeoutSeconds > 0, "positive")
        self.timeoutSeconds = reader.double(forKey: "timeoutSeconds", default: self.timeoutSeconds)
        section.check("timeoutSeconds", self.timeoutSeconds > 0, "positive")
        self.maxRedirects = reader.int(forKey: "maxRedirects", default: self.maxRedirects)
        section.check("maxRedirects", (0...20).contains(self.maxRedirects), "0-20")
        self.allowLoopback = reader.bool(forKey: "allowLoopback", default: self.allowLoopback)
        self.allowedHosts = reader.stringArray(forKey: "allowedHosts", default: self.allowedHosts).filter {
            !$0.isEmpty
        }
        self.notFoundTTLSeconds = reader.double(forKey: "notFoundTTLSeconds", default: self.notFoundTTLSeconds)
        section.check("notFoundTTLSeconds", self.notFoundTTLSeconds >= 0, "0 or more")
        self.failureTTLSeconds = reader.double(forKey: "failureTTLSeconds", default: self.failureTTLSeconds)
        section.check("failureTTLSeconds", self.failureTTLSeconds >= 0, "0 or more")
    }
}
