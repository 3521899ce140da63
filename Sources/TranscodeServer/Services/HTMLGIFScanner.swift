import CGumbo
import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// A GIF a document shows: an `<img>` whose source is a GIF, or a `<picture>` with a GIF among its sources.
struct GIFElement: Sendable, Equatable {
    /// The bytes of the document to replace: the `<img>` tag, or the whole `<picture>` element.
    let range: Range<Int>
    /// The GIF's URL as the document writes it (entities decoded; maybe relative).
    let source: String
    /// The `<img>`'s attributes in document order, names lower-cased, values decoded.
    let attributes: [Attribute]

    struct Attribute: Sendable, Equatable {
        let name: String
        let value: String
    }

    func attribute(_ name: String) -> String? { self.attributes.first { $0.name == name }?.value }
}

/// Finds the GIFs of an HTML document with gumbo, a spec-compliant HTML5 parser that reports where every tag
/// starts and ends in the input, so a rewrite replaces exactly those bytes and keeps every other byte
/// (comments, scripts that contain the text `<img`, unquoted or upper-case attributes, entities).
///
/// A GIF is an `<img>` whose `src` path ends in `.gif`, whose `srcset` has a `.gif` candidate, or that carries
/// a `data-gif` marker (its value, when it is a URL, names the GIF). A `<picture>` with a GIF `<source>`
/// (`type="image/gif"` or a `.gif` candidate) or a GIF `<img>` is taken whole. Left alone: what the parser
/// did not find in the source (tags it inserted), `<template>` contents (inert markup a script clones as it
/// wrote it), `<noscript>` contents (the fallback for pages without scripts, usually twin of an element we
/// rewrite anyway) and anything inside SVG or MathML.
enum HTMLGIFScanner {
    /// Where documents are parsed (`RewriteController`): threads of their own, so that a slow document holds up
    /// other rewrites and nothing else (the shared I/O pool resolves download destinations, reads uploads and
    /// serves files).
    static let parsing: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: max(1, System.coreCount / 2))
        pool.start()
        return pool
    }()

    /// Runs `work` on `parsing` and answers with its result, or with 422 `too-complex` once it has run for
    /// `seconds` (counted from when a thread takes it: a document waiting behind others is not charged for
    /// them). The thread goes on until the parse ends (which the depth bound keeps finite); the request does
    /// not wait for it.
    static func parse<Result: Sendable>(
        within seconds: Double, _ work: @escaping @Sendable () throws -> Result
    ) async throws -> Result {
        let loop = MultiThreadedEventLoopGroup.singleton.any()
        return try await withCheckedThrowingContinuation { continuation in
            // Whichever comes first answers; the other finds it done.
            let answered = Atomic<Bool>(false)
            let answer: @Sendable (Swift.Result<Result, any Error>) -> Void = { result in
                if answered.exchange(true, ordering: .acquiringAndReleasing) == false {
                    continuation.resume(with: result)
                }
            }
            let tooComplex = ServiceError(
                .tooComplex, "the document took more than \(seconds) s to parse (rewrite.parseTimeoutSeconds)")
            Self.parsing.runIfActive(eventLoop: loop) {
                let deadline = loop.scheduleTask(in: .nanoseconds(Int64(seconds * 1_000_000_000))) {
                    answer(.failure(tooComplex))
                }
                defer { deadline.cancel() }
                return try work()
            }.whenComplete { result in answer(result) }
        }
    }

    /// The GIF elements of `html`, in document order, and the document's `<base href>` if any.
    static func scan(_ html: [UInt8]) -> (elements: [GIFElement], baseHref: String?) {
        html.withUnsafeBufferPointer { buffer -> ([GIFElement], String?) in
            guard let start = buffer.baseAddress else { return ([], nil) }
            let base = UnsafeRawPointer(start)
            return start.withMemoryRebound(to: CChar.self, capacity: buffer.count) { text in
                var options = kGumboDefaultOptions
                // No error records: gumbo copies the stack of open elements into each, which made a stray end
                // tag cost as much as the nesting is deep (`<div></x>` x 32,000 took 42 s); none is read here.
                options.max_errors = 0
                guard let output = gumbo_parse_with_options(&options, text, buffer.count) else { return ([], nil) }
                defer { gumbo_destroy_output(&options, output) }
                var scanner = Walker(base: base, count: buffer.count)
                scanner.walk(output.pointee.root)
                return (scanner.found, scanner.baseHref)
            }
        }
    }

    /// Deepest nesting parsed. gumbo's cost grows with the square of the depth (40,000 unclosed `<b>`, 120 KB,
    /// took 34 s; 1,024 deep, 3 ms); Chromium's own parser stops nesting at 512.
    static var maxDepth: Int { 1024 }

    /// Whether `html` may nest deeper than `limit` elements (`depthBound`).
    static func nestsDeeper(_ html: [UInt8], than limit: Int) -> Bool {
        self.depthBound(html, stoppingAbove: limit) > limit
    }

    /// The deepest nesting of `html` by one linear scan of its tags as the HTML tokenizer reads them (stopping as
    /// soon as it passes `limit`): start tags of elements that need an end tag open a level. An end tag closes
    /// the levels down to the element it names, and nothing when that element is not open or an element that
    /// stops it lies between: a scope boundary (`table`, `td`, `object`, `template`…) for the end tags of block
    /// elements (`div`, `section`…), any "special" element for all other end tags (`</span>` does not close a
    /// `div` inside it). Void elements, `/>` of SVG and MathML elements (an HTML `<div/>` is a `<div>`), elements
    /// that close implicitly (`p`, `li`, `td`…), comments (`<!-->`, `--!>`), bogus comments (`<?…>`, `</1…>`)
    /// and the contents of `script`, `style`, `textarea`, `title`… (up to a real end tag of theirs, outside SVG
    /// and MathML) do not count; quotes count only around attribute values. An upper bound of the parser's
    /// depth, except for markup it would nest on its own (`html`, `body`, a table's implied rows, formatting
    /// elements it reopens). Each element is pushed and popped once: linear in the document.
    static func depthBound(_ html: [UInt8], stoppingAbove limit: Int) -> Int {
        let lt = UInt8(ascii: "<"), gt = UInt8(ascii: ">"), slash = UInt8(ascii: "/"), bang = UInt8(ascii: "!")
        let dash = UInt8(ascii: "-"), question = UInt8(ascii: "?")
        let flat: Set<String> = [
            "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr",
            "param", "keygen", "p", "option", "optgroup", "tr", "td", "th", "thead", "tbody",
            "tfoot", "rb", "rt", "rp", "colgroup", "caption", "basefont", "bgsound", "frame",
        ]
        let raw: Set<String> = ["script", "style", "textarea", "title", "xmp", "plaintext", "noembed", "iframe"]
        let foreign: Set<String> = ["svg", "math"]
        // End tags that close down to their element when it is in scope (popping what lies between).
        let blocks: Set<String> = [
            "address", "article", "aside", "blockquote", "button", "center", "details", "dialog", "dir", "div", "dl",
            "fieldset", "figcaption", "figure", "footer", "header", "hgroup", "listing", "main", "menu", "nav", "ol",
            "pre", "search", "section", "summary", "ul", "h1", "h2", "h3", "h4", "h5", "h6", "applet", "marquee",
            "object", "table", "template",
        ]
        // What such an end tag does not reach past.
        let scopeBoundaries: Set<String> = [
            "applet", "caption", "html", "table", "td", "th", "marquee", "object", "template", "foreignobject",
            "desc", "mi", "mo", "mn", "ms", "mtext", "annotation-xml", "frameset",
        ]
        // What any other end tag does not reach past (the spec's special category, as it can be on this stack).
        // (`</body>`, `</html>` and `</form>` close nothing above them in the parser: they are other end tags here.)
        let special: Set<String> = scopeBoundaries.union(blocks).union([
            "body", "form", "frameset", "head", "noframes", "noscript", "select", "plaintext", "iframe", "noembed",
            "script", "style", "textarea", "title", "xmp", "li", "dd", "dt",
        ])
        var stack: [String] = []
        var positions: [String: [Int]] = [:]
        var boundaryAt: [Int] = []
        var specialAt: [Int] = []
        // Where a new `li`, `dd` or `dt` stops looking for the one it closes: special elements but `address`,
        // `div` and `p`.
        var listStopAt: [Int] = []
        // Whether each open element's content is foreign (SVG, MathML): `svg` and `math` start it, their HTML
        // integration points (`foreignObject`, `desc`, `title`, `mi`…) end it, other elements inherit it.
        var foreignContent: [Bool] = []
        let integrationPoints: Set<String> = [
            "foreignobject", "desc", "title", "mi", "mo", "mn", "ms", "mtext", "annotation-xml",
        ]
        // HTML start tags that end foreign content: the parser closes the SVG or MathML elements first.
        let breakout: Set<String> = [
            "b", "big", "blockquote", "body", "br", "center", "code", "dd", "div", "dl", "dt", "em", "embed", "h1",
            "h2", "h3", "h4", "h5", "h6", "head", "hr", "i", "img", "li", "listing", "menu", "meta", "nobr", "ol", "p",
            "pre", "ruby", "s", "small", "span", "strong", "strike", "sub", "sup", "table", "tt", "u", "ul", "var",
            "font",
        ]
        // Formatting elements: closed by a misnested end tag, the parser reopens them (the adoption agency and
        // the reconstruction of active formatting elements), so they stay counted.
        let formatting: Set<String> = [
            "a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong", "tt", "u",
        ]
        var deepest = 0
        var index = 0
        let count = html.count
        func lower(_ byte: UInt8) -> UInt8 { (0x41...0x5A).contains(byte) ? byte | 0x20 : byte }
        func isLetter(_ byte: UInt8) -> Bool { (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) }
        func isSpace(_ byte: UInt8) -> Bool {
            byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0C || byte == 0x0D
        }
        /// The first `needle` (lower-case ASCII) at or after `start`, in any case.
        func find(_ needle: [UInt8], from start: Int) -> Int? {
            guard needle.count <= count else { return nil }
            var position = start
            while position + needle.count <= count {
                if lower(html[position]) == needle[0] {
                    var offset = 1
                    while offset < needle.count, lower(html[position + offset]) == needle[offset] { offset += 1 }
                    if offset == needle.count { return position }
                }
                position += 1
            }
            return nil
        }
        func pop() {
            let name = stack.removeLast()
            positions[name]?.removeLast()
            if boundaryAt.last == stack.count { boundaryAt.removeLast() }
            if specialAt.last == stack.count { specialAt.removeLast() }
            if listStopAt.last == stack.count { listStopAt.removeLast() }
            foreignContent.removeLast()
        }
        func push(_ name: String, foreignInside: Bool) {
            if scopeBoundaries.contains(name) { boundaryAt.append(stack.count) }
            if special.contains(name) {
                specialAt.append(stack.count)
                if !["address", "div", "p"].contains(name) { listStopAt.append(stack.count) }
            }
            positions[name, default: []].append(stack.count)
            stack.append(name)
            foreignContent.append(foreignInside)
            deepest = max(deepest, stack.count)
        }
        while index < count {
            guard html[index] == lt, index + 1 < count else {
                index += 1
                continue
            }
            let next = html[index + 1]
            if next == bang {
                if html[index...].starts(with: Array("<!--".utf8)) {
                    // `<!-->` and `<!--->` are whole (empty) comments; otherwise up to the first `-->` or `--!>`,
                    // in one pass.
                    var position = index + 4
                    if position < count, html[position] == gt {
                        index = position + 1
                        continue
                    }
                    if position + 1 < count, html[position] == dash, html[position + 1] == gt {
                        index = position + 2
                        continue
                    }
                    var end = count
                    while position + 2 < count {
                        if html[position] == dash, html[position + 1] == dash {
                            if html[position + 2] == gt {
                                end = position + 3
                                break
                            }
                            if position + 3 < count, html[position + 2] == bang, html[position + 3] == gt {
                                end = position + 4
                                break
                            }
                        }
                        position += 1
                    }
                    index = end
                } else {
                    // A doctype, CDATA or a bogus comment: to the first `>`.
                    index = (find([gt], from: index) ?? count) + 1
                }
                continue
            }
            let closing = next == slash
            let nameStart = index + (closing ? 2 : 1)
            if next == question || (closing && nameStart < count && !isLetter(html[nameStart])) {
                // `<?…>` and `</` without a letter are bogus comments (`</>` is dropped alike): to the first `>`.
                index = (find([gt], from: index) ?? count) + 1
                continue
            }
            guard nameStart < count, isLetter(html[nameStart]) else {
                index += 1  // text
                continue
            }
            var nameEnd = nameStart
            while nameEnd < count, !isSpace(html[nameEnd]), html[nameEnd] != gt, html[nameEnd] != slash {
                nameEnd += 1
            }
            let name = String(decoding: html[nameStart..<nameEnd].map(lower), as: UTF8.self)
            // The end of the tag: quotes only open a value right after `=`; `/` ends a tag only outside an
            // unquoted value (`<g a=b/>` is not self-closing).
            var end = nameEnd
            var afterEquals = false
            var unquoted = false
            var selfClosing = false
            while end < count, html[end] != gt {
                let byte = html[end]
                selfClosing = false
                if unquoted {
                    if isSpace(byte) { unquoted = false }
                } else if byte == UInt8(ascii: "=") {
                    afterEquals = true
                } else if afterEquals, byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                    afterEquals = false
                    end = html[(end + 1)...].firstIndex(of: byte) ?? count
                    if end == count { break }
                } else if afterEquals, !isSpace(byte) {
                    afterEquals = false
                    unquoted = true
                } else if byte == slash {
                    selfClosing = true
                } else if !isSpace(byte) {
                    afterEquals = false
                }
                end += 1
            }
            index = end + 1
            var inForeign = foreignContent.last ?? false
            if inForeign, !closing, breakout.contains(name) {
                // Out of SVG or MathML: their elements close, and the tag is read as HTML.
                while foreignContent.last == true { pop() }
                inForeign = false
            }
            if closing {
                // Closes what it names, and everything opened inside it, unless something that stops it lies
                // between; a stray end tag closes nothing, nor do `</body>` and `</html>` (the parser keeps them
                // open). Formatting elements closed on the way are reopened.
                guard !["body", "html", "head"].contains(name), let position = positions[name]?.last else { continue }
                // `</form>` takes the form off the stack and nothing else: here it closes only a form on top.
                if name == "form", position != stack.count - 1 { continue }
                let stopper = (blocks.contains(name) ? boundaryAt.last : specialAt.last) ?? -1
                guard stopper <= position else { continue }
                var reopened: [(String, Bool)] = []
                while stack.count > position {
                    let top = stack.count - 1
                    if top > position, formatting.contains(stack[top]) {
                        reopened.append((stack[top], foreignContent[top]))
                    }
                    pop()
                }
                for (element, foreignInside) in reopened.reversed() { push(element, foreignInside: foreignInside) }
            } else if raw.contains(name), !inForeign {
                // Raw text only where the parser inserts the element: in a `select` only `script` and `textarea`
                // are, in a frameset none is (the others are ignored there, and what follows is markup).
                if positions["frameset"]?.isEmpty == false { continue }
                if positions["select"]?.isEmpty == false, name != "script", name != "textarea" { continue }
                if name == "plaintext" { return deepest }  // the rest is text
                // To its real end tag: `</title` followed by a space, `/` or `>` (`</titlex>` is text). Without one,
                // what follows is counted as markup (more than the parser nests, never less).
                let needle = Array("</\(name)".utf8)
                var from = index
                while let at = find(needle, from: from) {
                    let after = at + needle.count
                    if after >= count || isSpace(html[after]) || html[after] == slash || html[after] == gt {
                        index = at
                        break
                    }
                    from = at + 1
                }
            } else if ["html", "head", "body"].contains(name) {
                continue  // the parser has one of each, made at the start; later ones add nothing
            } else if inForeign ? !selfClosing : (!flat.contains(name) && !(selfClosing && foreign.contains(name))) {
                // `/>` closes only foreign elements: `<div/>` opens a `div` as `<div>` does. In foreign content
                // every element that is not self-closed opens a level (none is void or closes implicitly there).
                if !inForeign, ["li", "dd", "dt"].contains(name) {
                    // A list item closes the open one it continues, unless a special element lies between.
                    let same =
                        name == "li"
                        ? positions["li"]?.last : max(positions["dd"]?.last ?? -1, positions["dt"]?.last ?? -1)
                    if let same, same >= 0, (listStopAt.last ?? -1) <= same {
                        while stack.count > same { pop() }
                    }
                }
                push(name, foreignInside: inForeign ? !integrationPoints.contains(name) : foreign.contains(name))
                if stack.count > limit { return deepest }
            }
        }
        return deepest
    }

    /// The depth of the elements of the tree gumbo builds for `html` (`html` is 1, the implied `body` 2): what
    /// `depthBound` bounds, for tests.
    static func parsedDepth(_ html: [UInt8]) -> Int {
        html.withUnsafeBufferPointer { buffer -> Int in
            guard let start = buffer.baseAddress else { return 0 }
            return start.withMemoryRebound(to: CChar.self, capacity: buffer.count) { text in
                var options = kGumboDefaultOptions
                options.max_errors = 0
                guard let output = gumbo_parse_with_options(&options, text, buffer.count) else { return 0 }
                defer { gumbo_destroy_output(&options, output) }
                var deepest = 0
                var stack: [(UnsafeMutablePointer<GumboNode>, Int)] = [(output.pointee.document, 0)]
                while let (node, depth) = stack.popLast() {
                    let children: GumboVector
                    switch node.pointee.type {
                    case GUMBO_NODE_DOCUMENT: children = node.pointee.v.document.children
                    case GUMBO_NODE_ELEMENT, GUMBO_NODE_TEMPLATE:
                        deepest = max(deepest, depth)  // elements only: the document is 0, `html` 1
                        children = node.pointee.v.element.children
                    default: continue
                    }
                    for index in 0..<Int(children.length) {
                        if let child = children.data[index]?.assumingMemoryBound(to: GumboNode.self) {
                            stack.append((child, depth + 1))
                        }
                    }
                }
                return deepest
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
        for candidate in srcset.split(separator: ",") {
            let parts = candidate.split(whereSeparator: \.isWhitespace)
            guard let url = parts.first.map(String.init), Self.isGIFPath(url) else { continue }
            var weight = 1.0
            if parts.count > 1, let descriptor = parts.last, let value = Double(descriptor.dropLast()) {
                weight = value
            }
            if best == nil || weight > best!.weight { best = (url, weight) }
        }
        return best?.url
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
            } else {
                return nil
            }
            guard !source.isEmpty else { return nil }
            return GIFElement(range: range, source: source, attributes: attributes)
        }

        /// A `<picture>` with a GIF source or a GIF `<img>`, as a whole; its `<img>` gives the attributes.
        private func picture(_ element: GumboElement) -> GIFElement? {
            guard let start = self.offset(element.original_tag), element.original_end_tag.length > 0,
                let endTag = self.offset(element.original_end_tag)
            else { return nil }
            var gifSource: String?
            var image: GumboElement?
            for index in 0..<Int(element.children.length) {
                guard let child = element.children.data[index]?.assumingMemoryBound(to: GumboNode.self),
                    child.pointee.type == GUMBO_NODE_ELEMENT
                else { continue }
                let inner = child.pointee.v.element
                if inner.tag == GUMBO_TAG_SOURCE, gifSource == nil {
                    let attributes = Self.attributes(inner)
                    let srcset = attributes.first { $0.name == "srcset" }?.value ?? ""
                    let type = attributes.first { $0.name == "type" }?.value.lowercased()
                    if type == "image/gif" {
                        gifSource = srcset.split(separator: ",").first.flatMap {
                            $0.split(whereSeparator: \.isWhitespace).first
                        }.map(String.init)
                    } else if type == nil || type == "" {
                        gifSource = HTMLGIFScanner.gifCandidate(srcset: srcset)
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
                attributes: Self.attributes(image))
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
