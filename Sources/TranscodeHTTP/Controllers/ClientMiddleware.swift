import HTTPTypes
import Hummingbird
import TranscodeCore

/// Runs each request as its client (`RequestClient`): its peer address until a token (`BearerAuthenticator`) or
/// a signing key (`SourceController`) names another. When quotas are configured it also gives the answer of a
/// request that took a token, or was refused one, the `RateLimit-Policy` and `RateLimit` fields
/// (draft-ietf-httpapi-ratelimit-headers-10).
///
/// Added outside `ErrorMiddleware`, so a refusal is already an answer when it gets here.
package struct ClientMiddleware<Context: RemoteAddressRequestContext>: RouterMiddleware {
    /// Whether any quota is configured: without, no answer carries the fields and no note is made.
    let quotas: Bool

    package init(quotas: Bool) {
        self.quotas = quotas
    }

    static var rateLimitField: HTTPField.Name { HTTPField.Name("RateLimit")! }
    static var rateLimitPolicyField: HTTPField.Name { HTTPField.Name("RateLimit-Policy")! }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws
        -> Response
    {
        let client = RequestClient.address(context.remoteAddress?.ipAddress ?? "unknown")
        guard self.quotas else {
            return try await RequestClient.$current.withValue(client) { try await next(request, context) }
        }
        let note = QuotaNote()
        var response = try await RequestClient.$current.withValue(client) {
            try await QuotaNote.$current.withValue(note) { try await next(request, context) }
        }
        if let reading = note.value {
            response.headers[Self.rateLimitPolicyField] = reading.policyField
            response.headers[Self.rateLimitField] = reading.field
        }
        return response
    }
}
