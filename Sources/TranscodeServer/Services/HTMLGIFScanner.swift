import CGumbo
import Foundation

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
    /// The GIF elements of `html`, in document order, and the document's `<base href>` if any.
    static func scan(_ html: [UInt8]) -> (elements: [GIFElement], baseHref: String?) {
        html.withUnsafeBufferPointer { buffer -> ([GIFElement], String?) in
            guard let start = buffer.baseAddress else { return ([], nil) }
            let base = UnsafeRawPointer(start)
            return start.withMemoryRebound(to: CChar.self, capacity: buffer.count) { text in
                var options = kGumboDefaultOptions
                guard let output = gumbo_parse_with_options(&options, text, buffer.count) else { return ([], nil) }
                defer { gumbo_destroy_output(&options, output) }
                var scanner = Walker(base: base, count: buffer.count)
                scanner.visit(output.pointee.root)
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

        mutating func visit(_ node: UnsafeMutablePointer<GumboNode>?) {
            guard let node else { return }
            // Template contents are a GUMBO_NODE_TEMPLATE: not walked.
            guard node.pointee.type == GUMBO_NODE_ELEMENT || node.pointee.type == GUMBO_NODE_DOCUMENT else { return }
            if node.pointee.type == GUMBO_NODE_DOCUMENT {
                self.children(node.pointee.v.document.children)
                return
            }
            let element = node.pointee.v.element
            guard element.tag_namespace == GUMBO_NAMESPACE_HTML else { return }
            switch element.tag {
            case GUMBO_TAG_NOSCRIPT:
                return
            case GUMBO_TAG_BASE:
                if self.baseHref == nil, let href = Self.attributes(element).first(where: { $0.name == "href" }) {
                    self.baseHref = href.value
                }
            case GUMBO_TAG_IMG:
                if let gif = self.image(element, replacing: self.tagRange(element)) { self.found.append(gif) }
                return
            default:
                // gumbo 0.10 predates <picture>: it is an unknown tag, named by its source text.
                if element.tag == GUMBO_TAG_UNKNOWN, self.tagName(element) == "picture" {
                    if let gif = self.picture(element) {
                        self.found.append(gif)
                        return
                    }
                }
            }
            self.children(element.children)
        }

        private mutating func children(_ vector: GumboVector) {
            for index in 0..<Int(vector.length) {
                self.visit(vector.data[index]?.assumingMemoryBound(to: GumboNode.self))
            }
        }

        /// The GIF an `<img>` shows, if any.
        private func image(_ element: GumboElement, replacing range: Range<Int>?) -> GIFElement? {
            guard let range else { return nil }
            let attributes = Self.attributes(element)
            func value(_ name: String) -> String? { attributes.first { $0.name == name }?.value }
            let source: String
            if let marker = value("data-gif") {
                let named = marker.trimmingCharacters(in: .whitespaces)
                source = named.isEmpty ? (value("src") ?? "") : named
            } else if let src = value("src"), HTMLGIFScanner.isGIFPath(src) {
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
