import Foundation
import Transcoder

/// The URLs answers carry: relative, or absolute under `http.publicBaseURL`; and the signed
/// `GET /v1/...` URLs of a source when a signing key is configured.
package struct PublicLinks: Sendable {
    /// `https://media.example.com` (no trailing slash), or empty for relative URLs.
    package let baseURL: String
    package let signer: URLSigner

    package func absolute(_ path: String) -> String { self.baseURL + path }

    package init(baseURL: String, signer: URLSigner) {
        self.baseURL = baseURL
        self.signer = signer
    }

    /// The signed URLs of `sourceURL`'s video, poster and metadata with `background`, and of each of `extras`
    /// (by its format's name: `webp`), all files of the one object made with `extras` (`also:`), when signing is
    /// configured; nil otherwise.
    package func signed(sourceURL: String, background: RGBColor?, extras: [OutputFormat] = []) -> SignedLinks? {
        guard self.signer.canSign else { return nil }
        var urls: SignedLinks = [:]
        for (role, format) in ObjectFiles.roles + extras.map({ (ObjectRole.extra($0), $0) }) {
            // Every file of the one object: each path names the extras besides its own (`also:`).
            let path = SourcePath(sourceURL: sourceURL, background: background, format: format, extras: extras).path
            urls[role] = self.absolute(self.signer.signedPath(path))
        }
        return urls
    }
}

/// A source's signed `GET /v1/...` URLs by the role of the file each names (`PublicLinks.signed`): the `signed` map
/// of `POST /transcode`'s answers, the links of rewrites and batch lines.
package typealias SignedLinks = [ObjectRole: String]
