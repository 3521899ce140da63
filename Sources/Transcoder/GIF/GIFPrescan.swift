/// How a frame leaves the canvas once its delay is over (the GIF89a "disposal method").
enum GIFDisposal: UInt8, Sendable {
    /// 0: unspecified; browsers keep the frame, like 1.
    case unspecified = 0
    /// 1: leave the frame in place.
    case keep = 1
    /// 2: clear the frame rectangle to transparent (browsers ignore the "background colour" index).
    case clearToTransparent = 2
    /// 3: restore the canvas to what it was before this frame was drawn.
    case restorePrevious = 3

    /// Values 4-7 are reserved; browsers treat them as "keep".
    init(rawField: UInt8) {
        self = GIFDisposal(rawValue: rawField) ?? .keep
    }
}

/// A frame as the pre-scan found it: everything but its pixels.
struct GIFFrameInfo: Sendable, Equatable {
    /// The frame rectangle as written in the file (it may reach past the logical screen).
    var left: Int
    var top: Int
    var width: Int
    var height: Int
    var interlaced: Bool
    /// Byte offset and entry count of the frame's local colour table, if it has one.
    var localColorTable: ColorTableLocation?
    /// The delay as written, in centiseconds (0 when the frame has no graphic control extension).
    var delayCentiseconds: Int
    var disposal: GIFDisposal
    var transparentIndex: UInt8?
    /// Where the frame's image data ends in the file: the bytes the GIF spends up to and including this frame.
    var sourceEnd = 0

    /// How long the frame shows, in milliseconds, by the rule Chrome, Firefox and Safari share:
    /// a delay of 0 or 1 centisecond plays as 100 ms ("fast" GIFs made for old browsers would otherwise
    /// spin), every other delay plays exactly. There is no upper clamp.
    var displayMilliseconds: Int {
        self.delayCentiseconds <= 1 ? 100 : self.delayCentiseconds * 10
    }
}

/// Where a colour table sits in the file, so the decoder can read it without copying it here.
struct ColorTableLocation: Sendable, Equatable {
    var offset: Int
    var count: Int
}

/// The structure of a GIF, found by walking its blocks without decoding any LZW data.
///
/// The pre-scan enforces every limit before a single pixel is decoded: a hostile file that claims a
/// huge canvas or thousands of frames costs one pass over its bytes, nothing more.
struct GIFPrescan: Sendable {
    /// The canvas: the logical screen, enlarged to the first frame's rectangle where that reaches past it.
    var width: Int
    var height: Int
    var globalColorTable: ColorTableLocation?
    /// Frames whose data is complete in the file, in order.
    var frames: [GIFFrameInfo]
    /// The NETSCAPE2.0 (or ANIMEXTS1.0) loop count; `nil` when the file has no such block.
    var loopCount: Int?
    /// The file ended (or broke off) before the trailer: the frames found are all that is kept.
    var truncated: Bool

    private static let signatures: [[UInt8]] = [Array("GIF87a".utf8), Array("GIF89a".utf8)]

