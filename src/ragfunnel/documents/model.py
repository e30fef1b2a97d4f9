"""What a reader returns: a file's text with a map from character offsets to pages and headings."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from ragfunnel.errors import spelled_plainly
from ragfunnel.text.chunking import FILE_SEPARATOR
from ragfunnel.types import place_label


@dataclass(frozen=True)
class Section:
    """A stretch of a document's text that lies on one page, or under one heading path."""

    start: int
    end: int
    page: int | None = None  # 1-based physical page (PDF)
    page_label: str | None = None  # the page number printed on it, where the PDF gives one ("xii")
    heading: tuple[str, ...] = ()  # chapter, or heading path, outermost first
    sheet: str | None = None  # a spreadsheet's sheet (a CSV file has none)
    row: int | None = None  # a spreadsheet row's number, as the spreadsheet numbers it (the header is row 1)
    slide: int | None = None  # 1-based, in a slide deck
    confidence: float | None = None  # the OCR engine's confidence in a line it read from an image (0-1)

    def to_dict(self) -> dict[str, Any]:
        """Its span and every place field that is set, with ``label``, as a citation names it."""
        fields = {"page": self.page, "page_label": self.page_label, "heading": list(self.heading) or None,
                  "sheet": self.sheet, "row": self.row, "slide": self.slide, "confidence": self.confidence}
        return {"start": self.start, "end": self.end, **{k: v for k, v in fields.items() if v is not None},
                "label": self.describe()}

    def describe(self) -> str:
        """How a citation names it: ``p. 12 (xii)`` and/or the innermost heading; ``Q3 · row 14``; ``slide 7``."""
        innermost = self.heading[-1] if self.heading else None
        return place_label(page=self.page, page_label=self.page_label, heading=innermost, sheet=self.sheet,
                           row=self.row, slide=self.slide)


@dataclass(frozen=True)
class SourceDocument:
    """A user's file read as text. ``sections`` cover ``text`` in order (gaps hold the blank lines between)."""

    name: str  # the file's name as the user gave it
    format: str
    text: str
    sections: tuple[Section, ...] = ()
    pages: int = 0  # physical pages (PDF), blank ones included
    warnings: tuple[str, ...] = ()  # what the reader left out or doubts, one line each (also logged)
    _starts: list[int] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", [s.start for s in self.sections])

    @classmethod
    def of_text(cls, name: str, text: str, *, format: str = "text") -> SourceDocument:
        """A document with no pages or headings: one section over all of ``text``."""
        return cls(name, format, text, (Section(0, len(text)),))

    def section_at(self, offset: int) -> Section | None:
        """The section holding character ``offset`` (or the last one starting before it)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self.sections[i] if i >= 0 else None

    def to_dict(self) -> dict[str, Any]:
        """The text with its map (``ragfunnel read --json``, ``GET /v1/documents/{id}/text``)."""
        return {"name": self.name, "format": self.format, "pages": self.pages,
                "warnings": [spelled_plainly(w) for w in self.warnings],
                "text": self.text, "sections": [s.to_dict() for s in self.sections]}

    def line_at(self, offset: int) -> int:
        """1-based line number of character ``offset``."""
        return self.text.count("\n", 0, offset) + 1


class DocumentBuilder:
    """Builds a :class:`SourceDocument` from pieces, each with its page or heading; pieces are joined by a
    blank line and empty pieces are skipped."""

    def __init__(self, name: str, format: str):
        self.name, self.format = name, format
        self._parts: list[str] = []
        self._sections: list[Section] = []
        self._length = 0

    def add(self, text: str, *, page: int | None = None, page_label: str | None = None,
            heading: tuple[str, ...] = (), joiner: str = "\n\n", **place) -> None:
        """``text`` (stripped) as the next section, after ``joiner``; ``place`` holds the rest of its
        :class:`Section` (``sheet``, ``row``, ``slide``, ``confidence``)."""
        text = text.strip()
        if not text:
            return
        if self._parts:
            self._parts.append(joiner)
            self._length += len(joiner)
        self._sections.append(Section(self._length, self._length + len(text), page, page_label, heading, **place))
        self._parts.append(text)
        self._length += len(text)

    def build(self, *, pages: int = 0, warnings: tuple[str, ...] = ()) -> SourceDocument:
        return SourceDocument(self.name, self.format, "".join(self._parts), tuple(self._sections), pages, warnings)


@dataclass(frozen=True)
class Location:
    """Where an offset of a joined context falls: the file, the offset inside it, and its section."""

    document: SourceDocument
    offset: int
    section: Section | None


@dataclass(frozen=True)
class LocatedContext:
    """The text one question is answered from, joined from one or more files, and where each file begins.

    One file is its text alone. Several files each begin with a ``[file name]`` line and are separated by
    :data:`FILE_SEPARATOR`, so the prompt names the files and no chunk spans two of them.
    """

    text: str
    documents: tuple[SourceDocument, ...]
    starts: tuple[int, ...]  # where each document's own text begins in ``text``

    @classmethod
    def of_text(cls, text: str, *, name: str = "context") -> LocatedContext:
        """A context given as a string: one plain-text document (citations carry line numbers)."""
        return cls.join([SourceDocument.of_text(name, text)])

    @classmethod
    def join(cls, documents: list[SourceDocument]) -> LocatedContext:
        if len(documents) == 1:
            return cls(documents[0].text, (documents[0],), (0,))
        parts, starts, length = [], [], 0
        for i, doc in enumerate(documents):
            header = ("" if i == 0 else f"\n{FILE_SEPARATOR}\n") + f"[{doc.name}]\n"
            parts += [header, doc.text]
            starts.append(length + len(header))
            length += len(header) + len(doc.text)
        return cls("".join(parts), tuple(documents), tuple(starts))

    def clip(self, start: int, end: int) -> tuple[int, int]:
        """``start``..``end`` without the ``[file name]`` line a chunk of a later file may begin with."""
        i = max(bisect.bisect_right(self.starts, max(end - 1, 0)) - 1, 0)
        return max(start, self.starts[i]), end

    def locate(self, offset: int) -> Location:
        """The file, file offset and section of character ``offset`` of :attr:`text`."""
        i = max(bisect.bisect_right(self.starts, offset) - 1, 0)
        doc = self.documents[i]
        local = min(max(offset - self.starts[i], 0), len(doc.text))
        return Location(doc, local, doc.section_at(local))
