import AsyncHTTPClient
import NIOCore

/// A one-connection-per-request client for tests that talk to a server in another process.
struct URLSessionlessClient: Sendable {
    let port: Int

    func get(_ path: String, timeout: TimeAmount = .seconds(120)) async throws -> Int {
        try await self.fetch(path, timeout: timeout).0
    }

    func fetch(
        _ path: String, headers: [(String, String)] = [], timeout: TimeAmount = .seconds(120)
    ) async throws -> (Int, [UInt8]) {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(self.port)\(path)")
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        return try await self.send(request, timeout: timeout)
    }

    /// - Parameter timeout: until the answer's head (a synchronous conversion answers when it is done).
    func post(
        _ path: String, contentType: String, body: [UInt8], headers: [(String, String)] = [],
        timeout: TimeAmount = .seconds(120)
    ) async throws -> (Int, [UInt8]) {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(self.port)\(path)")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: contentType)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(bytes: body))
        return try await self.send(request, timeout: timeout)
    }

    private func send(_ request: HTTPClientRequest, timeout: TimeAmount = .seconds(120)) async throws -> (Int, [UInt8])
    {
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        do {
            let response = try await client.execute(request, timeout: timeout)
            let body = try await response.body.collect(upTo: 10 * 1024 * 1024)
            try await client.shutdown()
            return (Int(response.status.code), Array(body.readableBytesView))
        } catch {
            try? await client.shutdown()
            throw error
        }
    }
}
