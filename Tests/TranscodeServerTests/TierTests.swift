import Foundation
import TestSupport
import Testing

/// The suite's tiers (`scripts/test-tiers`, the Makefile): derived from each test's tags, and the tags say what the
/// tests do.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct TierTests {
    /// One `@Test`: its suite, its function, its tags (its suite's and its own) and the text up to the next test.
    struct TaggedTest {
        let file: String
        let suite: String
        let function: String
        let tags: Set<String>
        let body: Substring
    }

    static let targets = ["Tests/TranscodeServerTests", "Tests/TranscoderTests"]

    /// The tag names of `.tags(...)` in `attribute`.
    static func tags(in attribute: Substring) -> [String] {
        attribute.matches(of: /\.tags\(([^)]*)\)/).flatMap { group in
            group.1.matches(of: /\.(\w+)/).map { String($0.1) }
        }
    }

    /// Every `@Suite...` line of both test targets, with its file's name.
    static func suiteLines() throws -> [(file: String, line: Substring)] {
        var found: [(String, Substring)] = []
        for target in Self.targets {
            let directory = ConfigurationTests.repositoryRoot.appendingPathComponent(target).path
            for name in try FileManager.default.contentsOfDirectory(atPath: directory) where name.hasSuffix(".swift") {
                let text = try String(contentsOfFile: directory + "/" + name, encoding: .utf8)
                found += text.split(separator: "\n").filter { $0.hasPrefix("@Suite") }.map { (name, $0) }
            }
        }
        return found
    }

    /// Every test of both targets, read as `scripts/test-tiers` reads them.
    static func taggedTests() throws -> [TaggedTest] {
        var found: [TaggedTest] = []
        for target in Self.targets {
            let directory = ConfigurationTests.repositoryRoot.appendingPathComponent(target).path
            for name in try FileManager.default.contentsOfDirectory(atPath: directory) where name.hasSuffix(".swift") {
                let text = try String(contentsOfFile: directory + "/" + name, encoding: .utf8)
                let suites = text.matches(of: /(?m)^@Suite(.*?) struct (\w+)/).map {
                    (start: $0.range.lowerBound, name: String($0.2), tags: Self.tags(in: $0.1))
                }
                let tests = text.matches(of: /(?m)^[ \t]*@Test\b[\s\S]*?func\s+(\w+)/)
                for (index, test) in tests.enumerated() {
                    let suite = try #require(suites.last { $0.start < test.range.lowerBound }, "\(name)")
                    let end = index + 1 < tests.count ? tests[index + 1].range.lowerBound : text.endIndex
                    // The attribute: from `@Test` to `func` (its arguments may hold anything but a tag list).
                    let attribute = text[test.range.lowerBound..<test.range.upperBound]
                    found.append(
                        TaggedTest(
                            file: name, suite: suite.name, function: String(test.1),
                            tags: Set(suite.tags + Self.tags(in: attribute)), body: text[test.range.upperBound..<end]))
                }
            }
        }
        return found
    }

    /// The tags that say a test calls `tag`'s helpers: a browser, a database and SeaweedFS run as child processes
    /// too, so any of the four says `childProcess`.
    static func satisfying(_ tag: String) -> Set<String> {
        tag == "childProcess" ? ["browser", "database", "objectStore", "childProcess"] : [tag]
    }

    /// Every suite says what it exercises (`.unit` or `.integration`) and has a time limit; the tags are those of
    /// Tags.swift.
    @Test func everySuiteIsTaggedAndLimited() throws {
        let lines = try Self.suiteLines()
        #expect(lines.count > 40)
        let known: Set = [
            "unit", "integration", "browser", "database", "objectStore", "childProcess", "wallClock", "heavy",
        ]
        for (name, line) in lines {
            let tags = Self.tags(in: line)
            #expect(tags.first == "unit" || tags.first == "integration", "\(name): \(line)")
            #expect(line.contains(".timeLimit("), "\(name): \(line)")
        }
        for test in try Self.taggedTests() {
            #expect(test.tags.isSubset(of: known), "\(test.suite)/\(test.function): \(test.tags)")
        }
    }

    /// A test that calls a browser, PostgreSQL, SeaweedFS or a child process directly carries its tag, so the
    /// script puts it in the system tier; a file that calls one in its helpers has a test tagged with it. Eight
    /// browser tests in tier 1 raced every other test for two cores, and a loaded machine kept a renderer past its
    /// bound (issue 54).
    @Test func whatATestStartsIsTagged() throws {
        let markers = [
            "browser": [
                "runBrowserScript(", "requireChromium(", "chromium_oracle", "page_fidelity", "webdriver",
                "ChromiumOracle.", "CorpusRun(", "CorpusRun.shared",
            ],
            "database": ["withPostgres", "PostgresServer("],
            "objectStore": ["withSeaweedFS"],
            "childProcess": ["runProcess(", "ChildProcess("],
        ]
        let tests = try Self.taggedTests()
        #expect(tests.count > 400)
        for (tag, words) in markers {
            for test in tests where test.file != "TierTests.swift" && words.contains(where: { test.body.contains($0) })
            {
                #expect(
                    !test.tags.isDisjoint(with: Self.satisfying(tag)),
                    "\(test.suite)/\(test.function) calls a \(tag) helper untagged")
            }
        }
        let root = ConfigurationTests.repositoryRoot
        var files: [String: Int] = [:]
        for target in Self.targets {
            let directory = root.appendingPathComponent(target).path
            for name in try FileManager.default.contentsOfDirectory(atPath: directory) where name.hasSuffix(".swift") {
                guard name != "TierTests.swift" else { continue }
                let text = try String(contentsOfFile: directory + "/" + name, encoding: .utf8)
                let tagged = tests.filter { $0.file == name }.reduce(into: Set<String>()) { $0.formUnion($1.tags) }
                for (tag, words) in markers where words.contains(where: { text.contains($0) }) {
                    files[tag, default: 0] += 1
                    #expect(
                        !tagged.isDisjoint(with: Self.satisfying(tag)),
                        "\(name) calls a \(tag) helper, and none of its tests is tagged")
                }
            }
        }
        // The markers name helpers the tests call.
        for tag in markers.keys { #expect(files[tag, default: 0] > 0, "no file calls a \(tag) helper") }
    }

    /// The Makefile runs the script's three tiers, after its check that they hold every test once; and the script
    /// reads the tags as this suite does.
    @Test(.tags(.childProcess)) func theMakefileRunsTheTiersTheTagsGive() async throws {
        let makefile = try PackagingTests.read("Makefile")
        for line in [
            "scripts/test-tiers --check", "tier=$$(scripts/test-tiers fast) && swift test --skip-build $$tier",
            "tier=$$(scripts/test-tiers system) && swift test --skip-build $$tier",
            "tier=$$(scripts/test-tiers heavy) && swift test --skip-build $$tier",
        ] {
            #expect(makefile.contains("\t" + line + "\n"), "\(line)")
        }
        let root = ConfigurationTests.repositoryRoot.path
        let table = try await runProcess(root + "/scripts/test-tiers", ["--table"], timeout: .seconds(60))
        #expect(table.status == 0, "\(table.stderr)")
        let read = Set(
            table.stdout.split(separator: "\n").map { line in
                let cells = line.split(separator: "\t", omittingEmptySubsequences: false)
                return "\(cells[1]) \(Set(cells[2].split(separator: ",").map(String.init)).sorted())"
            })
        let ours = Set(try Self.taggedTests().map { "\($0.suite)/\($0.function) \($0.tags.sorted())" })
        #expect(read == ours)
        // Every tier holds tests, and tier 1 starts nothing.
        let tiers = table.stdout.split(separator: "\n").map { $0.prefix { $0 != "\t" } }
        for name in ["fast", "system", "heavy"] { #expect(tiers.contains(Substring(name))) }
        for test in try Self.taggedTests() where !test.tags.isDisjoint(with: ["browser", "database", "objectStore"]) {
            #expect(!table.stdout.contains("fast\t\(test.suite)/\(test.function)\t"))
        }
    }

    /// No test waits for anything longer than 120 s (`timeout: .seconds(N)`): a longer deadline hid slow work
    /// (conversions on the cooperative pool, suites racing browsers for two cores) instead of fixing it.
    @Test func noDeadlineIsOverTwoMinutes() throws {
        let root = ConfigurationTests.repositoryRoot
        var deadlines = 0
        for target in Self.targets + ["Tests/TestSupport"] {
            let directory = root.appendingPathComponent(target).path
            // Their support folders too.
            let names = try FileManager.default.subpathsOfDirectory(atPath: directory)
            for name in names where name.hasSuffix(".swift") {
                let text = try String(contentsOfFile: directory + "/" + name, encoding: .utf8)
                for match in text.matches(of: /timeout: *(?:TimeAmount)?\.seconds\((\d+)\)/) {
                    deadlines += 1
                    #expect(Int(match.1)! <= 120, "\(name): \(match.0)")
                }
            }
        }
        #expect(deadlines > 10)
    }
}
