import Configuration
import Foundation

/// `quota.*`: the token buckets of the clients (`ClientQuotas`).
package struct QuotaConfiguration: Sendable, Equatable {
    package init() {}

    /// By client name: `quota.limits`, entries `<client>=<rate per second>/<burst>` (`cms=5/20`); the name `open`
    /// gives each address of an open route its own bucket. A client without an entry has no quota.
    package var limits: [String: QuotaPolicy] = [:]
}

extension QuotaConfiguration {
    /// Reads `section` (`quota`). A name must be a configured client (`clients`: the names `auth.clients` and
    /// `signing.clients` give, `token-<n>` and `key-<n>` included) or `open`, so a misspelt name is refused
    /// rather than silently unlimited.
    package init(_ section: ConfigSection, clients: Set<String>) {
        self.init()
        for entry in section.reader.stringArray(forKey: "limits", default: []) {
            let parts = entry.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, let policy = QuotaPolicy(parts[1].trimmingCharacters(in: .whitespaces)) else {
                section.refuse(
                    "limits", "\(entry): must be <client>=<requests per second>/<burst>, e.g. cms=5/20 or open=0.5/4")
                continue
            }
            let name = parts[0].trimmingCharacters(in: .whitespaces)
            guard name == RequestClient.openLabel || clients.contains(name) else {
                let known = (clients.sorted() + [RequestClient.openLabel]).joined(separator: ", ")
                section.refuse("limits", "\(name) is not a client; the clients are \(known)")
                continue
            }
            guard self.limits[name] == nil else {
                section.refuse("limits", "\(name) has two entries")
                continue
            }
            self.limits[name] = policy
        }
    }
}

extension ConfigSection {
    /// Reads the client names paired by position with `count` credentials (`auth.clients`, `signing.clients`):
    /// each valid (`RequestClient.isValidName`), no more names than credentials.
    /// - Returns: a name per credential, `<prefix>-<n>` where none is given.
    package func clientNames(_ key: String, count: Int, credentials: String, prefix: String) -> [String] {
        let names = self.reader.stringArray(forKey: ConfigKey(key), default: [])
        for name in names where !RequestClient.isValidName(name) {
            self.refuse(key, "\(name): a client's name is 1-32 of a-z, 0-9, - and _ (not open or background)")
        }
        if names.count > count {
            self.refuse(key, "\(names.count) names for \(count) \(credentials); they are paired by position")
        }
        return RequestClient.names(names, count: count, prefix: prefix)
    }
}
