import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// The examples of AWS's "Authenticating Requests: Using the Authorization Header (AWS Signature Version 4)"
/// and "Authenticating Requests: Using Query Parameters" pages (S3 API reference), byte for byte.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct SigV4SignerTests {
    static let signer = SigV4Signer(
        accessKey: "AKIAIOSFODNN7EXAMPLE", secretKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", region: "us-east-1")
    /// 20130524T000000Z.
    static let date = Date(timeIntervalSince1970: 1_369_353_600)
    static let host = ("Host", "examplebucket.s3.amazonaws.com")

    static func authorization(_ headers: [(String, String)]) -> String? {
        headers.first { $0.0 == "Authorization" }?.1
    }

    @Test func getObjectWithARange() {
        let headers = Self.signer.authorizationHeaders(
            method: "GET", path: "/test.txt", headers: [Self.host, ("Range", "bytes=0-9")],
            payloadHash: SigV4Signer.emptyPayloadHash, date: Self.date)
        #expect(
            Self.authorization(headers)
                == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
                + "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
                + "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        #expect(headers.contains { $0 == ("x-amz-date", "20130524T000000Z") })
    }

    /// A `$` in the key is percent-encoded in the canonical URI; extra headers are signed.
    @Test func putObject() {
        let headers = Self.signer.authorizationHeaders(
            method: "PUT", path: "/test$file.text",
            headers: [
                Self.host, ("Date", "Fri, 24 May 2013 00:00:00 GMT"), ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ],
            payloadHash: "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072", date: Self.date)
        #expect(
            Self.authorization(headers)
                == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
                + "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,"
                + "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
    }

    @Test func getBucketLifecycle() {
        let headers = Self.signer.authorizationHeaders(
            method: "GET", path: "/", query: [("lifecycle", "")], headers: [Self.host],
            payloadHash: SigV4Signer.emptyPayloadHash, date: Self.date)
        #expect(
            Self.authorization(headers)?.hasSuffix(
                "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543") == true)
    }

    /// Query parameters are sorted by name.
    @Test func listObjects() {
        let headers = Self.signer.authorizationHeaders(
            method: "GET", path: "/", query: [("prefix", "J"), ("max-keys", "2")], headers: [Self.host],
            payloadHash: SigV4Signer.emptyPayloadHash, date: Self.date)
        #expect(
            Self.authorization(headers)?.hasSuffix(
                "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7") == true)
    }

    @Test func presignedURL() {
        let query = Self.signer.presignedQuery(
            method: "GET", host: "examplebucket.s3.amazonaws.com", path: "/test.txt", expiresSeconds: 86400,
            date: Self.date)
        #expect(
            query
                == "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3"
                + "%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
                + "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404")
    }

    /// The client builds virtual-hosted and path-style addresses the way the examples do.
    @Test func theClientAddressesObjectsBothWays() {
        var configuration = S3Configuration(
            endpoint: URL(string: "https://s3.amazonaws.com")!, bucket: "examplebucket", pathStyle: false,
            accessKey: "AKIAIOSFODNN7EXAMPLE", secretKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
        let virtualHosted = S3Client(configuration: configuration).presignedURL(
            "test.txt", expiresSeconds: 86400, now: Self.date)
        #expect(virtualHosted.hasPrefix("https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm="))
        #expect(virtualHosted.hasSuffix("aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"))
        configuration.endpoint = URL(string: "http://127.0.0.1:8333")!
        configuration.pathStyle = true
        let pathStyle = S3Client(configuration: configuration).presignedURL("a b/c.mp4", expiresSeconds: 60)
        #expect(pathStyle.hasPrefix("http://127.0.0.1:8333/examplebucket/a%20b/c.mp4?X-Amz-Algorithm="))
    }
}

/// S3's XML error bodies.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct S3ErrorBodyTests {
    /// The example of the S3 API reference's "Error responses" page.
    @Test func theDocumentedExample() throws {
        let body = try #require(
            S3ErrorBody(
                Array(
                    """
                    <?xml version="1.0" encoding="UTF-8"?>
                    <Error>
                      <Code>NoSuchKey</Code>
                      <Message>The resource you requested does not exist</Message>
                      <Resource>/mybucket/myfoto.jpg</Resource>
                      <RequestId>4442587FB7D0A2F9</RequestId>
                    </Error>
                    """.utf8)))
        #expect(body.code == "NoSuchKey")
        #expect(body.message == "The resource you requested does not exist")
        #expect(body.fields["Resource"] == "/mybucket/myfoto.jpg")
        #expect(body.fields["RequestId"] == "4442587FB7D0A2F9")
    }

    @Test func entitiesAndEmptyElements() throws {
        let body = try #require(
            S3ErrorBody(
                Array(
                    ("<Error><Code>SignatureDoesNotMatch</Code><Message>a &lt;b&gt; &amp; &quot;c&quot; &#233;&#x4E2D;"
                        + "</Message><HostId/></Error>").utf8)))
        #expect(body.code == "SignatureDoesNotMatch")
        #expect(body.message == "a <b> & \"c\" é中")
        #expect(body.fields["HostId"] == "")
    }

    @Test(arguments: ["", "not xml", "<ListBucketResult></ListBucketResult>", "<Error><Code>x</Error>"])
    func notAnErrorDocument(_ text: String) {
        #expect(S3ErrorBody(Array(text.utf8)) == nil)
    }
}
