import Configuration

/// One domain's keys: a reader scoped to the domain's prefix (`cache`, `storage.s3`), and where its invalid
/// values are reported, each by its full key. Every domain's configuration is read from its own section, by an
/// initializer beside the type (`CacheConfiguration(_:)`), with the type's own property values as the defaults.
package struct ConfigSection {
    /// Reads keys relative to `prefix`.
    package let reader: ConfigReader
    /// The dotted prefix (`storage.s3`); empty at the root.
    let prefix: String
    private let invalid: InvalidValues

    /// Tokens that come from documentation or examples, or are too short to be secret.
    package static func isPlaceholder(_ token: String) -> Bool {
        let lowered = token.lowercased()
        return token.count < 16
            || ["change", "replace", "example", "placeholder", "your-token", "secret-token", "xxxx"].contains {
                lowered.contains($0)
            }
    }

    /// The root section of `reader`.
    package init(root reader: ConfigReader) {
        self.reader = reader
        self.prefix = ""
        self.invalid = InvalidValues()
    }

    private init(reader: ConfigReader, prefix: String, invalid: InvalidValues) {
        self.reader = reader
        self.prefix = prefix
        self.invalid = invalid
    }

    /// The section of `name` (one key component) inside this one.
    package func section(_ name: String) -> ConfigSection {
        ConfigSection(
            reader: self.reader.scoped(to: ConfigKey([name])), prefix: self.fullKey(name), invalid: self.invalid)
    }

    /// `key` with this section's prefix.
    func fullKey(_ key: String) -> String {
        self.prefix.isEmpty ? key : self.prefix + "." + key
    }

    /// Reports `key` as invalid unless `valid`: "`<full key>`: must be `<expectation>`".
    package func check(_ key: String, _ valid: Bool, _ expectation: String) {
        if !valid { self.refuse(key, "must be \(expectation)") }
    }

    /// Reports `key` as invalid: "`<full key>`: `<message>`".
    package func refuse(_ key: String, _ message: String) {
        self.refuse(keys: [key], message)
    }

    /// Reports keys invalid together (`signing.keys, signing.salts: ...`).
    func refuse(keys: [String], _ message: String) {
        self.invalid.messages.append(keys.map(self.fullKey).joined(separator: ", ") + ": " + message)
    }

    /// Everything reported, in the order read.
    package var problems: [String] { self.invalid.messages }

    /// Shared by a root and its sections; used on one thread while the configuration is read.
    private final class InvalidValues {
        var messages: [String] = []
    }
}
