import Hummingbird

/// Requires `Authorization: Bearer <token>` with one of the configured tokens (several, so tokens can be
/// rotated). With no tokens configured, every request passes. Tokens are compared in constant time.
struct BearerAuthenticator<Context: RequestContext>: RouterMiddleware {
    let tokens: [[UInt8]]

    init(tokens: [String]) {
        self.tokens = tokens.map { Array($0.utf8) }
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        guard self.authorizes(request.headers[.authorization]) else { throw ServiceError.unauthorized }
        return try await next(request, context)
    }

    /// Whether a request with this `Authorization` field may pass (any, when no token is configured).
    func authorizes(_ header: String?) -> Bool {
        guard !self.tokens.isEmpty else { return true }
        guard let header, header.lowercased().hasPrefix("bearer ") else { return false }
        let presented = Array(header.dropFirst(7).trimmingCharacters(in: .whitespaces).utf8)
        // Every token is compared, whatever matched, so timing reveals neither which nor how much.
        var matched = false
        for token in self.tokens {
            matched = Self.constantTimeEqual(presented, token) || matched
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
