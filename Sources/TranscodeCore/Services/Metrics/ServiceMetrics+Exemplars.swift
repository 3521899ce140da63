import Foundation
import Prometheus
import Synchronization

/// A sampled trace's ids, attached to one histogram observation as an OpenMetrics exemplar.
package struct TraceExemplar: Sendable, Equatable {
    /// 32 lowercase hexadecimal digits.
    let traceID: String
    /// 16 lowercase hexadecimal digits.
    let spanID: String
}

/// The trace exemplars of the duration histograms (issue 55): for each bucket of each series, the latest observation
/// made inside a sampled trace, with its trace and span ids, its value and when it was made. Only the OpenMetrics
/// exposition carries them (`# {trace_id="…",span_id="…"} 0.042 1764451200.123` after a `_bucket` sample); the
/// classic text format has no place for them. The table is bounded by the series: one entry per bucket line.
///
/// swift-prometheus (2.4) keeps no exemplars, so they are kept here, keyed by the bucket line's name and labels as
/// it renders them, and added to those lines when the OpenMetrics text is made.
final class HistogramExemplars: Sendable {
    private struct Entry {
        let exemplar: TraceExemplar
        let seconds: Double
        let timestamp: Double
    }

    private let table = Mutex<[String: Entry]>([:])

    /// Keeps `exemplar` as the latest of the bucket `value` falls in: the first whose bound is not below it, else
    /// `+Inf`. `labels` are the series' labels (none for an unlabelled histogram).
    func record(
        _ exemplar: TraceExemplar, histogram name: String, labels: [(String, String)], buckets: [Duration],
        value: Duration, at time: Date = Date()
    ) {
        // A value the renderer would escape differently is left without an exemplar rather than mis-keyed.
        guard labels.allSatisfy({ !$0.1.contains("\"") && !$0.1.contains("\\") && !$0.1.contains("\n") }) else {
            return
        }
        let bound = buckets.first { $0 >= value }.map(\.bucketRepresentation) ?? "+Inf"
        let key = Self.key(name: name, labels: labels, bound: bound)
        let entry = Entry(
            exemplar: exemplar, seconds: Double(value.components.seconds) + Double(value.components.attoseconds) / 1e18,
            timestamp: time.timeIntervalSince1970)
        self.table.withLock { $0[key] = entry }
    }

    /// The bucket line as swift-prometheus renders it, up to its closing brace.
    private static func key(name: String, labels: [(String, String)], bound: String) -> String {
        let rendered = labels.map { "\($0.0)=\"\($0.1)\"" } + ["le=\"\(bound)\""]
        return "\(name)_bucket{\(rendered.joined(separator: ","))}"
    }

    /// `line` with its exemplar appended, when it is a bucket sample that has one.
    func annotate(_ line: Substring) -> Substring {
        guard line.contains("_bucket{"), let space = line.lastIndex(of: " ") else { return line }
        guard let entry = self.table.withLock({ $0[String(line[..<space])] }) else { return line }
        let ids = "trace_id=\"\(entry.exemplar.traceID)\",span_id=\"\(entry.exemplar.spanID)\""
        return line + " # {\(ids)} \(entry.seconds) \(String(format: "%.3f", entry.timestamp))"
    }
}
