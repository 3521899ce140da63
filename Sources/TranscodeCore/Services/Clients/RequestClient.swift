/// Whom a request counts against: the scheduler's fairness (`TranscodePool`) and the quotas (`ClientQuotas`).
///
/// - A request with a bearer token is its token's client (`auth.clients`, paired with `auth.tokens`; `token-1`
///   when not named). Tokens that share a name are one client, so a rotated token keeps its quota.
/// - A signed `GET /v1/...` is its signing key's client (`signing.clients`, paired with `signing.keys`; `key-1`):
///   the site whose pages carry the URLs, whoever reads them.
/// - A request on an open route (no tokens configured, signing disabled) is its peer address's client, counted
///   under the label `open`: every address has its own bucket and its own turn, and no address becomes a label.
///
/// Set for the request's task (`$current`); the jobs a request starts inherit it.
package struct RequestClient: Sendable, Hashable, CustomStringConvertible {
    /// What buckets and turns are kept by: the client's name, or `address:<ip>`.
    let key: String
    /// The metric label and the policy's name: the configured name, or `open`.
    let label: String

    /// The label every address-keyed client shares.
    static let openLabel = "open"

    /// A configured client (a token's or a signing key's name).
    package static func named(_ name: String) -> RequestClient {
        RequestClient(key: name, label: name)
    }

    /// The client of an open route, by peer address.
    package static func address(_ address: String) -> RequestClient {
        RequestClient(key: "address:" + address, label: Self.openLabel)
    }

    /// Work no request asked for now (a batch's items, the fleet's queue): one client of its own.
    static let background = RequestClient(key: "background", label: "background")

    package var description: String { self.key }

    /// The client of the request this task serves; nil outside a request.
    @TaskLocal package static var current: RequestClient?

    /// Whether `name` may name a client: 1-32 of `a-z`, `0-9`, `-` and `_` (it becomes a metric label and a
    /// `RateLimit-Policy` name), and not a reserved label.
    static func isValidName(_ name: String) -> Bool {
        (1...32).contains(name.utf8.count)
            && name.utf8.allSatisfy {
                (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D || $0 == 0x5F
            }
            && name != Self.openLabel && name != Self.background.label
    }

    /// The names of `count` credentials from `names` (paired by position), `<prefix>-<n>` where none is given.
    package static func names(_ names: [String], count: Int, prefix: String) -> [String] {
        (0..<count).map { $0 < names.count ? names[$0] : "\(prefix)-\($0 + 1)" }
    }
}