    /// Scans `bytes` and checks `limits` (the input's size is checked before, by `Transcoder.header`).
    /// - Throws: `TranscodeError` with `unsupported-format`, `corrupt`, `dimensions-too-large`,
    ///   `too-many-frames` or `too-many-pixels`.
    init(bytes: UnsafeRawBufferPointer, limits: TranscodeLimits) throws {
        var reader = ByteReader(bytes: bytes)
        guard let signature = reader.read(count: 6).map(Array.init),
            Self.signatures.contains(signature)
        else {
            // A file that is a strict prefix of a signature is a GIF cut short, not something else.
            let head = Array(bytes.prefix(6))
            if !head.isEmpty, head.count < 6, Self.signatures.contains(where: { $0.starts(with: head) }) {
                throw TranscodeError(.corrupt, "the file ends inside the GIF header")
            }
            throw TranscodeError(.unsupportedFormat, "the data does not start with a GIF87a or GIF89a signature")
        }
        guard let screenWidth = reader.readUInt16(), let screenHeight = reader.readUInt16(),
            let packed = reader.readByte(), reader.skip(2)
        else {
            throw TranscodeError(.corrupt, "the file ends inside the logical screen descriptor")
        }
        self.width = Int(screenWidth)
        self.height = Int(screenHeight)
        guard self.width > 0, self.height > 0 else {
            throw TranscodeError(.corrupt, "the logical screen is \(self.width)x\(self.height)")
        }
        guard self.width <= limits.maxWidth, self.height <= limits.maxHeight else {
            throw TranscodeError(
                .dimensionsTooLarge,
                "the canvas is \(self.width)x\(self.height); the limit is \(limits.maxWidth)x\(limits.maxHeight)")
        }
        self.globalColorTable = nil
        if packed & 0x80 != 0 {
            let count = 2 << Int(packed & 0x07)
            let location = ColorTableLocation(offset: reader.position, count: count)
            guard reader.skip(count * 3) else {
                throw TranscodeError(.corrupt, "the file ends inside the global colour table")
            }
            self.globalColorTable = location
        }
        self.frames = []
        self.loopCount = nil
        self.truncated = true

        var canvasPixels = Int64(self.width) * Int64(self.height)
        var decodedPixels: Int64 = 0
        var pendingControl: (delay: Int, disposal: GIFDisposal, transparent: UInt8?)?
        scan: while let introducer = reader.readByte() {
            switch introducer {
            case 0x3B:  // trailer
                self.truncated = false
                break scan
            case 0x21:  // extension
                guard let label = reader.readByte() else { break scan }
                if label == 0xF9 {
                    // Graphic control extension: a 4-byte block, then the usual sub-block chain.
                    guard let size = reader.readByte(), let block = reader.read(count: Int(size)) else { break scan }
                    if size >= 4 {
                        let fields = block[block.startIndex]
                        let delay = Int(block[block.startIndex + 1]) | Int(block[block.startIndex + 2]) << 8
                        let transparent = fields & 0x01 != 0 ? block[block.startIndex + 3] : nil
                        pendingControl = (delay, GIFDisposal(rawField: (fields >> 2) & 0x07), transparent)
                    }
                    guard reader.skipSubBlocks() else { break scan }
                } else if label == 0xFF {
                    guard let size = reader.readByte(), let identifier = reader.read(count: Int(size)) else {
                        break scan
                    }
                    let name = Array(identifier)
                    let isLoopBlock =
                        name == Array("NETSCAPE2.0".utf8) || name == Array("ANIMEXTS1.0".utf8)
                    // Sub-block 1 of a loop block carries the count. Chrome and Firefox overwrite it with
                    // every loop block they meet, so the last one wins.
                    while let length = reader.readByte(), length > 0 {
                        guard let data = reader.read(count: Int(length)) else { break scan }
                        if isLoopBlock, length >= 3, data[data.startIndex] == 1 {
                            self.loopCount =
                                Int(data[data.startIndex + 1]) | Int(data[data.startIndex + 2]) << 8
                        }
                    }
                } else {
                    guard reader.skipSubBlocks() else { break scan }
                }
            case 0x2C:  // image descriptor
                guard let left = reader.readUInt16(), let top = reader.readUInt16(),
                    let frameWidth = reader.readUInt16(), let frameHeight = reader.readUInt16(),
                    let fields = reader.readByte()
                else { break scan }
                var localTable: ColorTableLocation?
                if fields & 0x80 != 0 {
                    let count = 2 << Int(fields & 0x07)
                    localTable = ColorTableLocation(offset: reader.position, count: count)
                    guard reader.skip(count * 3) else { break scan }
                }
                guard let minimumCodeSize = reader.readByte() else { break scan }
                guard reader.skipSubBlocks() else { break scan }
                guard frameWidth > 0, frameHeight > 0, (1...11).contains(minimumCodeSize) else {
                    // A frame that cannot be decoded ends the animation like a truncation would; only a
                    // file with nothing before it is an error.
                    if !self.frames.isEmpty { break scan }
                    throw TranscodeError(
                        .corrupt,
                        "frame \(self.frames.count + 1) is \(frameWidth)x\(frameHeight) "
                            + "with LZW code size \(minimumCodeSize)")
                }
                // The frame's own rectangle is decoded in full even where it is clipped away, so it is
                // held to the same bounds as the canvas.
                guard Int(frameWidth) <= limits.maxWidth, Int(frameHeight) <= limits.maxHeight else {
                    throw TranscodeError(
                        .dimensionsTooLarge,
                        "frame \(self.frames.count + 1) is \(frameWidth)x\(frameHeight); "
                            + "the limit is \(limits.maxWidth)x\(limits.maxHeight)")
                }
                if self.frames.isEmpty {
                    // Like Chromium: a first frame reaching past the logical screen enlarges it (a screen
                    // written too small, or as 0x0, is common in old files); later frames are clipped.
                    let right = Int(left) + Int(frameWidth)
                    let bottom = Int(top) + Int(frameHeight)
                    if right > self.width || bottom > self.height {
                        guard right <= limits.maxWidth, bottom <= limits.maxHeight else {
                            throw TranscodeError(
                                .dimensionsTooLarge,
                                "the first frame reaches \(right)x\(bottom), which becomes the canvas; the limit is "
                                    + "\(limits.maxWidth)x\(limits.maxHeight)")
                        }
                        self.width = max(self.width, right)
                        self.height = max(self.height, bottom)
                        canvasPixels = Int64(self.width) * Int64(self.height)
                    }
                }
                guard self.frames.count < limits.maxFrames else {
                    throw TranscodeError(
                        .tooManyFrames, "the GIF has more than \(limits.maxFrames) frames")
                }
                decodedPixels += max(canvasPixels, Int64(frameWidth) * Int64(frameHeight))
                guard decodedPixels <= limits.maxTotalPixels else {
                    throw TranscodeError(
                        .tooManyPixels,
                        "decoding would produce more than \(limits.maxTotalPixels) pixels "
                            + "(canvas \(self.width)x\(self.height), \(self.frames.count + 1)+ frames)")
                }
                let control = pendingControl ?? (0, .unspecified, nil)
                pendingControl = nil
                self.frames.append(
                    GIFFrameInfo(
                        left: Int(left), top: Int(top), width: Int(frameWidth), height: Int(frameHeight),
                        interlaced: fields & 0x40 != 0, localColorTable: localTable,
                        delayCentiseconds: control.delay, disposal: control.disposal,
                        transparentIndex: control.transparent, sourceEnd: reader.position))
            default:
                // Like Chrome and Firefox: bytes that start no known block end the stream, and what came
                // before them still plays.
                break scan
            }
        }
        guard !self.frames.isEmpty else {
            throw TranscodeError(.corrupt, "the GIF has no complete frame")
        }
    }

