/// Structural similarity of two 8-bit luma planes, computed the way x264 and FFmpeg's `ssim` filter do:
/// statistics of 4x4 blocks, combined into overlapping 8x8 windows on a 4-pixel grid, averaged over the
/// picture. 1 is identical; for video, 0.98 and up is hard to tell apart, below 0.9 artefacts are plain.
enum LumaSSIM {
    private static let c1 = 0.01 * 255 * 0.01 * 255 * 64
    private static let c2 = 0.03 * 255 * 0.03 * 255 * 64 * 63

    /// The mean SSIM of `a` and `b`, both `width` x `height` with their own row strides (bytes).
    static func compute(
        _ a: UnsafePointer<UInt8>, strideA: Int, _ b: UnsafePointer<UInt8>, strideB: Int, width: Int, height: Int
    ) -> Double {
        let blocksX = width / 4
        let blocksY = height / 4
        guard blocksX >= 2, blocksY >= 2 else {
            return Self.small(a, strideA: strideA, b, strideB: strideB, width: width, height: height)
        }
        // Two rows of block sums (s1, s2, ss, s12), the previous and the current.
        var previous = [Int64](repeating: 0, count: blocksX * 4)
        var current = previous
        var total = 0.0
        var windows = 0
        for blockY in 0..<blocksY {
            for blockX in 0..<blocksX {
                var s1: Int64 = 0
                var s2: Int64 = 0
                var ss: Int64 = 0
                var s12: Int64 = 0
                for y in 0..<4 {
                    let rowA = a + (blockY * 4 + y) * strideA + blockX * 4
                    let rowB = b + (blockY * 4 + y) * strideB + blockX * 4
                    for x in 0..<4 {
                        let va = Int64(rowA[x])
                        let vb = Int64(rowB[x])
                        s1 += va
                        s2 += vb
                        ss += va * va + vb * vb
                        s12 += va * vb
                    }
                }
                current[blockX * 4] = s1
                current[blockX * 4 + 1] = s2
                current[blockX * 4 + 2] = ss
                current[blockX * 4 + 3] = s12
            }
            if blockY > 0 {
                for blockX in 0..<(blocksX - 1) {
                    let i = blockX * 4
                    func sum(_ k: Int) -> Double {
                        Double(previous[i + k] + previous[i + 4 + k] + current[i + k] + current[i + 4 + k])
                    }
                    total += Self.window(sum(0), sum(1), sum(2), sum(3))
                    windows += 1
                }
            }
            swap(&previous, &current)
        }
        return windows > 0 ? total / Double(windows) : 1
    }

    /// SSIM of one 8x8 window from its sums (x264's `ssim_end1`).
    private static func window(_ s1: Double, _ s2: Double, _ ss: Double, _ s12: Double) -> Double {
        let fs1 = s1 * s1
        let fs2 = s2 * s2
        let fs12 = s1 * s2
        let vars = ss * 64 - fs1 - fs2
        let covar = s12 * 64 - fs12
        return (2 * fs12 + Self.c1) * (2 * covar + Self.c2) / ((fs1 + fs2 + Self.c1) * (vars + Self.c2))
    }

    /// Pictures under 8 pixels a side: one window over the whole picture, scaled to 64 samples.
    private static func small(
        _ a: UnsafePointer<UInt8>, strideA: Int, _ b: UnsafePointer<UInt8>, strideB: Int, width: Int, height: Int
    ) -> Double {
        let count = Double(width * height)
        guard count > 0 else { return 1 }
        var s1 = 0.0
        var s2 = 0.0
        var ss = 0.0
        var s12 = 0.0
        for y in 0..<height {
            for x in 0..<width {
                let va = Double(a[y * strideA + x])
                let vb = Double(b[y * strideB + x])
                s1 += va
                s2 += vb
                ss += va * va + vb * vb
                s12 += va * vb
            }
        }
        let scale = 64 / count
        return Self.window(s1 * scale, s2 * scale, ss * scale, s12 * scale)
    }
}
