import Configuration
import Foundation
import TranscodeCore

/// `http.*`: the HTTP server's limits and timeouts, and the URLs and caching headers of its answers.
package struct HTTPConfiguration: Sendable, Equatable {
    package init() {}

    /// Largest request body (an uploaded GIF or JSON). `http.maxBodyBytes`, default 50 MB.
    package var maxBodyBytes = 50_000_000
    /// Idle connections are closed after this, and those whose client takes none of an answer's bytes for this
    /// long. `http.idleTimeoutSeconds`, default 30.
    package var idleTimeoutSeconds: Double = 30
    /// A request head must arrive in full within this, from the connection's start or the previous
    /// response's end. `http.headerTimeoutSeconds`, default 10.
    package var headerTimeoutSeconds: Double = 10
    /// An uploaded GIF must arrive in full within this many seconds of its first byte being read; a body
    /// that drips is answered 408. `http.bodyTimeoutSeconds`, default 30.
    package var bodyTimeoutSeconds: Double = 30
    /// Prefixed to the URLs answers carry (`https://media.example.com`); empty: relative URLs.
    /// `http.publicBaseURL`.
    package var publicBaseURL = ""
    /// `Cache-Control: max-age` of `/media` (content-addressed, immutable). `http.mediaMaxAgeSeconds`,
    /// default one year.
    package var mediaMaxAgeSeconds = 31_536_000
    /// `Cache-Control: max-age` of `GET /v1/...`, whose answer follows the origin's GIF.
    /// `http.sourceMaxAgeSeconds`, default 3600.
    package var sourceMaxAgeSeconds = 3600
    /// `Cache-Control: max-age` of an `.auto` answer given while its better formats are made (the GIF, or Safari's
    /// MP4). `http.interimMaxAgeSeconds`, default 60.
    package var interimMaxAgeSeconds = 60
    /// `bytes` (the file itself) or `redirect` (302 to `/media/...`) on `GET /v1/...`. `http.sourceAnswer`.
    package var sourceAnswer = SourceController<AppRequestContext>.Answer.bytes
    /// Cache hits are answered from the bytes read, ahead of the HTTP decoder (`MediaHitFront`); false leaves them
    /// to the same logic behind the decoder (`MediaHitHandler`). For measuring what the front saves
    /// (`scripts/bench-hits-ab --new-env`), or for setting it aside. `http.answerAhead`, default true.
    package var answerAhead = true
    /// Connections held open at once; one more is answered 503 `overloaded` and closed. 0: three quarters of
    /// the process's descriptor limit (`ConnectionLimit.automatic`). `http.maxConnections`, default 0.
    package var maxConnections = 0
}

extension HTTPConfiguration {
    /// Reads `section` (`http`); a key not set keeps its default.
    package init(_ section: ConfigSection) {
        self.init()
        let reader = section.reader
        self.maxBodyBytes = reader.int(forKey: "maxBodyBytes", default: self.maxBodyBytes)
        section.check("maxBodyBytes", self.maxBodyBytes > 0, "positive")
        self.idleTimeoutSeconds = reader.double(forKey: "idleTimeoutSeconds", default: self.idleTimeoutSeconds)
        section.check("idleTimeoutSeconds", self.idleTimeoutSeconds > 0, "positive")
        self.headerTimeoutSeconds = reader.double(forKey: "headerTimeoutSeconds", default: self.headerTimeoutSeconds)
        section.check("headerTimeoutSeconds", self.headerTimeoutSeconds > 0, "positive")
        self.bodyTimeoutSeconds = reader.double(forKey: "bodyTimeoutSeconds", default: self.bodyTimeoutSeconds)
        section.check("bodyTimeoutSeconds", self.bodyTimeoutSeconds > 0, "positive")
        self.publicBaseURL = reader.string(forKey: "publicBaseURL", default: self.publicBaseURL)
        while self.publicBaseURL.hasSuffix("/") { self.publicBaseURL.removeLast() }
        if !self.publicBaseURL.isEmpty {
            let url = URL(string: self.publicBaseURL)
            section.check(
                "publicBaseURL",
                ["http", "https"].contains(url?.scheme?.lowercased() ?? "") && url?.host != nil && url?.query == nil,
                "an absolute http(s) URL such as https://media.example.com")
        }
        self.mediaMaxAgeSeconds = reader.int(forKey: "mediaMaxAgeSeconds", default: self.mediaMaxAgeSeconds)
        section.check("mediaMaxAgeSeconds", self.mediaMaxAgeSeconds >= 0, "0 or more")
        self.sourceMaxAgeSeconds = reader.int(forKey: "sourceMaxAgeSeconds", default: self.sourceMaxAgeSeconds)
        section.check("sourceMaxAgeSeconds", self.sourceMaxAgeSeconds >= 0, "0 or more")
        self.interimMaxAgeSeconds = reader.int(forKey: "interimMaxAgeSeconds", default: self.interimMaxAgeSeconds)
        section.check("interimMaxAgeSeconds", self.interimMaxAgeSeconds >= 0, "0 or more")
        self.maxConnections = reader.int(forKey: "maxConnections", default: self.maxConnections)
        section.check("maxConnections", self.maxConnections >= 0, "0 (automatic) or more")
        self.answerAhead = reader.bool(forKey: "answerAhead", default: self.answerAhead)
        let answer = reader.string(forKey: "sourceAnswer", default: self.sourceAnswer.rawValue)
        if let parsed = SourceController<AppRequestContext>.Answer(rawValue: answer) {
            self.sourceAnswer = parsed
        } else {
            section.refuse("sourceAnswer", "must be bytes or redirect, got \(answer)")
        }
    }
}
