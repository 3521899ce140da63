import Foundation
import Testing

@testable import TranscodeClient

@Suite struct PlayPolicyTests {
    @Test func posterUntilTheFirstFrameThenPlaysWhileVisible() {
        var policy = PlayPolicy(playCount: nil)
        #expect(policy.display == .poster && !policy.shouldPlay && !policy.needsPlayer)
        policy.signals.isVisible = true
        #expect(policy.needsPlayer && policy.shouldPlay && policy.display == .poster)
        policy.signals.firstFrameReady = true
        #expect(policy.display == .video && policy.shouldPlay)
        // Offscreen: paused, and the player may go back to the pool.
        policy.signals.isVisible = false
        #expect(!policy.shouldPlay && !policy.needsPlayer && policy.display == .video)
        // Forever: every end starts another play.
        for _ in 0..<50 { policy.playDidEnd() }
        #expect(policy.loopsAfterThisPlay && !policy.isFinished)
    }

    /// A NETSCAPE loop count of 1 plays twice (the manifest's `playCount`), then stays on its last frame, and does
    /// not start again when it comes back on screen.
    @Test func aFiniteCountPlaysThenStaysOnTheLastFrame() {
        var policy = PlayPolicy(playCount: 2, signals: .init(isVisible: true, firstFrameReady: true))
        #expect(policy.loopsAfterThisPlay)
        policy.playDidEnd()
        #expect(!policy.loopsAfterThisPlay && policy.shouldPlay)
        policy.playDidEnd()
        #expect(policy.isFinished && policy.display == .lastFrame && !policy.shouldPlay)
        policy.playDidEnd()
        #expect(policy.playsCompleted == 2)
        policy.signals.isVisible = false
        policy.signals.isVisible = true
        #expect(!policy.shouldPlay && policy.display == .lastFrame && policy.needsPlayer)
        policy.restart()
        #expect(policy.shouldPlay && policy.display == .video)
        // A count of zero or less is forever, as the manifest's nil.
        #expect(PlayPolicy(playCount: 0).playCount == nil)
    }

    @Test func lowPowerAndReduceMotionShowThePoster() throws {
        for signals in [
            PlayPolicy.Signals(isVisible: true, lowPowerMode: true, firstFrameReady: true),
            PlayPolicy.Signals(isVisible: true, reduceMotion: true, firstFrameReady: true),
        ] {
            let policy = PlayPolicy(playCount: nil, signals: signals)
            #expect(policy.display == .poster && !policy.shouldPlay && !policy.needsPlayer && !policy.motionAllowed)
        }
        let manifest = try JSONDecoder().decode(
            Manifest.self,
            from: Data(
                #"{"sourceWidth":1,"sourceHeight":1,"outputWidth":2,"outputHeight":2,"durationMs":100,"loopsForever":false,"playCount":3,"hasTransparency":false,"sourceBytes":100,"mp4Bytes":10,"posterBytes":5,"recommendation":"video"}"#
                    .utf8))
        #expect(PlayPolicy(manifest: manifest).playCount == 3)
    }

    @Test func thePoolLendsAtMostItsCapacityAndTakesBackIdlePlayers() {
        var pool = PlayerPool<Int>(capacity: 2)
        #expect(pool.claim(1) == (true, nil))
        #expect(pool.claim(2) == (true, nil))
        #expect(pool.claim(3) == (false, nil))
        pool.markIdle(1)
        #expect(pool.claim(3) == (true, 1))
        #expect(pool.holding == [2, 3])
        #expect(pool.claim(2) == (true, nil))
        #expect(pool.holding == [3, 2])
        pool.release(3)
        #expect(pool.claim(4) == (true, nil))
        #expect(PlayerPool<Int>(capacity: 0).capacity == 1)
    }
}
