import Configuration
import Foundation

/// `storage.*`: the local disk alone (`disk`, the default), or S3-compatible object storage shared by a fleet,
/// the local disk cache in front of it.
package struct StorageConfiguration: Sendable, Equatable {
    package init() {}

    package enum Kind: String, Sendable { case disk, s3 }
    /// How a node answers for an object its disk lacks.
    package enum Serve: String, Sendable {
        /// Copy it from the store onto the local disk, then serve it with byte ranges (read-through).
        case local
        /// 302 to a presigned URL of the store.
        case redirect
    }

    /// `storage.kind`, default `disk`.
    package var kind = Kind.disk
    /// `storage.s3.endpoint`, `.bucket`, `.region` (us-east-1), `.pathStyle` (true), `.timeoutSeconds` (10);
    /// credentials from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` only. Set when
    /// `kind` is `s3`.
    package var s3: S3Configuration?
    /// `storage.s3.serve`, default `local`.
    package var serve = Serve.local
    /// Lifetime of presigned URLs (`redirect`). `storage.s3.presignSeconds`, default 3600.
    package var presignSeconds = 3600
    /// Create the bucket at startup if it does not exist. `storage.s3.createBucket`, default false.
    package var createBucket = false
    /// A cache hit trusts the store's "not taken down" for this long. `storage.s3.tombstoneCheckSeconds`,
    /// default 10.
    package var tombstoneCheckSeconds: Double = 10
}

extension StorageConfiguration {
    /// Reads `section` (`storage`); a key not set keeps its default. S3 credentials come from `environment`
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), never from a file or a flag.
    package init(_ section: ConfigSection, environment: [String: String]) {
        self.init()
        let kind = section.reader.string(forKey: "kind", default: self.kind.rawValue)
        let s3 = section.section("s3")
        let reader = s3.reader
        let endpoint = reader.string(forKey: "endpoint", default: "")
        let bucket = reader.string(forKey: "bucket", default: "")
        let region = reader.string(forKey: "region", default: S3Configuration.defaultRegion)
        let pathStyle = reader.bool(forKey: "pathStyle", default: S3Configuration.defaultPathStyle)
        let timeout = reader.double(forKey: "timeoutSeconds", default: S3Configuration.defaultTimeoutSeconds)
        s3.check("timeoutSeconds", timeout > 0, "positive")
        let serve = reader.string(forKey: "serve", default: self.serve.rawValue)
        self.presignSeconds = reader.int(forKey: "presignSeconds", default: self.presignSeconds)
        s3.check("presignSeconds", (60...604_800).contains(self.presignSeconds), "between 60 and 604800 (S3's limit)")
        self.createBucket = reader.bool(forKey: "createBucket", default: self.createBucket)
        self.tombstoneCheckSeconds = reader.double(
            forKey: "tombstoneCheckSeconds", default: self.tombstoneCheckSeconds)
        s3.check("tombstoneCheckSeconds", self.tombstoneCheckSeconds >= 0, "0 or more")
        if let parsed = Serve(rawValue: serve) {
            self.serve = parsed
        } else {
            s3.refuse("serve", "must be local or redirect, got \(serve)")
        }
        switch Kind(rawValue: kind) {
        case .disk:
            self.kind = .disk
        case .s3:
            self.kind = .s3
            let url = URL(string: endpoint)
            if url?.host == nil || !["http", "https"].contains(url?.scheme ?? "") {
                s3.refuse("endpoint", "must be an http(s) URL, e.g. http://127.0.0.1:8333")
            }
            s3.check("bucket", !bucket.isEmpty, "the bucket's name")
            let accessKey = environment["AWS_ACCESS_KEY_ID"] ?? ""
            let secretKey = environment["AWS_SECRET_ACCESS_KEY"] ?? ""
            if accessKey.isEmpty || secretKey.isEmpty {
                section.refuse(
                    "kind", "s3 needs credentials in the environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
            }
            if let url {
                self.s3 = S3Configuration(
                    endpoint: url, bucket: bucket, region: region, pathStyle: pathStyle, accessKey: accessKey,
                    secretKey: secretKey, sessionToken: environment["AWS_SESSION_TOKEN"], timeoutSeconds: timeout)
            }
        case nil:
            section.refuse("kind", "must be disk or s3, got \(kind)")
        }
    }
}
