import Foundation
import Synchronization

/// What `BatchRunner` keeps of a batch besides its URLs: `batches/<id>/request.json`, written last when the batch is
/// recorded. Its URLs are in the folder's `urls` and `urls.index` (`BatchFolder`), read one at a time, so that a
/// batch of 10,000 long URLs costs its counts in memory, not its URLs.
struct BatchRecord: Codable, Sendable {
    /// How many URLs it has.
    var total: Int
    var background: String?
    var callbackURL: String?
    var output: String?
    var createdAt: Double

    init(_ request: BatchRequest) {
        self.total = request.urls.count
        self.background = request.background
        self.callbackURL = request.callbackURL
        self.output = request.output
        self.createdAt = request.createdAt
    }

    /// What its items make.
    var outputKind: BatchOutput { self.output.flatMap(BatchOutput.init(rawValue:)) ?? .img }
}

/// One batch's folder on disk, `<batches>/<id>/`:
/// - `urls`: the URLs' UTF-8 bytes one after another, and `urls.index`: each URL's end offset in `urls`, 8 bytes
///   little-endian, so that URL `i` is read with two `pread`s;
/// - `request.json`: its `BatchRecord`, written last (a folder without it is a batch never recorded);
/// - `results.ndjson`: one line per finished URL, appended, read a page at a time.
///
/// A folder of a build that kept the URLs inside `request.json` (a `BatchRequest`) is rewritten in this form when
/// it is read back (`load`).
struct BatchFolder: Sendable {
    let path: String

    var requestPath: String { self.path + "/request.json" }
    var urlsPath: String { self.path + "/urls" }
    var indexPath: String { self.path + "/urls.index" }
    var resultsPath: String { self.path + "/results.ndjson" }

    /// Writes a new batch's files. - Returns: its record. - Throws: when the disk refuses one of them.
    func create(_ request: BatchRequest) throws -> BatchRecord {
        try FileManager.default.createDirectory(atPath: self.path, withIntermediateDirectories: true)
        try self.writeURLs(request.urls)
        let record = BatchRecord(request)
        try Self.replace(self.requestPath, with: [UInt8](try JSONEncoder().encode(record)))
        return record
    }

    /// Reads the batch's record back. A folder in the older form (its URLs inside `request.json`) is rewritten in
    /// this one first. - Returns: nil when the folder holds no recorded batch.
    func load() -> BatchRecord? {
        guard let data = FileManager.default.contents(atPath: self.requestPath) else { return nil }
        if let record = try? JSONDecoder().decode(BatchRecord.self, from: data),
            let index = try? FileManager.default.attributesOfItem(atPath: self.indexPath)[.size] as? Int,
            index == record.total * 8, self.urlsAreWhole(count: record.total)
        {
            return record
        }
        guard let request = try? JSONDecoder().decode(BatchRequest.self, from: data) else { return nil }
        return try? self.create(request)
    }

    /// Whether `urls` is as long as `urls.index` says (its last entry), so that every URL reads.
    private func urlsAreWhole(count: Int) -> Bool {
        guard count > 0 else { return true }
        guard let size = try? FileManager.default.attributesOfItem(atPath: self.urlsPath)[.size] as? Int else {
            return false
        }
        return self.withIndex { self.end(ofURL: count - 1, in: $0) } == size
    }

