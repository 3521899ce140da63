import Foundation

/// Runs `body` with a new empty directory under the system's temporary directory (named `prefix-<UUID>`),
/// and removes the directory and all it holds afterwards, whatever `body` did.
public func withTemporaryDirectorySync<Result>(prefix: String = "test", _ body: (String) throws -> Result) throws
    -> Result
{
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

/// `withTemporaryDirectorySync` for an async `body`.
public func withTemporaryDirectory<Result>(prefix: String = "test", _ body: (String) async throws -> Result)
    async throws -> Result
{
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try await body(path)
}
