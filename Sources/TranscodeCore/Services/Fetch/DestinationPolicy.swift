#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An IPv4 (4 bytes) or IPv6 (16 bytes) address, as a resolver returned it.
struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    let bytes: [UInt8]

    init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    var isIPv4: Bool { self.bytes.count == 4 }

    /// The canonical text (`inet_ntop`), which is also what the HTTP client connects to.
    var description: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = self.isIPv4 ? AF_INET : AF_INET6
        let text = self.bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &buffer, socklen_t(buffer.count)) }
        guard text != nil else { return "?" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether the first `length` bits equal those of `prefix`.
    func hasPrefix(_ prefix: [UInt8], length: Int) -> Bool {
        guard prefix.count == self.bytes.count else { return false }
        var bits = length
        for (mine, theirs) in zip(self.bytes, prefix) where bits > 0 {
            let take = min(8, bits)
            let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - take))
            if mine & mask != theirs & mask { return false }
            bits -= take
        }
        return true
    }
}

/// Which destinations a download may connect to. Every address a host name resolves to is checked, and
/// the one connected to is pinned (the HTTP client gets the IP, not the name), so DNS rebinding and names
/// that resolve to internal addresses are refused like literal internal addresses.
struct DestinationPolicy: Sendable {
    var allowLoopback: Bool
    /// Lower-cased host names; empty allows every host.
    var allowedHosts: Set<String>

    init(allowLoopback: Bool, allowedHosts: [String]) {
        self.allowLoopback = allowLoopback
        self.allowedHosts = Set(allowedHosts.map { $0.lowercased() })
    }

    /// Special-purpose IPv4 ranges (RFC 6890 and friends): none is a public web server.
    private static let deniedIPv4: [(prefix: [UInt8], length: Int)] = [
        ([0, 0, 0, 0], 8), ([10, 0, 0, 0], 8), ([100, 64, 0, 0], 10), ([169, 254, 0, 0], 16),
        ([172, 16, 0, 0], 12), ([192, 0, 0, 0], 24), ([192, 0, 2, 0], 24), ([192, 88, 99, 0], 24),
        ([192, 168, 0, 0], 16), ([198, 18, 0, 0], 15), ([198, 51, 100, 0], 24), ([203, 0, 113, 0], 24),
        ([224, 0, 0, 0], 4), ([240, 0, 0, 0], 4),
    ]
    private static let loopbackIPv4: (prefix: [UInt8], length: Int) = ([127, 0, 0, 0], 8)

    private static func v6(_ groups: [UInt16]) -> [UInt8] {
        var bytes: [UInt8] = []
        for group in groups + [UInt16](repeating: 0, count: 8 - groups.count) {
            bytes.append(UInt8(group >> 8))
            bytes.append(UInt8(group & 0xFF))
        }
        return bytes
    }

    /// Special-purpose IPv6 ranges: NAT64, 6to4, Teredo, discard, documentation, unique local,
    /// link-local, site-local, multicast.
    private static let deniedIPv6: [(prefix: [UInt8], length: Int)] = [
        (v6([0x64, 0xFF9B]), 96), (v6([0x64, 0xFF9B, 1]), 48), (v6([0x2002]), 16), (v6([0x2001, 0]), 32),
        (v6([0x100]), 64), (v6([0x2001, 0xDB8]), 32), (v6([0xFC00]), 7), (v6([0xFE80]), 10), (v6([0xFEC0]), 10),
        (v6([0xFF00]), 8),
    ]

    /// Whether `host` (a name from a URL) is on the allow-list, when there is one.
    func allowsHost(_ host: String) -> Bool {
        self.allowedHosts.isEmpty || self.allowedHosts.contains(host.lowercased())
    }

    /// Whether a connection to `address` is allowed.
    func allows(_ address: IPAddress) -> Bool {
        if address.isIPv4 {
            if address.hasPrefix(Self.loopbackIPv4.prefix, length: Self.loopbackIPv4.length) {
                return self.allowLoopback
            }
            return !Self.deniedIPv4.contains { address.hasPrefix($0.prefix, length: $0.length) }
        }
        let bytes = address.bytes
        // ::1 (loopback) and :: (unspecified).
        if bytes.dropLast().allSatisfy({ $0 == 0 }) {
            return bytes[15] == 1 && self.allowLoopback
        }
        // IPv4-mapped ::ffff:a.b.c.d and IPv4-compatible ::a.b.c.d carry an IPv4 address: judge that.
        let mapped = bytes.prefix(10).allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF
        let compatible = bytes.prefix(12).allSatisfy { $0 == 0 }
        if mapped || compatible, let embedded = IPAddress(bytes: Array(bytes.suffix(4))) {
            return self.allows(embedded)
        }
        return !Self.deniedIPv6.contains { address.hasPrefix($0.prefix, length: $0.length) }
    }

    /// Resolves `host` with the system resolver (which also reads numeric spellings such as `2130706433`,
    /// `0177.0.0.1` or `127.1` the way `inet_aton` does, so they are judged by the address they mean).
    /// Blocking: call it from a thread pool. - Returns: no address when the name does not resolve.
    static func resolve(_ host: String) -> [IPAddress] {
        (try? self.lookup(host)) ?? []
    }

    /// `resolve`, telling the process's own shortage from the name's failure.
    /// - Throws: `overloaded` when the resolver ran out of memory or descriptors (not the name's failure: it
    ///   must not be remembered as the origin's).
    static func lookup(_ host: String) throws -> [IPAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, nil, &hints, &list)
        guard status == 0, let first = list else {
            if status == EAI_MEMORY || (status == EAI_SYSTEM && ServiceError.isShortage(errno: errno)) {
                throw ServiceError.overloaded("cannot resolve \(host) now: out of memory or descriptors")
            }
            return []
        }
        defer { freeaddrinfo(list) }
        var addresses: [IPAddress] = []
        var node: UnsafeMutablePointer<addrinfo>? = first
        while let current = node {
            if let socketAddress = current.pointee.ai_addr {
                switch Int32(socketAddress.pointee.sa_family) {
                case AF_INET:
                    socketAddress.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { pointer in
                        var raw = pointer.pointee.sin_addr
                        let bytes = withUnsafeBytes(of: &raw) { Array($0) }
                        if let address = IPAddress(bytes: bytes) { addresses.append(address) }
                    }
                case AF_INET6:
                    socketAddress.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in
                        var raw = pointer.pointee.sin6_addr
                        let bytes = withUnsafeBytes(of: &raw) { Array($0) }
                        if let address = IPAddress(bytes: bytes) { addresses.append(address) }
                    }
                default:
                    break
                }
            }
            node = current.pointee.ai_next
        }
        var seen = Set<IPAddress>()
        return addresses.filter { seen.insert($0).inserted }
    }
}
