// The Apple layer: a view that plays a GIF's MP4 as the apps that started this did, with AVQueuePlayer and
// AVPlayerLooper (no gap between plays, unlike seeking back to zero), a poster until the first frame, and every
// decision taken by `PlayPolicy` and `PlayerPool` in the core. This file cannot be compiled on Linux, where the
// package is built and tested: keep it thin, and put any new decision in the core, where it is tested.
#if canImport(AVFoundation) && canImport(UIKit)
    import AVFoundation
    import UIKit

    /// Plays a GIF's MP4 (from `MediaCache`), muted, looping as the GIF did, with its poster meanwhile.
    @MainActor
    public final class LoopingVideoView: UIView {
        /// The players a screen shares (a feed): at most this many play at once; the others show their posters.
        public static var pool = PlayerPool<ObjectIdentifier>(capacity: 4)

        private let posterView = UIImageView()
        private var playerLayer: AVPlayerLayer?
        private var player: AVQueuePlayer?
        private var looper: AVPlayerLooper?
        private var item: AVPlayerItem?
        private var observations: [NSKeyValueObservation] = []
        private var videoURL: URL?
        public private(set) var policy = PlayPolicy(playCount: nil)

        public override init(frame: CGRect) {
            super.init(frame: frame)
            self.posterView.contentMode = .scaleAspectFit
            self.posterView.frame = self.bounds
            self.posterView.autoresizingMask = [.flexibleWidth, .flexibleHeight]
            self.addSubview(self.posterView)
            NotificationCenter.default.addObserver(
                self, selector: #selector(self.systemSignalsChanged), name: .NSProcessInfoPowerStateDidChange,
                object: nil)
            NotificationCenter.default.addObserver(
                self, selector: #selector(self.systemSignalsChanged),
                name: UIAccessibility.reduceMotionStatusDidChangeNotification, object: nil)
        }

        public required init?(coder: NSCoder) { nil }

        /// Shows `video` (a local file) with `poster`, played as `manifest` says.
        public func show(video: URL, poster: UIImage?, manifest: Manifest) {
            self.releasePlayer()
            self.videoURL = video
            self.posterView.image = poster
            self.policy = PlayPolicy(manifest: manifest)
            self.systemSignalsChanged()
        }

        /// Call when the view scrolls on or off screen.
        public func setVisible(_ visible: Bool) {
            self.policy.signals.isVisible = visible
            self.apply()
        }

        @objc private func systemSignalsChanged() {
            self.policy.signals.lowPowerMode = ProcessInfo.processInfo.isLowPowerModeEnabled
            self.policy.signals.reduceMotion = UIAccessibility.isReduceMotionEnabled
            self.apply()
        }

        /// Brings the view to what the policy says.
        private func apply() {
            let id = ObjectIdentifier(self)
            if self.policy.needsPlayer, self.player == nil, let videoURL {
                let claim = Self.pool.claim(id)
                if claim.granted { self.makePlayer(videoURL) }
            } else if !self.policy.needsPlayer, self.player != nil {
                if self.policy.display == .lastFrame { Self.pool.markIdle(id) } else { self.releasePlayer() }
            }
            self.posterView.isHidden = self.policy.display != .poster
            self.playerLayer?.isHidden = self.policy.display == .poster
            if self.policy.shouldPlay { self.player?.play() } else { self.player?.pause() }
        }

        private func makePlayer(_ url: URL) {
            let item = AVPlayerItem(url: url)
            let player = AVQueuePlayer()
            player.isMuted = true
            player.preventsDisplaySleepDuringVideoPlayback = false
            // One looper for every count: it queues the next play before this one ends, so there is no gap (seeking
            // back to zero shows one). A finite count stops looping before its last play, which then stays on its
            // last frame.
            let looper = AVPlayerLooper(player: player, templateItem: item)
            self.observations.append(
                looper.observe(\.loopCount, options: [.new]) { [weak self] looper, _ in
                    Task { @MainActor in
                        guard let self else { return }
                        while self.policy.playsCompleted < looper.loopCount, !self.policy.isFinished {
                            self.policy.playDidEnd()
                        }
                        if !self.policy.loopsAfterThisPlay { looper.disableLooping() }
                        self.apply()
                    }
                })
            if !self.policy.loopsAfterThisPlay { looper.disableLooping() }
            self.looper = looper
            let layer = AVPlayerLayer(player: player)
            layer.videoGravity = .resizeAspect
            layer.frame = self.bounds
            layer.isHidden = true
            self.layer.addSublayer(layer)
            self.observations.append(
                layer.observe(\.isReadyForDisplay, options: [.new]) { [weak self] layer, _ in
                    let ready = layer.isReadyForDisplay
                    Task { @MainActor in
                        self?.policy.signals.firstFrameReady = ready
                        self?.apply()
                    }
                })
            self.item = item
            self.player = player
            self.playerLayer = layer
        }

        private func releasePlayer() {
            Self.pool.release(ObjectIdentifier(self))
            self.player?.pause()
            self.looper?.disableLooping()
            self.observations = []
            self.playerLayer?.removeFromSuperlayer()
            (self.player, self.playerLayer, self.looper, self.item) = (nil, nil, nil, nil)
            self.policy.signals.firstFrameReady = false
        }

        public override func layoutSubviews() {
            super.layoutSubviews()
            self.playerLayer?.frame = self.bounds
        }
    }
#endif
