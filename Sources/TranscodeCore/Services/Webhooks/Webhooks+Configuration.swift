import Configuration

/// `webhooks.*`: how `callbackURL` deliveries are signed and retried.
package struct WebhookConfiguration: Sendable, Equatable {
    package init() {}

    /// Standard Webhooks signing secrets (`whsec_` + base64, or base64; 16 bytes or more), each signing every
    /// delivery (rotation); empty: `callbackURL` is refused. `webhooks.secrets`.
    package var secrets: [String] = []
    /// The first retry of a failed delivery after this, then twice as long each time (at most 5 minutes).
    /// `webhooks.firstRetrySeconds`, default 1.
    package var firstRetrySeconds: Double = 1
    /// A delivery is retried until this long after its first attempt. `webhooks.maxRetrySeconds`, default 3600.
    package var maxRetrySeconds: Double = 3600
    /// Delivery attempts under way at once; the others wait their turn. Each holds a socket (a descriptor), so
    /// receivers that hang cannot exhaust the process. `webhooks.maxConcurrentDeliveries`, default 64.
    package var maxConcurrentDeliveries = 64
}

extension WebhookConfiguration {
    /// Reads `section` (`webhooks`); a key not set keeps its default.
    package init(_ section: ConfigSection) {
        self.init()
        let reader = section.reader
        self.secrets = reader.stringArray(forKey: "secrets", isSecret: true, default: self.secrets).filter {
            !$0.isEmpty
        }
        if WebhookSigner(secrets: self.secrets) == nil {
            section.refuse("secrets", "each must be whsec_ + base64 (or base64) of 16 bytes or more")
        }
        self.firstRetrySeconds = reader.double(forKey: "firstRetrySeconds", default: self.firstRetrySeconds)
        section.check("firstRetrySeconds", self.firstRetrySeconds > 0, "positive")
        self.maxRetrySeconds = reader.double(forKey: "maxRetrySeconds", default: self.maxRetrySeconds)
        section.check("maxRetrySeconds", self.maxRetrySeconds >= 0, "0 or more")
        self.maxConcurrentDeliveries = reader.int(
            forKey: "maxConcurrentDeliveries", default: self.maxConcurrentDeliveries)
        section.check("maxConcurrentDeliveries", self.maxConcurrentDeliveries >= 1, "1 or more")
    }
}
