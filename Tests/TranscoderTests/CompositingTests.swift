import TestSupport
import Testing

@testable import Transcoder

/// Browser compositing rules, checked on the pixels of the reopened MP4. Colour regions are at least
/// 8 pixels and even-aligned. The encoder's bicubic 4:2:0 chroma filter bleeds about two pixels across a
/// saturated edge (31-35 dB on these pictures), while a single 8x8 region of the wrong colour in a 32x32
/// picture costs more than 14 dB: above 28 dB, every region has the right colour.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct CompositingTests {
    // Palette indices of GIFBuilder's default palette.
    static let black: UInt8 = 0, white: UInt8 = 1, red: UInt8 = 2, green: UInt8 = 3, blue: UInt8 = 4

    /// Frame 1 fills a 32x32 canvas red, frame 2 paints green over the top-left quarter with `disposal`,
    /// frame 3 paints blue over the bottom-right quarter.
    private func threeFrames(disposal: Int) -> GIFBuilder {
        var gif = GIFBuilder(width: 32, height: 32)
        gif.frames = [
            .filled(Self.red, width: 32, height: 32, disposal: 1),
            .filled(Self.green, width: 16, height: 16, disposal: disposal),
            .filled(Self.blue, left: 16, top: 16, width: 16, height: 16),
        ]
        return gif
    }

    private func expectPictures(
        _ result: Conversion, _ expected: [[UInt32]], sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(result.video.pictures.count == expected.count, sourceLocation: sourceLocation)
        for (index, (actual, wanted)) in zip(result.video.pictures, expected).enumerated() {
            let quality = psnr(actual, wanted)
            #expect(quality > 28, "frame \(index): PSNR \(quality) dB", sourceLocation: sourceLocation)
        }
    }

    @Test(arguments: [0, 1, 4])
    func keepDisposals(disposal: Int) async throws {
        let result = try await convert(try self.threeFrames(disposal: disposal).build())
        self.expectPictures(
            result,
            [
                picture(width: 32, height: 32, base: 0xFF0000),
                picture(width: 32, height: 32, base: 0xFF0000, [(0, 0, 16, 16, 0x00FF00)]),
                picture(width: 32, height: 32, base: 0xFF0000, [(0, 0, 16, 16, 0x00FF00), (16, 16, 16, 16, 0x0000FF)]),
            ])
    }

    @Test func disposalTwoClearsToTransparentShownAsBackground() async throws {
        var options = TranscodeOptions()
        options.background = RGBColor(hex: "#ffff00")!
        let result = try await convert(try self.threeFrames(disposal: 2).build(), options: options)
        self.expectPictures(
            result,
            [
                picture(width: 32, height: 32, base: 0xFF0000),
                picture(width: 32, height: 32, base: 0xFF0000, [(0, 0, 16, 16, 0x00FF00)]),
                picture(width: 32, height: 32, base: 0xFF0000, [(0, 0, 16, 16, 0xFFFF00), (16, 16, 16, 16, 0x0000FF)]),
            ])
        #expect(result.metadata.hasTransparency)
    }

    @Test func disposalThreeRestoresThePreviousCanvas() async throws {
        let result = try await convert(try self.threeFrames(disposal: 3).build())
        self.expectPictures(
            result,
            [
                picture(width: 32, height: 32, base: 0xFF0000),
                picture(width: 32, height: 32, base: 0xFF0000, [(0, 0, 16, 16, 0x00FF00)]),
                picture(width: 32, height: 32, base: 0xFF0000, [(16, 16, 16, 16, 0x0000FF)]),
            ])
        #expect(!result.metadata.hasTransparency)
    }

    @Test func disposalThreeOnTheFirstFrameRestoresTransparency() async throws {
        var gif = GIFBuilder(width: 32, height: 32)
        gif.frames = [
            .filled(Self.green, width: 16, height: 16, disposal: 3),
            .filled(Self.blue, left: 16, top: 16, width: 16, height: 16),
        ]
        let result = try await convert(try gif.build())
        self.expectPictures(
            result,
            [
                picture(width: 32, height: 32, base: 0xFFFFFF, [(0, 0, 16, 16, 0x00FF00)]),
                picture(width: 32, height: 32, base: 0xFFFFFF, [(16, 16, 16, 16, 0x0000FF)]),
            ])
        #expect(result.metadata.hasTransparency)
    }

    @Test func transparentIndexShowsWhatIsUnderneath() async throws {
        var gif = GIFBuilder(width: 32, height: 32)
        var overlay = GIFBuilder.Frame.filled(Self.blue, width: 32, height: 32, transparentIndex: Int(Self.black))
        for y in 0..<32 { for x in 0..<16 { overlay.pixels[y * 32 + x] = Self.black } }
        gif.frames = [.filled(Self.red, width: 32, height: 32), overlay]
        let result = try await convert(try gif.build())
        self.expectPictures(
            result,
            [
                picture(width: 32, height: 32, base: 0xFF0000),
                picture(width: 32, height: 32, base: 0xFF0000, [(16, 0, 16, 32, 0x0000FF)]),
            ])
        #expect(!result.metadata.hasTransparency)
    }

    @Test(arguments: ["#000000", "#00ff00", "#FFFFFF"])
    func transparencyIsFlattenedOverTheBackground(hex: String) async throws {
        var gif = GIFBuilder(width: 32, height: 32)
        var frame = GIFBuilder.Frame.filled(Self.red, width: 32, height: 32, transparentIndex: Int(Self.white))
        for y in 16..<32 { for x in 0..<32 { frame.pixels[y * 32 + x] = Self.white } }
        gif.frames = [frame]
        var options = TranscodeOptions()
        options.background = RGBColor(hex: hex)!
        let result = try await convert(try gif.build(), options: options)
        let background = UInt32(hex.dropFirst(), radix: 16)!
        self.expectPictures(result, [picture(width: 32, height: 32, base: 0xFF0000, [(0, 16, 32, 16, background)])])
        #expect(result.metadata.hasTransparency)
        #expect(result.metadata.background == RGBColor(hex: hex))
    }

    @Test func interlacedRowsLandInPlace() async throws {
        var gif = GIFBuilder(width: 32, height: 32)
        var frame = GIFBuilder.Frame.filled(Self.red, width: 32, height: 32)
        frame.interlaced = true
        // Bands of 8 rows: red, blue, green, white.
        for y in 0..<32 {
            for x in 0..<32 { frame.pixels[y * 32 + x] = [Self.red, Self.blue, Self.green, Self.white][y / 8] }
        }
        gif.frames = [frame]
        let result = try await convert(try gif.build())
        self.expectPictures(
            result,
            [
                picture(
                    width: 32, height: 32, base: 0xFF0000,
                    [(0, 8, 32, 8, 0x0000FF), (0, 16, 32, 8, 0x00FF00), (0, 24, 32, 8, 0xFFFFFF)])
            ])
    }

    @Test func localPaletteOverridesTheGlobalOne() async throws {
        var gif = GIFBuilder(width: 32, height: 32)
        var frame = GIFBuilder.Frame.filled(1, width: 32, height: 32)
        frame.localPalette = [0x000000, 0x123456]
        gif.frames = [.filled(Self.red, width: 32, height: 32), frame, .filled(1, width: 32, height: 32)]
        let result = try await convert(try gif.build())
        self.expectPictures(
            result,
            [
                picture(width: 32, height: 32, base: 0xFF0000),
                picture(width: 32, height: 32, base: 0x123456),
                picture(width: 32, height: 32, base: 0xFFFFFF),
            ])
    }

    @Test func indicesPastThePaletteReadAsBlack() async throws {
        var gif = GIFBuilder(width: 32, height: 32)
        gif.palette = [0xFF0000, 0x00FF00]
        var frame = GIFBuilder.Frame.filled(0, width: 32, height: 32)
        for y in 0..<32 { for x in 16..<32 { frame.pixels[y * 32 + x] = 7 } }
        gif.frames = [frame]
        let result = try await convert(try gif.build())
        self.expectPictures(result, [picture(width: 32, height: 32, base: 0xFF0000, [(16, 0, 16, 32, 0x000000)])])
    }

    /// Chromium's rule: a first frame reaching past the logical screen enlarges the canvas to hold it; later
    /// frames are clipped to that canvas.
    @Test func aFirstFrameLargerThanTheScreenEnlargesTheCanvas() async throws {
        var gif = GIFBuilder(width: 16, height: 16)
        gif.frames = [
            .filled(Self.red, left: 8, top: 0, width: 16, height: 24),
            .filled(Self.blue, left: 20, top: 20, width: 20, height: 20),
        ]
        var options = TranscodeOptions()
        options.background = .white
        let result = try await convert(try gif.build(), options: options)
        #expect(result.metadata.sourceWidth == 24 && result.metadata.sourceHeight == 24)
        self.expectPictures(
            result,
            [
                picture(width: 24, height: 24, base: 0xFFFFFF, [(8, 0, 16, 24, 0xFF0000)]),
                picture(width: 24, height: 24, base: 0xFFFFFF, [(8, 0, 16, 24, 0xFF0000), (20, 20, 4, 4, 0x0000FF)]),
            ])
        // The enlarged canvas is held to the limits.
        options.limits.maxWidth = 20
        try await expectFailure(try gif.build(), .dimensionsTooLarge, options: options)
    }

    @Test func framesAreClippedToTheScreen() async throws {
        var gif = GIFBuilder(width: 32, height: 32)
        gif.frames = [
            .filled(Self.red, width: 32, height: 32),
            .filled(Self.blue, left: 24, top: 16, width: 40, height: 40),
            .filled(Self.green, left: 100, top: 100, width: 8, height: 8, delay: 30),
            // Beside the screen, on rows it does cover vertically (found by fuzzing: an empty horizontal clip).
            .filled(Self.green, left: 40, top: 0, width: 8, height: 8, delay: 0),
            .filled(Self.green, left: 0, top: 40, width: 8, height: 8, delay: 0),
        ]
        let result = try await convert(try gif.build())
        // The last three frames lie wholly outside: they change nothing, so they merge into the second.
        #expect(result.metadata.sourceFrameCount == 5)
        #expect(result.video.ptsMilliseconds == [0, 100])
        #expect(result.metadata.durationMs == 700)
        self.expectPictures(
            result,
            [
                picture(width: 32, height: 32, base: 0xFF0000),
                picture(width: 32, height: 32, base: 0xFF0000, [(24, 16, 8, 16, 0x0000FF)]),
            ])
    }

    /// Odd sizes are padded to even by copying the last column and row, so 4:2:0 chroma (shared by 2x2
    /// blocks) does not mix the pad into the picture's edge: with a background-coloured pad, the last
    /// column and row took half of its colour.
    @Test func oddSizesKeepTheirLastColumnAndRow() async throws {
        var options = TranscodeOptions()
        options.background = .black
        var uniform = GIFBuilder(width: 33, height: 17)
        uniform.frames = [.filled(Self.red, width: 33, height: 17)]
        let result = try await convert(try uniform.build(), options: options)
        #expect(result.metadata.outputWidth == 34 && result.metadata.outputHeight == 18)
        #expect(result.video.width == 34 && result.video.height == 18)
        let frame = try #require(result.video.pictures.first)
        let red = rgba(0xFF0000)
        let interior = (0..<16).flatMap { y in (0..<32).map { x in frame[y * 34 + x] } }
        #expect(psnr(interior, [UInt32](repeating: red, count: interior.count)) > 35)
        let lastColumn = (0..<17).map { y in frame[y * 34 + 32] }
        #expect(psnr(lastColumn, [UInt32](repeating: red, count: lastColumn.count)) > 35)
        let lastRow = (0..<33).map { x in frame[16 * 34 + x] }
        #expect(psnr(lastRow, [UInt32](repeating: red, count: lastRow.count)) > 35)

        // The pad repeats the edge, whatever its colour, not the background (a black pad: about 5 dB; the
        // edge colours lose some saturation to their red neighbours through bicubic chroma).
        var edged = GIFBuilder(width: 33, height: 17)
        var pixels = [UInt8](repeating: Self.red, count: 33 * 17)
        for y in 0..<17 { pixels[y * 33 + 32] = Self.blue }
        for x in 0..<33 { pixels[16 * 33 + x] = Self.green }
        edged.frames = [GIFBuilder.Frame(width: 33, height: 17, pixels: pixels)]
        let padded = try #require(try await convert(try edged.build(), options: options).video.pictures.first)
        let padColumn = (0..<16).map { y in padded[y * 34 + 33] }
        #expect(psnr(padColumn, [UInt32](repeating: rgba(0x0000FF), count: 16)) > 20)
        let padRow = (0..<32).map { x in padded[17 * 34 + x] }
        #expect(psnr(padRow, [UInt32](repeating: rgba(0x00FF00), count: 32)) > 20)
    }

    @Test func oneByOneBecomesTwoByTwoOfTheSameColour() async throws {
        var gif = GIFBuilder(width: 1, height: 1)
        gif.loopCount = nil
        gif.frames = [.filled(Self.red, width: 1, height: 1, delay: 0)]
        let result = try await convert(try gif.build())
        #expect(result.video.width == 2 && result.video.height == 2)
        #expect(result.metadata.sourceWidth == 1 && result.metadata.sourceHeight == 1)
        #expect(result.metadata.durationMs == 100)
        // The one pixel keeps its colour (4.5 dB when the pad was background).
        let frame = try #require(result.video.pictures.first)
        #expect(psnr([frame[0]], [rgba(0xFF0000)]) > 35)
    }

    @Test func largeCanvasesAreScaledIntoTheBox() async throws {
        var gif = GIFBuilder(width: 64, height: 32)
        gif.frames = [
            .filled(Self.red, width: 32, height: 32), .filled(Self.blue, left: 32, top: 0, width: 32, height: 32),
        ]
        var options = TranscodeOptions()
        options.maxOutputWidth = 32
        options.maxOutputHeight = 32
        let result = try await convert(try gif.build(), options: options)
        #expect(result.metadata.outputWidth == 32 && result.metadata.outputHeight == 16)
        #expect(result.video.width == 32 && result.video.height == 16)
        let last = try #require(result.video.pictures.last)
        let left = (0..<16).flatMap { y in (0..<14).map { last[y * 32 + $0] } }
        let right = (0..<16).flatMap { y in (18..<32).map { last[y * 32 + $0] } }
        #expect(psnr(left, [UInt32](repeating: rgba(0xFF0000), count: left.count)) > 30)
        #expect(psnr(right, [UInt32](repeating: rgba(0x0000FF), count: right.count)) > 30)
    }

    @Test(arguments: [
        (4000, 100, 1920, 48), (1080, 2160, 540, 1080), (1921, 1081, 1920, 1080), (1920, 1080, 1920, 1080),
        (3, 5, 4, 6),
    ])
    func outputSize(width: Int, height: Int, expectedWidth: Int, expectedHeight: Int) {
        let size = Transcoder.outputSize(width: width, height: height, maxWidth: 1920, maxHeight: 1080)
        #expect(size.width == expectedWidth && size.height == expectedHeight)
    }

    /// An odd box (a rendition's `w:161`) as wide as the canvas: inside the box, not padded 1 px past it.
    @Test func anOddBoxIsNeverExceeded() {
        let size = Transcoder.outputSize(width: 161, height: 150, maxWidth: 161, maxHeight: 1080)
        #expect(size.width <= 161 && size.width % 2 == 0 && size.height == 150, "\(size)")
        // An even box as wide as an odd canvas: padded, as before.
        let padded = Transcoder.outputSize(width: 161, height: 151, maxWidth: 162, maxHeight: 152)
        #expect(padded.width == 162 && padded.height == 152 && !padded.scaled)
    }
}
