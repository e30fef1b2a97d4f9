"""Text from (X)HTML, with line breaks where blocks end. lxml's HTML parser resolves no entities from a DTD
and reads nothing from the network."""

from __future__ import annotations

import re

from ragfunnel.errors import MissingExtra

_BLOCKS = {"p", "div", "section", "article", "li", "ul", "ol", "tr", "table", "blockquote", "pre", "br", "hr",
           "h1", "h2", "h3", "h4", "h5", "h6", "dt", "dd", "figcaption", "header", "footer", "aside", "nav"}
_SKIP = {"script", "style", "head", "noscript", "template"}
_SPACES = re.compile(r"[ \t\u00a0]+")
_BLANK_LINES = re.compile(r"\n\s*\n+")


def parse_html(data: bytes):
    """The document's root element, or None when the markup holds no document at all (empty, only comments)."""
    try:
        import lxml.etree
        import lxml.html
    except ImportError:
        raise MissingExtra("lxml", "documents") from None

    parser = lxml.html.HTMLParser(no_network=True, remove_comments=True, remove_pis=True)
    try:
        return lxml.html.document_fromstring(data, parser=parser)
    except (lxml.etree.ParserError, lxml.etree.XMLSyntaxError, ValueError):
        return None


def html_text(root) -> str:
    """The visible text under ``root``: blocks on their own lines, paragraphs apart by a blank line."""
    out: list[str] = []

    def walk(el) -> None:
        tag = el.tag.rsplit("}", 1)[-1].lower() if isinstance(el.tag, str) else ""
        if tag in _SKIP:
            if el.tail:
                out.append(el.tail)
            return
        block = tag in _BLOCKS
        if block:
            out.append("\n\n" if tag in ("p", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote") else "\n")
        if el.text:
            out.append(el.text)
        for child in el:
            walk(child)
        if block:
            out.append("\n")
        if el.tail:
            out.append(el.tail)

    walk(root)
    lines = (_SPACES.sub(" ", line).strip() for line in "".join(out).split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def first_heading(root) -> str | None:
    for el in root.iter("h1", "h2", "h3", "title"):
        text = " ".join(el.text_content().split())
        if text:
            return text
    return None