    /// `body` with `urls.index` open; nil when it cannot be opened.
    private func withIndex<Result>(_ body: (Int32) -> Result?) -> Result? {
        let descriptor = open(self.indexPath, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        return body(descriptor)
    }

    /// Where URL `index` ends in `urls`: its entry of the index open as `descriptor`.
    private func end(ofURL index: Int, in descriptor: Int32) -> Int? {
        var end: UInt64 = 0
        let read = withUnsafeMutableBytes(of: &end) { pread(descriptor, $0.baseAddress, 8, off_t(index * 8)) }
        return read == 8 ? Int(UInt64(littleEndian: end)) : nil
    }

    /// URL `index`, read from disk. - Returns: nil when the batch's files are gone (deleted meanwhile) or cut short.
    func url(at index: Int) -> String? {
        guard index >= 0,
            let span = self.withIndex({ descriptor -> Range<Int>? in
                // It starts where the URL before ends (the first at 0).
                guard let start = index == 0 ? 0 : self.end(ofURL: index - 1, in: descriptor),
                    let end = self.end(ofURL: index, in: descriptor), end >= start
                else { return nil }
                return start..<end
            }),
            span.count <= 1 << 20
        else { return nil }
        let (start, end) = (span.lowerBound, span.upperBound)
        let urlsFile = open(self.urlsPath, O_RDONLY | O_CLOEXEC)
        guard urlsFile >= 0 else { return nil }
        defer { close(urlsFile) }
        var bytes = [UInt8](repeating: 0, count: end - start)
        let got = bytes.withUnsafeMutableBytes { pread(urlsFile, $0.baseAddress, end - start, off_t(start)) }
        guard got == end - start else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Calls `body` with the index and status of each complete result line, in file order, reading the file in
    /// pieces.
    func forEachResult(_ body: (_ index: Int, _ status: ItemStatus) -> Void) {
        struct Line: Decodable {
            let index: Int
            let status: ItemStatus
        }
        let decoder = JSONDecoder()
        self.forEachLine { line in
            if let result = try? decoder.decode(Line.self, from: Data(line)) { body(result.index, result.status) }
            return true
        }
    }

    /// Complete result lines `offset..<offset+limit` and how many complete lines there are (a line being appended has
    /// no newline yet), reading the file in pieces: a page costs its lines in memory, not the whole file.
    func results(offset: Int, limit: Int) -> (lines: [[UInt8]], total: Int) {
        var lines: [[UInt8]] = []
        var total = 0
        self.forEachLine { line in
            if total >= offset, lines.count < limit { lines.append(Array(line)) }
            total += 1
            return true
        }
        return (lines, total)
    }

    /// Cuts a line left without its newline (a crash mid-write) off the end of `results.ndjson`: the next append must
    /// start a line of its own.
    func dropPartialLine() {
        let descriptor = open(self.resultsPath, O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        var end = Int(lseek(descriptor, 0, SEEK_END))
        let size = end
        var chunk = [UInt8](repeating: 0, count: 65536)
        while end > 0 {
            let start = max(0, end - chunk.count)
            let count = end - start
            guard chunk.withUnsafeMutableBytes({ pread(descriptor, $0.baseAddress, count, off_t(start)) }) == count
            else { return }
            if let newline = chunk[0..<count].lastIndex(of: UInt8(ascii: "\n")) {
                if start + newline + 1 < size { _ = ftruncate(descriptor, off_t(start + newline + 1)) }
                return
            }
            end = start
        }
        if size > 0 { _ = ftruncate(descriptor, 0) }
    }

    /// Appends one result line, one append at a time in the process (items of a batch finish concurrently): a
    /// short write (a full disk) is cut off again, so a line is whole or absent and never interleaved with another.
    /// - Returns: whether all of it was written.
    func append(result line: [UInt8]) -> Bool {
        Self.appending.withLock { _ in
            let descriptor = open(self.resultsPath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
            guard descriptor >= 0 else { return false }
            defer { close(descriptor) }
            let before = lseek(descriptor, 0, SEEK_END)
            guard Self.write(descriptor, line) else {
                if before >= 0 { _ = ftruncate(descriptor, before) }
                return false
            }
            return true
        }
    }

    private static let appending = Mutex(())

    // MARK: Files

    /// Calls `body` with each complete line of `results.ndjson` (without its newline) until it returns false.
    private func forEachLine(_ body: (ArraySlice<UInt8>) -> Bool) {
        let descriptor = open(self.resultsPath, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        var pending: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return }
            pending += chunk[0..<count]
            var start = pending.startIndex
            while let newline = pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
                if newline > start, !body(pending[start..<newline]) { return }
                start = newline + 1
            }
            pending.removeSubrange(..<start)
        }
    }

    /// Writes `urls` and `urls.index` (each through a temporary file and a rename).
    private func writeURLs(_ urls: [String]) throws {
        var bytes: [UInt8] = []
        var ends: [UInt8] = []
        ends.reserveCapacity(urls.count * 8)
        let temporary = self.urlsPath + ".tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw Self.cannotRecord(self.urlsPath) }
        var offset: UInt64 = 0
        var written = true
        for url in urls {
            bytes += url.utf8
            offset += UInt64(url.utf8.count)
            withUnsafeBytes(of: offset.littleEndian) { ends += $0 }
            if bytes.count >= 1 << 20 {
                written = written && Self.write(descriptor, bytes)
                bytes.removeAll(keepingCapacity: true)
            }
        }
        written = written && Self.write(descriptor, bytes)
        close(descriptor)
        guard written, rename(temporary, self.urlsPath) == 0 else {
            unlink(temporary)
            throw Self.cannotRecord(self.urlsPath)
        }
        try Self.replace(self.indexPath, with: ends)
    }

    /// Writes `bytes` to `path` through a temporary file beside it and a rename.
    private static func replace(_ path: String, with bytes: [UInt8]) throws {
        let temporary = path + ".tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw Self.cannotRecord(path) }
        let written = Self.write(descriptor, bytes)
        close(descriptor)
        guard written, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw Self.cannotRecord(path)
        }
    }

    private static func write(_ descriptor: Int32, _ bytes: [UInt8]) -> Bool {
        var done = 0
        while done < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress! + done, $0.count - done) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return false }
            done += count
        }
        return true
    }

    private static func cannotRecord(_ path: String) -> ServiceError {
        ServiceError.insufficientStorage("cannot record the batch in \(path)")
    }
}
