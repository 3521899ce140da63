import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// A GIF fetched to a temporary file.
struct DownloadedFile: Sendable {
    let path: String
    let byteCount: Int
    /// The origin's validators, kept to revalidate the URL later.
    var etag: String? = nil
    var lastModified: String? = nil
}

/// What a conditional download found.
enum Fetched: Sendable {
    case file(DownloadedFile)
    /// The origin answered 304: what was stored under the validators is still current.
    case notModified
}

/// Fetches GIFs from the open internet without becoming a way into the network it runs in.
///
/// - Only `http` and `https`; redirects are followed here (at most `maxRedirects`), each hop checked
///   again from scratch.
/// - Every hop's host is resolved once, every address checked against `DestinationPolicy`, and the HTTP
///   client is pinned to the checked address (`dnsOverride`), so the address connected to is the one
///   that was checked.
/// - The size cap holds on `Content-Length` and on the bytes streamed; a connect timeout and one deadline
///   for the whole download (a server that drips bytes fails at the deadline); no content decoding.
/// - The body streams to a temporary file, never whole into memory.
package struct Downloader: Sendable {
    let configuration: DownloadConfiguration
    let policy: DestinationPolicy
    let eventLoopGroup: any EventLoopGroup
    /// Where partial downloads are written (inside the cache directory, so the rename is cheap).
    let temporaryDirectory: String
    let logger: Logger
    /// Recent decisions of `checkCachedDestination`, by host.
    private let decisions = HostDecisions()

    package init(
        configuration: DownloadConfiguration, temporaryDirectory: String, eventLoopGroup: any EventLoopGroup,
        logger: Logger
    ) {
        self.configuration = configuration
        self.policy = DestinationPolicy(
            allowLoopback: configuration.allowLoopback, allowedHosts: configuration.allowedHosts)
        self.temporaryDirectory = temporaryDirectory
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
    }

    /// Checks that `text` is an absolute http(s) URL with a host; returns it parsed.
    package static func validate(_ text: String) throws -> URL {
        guard text.utf8.count <= 8192, let url = URL(string: text), let scheme = url.scheme?.lowercased() else {
            throw ServiceError.invalidURL("not an absolute URL")
        }
        guard scheme == "http" || scheme == "https" else {
            throw ServiceError.invalidURL("only http and https URLs can be fetched, not \(scheme)")
        }
        guard let host = url.host, !host.isEmpty else { throw ServiceError.invalidURL("the URL has no host") }
        return url
    }

    /// Downloads `url`, or learns it has not changed: with `etag` or `lastModified`, the request carries
    /// `If-None-Match` / `If-Modified-Since`, on every hop (each checked against the policy as always).
    /// The caller owns (and removes) a file returned.
    func fetch(_ url: URL, etag: String? = nil, lastModified: String? = nil) async throws -> Fetched {
        let deadline = NIODeadline.now() + .milliseconds(Int64(self.configuration.timeoutSeconds * 1000))
        var conditions: [(String, String)] = []
        if let etag { conditions.append(("If-None-Match", etag)) }
        if let lastModified { conditions.append(("If-Modified-Since", lastModified)) }
        var current = url
        for _ in 0...self.configuration.maxRedirects {
            switch try await self.fetchOnce(current, conditions: conditions, deadline: deadline) {
            case .file(let file):
                return .file(file)
            case .notModified:
                return .notModified
            case .redirect(let location):
                guard let next = URL(string: location, relativeTo: current)?.absoluteURL else {
                    throw ServiceError.originError("the origin redirected to an invalid URL")
                }
                do {
                    current = try Self.validate(next.absoluteString)
                } catch {
                    throw ServiceError.destinationNotAllowed("the origin redirected to \(next.scheme ?? "?"): URL")
                }
            }
        }
        throw ServiceError.originError("more than \(self.configuration.maxRedirects) redirects")
    }

    private enum Hop {
        case file(DownloadedFile)
        case notModified
        case redirect(String)
    }

    /// Checks `url`'s host against the allow-list and every address it resolves to against the policy.
    /// Cache hits for a URL go through this too, so a URL stored while a destination was allowed is not
    /// answered once it no longer is.
    /// - Returns: the address to connect to.
    /// - Throws: `destination-not-allowed`, or `origin-error` when the host does not resolve.
    @discardableResult
    func checkDestination(_ url: URL) async throws -> IPAddress {
        let host = Self.bareHost(url)
        guard self.policy.allowsHost(host) else {
            throw ServiceError.destinationNotAllowed("\(host) is not on the host allow-list")
        }
        let addresses = try await NIOThreadPool.singleton.runIfActive { try DestinationPolicy.lookup(host) }
        guard let address = addresses.first else {
            throw ServiceError.originError("\(host) does not resolve")
        }
        // One internal address among several is enough to refuse: a name that mixes them is a rebinding
        // attempt more often than not.
        if let denied = addresses.first(where: { !self.policy.allows($0) }) {
            var message = "\(host) resolves to \(denied), which is not a public address"
            if !self.policy.allowLoopback, DestinationPolicy(allowLoopback: true, allowedHosts: []).allows(denied) {
                // A loopback address: the setting that allows it, which a developer trying the service wants.
                message += "; loopback origins are refused unless download.allowLoopback is set (for development only)"
            }
            throw ServiceError.destinationNotAllowed(message)
        }
        return address
    }

    /// Whether `host` (`bareHost` of a URL) was allowed by the policy less than `HostDecisions.lifetime` ago (no
    /// lookup).
    func isRememberedAllowed(host: String) -> Bool {
        if case .some(.none) = self.decisions.decision(for: host) { return true }
        return false
    }

    /// `checkDestination` for a cache hit, which fetches nothing: a host's decision is remembered for
    /// `HostDecisions.lifetime`, so a hit does not cost a name lookup on the thread pool. The policy is fixed
    /// for the life of the process; a restart with a stricter one decides afresh. Downloads and
    /// revalidations always check afresh (and connect to the address they checked).
    func checkCachedDestination(_ url: URL) async throws {
        let host = Self.bareHost(url)
        if let decision = self.decisions.decision(for: host) {
            if let error = decision { throw error }
            return
        }
        do {
            try await self.checkDestination(url)
            self.decisions.record(host, nil)
        } catch let error as ServiceError where error.code == .destinationNotAllowed {
            self.decisions.record(host, error)
            throw error
        }
    }

    private func fetchOnce(_ url: URL, conditions: [(String, String)], deadline: NIODeadline) async throws -> Hop {
        let host = Self.bareHost(url)
        let address = try await self.checkDestination(url)

        let client = self.pinnedClient(host: host, address: address)
        do {
            let hop = try await self.execute(url, conditions: conditions, client: client, deadline: deadline)
            try? await client.shutdown()
            return hop
        } catch {
            try? await client.shutdown()
            throw Self.map(error, url: url)
        }
    }

    /// A client that reaches `host` only at `address` (the one the policy checked: no second lookup an attacker
    /// could answer differently), follows no redirect and tries each connection once. The caller shuts it down.
    func pinnedClient(host: String, address: IPAddress) -> HTTPClient {
        var clientConfiguration = HTTPClient.Configuration()
        clientConfiguration.redirectConfiguration = .disallow
        clientConfiguration.decompression = .disabled
        clientConfiguration.dnsOverride = [host: address.description]
        clientConfiguration.timeout = .init(
            connect: .milliseconds(Int64(self.configuration.connectTimeoutSeconds * 1000)),
            read: .milliseconds(Int64(self.configuration.timeoutSeconds * 1000)))
        clientConfiguration.connectionPool = .init(
            idleTimeout: .seconds(1), concurrentHTTP1ConnectionsPerHostSoftLimit: 1)
        // One attempt per hop: a refused connection or a failed TLS handshake is the origin's answer, not
        // a fluke to retry until the connect timeout (a closed port answered only after 5 s, and a bad
        // certificate cost 12 connections).
        clientConfiguration.connectionPool.retryConnectionEstablishment = false
        return HTTPClient(
            eventLoopGroup: self.eventLoopGroup, configuration: clientConfiguration.withoutClientTracing())
    }

    private func execute(
        _ url: URL, conditions: [(String, String)], client: HTTPClient, deadline: NIODeadline
    ) async throws -> Hop {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.headers.add(name: "User-Agent", value: "transcode-server/1 (+gif-to-mp4)")
        request.headers.add(name: "Accept", value: "image/gif, image/webp, image/apng, image/png;q=0.9, */*;q=0.5")
        request.headers.add(name: "Accept-Encoding", value: "identity")
        for (name, value) in conditions { request.headers.add(name: name, value: value) }
        Traces.inject(into: &request.headers)
        let response = try await client.execute(request, deadline: deadline, logger: self.logger)
        switch response.status.code {
        case 200..<300:
            break
        case 304 where !conditions.isEmpty:
            return .notModified
        case 301, 302, 303, 307, 308:
            guard let location = response.headers.first(name: "Location") else {
                throw ServiceError.originError("redirect without a Location header")
            }
            return .redirect(location)
        case 404, 410:
            throw ServiceError.originNotFound("the origin answered \(response.status.code)")
        case 401, 403, 451:
            throw ServiceError.originRefused("the origin answered \(response.status.code)")
        default:
            throw ServiceError.originError("the origin answered \(response.status.code)")
        }
        if let length = response.headers.first(name: "Content-Length").flatMap(Int.init),
            length > self.configuration.maxBytes
        {
            throw ServiceError.tooLarge("the GIF is \(length) bytes; the limit is \(self.configuration.maxBytes)")
        }
        if let encoding = response.headers.first(name: "Content-Encoding")?.lowercased(), encoding != "identity" {
            throw ServiceError.originError("the origin sent a \(encoding)-encoded body")
        }

        let file = try ReceivingFile(in: self.temporaryDirectory, prefix: "download", suffix: ".part")
        var received = 0
        do {
            for try await buffer in response.body {
                guard received + buffer.readableBytes <= self.configuration.maxBytes else {
                    throw ServiceError.tooLarge("the GIF is larger than \(self.configuration.maxBytes) bytes")
                }
                guard NIODeadline.now() < deadline else {
                    throw ServiceError.originTimeout(
                        "the download took longer than \(self.configuration.timeoutSeconds) s")
                }
                try await file.write(buffer, at: received)
                received += buffer.readableBytes
            }
        } catch {
            unlink(file.path)
            throw error
        }
        return .file(
            DownloadedFile(
                path: file.path, byteCount: received, etag: response.headers.first(name: "ETag"),
                lastModified: response.headers.first(name: "Last-Modified")))
    }

    /// The URL's host without IPv6 brackets, and without the root's dot of a fully qualified name
    /// (`localhost.` is `localhost`: the allow-list and the policy judge one name, and a name that only resolves
    /// with the dot is not a way around them).
    static func bareHost(_ url: URL) -> String {
        var host = url.host ?? ""
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        while host.hasSuffix("."), host.count > 1 { host.removeLast() }
        return host
    }

    private static func map(_ error: any Error, url: URL) -> any Error {
        if error is ServiceError || error is CancellationError { return error }
        // This process short of descriptors or memory (a socket it could not open): not the origin's failure.
        if let error = error as? IOError, ServiceError.isShortage(errno: error.errnoCode) {
            return ServiceError.from(error)
        }
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout, .connectTimeout, .getConnectionFromPoolTimeout:
                return ServiceError.originTimeout("the origin did not answer in time")
            default:
                return ServiceError.originError("fetching the GIF failed: \(error)")
            }
        }
        return ServiceError.originError("fetching the GIF failed: \(error)")
    }
}

/// Hosts recently checked against the destination policy, and the answer: bounded, short-lived.
final class HostDecisions: Sendable {
    static var lifetime: TimeInterval { 60 }
    static var capacity: Int { 10_000 }
    private let entries = Mutex<[String: (error: ServiceError?, at: Date)]>([:])

    /// nil when unknown or expired; `.some(nil)` when allowed; `.some(error)` when refused.
    func decision(for host: String) -> ServiceError?? {
        let now = Date()
        return self.entries.withLock { entries in
            guard let entry = entries[host.lowercased()], now.timeIntervalSince(entry.at) < Self.lifetime else {
                return nil
            }
            return .some(entry.error)
        }
    }

    func record(_ host: String, _ error: ServiceError?) {
        let now = Date()
        self.entries.withLock { entries in
            if entries.count >= Self.capacity {
                entries = entries.filter { now.timeIntervalSince($0.value.at) < Self.lifetime }
                if entries.count >= Self.capacity { entries.removeAll() }
            }
            entries[host.lowercased()] = (error, now)
        }
    }
}
