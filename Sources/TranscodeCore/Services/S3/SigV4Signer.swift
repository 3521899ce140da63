import Crypto
import Foundation

/// AWS Signature Version 4 for S3: the `Authorization` header of a request, or the query of a presigned URL.
/// Follows "Authenticating Requests (AWS Signature Version 4)" of the S3 API reference; the tests check it
/// against that page's published examples.
package struct SigV4Signer: Sendable {
    let accessKey: String
    let secretKey: String
    /// Temporary credentials' token (`x-amz-security-token`), signed with the rest.
    var sessionToken: String? = nil
    let region: String
    var service = "s3"

    /// SHA-256 of no bytes: the payload hash of a request without a body.
    static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// The headers to add to a request: `x-amz-date`, `x-amz-content-sha256`, the session token if any, and
    /// `Authorization`.
    /// - Parameters:
    ///   - path: the URI path as sent, not yet percent-encoded (`/bucket/key`).
    ///   - query: the query's parameters, not encoded.
    ///   - headers: every header to sign besides those this adds; `host` must be among them.
    ///   - payloadHash: hex SHA-256 of the body, or `UNSIGNED-PAYLOAD`.
    func authorizationHeaders(
        method: String, path: String, query: [(String, String)] = [], headers: [(String, String)],
        payloadHash: String, date: Date
    ) -> [(String, String)] {
        let stamp = Self.timestamp(date)
        var added = [("x-amz-date", stamp), ("x-amz-content-sha256", payloadHash)]
        if let sessionToken { added.append(("x-amz-security-token", sessionToken)) }
        let signed = Self.canonicalHeaders(headers + added)
        let canonicalRequest = [
            method, Self.encodePath(path), Self.canonicalQuery(query), signed.block, signed.names, payloadHash,
        ].joined(separator: "\n")
        let signature = self.signature(canonicalRequest: canonicalRequest, stamp: stamp)
        let authorization =
            "AWS4-HMAC-SHA256 Credential=\(self.accessKey)/\(self.scope(stamp)),SignedHeaders=\(signed.names),"
            + "Signature=\(signature)"
        return added + [("Authorization", authorization)]
    }

    /// The query of a presigned URL (`X-Amz-Algorithm` … `X-Amz-Signature`), already encoded, signing only
    /// `host` and leaving the payload unsigned, as S3 expects of a URL handed to a browser.
    func presignedQuery(method: String, host: String, path: String, expiresSeconds: Int, date: Date) -> String {
        let stamp = Self.timestamp(date)
        var query = [
            ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
            ("X-Amz-Credential", "\(self.accessKey)/\(self.scope(stamp))"),
            ("X-Amz-Date", stamp),
            ("X-Amz-Expires", String(expiresSeconds)),
            ("X-Amz-SignedHeaders", "host"),
        ]
        if let sessionToken { query.append(("X-Amz-Security-Token", sessionToken)) }
        let canonicalRequest = [
            method, Self.encodePath(path), Self.canonicalQuery(query), "host:\(host)\n", "host", "UNSIGNED-PAYLOAD",
        ].joined(separator: "\n")
        let signature = self.signature(canonicalRequest: canonicalRequest, stamp: stamp)
        return Self.canonicalQuery(query) + "&X-Amz-Signature=\(signature)"
    }

    // MARK: The steps

    private func scope(_ stamp: String) -> String {
        "\(stamp.prefix(8))/\(self.region)/\(self.service)/aws4_request"
    }

    private func signature(canonicalRequest: String, stamp: String) -> String {
        let stringToSign = [
            "AWS4-HMAC-SHA256", stamp, self.scope(stamp),
            HexDigest.encode(SHA256.hash(data: Array(canonicalRequest.utf8))),
        ].joined(separator: "\n")
        var key = SymmetricKey(data: Array("AWS4\(self.secretKey)".utf8))
        for part in [String(stamp.prefix(8)), self.region, self.service, "aws4_request"] {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Array(part.utf8), using: key)))
        }
        return HexDigest.encode(HMAC<SHA256>.authenticationCode(for: Array(stringToSign.utf8), using: key))
    }

    /// `20130524T000000Z`.
    static func timestamp(_ date: Date) -> String {
        var time = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&time, &parts)
        return String(
            format: "%04d%02d%02dT%02d%02d%02dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
            Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
    }

    /// Lower-case names, values trimmed with inner runs of spaces made one, sorted by name; and the names
    /// joined by `;`.
    static func canonicalHeaders(_ headers: [(String, String)]) -> (block: String, names: String) {
        let normalized = headers.map { name, value in
            (
                name.lowercased(),
                value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
            )
        }.sorted { $0.0 < $1.0 }
        let block = normalized.map { "\($0.0):\($0.1)\n" }.joined()
        return (block, normalized.map(\.0).joined(separator: ";"))
    }

    /// Parameters encoded (RFC 3986 unreserved characters kept) and sorted by name, then value.
    static func canonicalQuery(_ query: [(String, String)]) -> String {
        let encoded: [(name: String, value: String)] = query.map { (self.encode($0.0), self.encode($0.1)) }
        let sorted = encoded.sorted { $0.name == $1.name ? $0.value < $1.value : $0.name < $1.name }
        return sorted.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
    }

    /// Each segment of `path` encoded, the slashes kept (S3 encodes the path once).
    static func encodePath(_ path: String) -> String {
        path.split(separator: "/", omittingEmptySubsequences: false).map { self.encode(String($0)) }
            .joined(separator: "/")
    }

    private static let unreserved = Set(
        Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8))

    /// Percent-encoding of everything but `A-Z a-z 0-9 - . _ ~`, with upper-case hex.
    static func encode(_ text: String) -> String {
        var encoded = ""
        for byte in text.utf8 {
            if Self.unreserved.contains(byte) {
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                encoded += String(format: "%%%02X", byte)
            }
        }
        return encoded
    }
}
