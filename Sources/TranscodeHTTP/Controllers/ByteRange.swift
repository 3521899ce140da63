import TranscodeCore

/// A `Range: bytes=...` request header, read per RFC 9110 §14 for one representation of `size` bytes.
enum ByteRange: Equatable, Sendable {
    /// No usable range (absent, malformed, or several ranges): send the whole representation (200).
    case whole
    /// Send these bytes (206).
    case partial(ClosedRange<Int>)
    /// No byte of the request exists (416, `Content-Range: bytes */size`).
    case unsatisfiable

    /// - Parameters:
    ///   - header: the `Range` field value, if any.
    ///   - size: the representation's length.
    init(header: String?, size: Int) {
        // Read as bytes: Foundation's trimming and Character comparisons were a tenth of a cache hit's time.
        guard var bytes = header?.utf8[...] else {
            self = .whole
            return
        }
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }
        func trim(_ text: inout Substring.UTF8View) {
            while let first = text.first, isSpace(first) { text.removeFirst() }
            while let last = text.last, isSpace(last) { text.removeLast() }
        }
        trim(&bytes)
        let unit = "bytes=".utf8
        guard bytes.count >= unit.count,
            zip(bytes.prefix(unit.count), unit).allSatisfy({ ((0x41...0x5A).contains($0) ? $0 | 0x20 : $0) == $1 })
        else {
            self = .whole
            return
        }
        var spec = bytes.dropFirst(unit.count)
        trim(&spec)
        // Several ranges may be answered with the whole representation (RFC 9110 §14.2: a server MAY ignore
        // Range), which every player handles.
        guard !spec.contains(0x2C), let dash = spec.firstIndex(of: 0x2D) else {
            self = .whole
            return
        }
        let first = spec[..<dash]
        let last = spec[spec.index(after: dash)...]
        func number(_ text: Substring.UTF8View) -> Int? {
            guard !text.isEmpty, text.count <= 18 else { return nil }
            var value = 0
            for byte in text {
                guard (0x30...0x39).contains(byte) else { return nil }
                value = value * 10 + Int(byte - 0x30)
            }
            return value
        }
        if first.isEmpty {
            // Suffix range: the last n bytes.
            guard let count = number(last) else {
                self = .whole
                return
            }
            guard count > 0, size > 0 else {
                self = .unsatisfiable
                return
            }
            self = .partial(max(0, size - count)...(size - 1))
            return
        }
        guard let start = number(first) else {
            self = .whole
            return
        }
        var end = size - 1
        if !last.isEmpty {
            guard let value = number(last), value >= start else {
                self = .whole
                return
            }
            end = min(value, size - 1)
        }
        guard start < size else {
            self = .unsatisfiable
            return
        }
        self = .partial(start...end)
    }
}
