import Configuration

/// `cache.*`: where results are kept on this node, how much, and how long a URL's result is served.
package struct CacheConfiguration: Sendable, Equatable {
    package init() {}

    /// `cache.directory`, default `./cache`.
    package var directory = "./cache"
    /// `cache.maxBytes`, default 10 GiB. Least recently used results are evicted beyond it.
    package var maxBytes: Int64 = 10 * 1024 * 1024 * 1024
    /// Below this much free space on the cache's file system, `/readyz` answers 503 so a balancer sends
    /// work elsewhere; writes that hit a full disk answer 507 anyway. `cache.minFreeBytes`, default 256 MiB.
    package var minFreeBytes: Int64 = 256 * 1024 * 1024
    /// A URL's result is served this long after it was fetched; past it, the next request revalidates with
    /// the origin (`If-None-Match` / `If-Modified-Since`). `cache.urlTTLSeconds`, default 86400.
    package var urlTTLSeconds: Double = 86400
    /// While a URL's origin fails (5xx, timeout), its stored result is served for up to this long past the
    /// TTL, the origin asked again at most once a minute. `cache.staleIfErrorSeconds`, default 604800 (7 days).
    package var staleIfErrorSeconds: Double = 604_800
}

extension CacheConfiguration {
    /// Reads `section` (`cache`); a key not set keeps its default.
    package init(_ section: ConfigSection) {
        self.init()
        let reader = section.reader
        self.directory = reader.string(forKey: "directory", default: self.directory)
        self.maxBytes = Int64(reader.int(forKey: "maxBytes", default: Int(self.maxBytes)))
        section.check("maxBytes", self.maxBytes > 0, "positive")
        self.minFreeBytes = Int64(reader.int(forKey: "minFreeBytes", default: Int(self.minFreeBytes)))
        section.check("minFreeBytes", self.minFreeBytes >= 0, "0 or more")
        self.urlTTLSeconds = reader.double(forKey: "urlTTLSeconds", default: self.urlTTLSeconds)
        section.check("urlTTLSeconds", self.urlTTLSeconds >= 0, "0 or more")
        self.staleIfErrorSeconds = reader.double(forKey: "staleIfErrorSeconds", default: self.staleIfErrorSeconds)
        section.check("staleIfErrorSeconds", self.staleIfErrorSeconds >= 0, "0 or more")
    }
}
