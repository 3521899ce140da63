import TranscodeCore
import TranscodeHTTP

/// The closest of a set of valid names to a misspelt one, for "did you mean" in messages: the one at the smallest
/// edit distance (insertions, deletions, substitutions, and swaps of neighbours, case ignored), when that distance
/// is small for the name's length (at most a third of it, at least 1 and at most 3).
enum NearestName {
    static func suggestion(for name: String, among candidates: some Sequence<String>) -> String? {
        let word = Array(name.lowercased())
        var best: (name: String, distance: Int)?
        for candidate in candidates {
            let distance = Self.distance(word, Array(candidate.lowercased()))
            if distance < (best?.distance ?? .max) || (distance == best?.distance && candidate < best!.name) {
                best = (candidate, distance)
            }
        }
        guard let best, best.distance > 0, best.distance <= min(3, max(1, word.count / 3)) else { return nil }
        return best.name
    }

    /// The optimal-string-alignment distance between `a` and `b`.
    static func distance(_ a: [Character], _ b: [Character]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previousRow: [Int] = []
        var row = Array(0...b.count)
        for i in 1...a.count {
            let twoBack = previousRow
            previousRow = row
            row = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                row[j] = min(previousRow[j] + 1, row[j - 1] + 1, previousRow[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    row[j] = min(row[j], twoBack[j - 2] + 1)
                }
            }
        }
        return row[b.count]
    }

    /// ` (did you mean X?)` when there is a suggestion, else nothing.
    static func hint(for name: String, among candidates: some Sequence<String>) -> String {
        self.suggestion(for: name, among: candidates).map { " (did you mean \($0)?)" } ?? ""
    }
}
