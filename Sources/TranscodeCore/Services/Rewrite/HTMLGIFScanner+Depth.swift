import CGumbo
import Foundation

/// The depth guard of the rewrite's parse: gumbo's cost grows with the square of the nesting, so a document
/// that may nest deeper than `maxDepth` is refused before it is parsed (`RewriteController`).
extension HTMLGIFScanner {
    /// Deepest nesting parsed. gumbo's cost grows with the square of the depth (40,000 unclosed `<b>`, 120 KB,
    /// took 34 s; 1,024 deep, 3 ms); Chromium's own parser stops nesting at 512.
    static var maxDepth: Int { 1024 }

    /// Most attributes one element may have. gumbo looks for a duplicate of each attribute among the element's
    /// earlier ones: its cost grows with the square of the count (one `<div>` of 80,000 attributes, 560 KB, held a
    /// parser thread for minutes), and the depth bound cannot see it (the document is one level deep). Real pages
    /// stay far below (a framework's `data-` attributes: tens).
    static var maxAttributes: Int { 500 }
    /// Most tags (start and end) one document may have: a bound on the parser's linear work, well above what a
    /// page of `rewrite.maxBodyBytes` holds (a 16 MB document of paragraphs and links: 1.6 million).
    static var maxTags: Int { 2_000_000 }

    /// What the linear pre-scan found, each count stopped just past its limit.
    struct Shape: Equatable {
        /// An upper bound of the parsed depth (`depthBound`).
        var deepest = 0
        /// The most attributes of one start tag.
        var mostAttributes = 0
        /// Start and end tags, outside comments and raw text.
        var tags = 0
    }

    /// Why `html` must not reach gumbo, or nil: nesting deeper than `maxDepth` (`too-deep`), an element with more
    /// than `maxAttributes` attributes or more than `maxTags` tags (`too-complex`). One linear scan.
    package static func refusal(_ html: [UInt8]) -> ServiceError? {
        let shape = self.shape(
            html, depthLimit: self.maxDepth, attributeLimit: self.maxAttributes, tagLimit: self.maxTags)
        if shape.deepest > self.maxDepth {
            return ServiceError(
                .tooDeep, "the document nests elements more than \(self.maxDepth) deep (browsers stop at 512)")
        }
        if shape.mostAttributes > self.maxAttributes {
            return ServiceError(
                .tooComplex, "an element of the document has more than \(self.maxAttributes) attributes")
        }
        if shape.tags > self.maxTags {
            return ServiceError(.tooComplex, "the document has more than \(self.maxTags) tags")
        }
        return nil
    }

    /// Whether `html` may nest deeper than `limit` elements (`depthBound`).
    static func nestsDeeper(_ html: [UInt8], than limit: Int) -> Bool {
        self.depthBound(html, stoppingAbove: limit) > limit
    }

    /// The deepest nesting of `html` (`shape`), stopping as soon as it passes `limit`.
    static func depthBound(_ html: [UInt8], stoppingAbove limit: Int) -> Int {
        self.shape(html, depthLimit: limit, attributeLimit: .max, tagLimit: .max).deepest
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
    /// elements it reopens). Each element is pushed and popped once: linear in the document. The same pass counts
    /// the attributes of each start tag and the tags; it stops once any count passes its limit.
    static func shape(_ html: [UInt8], depthLimit limit: Int, attributeLimit: Int, tagLimit: Int) -> Shape {
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
        var mostAttributes = 0
        var tags = 0
        var shape: Shape { Shape(deepest: deepest, mostAttributes: mostAttributes, tags: tags) }
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
            // Attributes: a name starts at a character that is none of these after a space, a `/` or a value.
            var inName = false
            var attributes = 0
            while end < count, html[end] != gt {
                let byte = html[end]
                selfClosing = false
                if unquoted {
                    if isSpace(byte) { unquoted = false }
                } else if byte == UInt8(ascii: "=") {
                    afterEquals = true
                    inName = false
                } else if afterEquals, byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                    afterEquals = false
                    end = html[(end + 1)...].firstIndex(of: byte) ?? count
                    if end == count { break }
                } else if afterEquals, !isSpace(byte) {
                    afterEquals = false
                    unquoted = true
                } else if byte == slash {
                    selfClosing = true
                    inName = false
                } else if !isSpace(byte) {
                    afterEquals = false
                    if !inName {
                        inName = true
                        attributes += 1
                    }
                } else {
                    inName = false
                }
                end += 1
            }
            index = end + 1
            tags += 1
            mostAttributes = max(mostAttributes, closing ? 0 : attributes)
            if mostAttributes > attributeLimit || tags > tagLimit { return shape }
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
                if name == "plaintext" { return shape }  // the rest is text
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
                if stack.count > limit { return shape }
            }
        }
        return shape
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
}
