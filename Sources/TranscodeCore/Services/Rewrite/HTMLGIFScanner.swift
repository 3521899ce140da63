import CGumbo
import CGumboDeadline
import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// A GIF a document shows: an `<img>` whose source is a GIF, or a `<picture>` with a GIF among its sources.
package struct GIFElement: Sendable, Equatable {
    /// The bytes of the document to replace: the `<img>` tag, or the whole `<picture>` element.
    package let range: Range<Int>
    /// The GIF's URL as the document writes it (entities decoded; maybe relative).
    package let source: String
    /// The `<img>`'s attributes in document order, names lower-cased, values decoded.
    let attributes: [Attribute]
    /// The URL attributes (`src`, `srcset`, `data-src`, `data-srcset`) of the `<img>` and of a `<picture>`'s
    /// `<source>`s, with where their values are written: what a rewrite that keeps the elements changes.
    var urlAttributes: [URLAttribute] = []
    /// A `<picture>` whose pictures the browser chooses among by what a `<video>` cannot weigh: a `<source>` of
    /// another format (`type="image/webp"`), which browsers show rather than its GIF, or one for some viewports only
    /// (`media`, art direction: a narrow column's crop, a wide one's).
    package var browserChoosesSource = false

    struct Attribute: Sendable, Equatable {
        let name: String
        let value: String
    }

    struct URLAttribute: Sendable, Equatable {
        /// The value as written, its quotes included.
        let range: Range<Int>
        let name: String
        /// Entities decoded.
        let value: String
    }

    /// The attributes that hold image URLs: the browser's, and lazy-loading plugins' (which copy them over).
    static let urlAttributeNames: Set<String> = ["src", "srcset", "data-src", "data-srcset"]

    func attribute(_ name: String) -> String? { self.attributes.first { $0.name == name }?.value }

    /// The GIF a browser shows at its largest: the `srcset` (or a lazy-loading plugin's `data-srcset`) candidate with
    /// the largest descriptor, where there is one (a browser with `srcset` never shows `src` then), else `source`.
    package var largestSource: String {
        for name in ["srcset", "data-srcset"] {
            if let srcset = self.attribute(name), let candidate = HTMLGIFScanner.gifCandidate(srcset: srcset) {
                return candidate
            }
        }
        return self.source
    }
}

