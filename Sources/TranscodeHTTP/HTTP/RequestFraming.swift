import NIOCore
import TranscodeCore

/// How `MediaHitFront` cuts a connection's bytes into requests, as a value with no channel: the state that
/// survives between reads (a head's start held, a body's bytes still to come, whether framing was given up)
/// and the one rule of where a request ends. The front asks `next()` for each step of a read and says what it
/// did with each head (`answered`, `passHead`); tests drive it with bytes alone (`RequestFramingTests`).
///
/// It frames plain HTTP/1.1 only: a head of CRLF-ended lines of visible ASCII (`RawRequestHead`) and then
/// exactly `Content-Length` bytes of body. Anything it cannot frame for certain (a bare CR or LF, a control or
/// non-ASCII byte, `Transfer-Encoding`, `Upgrade`, `CONNECT`, a malformed or repeated `Content-Length`) ends
/// framing: from there on every byte goes to the decoder as read. A head longer than `maxHeadBytes` is
/// `tooLong`: the front answers it (414 or 431) when it may, else it goes to the decoder too.
struct RequestFraming {
    /// The longest head taken (under the decoder's own limit, 80 KB, which answers a bare 400). The longest
    /// source URL is 8 KB, so a signed `/v1` path about 11 KB; the rest is for the fields (cookies).
    static let maxHeadBytes = 64 * 1024

    enum Mode: Equatable {
        /// Requests are framed here.
        case framing
        /// Everything read goes to the decoder.
        case passing
        /// Answered with `Connection: close`: nothing more is read.
        case closed
    }

    /// What to do next with the read.
    enum Step {
        /// Bytes of the current request's body: pass them on.
        case body(ByteBuffer)
        /// A whole head at the start of what is left (`length` bytes; its body, `bodyLength` bytes, may be there
        /// too: `wholeBody`). Answer it (`answered`) or pass it on (`passHead`) before the next step.
        case head(RawRequestHead, length: Int, bodyLength: Int)
        /// Framing ended: these bytes, and every later read, go to the decoder as they are.
        case passOn(ByteBuffer)
        /// The head at the start of what is left is longer than `maxHeadBytes`: its request line alone
        /// (`requestLine`) or with its fields. Answer it and `close()`, or `passRest()`.
        case tooLong(requestLine: Bool)
        /// Nothing more in this read (the start of a head may be held for the next one).
        case done
    }

    private(set) var mode = Mode.framing
    /// What is left of the current read.
    private var input = ByteBuffer()
    /// How much of `input`'s start was searched for a head's end already (the head held from the read before).
    private var searched = 0
    /// The start of a head not read in full yet, and how much of it was searched.
    private var partial: (bytes: ByteBuffer, searched: Int)?
    /// Bytes of the current request's body still to pass on.
    private var bodyLeft = 0
    /// The head `next()` returned last, not answered or passed yet.
    private var pending: (length: Int, bodyLength: Int)?

    /// Whether `input` is the held head's own buffer (with this read appended), not the socket's.
    private var inputIsHeld = false

    /// Starts a read: `bytes` after the head held from the read before.
    mutating func read(_ bytes: ByteBuffer) {
        var bytes = bytes
        if var partial = self.partial {
            self.partial = nil
            partial.bytes.writeBuffer(&bytes)
            (self.input, self.searched) = partial
            self.inputIsHeld = true
        } else {
            (self.input, self.searched) = (bytes, 0)
            self.inputIsHeld = false
        }
    }

