import Foundation
import Synchronization
import Transcoder

/// One conversion to do, as a value a queue can carry: what to convert, with which options, under which id.
package struct TranscodeJob: Codable, Sendable, Hashable {
    enum Source: Codable, Sendable, Hashable {
        /// A URL the downloader's checks accepted (`Downloader.validate`), as text.
        case url(String)
        /// An uploaded animation, named by the object it makes. Its bytes travel beside the job
        /// (`TranscodeJobs.submit(_:upload:waitingUpTo:)`): a queue that crosses machines stages them first.
        case upload(ObjectKey)
    }

    /// The request key: the URL key, or for an upload its object key. `GET /jobs/{id}` takes it, and jobs with
    /// the same id are one job.
    let id: String
    let source: Source
    /// The options the id was derived with: a worker converts with these, not with its own defaults.
    let options: TranscodeOptions
    /// When it runs among the jobs waiting for a worker (`TranscodePool`). Jobs queued before priorities existed
    /// decode as interactive.
    var priority: JobPriority = .interactive
    /// The W3C `traceparent` of its trace when it was queued with tracing on (a batch item's `batch.enqueue`
    /// span): the node that runs it continues that trace (`Traces.span(continuing:)`).
    var traceparent: String?

    init(id: String, source: Source, options: TranscodeOptions, priority: JobPriority = .interactive) {
        self.id = id
        self.source = source
        self.options = options
        self.priority = priority
    }

    private enum CodingKeys: String, CodingKey { case id, source, options, priority, traceparent }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.id = try container.decode(String.self, forKey: .id)
        self.source = try container.decode(Source.self, forKey: .source)
        self.options = try container.decode(TranscodeOptions.self, forKey: .options)
        self.priority = try container.decodeIfPresent(JobPriority.self, forKey: .priority) ?? .interactive
        self.traceparent = try container.decodeIfPresent(String.self, forKey: .traceparent)
    }
}

/// How a job ended, as its subscribers hear it.
package enum JobEnd: Sendable {
    case done(TranscodeOutcome)
    case failed(ServiceError)

    init(_ result: Result<TranscodeOutcome, any Error>) {
        switch result {
        case .success(let outcome): self = .done(outcome)
        case .failure(let error): self = .failed(ServiceError.from(error))
        }
    }
}

/// The jobs of a service: started once per id however many ask, admitted against the queue's bound, waited
/// for up to a budget, and heard of when they end. In process today (`InProcessJobs`: a single flight per id
/// on the transcode pool); a fleet-wide queue implements the same.
package protocol TranscodeJobs: Sendable {
    /// Starts `job`, or joins the run going on under its id, and waits for it up to `seconds`.
    /// - Parameters:
    ///   - upload: the bytes of an uploaded source (`TranscodeJob.Source.upload`).
    ///   - seconds: how long to wait; nil waits until the job ends.
    ///   - subscriber: told how the run this call started or joined ends, however long that takes (a webhook, a
    ///     batch item). Not told anything when the call throws before a run (the caller knows then).
    /// - Returns: `.done` when it ended within the wait, otherwise `.pending` with the job's id.
    /// - Throws: `queue-full` or `shutting-down` before the job starts; the job's error when it failed within
    ///   the wait.
    func submit(
        _ job: TranscodeJob, upload: [UInt8]?, waitingUpTo seconds: Double?, subscriber: JobSubscription?
    ) async throws -> TranscodeAnswer
    /// Whether job `id` is running.
    func isRunning(_ id: String) async -> Bool
    /// How job `id` failed, and when, when it did recently.
    func failure(of id: String) -> JobFailure?
    /// Where job `id` stands as the fleet recorded it, when this node has nothing on it: pending or failed on
    /// another node (`GET /jobs/{id}` on any node). Asked last, after this node's and the shared store's answers.
    /// - Throws: `queue-unavailable` when the fleet's record cannot be read now.
    func recorded(_ id: String) async throws -> JobState?
}

extension TranscodeJobs {
    package func recorded(_ id: String) async throws -> JobState? { nil }
}

/// A job's failure as recorded: for `GET /jobs/{id}`, and for answering again without asking the origin
/// (`SourceResolver.cachedFailure`).
package struct JobFailure: Sendable {
    package let error: ServiceError
    package let at: Date
}

/// Does the work of a job: what a queue's worker runs.
protocol JobPerformer: Sendable {
    /// - Parameter upload: the bytes of an uploaded source.
    func perform(_ job: TranscodeJob, upload: [UInt8]?) async throws -> TranscodeOutcome
}

/// One subscriber's wait for the end of the job its request started or joined (a webhook, a batch item). The
/// first end told is the one kept, and kept until someone waits: a request that ends at once (a cache hit, a
/// refusal) tells it itself, a running job when it ends.
package final class JobSubscription: Sendable {
    private enum State {
        case waiting
        case awaited(CheckedContinuation<JobEnd, Never>)
        case ended(JobEnd)
    }

    private let state = Mutex<State>(.waiting)
    /// Told the same end, once this one is.
    private let next: JobSubscription?

    /// - Parameter next: a subscription told the same end (a job's own watcher ahead of a request's subscriber).
    package init(forwardingTo next: JobSubscription? = nil) {
        self.next = next
    }

    /// The job's end, once it is known. Call it once.
    package func end() async -> JobEnd {
        await withCheckedContinuation { continuation in
            let ended = self.state.withLock { state -> JobEnd? in
                if case .ended(let end) = state { return end }
                state = .awaited(continuation)
                return nil
            }
            if let ended { continuation.resume(returning: ended) }
        }
    }

    /// Tells the end; an end told before wins.
    func tell(_ end: JobEnd) {
        let waiter = self.state.withLock { state -> CheckedContinuation<JobEnd, Never>? in
            switch state {
            case .waiting:
                state = .ended(end)
                return nil
            case .awaited(let continuation):
                state = .ended(end)
                return continuation
            case .ended:
                return nil
            }
        }
        waiter?.resume(returning: end)
        self.next?.tell(end)
    }

    /// Whether an end was told.
    var hasEnded: Bool {
        self.state.withLock {
            if case .ended = $0 { return true }
            return false
        }
    }
}
