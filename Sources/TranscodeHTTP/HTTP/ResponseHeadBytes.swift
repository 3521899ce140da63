import HTTPTypes
import NIOCore
import TranscodeCore

/// A response head as NIO's HTTP/1 encoder writes it: the status line, one line per field, an empty line.
struct ResponseHeadBytes: HeaderFieldSink {
    private var buffer: ByteBuffer

    init(_ status: HTTPResponse.Status, into buffer: ByteBuffer) {
        self.buffer = buffer
        self.buffer.writeStaticString("HTTP/1.1 ")
        self.buffer.writeString(String(status.code))
        self.buffer.writeStaticString(" ")
        self.buffer.writeString(status.reasonPhrase)
        self.buffer.writeStaticString("\r\n")
    }

    mutating func add(_ name: HTTPField.Name, _ value: String) {
        assert(HTTPField.isValidValue(value), "\(name): a value the server did not make or check")
        self.buffer.writeString(name.rawName)
        self.buffer.writeStaticString(": ")
        self.buffer.writeString(value)
        self.buffer.writeStaticString("\r\n")
    }

    /// The head, ended by its empty line.
    consuming func end() -> ByteBuffer {
        self.buffer.writeStaticString("\r\n")
        return self.buffer
    }
}
