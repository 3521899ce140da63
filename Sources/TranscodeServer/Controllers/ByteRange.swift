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
        guard let header else {
            self = .whole
            return
        }
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes=") else {
            self = .whole
            return
        }
        let spec = trimmed.dropFirst(6).trimmingCharacters(in: .whitespaces)
        // Several ranges may be answered with the whole representation (RFC 9110 §14.2: a server MAY ignore
        // Range), which every player handles.
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else {
            self = .whole
            return
        }
        let first = spec[..<dash]
        let last = spec[spec.index(after: dash)...]
        func number(_ text: Substring) -> Int? {
            guard !text.isEmpty, text.count <= 18, text.allSatisfy(\.isASCIIDigit) else { return nil }
            return Int(text)
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

extension Character {
    fileprivate var isASCIIDigit: Bool { self >= "0" && self <= "9" }
}
