import Configuration

/// `signing.*`: the keys of the signed `GET /v1/...` URLs.
package struct SigningConfiguration: Sendable, Equatable {
    package init() {}

    /// HMAC keys and salts (hex, paired by position); the first signs, any one is accepted. `signing.keys`,
    /// `signing.salts`.
    package var keys: [String] = []
    package var salts: [String] = []
    /// The client each key's URLs count against, paired by position (`key-<n>` where not named): the site whose
    /// pages carry them (`RequestClient`). `signing.clients`.
    package var clients: [String] = []
    /// Accept `GET /v1/...` without a valid signature: for development only. `signing.disabled`.
    package var disabled = false
}

extension SigningConfiguration {
    /// Reads `section` (`signing`); a key not set keeps its default.
    package init(_ section: ConfigSection) {
        self.init()
        let reader = section.reader
        self.keys = reader.stringArray(forKey: "keys", isSecret: true, default: self.keys)
        self.salts = reader.stringArray(forKey: "salts", isSecret: true, default: self.salts)
        self.disabled = reader.bool(forKey: "disabled", default: self.disabled)
        self.clients = section.clientNames("clients", count: self.keys.count, credentials: "keys", prefix: "key")
        if self.keys.count != self.salts.count {
            section.refuse(
                keys: ["keys", "salts"],
                "\(self.keys.count) keys and \(self.salts.count) salts; they are paired by position")
        } else if URLSigner(hexKeys: self.keys, hexSalts: self.salts) == nil {
            section.refuse(keys: ["keys", "salts"], "must be hex digits")
        }
        for key in self.keys where key.utf8.count < 32 || ConfigSection.isPlaceholder(key) {
            section.refuse(
                "keys",
                "a key of \(key.utf8.count / 2) bytes (\(key.prefix(4))...) is refused; "
                    + "use at least 16 random bytes (openssl rand -hex 32)")
        }
    }
}
