import TranscodeCore
import TranscodeHTTP

extension PublicLinks {
    /// Under `http.publicBaseURL`, signing with `signing.keys`/`signing.salts`.
    init(configuration: ServerConfiguration) {
        let signer =
            URLSigner(
                hexKeys: configuration.signing.keys, hexSalts: configuration.signing.salts,
                clients: configuration.signing.clients, disabled: configuration.signing.disabled)
            ?? URLSigner(pairs: [], disabled: configuration.signing.disabled)
        self.init(baseURL: configuration.http.publicBaseURL, signer: signer)
    }
}
