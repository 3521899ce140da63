/// When a GIF's video plays, and what shows meanwhile: plain logic, the signals injected, so that every decision is
/// tested on Linux and the Apple layer (`LoopingVideoView`) only applies it.
///
/// - The poster shows until the video's first frame is ready, and instead of the video while Low Power Mode or
///   Reduce Motion is on (a still, as browsers do for `prefers-reduced-motion` sites).
/// - Offscreen, the video pauses; back on screen it goes on where it was.
/// - A GIF that plays a number of times (`playCount`: a NETSCAPE loop count of n plays n + 1 times, the service's
///   manifest counts that already) plays that many times, then stays on its last frame, as browsers show it; it
///   does not start again when it comes back on screen. One that loops forever loops (`AVPlayerLooper`).
public struct PlayPolicy: Sendable, Equatable {
    /// What the view shows.
    public enum Display: Sendable, Equatable {
        case poster
        case video
        /// Played its count: the video, stopped on its last frame.
        case lastFrame
    }

    /// The signals the policy reads; the app sets them as they change.
    public struct Signals: Sendable, Equatable {
        public var isVisible = false
        public var lowPowerMode = false
        public var reduceMotion = false
        /// The player has the first frame to show (`AVPlayerLayer.isReadyForDisplay`).
        public var firstFrameReady = false

        public init(
            isVisible: Bool = false, lowPowerMode: Bool = false, reduceMotion: Bool = false,
            firstFrameReady: Bool = false
        ) {
            self.isVisible = isVisible
            self.lowPowerMode = lowPowerMode
            self.reduceMotion = reduceMotion
            self.firstFrameReady = firstFrameReady
        }
    }

    /// How many times the animation plays; nil: forever.
    public let playCount: Int?
    public var signals: Signals
    /// Plays finished so far.
    public private(set) var playsCompleted = 0

    public init(playCount: Int?, signals: Signals = Signals()) {
        // A count of 0 or less is read as forever (the manifest's nil); a browser never plays a GIF zero times.
        self.playCount = playCount.flatMap { $0 > 0 ? $0 : nil }
        self.signals = signals
    }

    /// The policy of an object, by its manifest's `playCount` (`loopsForever` gives nil).
    public init(manifest: Manifest, signals: Signals = Signals()) {
        self.init(playCount: manifest.loopsForever ? nil : manifest.playCount ?? 1, signals: signals)
    }

    /// Motion is off: Low Power Mode or Reduce Motion.
    public var motionAllowed: Bool { !self.signals.lowPowerMode && !self.signals.reduceMotion }

    /// Every play done.
    public var isFinished: Bool { self.playCount.map { self.playsCompleted >= $0 } ?? false }

    public var display: Display {
        guard self.motionAllowed else { return .poster }
        if self.isFinished { return self.signals.firstFrameReady ? .lastFrame : .poster }
        return self.signals.firstFrameReady ? .video : .poster
    }

    /// Whether the player should be playing now.
    public var shouldPlay: Bool { self.signals.isVisible && self.motionAllowed && !self.isFinished }

    /// Whether the view needs a player at all (it may give its player back to the pool otherwise): on screen, motion
    /// allowed, and not finished before its first frame was shown.
    public var needsPlayer: Bool {
        self.signals.isVisible && self.motionAllowed && (!self.isFinished || self.signals.firstFrameReady)
    }

    /// Whether the player should start another play when this one ends (`AVPlayerLooper.disableLooping()` once not).
    public var loopsAfterThisPlay: Bool {
        guard let playCount else { return true }
        return self.playsCompleted + 1 < playCount
    }

    /// One play reached its end.
    public mutating func playDidEnd() {
        if !self.isFinished { self.playsCompleted += 1 }
    }

    /// Plays from the start again (the user tapped it).
    public mutating func restart() {
        self.playsCompleted = 0
    }
}

/// A capped set of players shared by many views (a feed of GIFs): a view on screen claims one; when none is free, the
/// least recently claimed player of a view that no longer needs it is taken back. Views over the cap show their
/// poster. Generic over the player's id so that it is tested without AVFoundation.
public struct PlayerPool<ViewID: Hashable & Sendable>: Sendable {
    public let capacity: Int
    private var holders: [ViewID] = []
    private var idle: Set<ViewID> = []

    public init(capacity: Int) {
        self.capacity = max(capacity, 1)
    }

    /// Asks a player for `view`.
    /// - Returns: whether `view` holds one, and the view whose player it took (release that view's player first).
    public mutating func claim(_ view: ViewID) -> (granted: Bool, takenFrom: ViewID?) {
        if let index = self.holders.firstIndex(of: view) {
            self.holders.remove(at: index)
            self.holders.append(view)
            self.idle.remove(view)
            return (true, nil)
        }
        if self.holders.count < self.capacity {
            self.holders.append(view)
            return (true, nil)
        }
        guard let index = self.holders.firstIndex(where: self.idle.contains) else { return (false, nil) }
        let taken = self.holders.remove(at: index)
        self.idle.remove(taken)
        self.holders.append(view)
        return (true, taken)
    }

    /// `view` keeps its player (its last frame, say) but gives it up to a view that needs one.
    public mutating func markIdle(_ view: ViewID) {
        if self.holders.contains(view) { self.idle.insert(view) }
    }

    /// `view` gives its player back.
    public mutating func release(_ view: ViewID) {
        self.holders.removeAll { $0 == view }
        self.idle.remove(view)
    }

    /// The views holding a player, least recently claimed first.
    public var holding: [ViewID] { self.holders }
}
