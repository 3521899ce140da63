import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// A batch's folder on disk (`BatchFolder`): URLs read one at a time, results a page at a time, a line cut short by a
/// crash, and folders written by a build that kept the URLs inside `request.json`.
@Suite(.tags(.unit), .timeLimit(.minutes(2))) struct BatchFolderTests {
    static func request(_ urls: [String]) -> BatchRequest {
        BatchRequest(urls: urls, background: "#ffffff", callbackURL: nil, output: "mp4", createdAt: 1_700_000_000)
    }

    @Test func eachURLIsReadBackByItsIndex() async throws {
        try await withTemporaryDirectory { directory in
            // Empty, one-byte, multibyte and long URLs, more than one write's worth (1 MiB) in all.
            let urls =
                ["", "a", "https://e.com/é✓.gif"]
                + (0..<600).map { "https://e.com/\($0)/" + String(repeating: "x", count: 2000) }
            let folder = BatchFolder(path: directory + "/batch")
            let record = try folder.create(Self.request(urls))
            #expect(record.total == urls.count)
            #expect(record.background == "#ffffff")
            #expect(record.outputKind == .mp4)
            for (index, url) in urls.enumerated() { #expect(folder.url(at: index) == url, "\(index)") }
            #expect(folder.url(at: urls.count) == nil)
            #expect(folder.url(at: -1) == nil)
            // The record on disk does not carry the URLs.
            let stored = try #require(FileManager.default.contents(atPath: folder.requestPath))
            #expect(stored.count < 200, "\(stored.count) bytes")
            #expect(folder.load()?.total == urls.count)
            // A `urls` file cut short is not read back (every URL must read, or its item would never run).
            let urlsSize = try #require(
                try FileManager.default.attributesOfItem(atPath: folder.urlsPath)[.size] as? Int)
            #expect(truncate(folder.urlsPath, off_t(urlsSize - 1)) == 0)
            #expect(folder.load() == nil)
            try FileManager.default.removeItem(atPath: folder.path)
            #expect(folder.url(at: 0) == nil)
        }
    }

    @Test func aFolderOfTheOlderFormIsRewritten() async throws {
        try await withTemporaryDirectory { directory in
            let folder = BatchFolder(path: directory + "/batch")
            try FileManager.default.createDirectory(atPath: folder.path, withIntermediateDirectories: true)
            let urls = (0..<50).map { "https://e.com/\($0).gif" }
            try JSONEncoder().encode(Self.request(urls)).write(to: URL(fileURLWithPath: folder.requestPath))
            let record = try #require(folder.load())
            #expect(record.total == 50)
            #expect(record.createdAt == 1_700_000_000)
            #expect(folder.url(at: 49) == urls[49])
            let stored = try #require(FileManager.default.contents(atPath: folder.requestPath))
            #expect(!String(decoding: stored, as: UTF8.self).contains("urls"))
            #expect(folder.load()?.total == 50)
        }
    }

    @Test func resultsArePagedAndAPartialLineIsCutOff() async throws {
        try await withTemporaryDirectory { directory in
            let folder = BatchFolder(path: directory + "/batch")
            _ = try folder.create(Self.request(["https://e.com/a.gif"]))
            // Lines of about 300 bytes: a page crosses the reads' 64 KiB pieces.
            let lines = (0..<1000).map {
                #"{"index":\#($0),"status":"done","url":"\#(String(repeating: "u", count: 260))"}"#
            }
            for line in lines { #expect(folder.append(result: Array((line + "\n").utf8))) }
            #expect(folder.append(result: Array(#"{"index":1000,"st"#.utf8)))
            let page = folder.results(offset: 200, limit: 300)
            #expect(page.total == 1000)
            #expect(page.lines.map { String(decoding: $0, as: UTF8.self) } == Array(lines[200..<500]))
            #expect(folder.results(offset: 990, limit: 100).lines.count == 10)
            #expect(folder.results(offset: 1000, limit: 100).lines.isEmpty)
            var seen: [Int] = []
            folder.forEachResult { index, status in
                #expect(status == .done)
                seen.append(index)
            }
            #expect(seen == Array(0..<1000))
            folder.dropPartialLine()
            let size = try #require(try FileManager.default.attributesOfItem(atPath: folder.resultsPath)[.size] as? Int)
            #expect(size == lines.reduce(0) { $0 + $1.utf8.count + 1 })
            // A file of one partial line is emptied.
            let lone = BatchFolder(path: directory + "/lone")
            _ = try lone.create(Self.request(["https://e.com/a.gif"]))
            #expect(lone.append(result: Array(String(repeating: "z", count: 70_000).utf8)))
            lone.dropPartialLine()
            #expect(try FileManager.default.attributesOfItem(atPath: lone.resultsPath)[.size] as? Int == 0)
        }
    }
}