    /// The next step of the read.
    mutating func next() -> Step {
        precondition(self.pending == nil, "a head was neither answered nor passed on")
        guard self.mode == .framing, self.input.readableBytes > 0 else {
            self.input = ByteBuffer()
            return .done
        }
        if self.bodyLeft > 0 {
            let count = min(self.bodyLeft, self.input.readableBytes)
            self.bodyLeft -= count
            return .body(self.input.readSlice(length: count)!)
        }
        let length: Int
        switch Self.headEnd(self.input, from: self.searched) {
        case .at(let end):
            length = end
        case .notYet where self.input.readableBytes < Self.maxHeadBytes:
            // A copy of a slice of the socket's read buffer, which it would keep alive; a head held already was
            // copied then, and the read appended to it, so it is kept as it is (copying it at every read would
            // cost the square of its length, for a head sent a byte at a time).
            if self.inputIsHeld {
                self.input.discardReadBytes()
                self.partial = (self.input, self.input.readableBytes)
            } else {
                self.partial = (ByteBuffer(buffer: self.input), self.input.readableBytes)
            }
            self.input = ByteBuffer()
            return .done
        case .notYet:
            let lineEnded = self.input.readableBytesView.prefix(Self.maxHeadBytes).contains(0x0A)
            return .tooLong(requestLine: !lineEnded)
        case .unreadable:
            // The decoder's error comes at once, not at the head deadline.
            return self.passRest()
        }
        self.searched = 0
        guard
            let head = self.input.withUnsafeReadableBytes({
                RawRequestHead(UnsafeRawBufferPointer(rebasing: $0[..<length]))
            }), let bodyLength = head.bodyLength
        else { return self.passRest() }
        self.pending = (length, bodyLength)
        return .head(head, length: length, bodyLength: bodyLength)
    }

    /// The body of the head just returned, when it came whole in this read.
    var wholeBody: ByteBufferView? {
        guard let pending = self.pending, self.input.readableBytes >= pending.length + pending.bodyLength else {
            return nil
        }
        return self.input.readableBytesView.dropFirst(pending.length).prefix(pending.bodyLength)
    }

    /// The head just returned was answered here: it goes, and its body with it when `withBody` (a body read
    /// whole, `wholeBody`).
    mutating func answered(withBody: Bool = false) {
        guard let pending = self.pending.take() else { preconditionFailure("no head to answer") }
        self.input.moveReaderIndex(forwardBy: pending.length + (withBody ? pending.bodyLength : 0))
    }

    /// The head just returned goes on to the decoder: its bytes, its body following as `.body` steps.
    mutating func passHead() -> ByteBuffer {
        guard let pending = self.pending.take() else { preconditionFailure("no head to pass on") }
        self.bodyLeft = pending.bodyLength
        return self.input.readSlice(length: pending.length)!
    }

    /// Ends framing: the rest of the read, and every later read, go to the decoder as they are.
    mutating func passRest() -> Step {
        self.mode = .passing
        let rest = self.input
        self.input = ByteBuffer()
        return .passOn(rest)
    }

    /// Nothing more is read (an answer closes the connection); the rest of this read is dropped at the next step.
    mutating func close() {
        self.mode = .closed
    }

    /// The connection's input ended: a head held here goes to the decoder (which answers an unfinished one with
    /// its error), and framing ends.
    mutating func takeHeld() -> ByteBuffer? {
        guard let partial = self.partial.take() else { return nil }
        self.mode = .passing
        return partial.bytes
    }

    /// Where the head at the start of `buffer` ends (the length up to and including its empty line), once it is
    /// all there; `unreadable` at the first byte no head read here may hold (a bare CR or LF, a control or
    /// non-ASCII byte), so that the decoder sees it, and errs, at once. The first `searched` bytes were
    /// searched already.
    enum HeadEnd: Equatable {
        case at(Int)
        case notYet
        case unreadable
    }

    static func headEnd(_ buffer: ByteBuffer, from searched: Int) -> HeadEnd {
        buffer.withUnsafeReadableBytes { bytes in
            let end = min(bytes.count, Self.maxHeadBytes)
            // From the last byte searched: a CR there was not checked against what follows it.
            var index = max(0, searched - 1)
            while index < end {
                switch bytes[index] {
                case 0x0A:
                    guard index > 0, bytes[index - 1] == 0x0D else { return .unreadable }
                    if index >= 3, bytes[index - 2] == 0x0A, bytes[index - 3] == 0x0D { return .at(index + 1) }
                case 0x0D:
                    if index + 1 < bytes.count, bytes[index + 1] != 0x0A { return .unreadable }
                case 0x09, 0x20...0x7E:
                    break
                default:
                    return .unreadable
                }
                index += 1
            }
            return .notYet
        }
    }
}