/// Finds the GIFs of an HTML document with gumbo, a spec-compliant HTML5 parser that reports where every tag
/// starts and ends in the input, so a rewrite replaces exactly those bytes and keeps every other byte
/// (comments, scripts that contain the text `<img`, unquoted or upper-case attributes, entities).
///
/// A GIF is an `<img>` whose `src` path ends in `.gif`, whose `srcset` has a `.gif` candidate, whose lazy-loading
/// plugin's `data-src` or `data-srcset` does, or that carries a `data-gif` marker (its value, when it is a URL,
/// names the GIF). A `<picture>` with a GIF `<source>`
/// (`type="image/gif"` or a `.gif` candidate) or a GIF `<img>` is taken whole. Left alone: what the parser
/// did not find in the source (tags it inserted), `<template>` contents (inert markup a script clones as it
/// wrote it), `<noscript>` contents (the fallback for pages without scripts, usually twin of an element we
/// rewrite anyway) and anything inside SVG or MathML.
package enum HTMLGIFScanner {
    /// Where documents are parsed (`RewriteController`): threads of their own, so that a slow document holds up
    /// other rewrites and nothing else (the shared I/O pool resolves download destinations, reads uploads and
    /// serves files).
    static let parsing: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: Self.parsingThreads)
        pool.start()
        return pool
    }()

    /// The threads of `parsing`: half the cores, at least one.
    static let parsingThreads = max(1, System.coreCount / 2)

    /// The bound on parses taken at once (`rewrite.maxParses`): running, waiting for a thread, or past their
    /// deadline and still running. Beyond it a rewrite is answered 503 `overloaded` at once, so a client sending
    /// again after each 422 `too-complex` cannot pile abandoned parses up in front of everyone else's.
    /// - Parameter limit: 0 for the default, 8 per parser thread and at least 16 (each waiting document holds
    ///   its body, up to `rewrite.maxBodyBytes`).
    package static func parseLimit(_ limit: Int) -> CountingLimit {
        CountingLimit(limit: limit > 0 ? limit : max(16, 8 * Self.parsingThreads))
    }

    /// Runs `work` on `parsing` and answers with its result, or once `seconds` have passed since the call (the
    /// request's arrival, give or take its body): 422 `too-complex` when its parse had begun, 503 `overloaded` when
    /// it was still waiting for a thread behind other documents (it is then never parsed). A small document behind
    /// slow ones is answered within the deadline either way. `work` gets the deadline: a parse that began is stopped
    /// there (`scan(_:until:)`), so the thread is free again a moment after the answer.
    package static func parse<Result: Sendable>(
        within seconds: Double, admittedBy admission: CountingLimit,
        _ work: @escaping @Sendable (_ deadline: ContinuousClock.Instant) throws -> Result
    ) async throws -> Result {
        guard admission.take() else {
            throw ServiceError.overloaded("\(admission.limit) documents are being parsed already; try again shortly")
        }
        let loop = MultiThreadedEventLoopGroup.singleton.any()
        let parseEnd = ContinuousClock.now + .nanoseconds(Int64(seconds * 1_000_000_000))
        // Whichever comes first answers, the parse or its deadline; the other finds it done.
        let answer = ResumeOnce<Swift.Result<Result, any Error>>()
        // Whether a thread took the document (`started`) or its deadline passed first (`expired`): one or the other.
        let state = Mutex<(started: Bool, expired: Bool)>((false, false))
        return try await withCheckedContinuation { continuation in
            answer.set(continuation)
            let deadline = loop.scheduleTask(in: .nanoseconds(Int64(seconds * 1_000_000_000))) {
                let started = state.withLock { state in
                    if !state.started { state.expired = true }
                    return state.started
                }
                answer.resume(
                    returning: .failure(
                        started
                            ? ServiceError(
                                .tooComplex,
                                "the document took more than \(seconds) s to parse (rewrite.parseTimeoutSeconds)")
                            : ServiceError.overloaded(
                                "no parser was free within \(seconds) s (rewrite.parseTimeoutSeconds); try again shortly"
                            )
                    ))
            }
            Self.parsing.runIfActive(eventLoop: loop) { () throws -> Result? in
                let begin = state.withLock { state in
                    if !state.expired { state.started = true }
                    return !state.expired
                }
                guard begin else { return nil }
                return try work(parseEnd)
            }.whenComplete { result in
                deadline.cancel()
                admission.give()
                switch result {
                case .success(let value?): answer.resume(returning: .success(value))
                case .success(nil): break  // answered 503 by its deadline, never parsed
                case .failure(let error): answer.resume(returning: .failure(error))
                }
            }
        }.get()
    }

    /// The GIF elements of `html`, in document order, and the document's `<base href>` if any.
    /// - Parameter deadline: when the parse must have ended (`CGumboDeadline`): past it gumbo is stopped where it is
    ///   and everything it allocated is freed, so a document answered 422 `too-complex` stops using its thread.
    /// - Throws: `too-complex` when the parse did not end by `deadline`; `overloaded` when memory ran out.
    package static func scan(
        _ html: [UInt8], until deadline: ContinuousClock.Instant = .now + .seconds(3600)
    ) throws -> (elements: [GIFElement], baseHref: String?) {
        let remaining = ContinuousClock.now.duration(to: deadline)
        let seconds = Double(remaining.components.seconds) + Double(remaining.components.attoseconds) / 1e18
        guard let parse = gumbo_deadline_create(seconds) else {
            throw ServiceError.overloaded("no memory to parse the document")
        }
        defer { gumbo_deadline_destroy(parse) }
        return try html.withUnsafeBufferPointer { buffer -> ([GIFElement], String?) in
            guard let start = buffer.baseAddress else { return ([], nil) }
            let base = UnsafeRawPointer(start)
            return try start.withMemoryRebound(to: CChar.self, capacity: buffer.count) { text in
                var options = kGumboDefaultOptions
                // No error records: gumbo copies the stack of open elements into each, which made a stray end
                // tag cost as much as the nesting is deep (`<div></x>` x 32,000 took 42 s); none is read here.
                options.max_errors = 0
                guard let output = gumbo_deadline_parse(parse, options, text, buffer.count) else {
                    if gumbo_deadline_expired(parse) != 0 {
                        throw ServiceError(.tooComplex, "the document's parse was stopped at its deadline")
                    }
                    throw ServiceError.overloaded("no memory to parse the document")
                }
                // Its blocks are freed with the parse (`gumbo_deadline_destroy`).
                var scanner = Walker(base: base, count: buffer.count)
                scanner.walk(output.pointee.root)
                return (scanner.found, scanner.baseHref)
            }
        }
    }

    /// Whether `url`'s path ends in `.gif` (any case), its query and fragment aside.
    static func isGIFPath(_ url: String) -> Bool {
        let path = url.prefix { $0 != "?" && $0 != "#" }
        return path.lowercased().hasSuffix(".gif")
    }

    /// The GIF candidate of a `srcset` with the largest width (`w`) or density (`x`) descriptor.
    static func gifCandidate(srcset: String) -> String? {
        var best: (url: String, weight: Double)?
        for candidate in Self.srcsetCandidates(srcset) {
            let url = String(srcset[candidate.url])
            guard Self.isGIFPath(url) else { continue }
            var weight = 1.0
            if let descriptor = candidate.descriptors.split(whereSeparator: \.isWhitespace).last,
                let value = Double(descriptor.dropLast())
            {
                weight = value
            }
            if best == nil || weight > best!.weight { best = (url, weight) }
        }
        return best?.url
    }

    /// A `srcset`'s candidates as the HTML standard parses them ("parse a srcset attribute"): a URL runs to the next
    /// whitespace, so a comma inside it belongs to it (`/upload/w_400,c_fill/cat.gif 400w`) and commas ending it
    /// end the candidate; its descriptors run to the next comma outside parentheses.
    /// - Returns: where each candidate's URL is in `srcset`, and its descriptors' text.
    static func srcsetCandidates(_ srcset: String) -> [(url: Range<String.Index>, descriptors: Substring)] {
        func isSpace(_ character: Character) -> Bool { " \t\n\r\u{0C}".contains(character) }
        var found: [(url: Range<String.Index>, descriptors: Substring)] = []
        var position = srcset.startIndex
        while position < srcset.endIndex {
            while position < srcset.endIndex, isSpace(srcset[position]) || srcset[position] == "," {
                position = srcset.index(after: position)
            }
            guard position < srcset.endIndex else { break }
            let start = position
            while position < srcset.endIndex, !isSpace(srcset[position]) { position = srcset.index(after: position) }
            var end = position
            if srcset[srcset.index(before: end)] == "," {
                while end > start, srcset[srcset.index(before: end)] == "," { end = srcset.index(before: end) }
                if end > start { found.append((start..<end, srcset[end..<end])) }
                continue
            }
            let descriptorsStart = position
            var depth = 0
            while position < srcset.endIndex {
                let character = srcset[position]
                if character == "(" { depth += 1 }
                if character == ")" { depth = max(0, depth - 1) }
                if character == ",", depth == 0 { break }
                position = srcset.index(after: position)
            }
            found.append((start..<end, srcset[descriptorsStart..<position]))
            if position < srcset.endIndex { position = srcset.index(after: position) }
        }
        return found
    }

    private struct Walker {
        let base: UnsafeRawPointer
        let count: Int
        var found: [GIFElement] = []
        var baseHref: String?

        /// Walks the tree in document order with a stack of its own: a document nested a million deep must not
        /// overflow the thread's stack.
        mutating func walk(_ root: UnsafeMutablePointer<GumboNode>?) {
            var stack: [UnsafeMutablePointer<GumboNode>] = root.map { [$0] } ?? []
            while let node = stack.popLast() {
                guard let children = self.visit(node) else { continue }
                for index in stride(from: Int(children.length) - 1, through: 0, by: -1) {
                    if let child = children.data[index]?.assumingMemoryBound(to: GumboNode.self) { stack.append(child) }
                }
            }
        }

        /// Looks at one node. - Returns: the children to walk, nil for none.
        private mutating func visit(_ node: UnsafeMutablePointer<GumboNode>) -> GumboVector? {
            // Template contents are a GUMBO_NODE_TEMPLATE: not walked.
            if node.pointee.type == GUMBO_NODE_DOCUMENT { return node.pointee.v.document.children }
            guard node.pointee.type == GUMBO_NODE_ELEMENT else { return nil }
            let element = node.pointee.v.element
            guard element.tag_namespace == GUMBO_NAMESPACE_HTML else { return nil }
            switch element.tag {
            case GUMBO_TAG_NOSCRIPT:
                return nil
            case GUMBO_TAG_BASE:
                if self.baseHref == nil, let href = Self.attributes(element).first(where: { $0.name == "href" }) {
                    self.baseHref = href.value
                }
            case GUMBO_TAG_IMG:
                if let gif = self.image(element, replacing: self.tagRange(element)) { self.found.append(gif) }
                return nil
            default:
                // gumbo 0.10 predates <picture>: it is an unknown tag, named by its source text.
                if element.tag == GUMBO_TAG_UNKNOWN, self.tagName(element) == "picture",
                    let gif = self.picture(element)
                {
                    self.found.append(gif)
                    return nil
                }
            }
            return element.children
        }

        /// The GIF an `<img>` shows, if any.
        private func image(_ element: GumboElement, replacing range: Range<Int>?) -> GIFElement? {
            guard let range else { return nil }
            let attributes = Self.attributes(element)
            func value(_ name: String) -> String? { attributes.first { $0.name == name }?.value }
            // A URL attribute as browsers read it: leading and trailing ASCII whitespace stripped ("a valid URL
            // potentially surrounded by spaces"), so `src=" a.gif "` is the GIF it shows.
            func url(_ name: String) -> String? {
                value(name)?.trimmingCharacters(in: CharacterSet(charactersIn: " \t\n\r\u{0C}"))
            }
            let source: String
            if let marker = value("data-gif") {
                let named = marker.trimmingCharacters(in: .whitespaces)
                source = named.isEmpty ? (url("src") ?? "") : named
            } else if let src = url("src"), HTMLGIFScanner.isGIFPath(src) {
                source = src
            } else if let srcset = value("srcset"), let candidate = HTMLGIFScanner.gifCandidate(srcset: srcset) {
                source = candidate
            } else if let src = url("data-src"), HTMLGIFScanner.isGIFPath(src) {
                // A lazy-loading plugin's: it copies `data-src` into `src` when the image nears the viewport.
                source = src
            } else if let srcset = value("data-srcset"), let candidate = HTMLGIFScanner.gifCandidate(srcset: srcset) {
                source = candidate
            } else {
                return nil
            }
            guard !source.isEmpty else { return nil }
            return GIFElement(
                range: range, source: source, attributes: attributes, urlAttributes: self.urlAttributes(element))
        }

        /// The URL attributes of an `<img>` or `<source>` whose values are written in the document.
        private func urlAttributes(_ element: GumboElement) -> [GIFElement.URLAttribute] {
            var found: [GIFElement.URLAttribute] = []
            for index in 0..<Int(element.attributes.length) {
                guard let attribute = element.attributes.data[index]?.assumingMemoryBound(to: GumboAttribute.self),
                    let name = attribute.pointee.name.map({ String(cString: $0).lowercased() }),
                    GIFElement.urlAttributeNames.contains(name),
                    attribute.pointee.original_value.length > 0,
                    let start = self.offset(attribute.pointee.original_value)
                else { continue }
                let value = attribute.pointee.value.map { String(cString: $0) } ?? ""
                found.append(
                    .init(
                        range: start..<(start + attribute.pointee.original_value.length), name: name, value: value))
            }
            return found
        }

        /// A `<picture>` with a GIF source or a GIF `<img>`, as a whole; its `<img>` gives the attributes.
        private func picture(_ element: GumboElement) -> GIFElement? {
            guard let start = self.offset(element.original_tag), element.original_end_tag.length > 0,
                let endTag = self.offset(element.original_end_tag)
            else { return nil }
            var gifSource: String?
            var image: GumboElement?
            var sourceAttributes: [GIFElement.URLAttribute] = []
            var otherFormats = false
            for index in 0..<Int(element.children.length) {
                guard let child = element.children.data[index]?.assumingMemoryBound(to: GumboNode.self),
                    child.pointee.type == GUMBO_NODE_ELEMENT
                else { continue }
                let inner = child.pointee.v.element
                if inner.tag == GUMBO_TAG_SOURCE {
                    let attributes = Self.attributes(inner)
                    // The media type alone (`image/gif; x` is a GIF).
                    let type =
                        (attributes.first { $0.name == "type" }?.value ?? "").split(separator: ";").first
                        .map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
                    // A <source> typed as anything but a GIF (`image/webp`) is left as it is: whatever its URL says.
                    if type.isEmpty || type == "image/gif" { sourceAttributes += self.urlAttributes(inner) }
                    // Another format: typed as one, or untyped with no GIF candidate (`srcset="a.webp"`), a
                    // lazy-loading plugin's `data-srcset` included.
                    let candidates = attributes.filter { $0.name == "srcset" || $0.name == "data-srcset" }
                    let gif =
                        type == "image/gif"
                        || (type.isEmpty
                            && candidates.contains { HTMLGIFScanner.gifCandidate(srcset: $0.value) != nil })
                    if !gif { otherFormats = true }
                    // Art direction: which picture shows depends on the viewport (`media` that says something: not
                    // empty, not `all`).
                    let media = (attributes.first { $0.name == "media" }?.value ?? "")
                        .trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
                    if !media.isEmpty, media != "all" { otherFormats = true }
                    if gifSource == nil {
                        let srcset = attributes.first { $0.name == "srcset" }?.value ?? ""
                        if type == "image/gif" {
                            gifSource = srcset.split(separator: ",").first.flatMap {
                                $0.split(whereSeparator: \.isWhitespace).first
                            }.map(String.init)
                        } else if type.isEmpty {
                            gifSource = HTMLGIFScanner.gifCandidate(srcset: srcset)
                        }
                    }
                } else if inner.tag == GUMBO_TAG_IMG, image == nil {
                    image = inner
                }
            }
            guard let image, let imageRange = self.tagRange(image) else { return nil }
            let imageGIF = self.image(image, replacing: imageRange)
            guard let source = gifSource ?? imageGIF?.source else { return nil }
            return GIFElement(
                range: start..<(endTag + element.original_end_tag.length), source: source,
                attributes: Self.attributes(image), urlAttributes: sourceAttributes + self.urlAttributes(image),
                browserChoosesSource: otherFormats)
        }

        /// The bytes of an element's start tag; nil when the parser inserted it (no source text).
        private func tagRange(_ element: GumboElement) -> Range<Int>? {
            guard element.original_tag.length > 0, let start = self.offset(element.original_tag) else { return nil }
            return start..<(start + element.original_tag.length)
        }

        private func offset(_ piece: GumboStringPiece) -> Int? {
            guard let data = piece.data else { return nil }
            let offset = UnsafeRawPointer(data) - self.base
            return offset >= 0 && offset + piece.length <= self.count ? offset : nil
        }

        /// The lower-cased name in the start tag's source text (`<PICTURE class=a>` is `picture`).
        private func tagName(_ element: GumboElement) -> String {
            guard let data = element.original_tag.data, element.original_tag.length > 1 else { return "" }
            let bytes = UnsafeRawBufferPointer(start: data, count: element.original_tag.length).dropFirst()
            let name = bytes.prefix { byte in
                !(byte == UInt8(ascii: " ") || byte == UInt8(ascii: ">") || byte == UInt8(ascii: "/")
                    || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r")
                    || byte == 0x0C)
            }
            return String(decoding: name, as: UTF8.self).lowercased()
        }

        static func attributes(_ element: GumboElement) -> [GIFElement.Attribute] {
            var attributes: [GIFElement.Attribute] = []
            for index in 0..<Int(element.attributes.length) {
                guard let attribute = element.attributes.data[index]?.assumingMemoryBound(to: GumboAttribute.self),
                    let name = attribute.pointee.name
                else { continue }
                let value = attribute.pointee.value.map { String(cString: $0) } ?? ""
                attributes.append(GIFElement.Attribute(name: String(cString: name).lowercased(), value: value))
            }
            return attributes
        }
    }
}
