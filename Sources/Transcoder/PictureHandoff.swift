import Foundation

/// Takes the encoder's side of a pass to a thread of its own, so that the next picture is decoded, composited
/// and converted while x264 takes the last one.
///
/// On one thread the two sides waited for each other. x264 with frame threads returns from a picture only
/// once a thread is free for it, and then waited, idle, while the next picture was made: a 1080x1080 GIF
/// converted alone kept the two cores 70-75% busy. Here two pictures alternate: the compositing side fills
/// one while the encoding side takes the other, and waits only when both are still with it.
///
/// Nothing about what is encoded changes: the same pictures, in the same order, with the same times, into
/// the same encoder, so the same bytes. Each object is still used by one thread at a time: the pictures are
/// passed under `condition`, and everything `encode` touches (the encoder, the muxer, the pictures' start times) only
/// on the encoding thread until `finish()` has joined it.
final class PictureHandoff: @unchecked Sendable {
    /// The pictures the two sides pass between them.
    private let frames: [VideoFrame]
    /// Dropped by `finish()`: the caller may hand in a closure that must not outlive its call.
    private var encode: ((VideoFrame, Int64) throws -> Void)?
    private let condition = NSCondition()
    /// Indices into `frames` the compositing side may fill.
    private var free: [Int]
    /// Pictures handed over and not yet taken, with their start times.
    private var queued: [(index: Int, start: Int64)] = []
    private var ending = false
    /// The encoding thread, until `finish()` has joined it.
    private var thread: pthread_t?
    /// What `encode` threw first; pictures handed over after it are dropped.
    private var failure: (any Error)?

    /// Starts the encoding thread; nil when no thread could be started (the caller then encodes on its own
    /// thread, with the same result).
    /// - Parameters:
    ///   - frames: the pictures to alternate (two: one being filled, one being encoded).
    ///   - encode: called on the encoding thread with each picture handed over, in order.
    init?(frames: [VideoFrame], encode: @escaping (VideoFrame, Int64) throws -> Void) {
        self.frames = frames
        self.encode = encode
        self.free = Array(frames.indices)
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        // x264's lookahead runs on the thread that sends it pictures: give it what its own threads get.
        pthread_attr_setstacksize(&attributes, 8 << 20)
        // A pthread, not Foundation's `Thread`, whose `start()` does not say when the thread could not be made
        // (a full pids cgroup, no memory for the stack): the compositing side would then wait forever.
        let context = Unmanaged.passRetained(self)
        var thread = pthread_t()
        let started = pthread_create(
            &thread, &attributes,
            { context in
                Unmanaged<PictureHandoff>.fromOpaque(context!).takeRetainedValue().run()
                return nil
            }, context.toOpaque())
        guard started == 0 else {
            context.release()
            return nil
        }
        self.thread = thread
    }

    /// A picture the compositing side may fill, waiting while both are with the encoder.
    /// - Throws: what the encoder threw, if it failed: nothing more should be made.
    func nextFree() throws -> (index: Int, frame: VideoFrame) {
        self.condition.lock()
        defer { self.condition.unlock() }
        while self.free.isEmpty, self.failure == nil { self.condition.wait() }
        if let failure = self.failure { throw failure }
        let index = self.free.removeFirst()
        return (index, self.frames[index])
    }

    /// Hands the picture `nextFree()` gave to the encoder, shown from `start`.
    func submit(_ index: Int, start: Int64) {
        self.condition.lock()
        self.queued.append((index, start))
        self.condition.broadcast()
        self.condition.unlock()
    }

    /// Lets the encoder take what was handed over, then joins its thread. Must be called whether the pass
    /// succeeded or not, before anything `encode` uses is touched or freed.
    /// - Throws: what the encoder threw first.
    func finish() throws {
        self.condition.lock()
        self.ending = true
        self.condition.broadcast()
        self.condition.unlock()
        if let thread = self.thread {
            pthread_join(thread, nil)
            self.thread = nil
        }
        self.condition.lock()
        self.encode = nil
        let failure = self.failure
        self.condition.unlock()
        if let failure { throw failure }
    }

    private func run() {
        self.condition.lock()
        while true {
            while self.queued.isEmpty, !self.ending { self.condition.wait() }
            guard !self.queued.isEmpty else { break }
            let item = self.queued.removeFirst()
            // Nothing more is encoded once something failed.
            let encode = self.failure == nil ? self.encode : nil
            self.condition.unlock()
            var thrown: (any Error)?
            if let encode {
                do { try encode(self.frames[item.index], item.start) } catch { thrown = error }
            }
            self.condition.lock()
            if let thrown, self.failure == nil { self.failure = thrown }
            self.free.append(item.index)
            self.condition.broadcast()
        }
        self.condition.unlock()
    }
}