    /// Browser loop semantics: no loop block plays once, 0 loops forever, n plays n + 1 times.
    /// Returns `nil` for "forever".
    var playCount: Int? {
        guard let loopCount = self.loopCount else { return 1 }
        return loopCount == 0 ? nil : loopCount + 1
    }
}

/// A bounds-checked cursor over the GIF's bytes; every read returns `nil` past the end.
private struct ByteReader {
    let bytes: UnsafeRawBufferPointer
    var position = 0

    init(bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    mutating func readByte() -> UInt8? {
        guard self.position < self.bytes.count else { return nil }
        defer { self.position += 1 }
        return self.bytes[self.position]
    }

    mutating func readUInt16() -> UInt16? {
        guard let low = self.readByte(), let high = self.readByte() else { return nil }
        return UInt16(low) | UInt16(high) << 8
    }

    mutating func read(count: Int) -> Slice<UnsafeRawBufferPointer>? {
        guard count >= 0, self.bytes.count - self.position >= count else { return nil }
        defer { self.position += count }
        return self.bytes[self.position..<self.position + count]
    }

    mutating func skip(_ count: Int) -> Bool {
        self.read(count: count) != nil
    }

    /// Skips a chain of data sub-blocks up to and including its zero-length terminator.
    mutating func skipSubBlocks() -> Bool {
        while let length = self.readByte() {
            if length == 0 { return true }
            guard self.skip(Int(length)) else { return false }
        }
        return false
    }
}
