import Hummingbird
import TranscodeCore

/// Requires `Authorization: Bearer <token>` with one of the configured tokens (several, so tokens can be
/// rotated), and runs the request as the token's client (`RequestClient`). With no tokens configured, every
/// request passes as the client it already is (its address). Tokens are compared in constant time.
package struct BearerAuthenticator<Context: RequestContext>: RouterMiddleware {
    let tokens: [(bytes: [UInt8], client: RequestClient)]

    /// - Parameter clients: the client of each token, paired by position (`auth.clients`; `token-<n>` where not
    ///   named).
    package init(tokens: [String], clients: [String] = []) {
        let names = RequestClient.names(clients, count: tokens.count, prefix: "token")
        self.tokens = zip(tokens, names).map { (Array($0.utf8), RequestClient.named($1)) }
    }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws
        -> Response
    {
        guard !self.tokens.isEmpty else { return try await next(request, context) }
        guard let client = self.client(authorizing: request.headers[.authorization]) else {
            throw ServiceError.unauthorized
        }
        return try await RequestClient.$current.withValue(client) { try await next(request, context) }
    }

    /// Whether a request with this `Authorization` field may pass (any, when no token is configured).
    func authorizes(_ header: String?) -> Bool {
        self.tokens.isEmpty || self.client(authorizing: header) != nil
    }

    /// The client of the token this `Authorization` field presents; nil when it presents none of them.
    func client(authorizing header: String?) -> RequestClient? {
        guard let header, header.lowercased().hasPrefix("bearer ") else { return nil }
        let presented = Array(header.dropFirst(7).trimmingCharacters(in: .whitespaces).utf8)
        // Every token is compared, whatever matched, so timing reveals neither which nor how much.
        var matched: RequestClient?
        for token in self.tokens {
            if Self.constantTimeEqual(presented, token.bytes) { matched = token.client }
        }
        return matched
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt8(truncatingIfNeeded: a.count ^ b.count)
        for index in 0..<max(a.count, b.count) {
            let x = index < a.count ? a[index] : 0
            let y = index < b.count ? b[index] : 0
            difference |= x ^ y
        }
        return difference == 0 && a.count == b.count
    }
}
