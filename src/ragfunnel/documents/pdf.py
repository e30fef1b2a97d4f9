"""PDF, from its text layer: pypdfium2 (fast, page labels and outline), with pdfminer.six for files whose
structure pypdfium2 cannot parse (a broken cross-reference table).

Before either reads a file, :func:`check_streams` decodes every compressed stream in it a piece at a time,
keeping nothing, and refuses the file once one stream or all of them expand past ``limits``: pdfium decodes a
stream whole in memory, so a 1 MB file holding 1 GiB of compressed spaces would take gigabytes. Pages and
text are counted while they are read. Whatever pdfium trips on is one line naming the file.
"""

from __future__ import annotations

import base64
import binascii
import logging
import mmap
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path

from ragfunnel.documents.limits import MB, ReadLimits
from ragfunnel.documents.model import DocumentBuilder, SourceDocument
from ragfunnel.errors import InputError, MissingExtra

log = logging.getLogger(__name__)

# Also said of a file that opens without a password: what its encrypted streams expand to cannot be checked.
ENCRYPTED = ("{name} is encrypted (password-protected); decrypt it first, e.g. qpdf --decrypt "
             "--password=PASSWORD {name} out.pdf (leave --password out if it opens without one)")
NO_TEXT = "{name} has no extractable text (scanned?); run OCR first (e.g. ocrmypdf {name} out.pdf)"
DAMAGED = "damaged PDF: {name} ({problem}); repair it with qpdf first (e.g. qpdf {name} repaired.pdf)"


def read_pdf(path: Path, limits: ReadLimits) -> SourceDocument:
    try:
        import pypdfium2 as pdfium
    except ImportError:
        raise MissingExtra("pypdfium2", "documents") from None
    check_streams(path, limits)
    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as e:
        if "password" in str(e).lower():
            raise InputError(ENCRYPTED.format(name=path.name)) from None
        log.info("pypdfium2 cannot open %s (%s); reading it with pdfminer.six", path.name, e)
        return _read_with_pdfminer(path, limits)
    try:
        return _checked(_read_pages(pdf, path.name, limits))
    except pdfium.PdfiumError as e:  # a page tree that lists itself, a page that cannot be parsed ...
        raise InputError(DAMAGED.format(name=path.name, problem=f"pdfium: {e}".rstrip("."))) from None
    finally:
        pdf.close()


def _read_pages(pdf, name: str, limits: ReadLimits) -> SourceDocument:
    pages = len(pdf)
    _check_pages(name, pages, limits)
    builder = DocumentBuilder(name, "pdf")
    headings = _outline_by_page(pdf, pages)
    characters = 0
    for index in range(pages):
        page = pdf[index]
        textpage = page.get_textpage()
        text = textpage.get_text_range().replace("\r\n", "\n").replace("\r", "\n")
        textpage.close()  # each page's memory goes before the next is read
        page.close()
        characters += len(text)
        _check_text(name, characters, index + 1, limits)
        label = pdf.get_page_label(index) or None
        builder.add(_clean(text), page=index + 1, page_label=label, heading=headings.get(index, ()))
    return builder.build(pages=pages)


def _check_pages(name: str, pages: int, limits: ReadLimits) -> None:
    if pages > limits.max_pdf_pages:
        raise InputError(f"{name} has {pages:,} pages, over the limit of {limits.max_pdf_pages:,} (a page tree "
                         "that lists pages over and over?); pass --max-pdf-pages to raise it")


def _check_text(name: str, characters: int, page: int, limits: ReadLimits) -> None:
    if characters > limits.max_pdf_text_chars:
        raise InputError(f"{name} holds over {limits.max_pdf_text_chars:,} characters of text by page {page:,}; "
                         "pass --max-pdf-text-chars to raise the limit")


def _outline_by_page(pdf, pages: int) -> dict[int, tuple[str, ...]]:
    """The outline's heading path in force on each page (the last bookmark at or before it)."""
    marks = []
    path: list[str] = []
    for bookmark in pdf.get_toc():
        dest = bookmark.get_dest()
        index = dest.get_index() if dest is not None else None
        path = path[:bookmark.level] + [" ".join((bookmark.get_title() or "").split())]
        if index is not None:
            marks.append((index, tuple(path)))
    by_page: dict[int, tuple[str, ...]] = {}
    current: tuple[str, ...] = ()
    marks.sort(key=lambda m: m[0])
    for index in range(pages):
        while marks and marks[0][0] <= index:
            current = marks.pop(0)[1]
        by_page[index] = current
    return by_page


def _read_with_pdfminer(path: Path, limits: ReadLimits) -> SourceDocument:
    try:
        from pdfminer.high_level import extract_pages
        from pdfminer.layout import LTTextContainer
        from pdfminer.pdfdocument import PDFPasswordIncorrect
    except ImportError:
        raise MissingExtra("pdfminer.six", "documents") from None
    builder = DocumentBuilder(path.name, "pdf")
    number = characters = 0
    try:
        for number, page in enumerate(extract_pages(str(path), maxpages=limits.max_pdf_pages + 1), start=1):
            _check_pages(path.name, number, limits)
            text = "\n".join(el.get_text() for el in page if isinstance(el, LTTextContainer))
            characters += len(text)
            _check_text(path.name, characters, number, limits)
            builder.add(_clean(text), page=number)
    except PDFPasswordIncorrect:
        raise InputError(ENCRYPTED.format(name=path.name)) from None
    except InputError:
        raise
    except Exception as e:  # pdfminer raises many unrelated types for damaged files
        raise InputError(f"{path.name} cannot be read as a PDF ({type(e).__name__}: {e}); it is damaged or "
                         f"truncated; repair it first (e.g. qpdf {path.name} repaired.pdf)") from None
    document = builder.build(pages=number)
    if not document.text:  # pdfium could not open it either: damage is likelier than a scan
        raise InputError(f"{path.name} is damaged or truncated (no page could be read); repair it first "
                         f"(e.g. qpdf {path.name} repaired.pdf)")
    return document


# pdfium marks a hyphen it found at a line end with U+0002 (U+FFFE in some builds); other control
# characters are glyphs of math and symbol fonts that map to no text (and U+001C separates files).
_CONTROLS = {c: " " for c in range(32) if chr(c) not in "\n\t"} | {0x02: "-", 0xFFFE: "-"}


def _clean(text: str) -> str:
    return text.translate(_CONTROLS)


def _checked(document: SourceDocument) -> SourceDocument:
    if not document.text.strip():
        raise InputError(NO_TEXT.format(name=document.name))
    return document


# --- What the compressed streams expand to, found before pdfium decodes any of them ---------------------------

STEP = MB  # a decoder hands on at most about this much at a time: no part of a bomb is ever held whole
FIRST_READ = 256  # raw bytes first read of a stream; each further read doubles, up to 64 KB
MAX_CHAINS = 8  # distinct filter chains one stream may declare; more is a file built to slow the check


_SPACE = rb"(?:\s|%[^\r\n]*)*"  # white space and comments between tokens
_NAME_CHARS = rb"[^\s/\[\]<>(){}%]"


def _name_pattern(name: str) -> bytes:
    """A regex for the PDF name ``/name`` however it is spelled (any character may be written #xx)."""
    def either(char: str) -> str:
        code = "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in f"{ord(char):02x}")
        return f"(?:{re.escape(char)}|#{code})"
    return ("/" + "".join(either(c) for c in name)).encode() + rb"(?!" + _NAME_CHARS + rb")"


# A stream's data starts on the line after its keyword (pdfium skips the rest of that line).
_STREAM = re.compile(rb"(?<![A-Za-z])stream(?![A-Za-z0-9#])[^\r\n]*(?:\r\n|\r|\n)")
_FILTER = re.compile(_name_pattern("Filter") + _SPACE + rb"(\[(?:%[^\r\n]*|[^\]%])*\]|/" + _NAME_CHARS + rb"*|\d)")
_EARLY_CHANGE_0 = re.compile(_name_pattern("EarlyChange") + _SPACE + rb"0(?![0-9.])")
_ENCRYPT = re.compile(_name_pattern("Encrypt") + _SPACE + rb"(?:\d|<<)")
_NAME = re.compile(rb"/(" + _NAME_CHARS + rb"*)")
_NAME_ESCAPE = re.compile(rb"#([0-9A-Fa-f]{2})")
_WHITE = re.compile(rb"[\s\x00]+")
_NOT_HEX = re.compile(rb"[^0-9A-Fa-f]")
_NOT_A85 = re.compile(rb"[^!-u]")


class _PastCap(Exception):
    """A stream decoded past the bytes it was allowed."""


def check_streams(path: Path, limits: ReadLimits) -> None:
    """Refuse ``path`` if one of its compressed streams would expand past ``limits.max_pdf_stream_mb``, or all
    of them past ``limits.max_inflated_mb``; an encrypted file, whose streams cannot be decoded here, is
    refused too. Every decoding filter pdfium applies is followed (Flate, LZW, RunLength, ASCIIHex, ASCII85,
    chained in any order), counting each stage's output; image codecs end a chain, as pdfium leaves images
    encoded when it reads text."""
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if _ENCRYPT.search(data):
            raise InputError(ENCRYPTED.format(name=path.name))
        _StreamCheck(data, path.name, limits).run()


class _StreamCheck:
    """One pass over a PDF's bytes: each stream decoded by every filter chain its dictionary might declare."""

    def __init__(self, data: mmap.mmap, name: str, limits: ReadLimits):
        self.data, self.name = data, name
        self.stream_cap = int(limits.max_pdf_stream_mb * MB)
        self.total_left = int(limits.max_inflated_mb * MB)
        self.limits = limits
        # Each stream's data is read about once; a damaged one may run on into the next, not into every one.
        self.raw_left = 4 * len(data)

    def run(self) -> None:
        previous_end = 0
        for match in _STREAM.finditer(self.data):
            # Its dictionary lies after the previous stream's data; all that text is searched for its filters,
            # so a filter name hidden in a string or a nested dictionary only adds a chain to try.
            header = self.data[previous_end:match.start()]
            previous_end = match.end()
            self.raw_left += 2 * FIRST_READ  # the first read of a short stream overshoots its end
            chains = _declared_chains(header, self.name) | _sniffed_chain(self.data[match.end():match.end() + 2])
            sizes = [self._decoded_size(match.end(), chain) for chain in chains if chain]
            self.total_left -= max(sizes, default=0)

    def _decoded_size(self, start: int, chain: tuple[Callable, ...]) -> int:
        """Bytes all stages of ``chain`` write for the stream at ``start``; InputError past a limit."""
        cap = min(self.stream_cap, self.total_left)
        size = 0

        def counted(pieces: Iterable[bytes]) -> Iterator[bytes]:
            nonlocal size
            for piece in pieces:
                size += len(piece)
                if size > cap:
                    raise _PastCap
                yield piece

        pieces: Iterable[bytes] = self._raw(start)
        for decode in chain:
            pieces = counted(decode(pieces))
        try:
            for _ in pieces:
                pass
        except _PastCap:
            raise self._refusal(stream_over=cap == self.stream_cap) from None
        return size

    def _raw(self, start: int) -> Iterator[bytes]:
        """The file's bytes from ``start`` on, in growing pieces, as far as the first decoder asks."""
        size = FIRST_READ
        while start < len(self.data):
            self.raw_left -= size
            if self.raw_left < 0:
                raise InputError(DAMAGED.format(name=self.name, problem="its streams run into one another"))
            yield self.data[start:start + size]
            start, size = start + size, min(2 * size, 64 * 1024)

    def _refusal(self, *, stream_over: bool) -> InputError:
        if stream_over:
            return InputError(f"{self.name}: a compressed stream expands past {self.limits.max_pdf_stream_mb:g} MB "
                              "(a decompression bomb?); pass --max-pdf-stream-mb to raise the limit")
        return InputError(f"{self.name}: its compressed streams expand past {self.limits.max_inflated_mb:g} MB in "
                          "all (a decompression bomb?); pass --max-inflated-mb to raise the limit")


def _declared_chains(header: bytes, name: str) -> set[tuple[Callable, ...]]:
    """The decoding chains that every ``/Filter`` in ``header`` names, each up to its first filter that
    pdfium leaves encoded (an image codec) or does not know."""
    early_changes = (1, 0) if _EARLY_CHANGE_0.search(header) else (1,)
    chains = set()
    for match in _FILTER.finditer(header):
        value = match.group(1)
        if re.search(rb"\d", _NAME.sub(b"", value)):  # a reference pdfium would follow
            raise InputError(DAMAGED.format(name=name, problem="a stream's /Filter is not written in place, so "
                                            "what it expands to cannot be checked"))
        names = [_unescaped(n) for n in _NAME.findall(value)]
        chains |= {_chain(names, early) for early in early_changes}
    if len(chains) > MAX_CHAINS:
        raise InputError(DAMAGED.format(name=name, problem=f"a stream declares over {MAX_CHAINS} filter chains"))
    return chains


def _unescaped(name: bytes) -> str:
    return _NAME_ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), name).decode("latin-1")


def _chain(names: list[str], early_change: int) -> tuple[Callable, ...]:
    chain = []
    for filter_name in names:
        decoder = _DECODERS[early_change].get(filter_name)
        if decoder is None:  # an image codec, which pdfium leaves encoded, or a filter it does not know
            break
        chain.append(decoder)
    return tuple(chain)


def _sniffed_chain(head: bytes) -> set[tuple[Callable, ...]]:
    """Flate, if the stream's data starts like a zlib stream: checked whatever the dictionary says."""
    is_zlib = len(head) == 2 and head[0] & 0x0F == 8 and (head[0] * 256 + head[1]) % 31 == 0
    return {(_inflate,)} if is_zlib else set()


# Each decoder takes pieces and yields pieces of at most about STEP bytes; it stops where the filter's data ends
# or turns invalid, having yielded what pdfium would decode up to there.

def _inflate(pieces: Iterable[bytes]) -> Iterator[bytes]:
    inflater = zlib.decompressobj()
    for piece in pieces:
        while True:
            try:
                out = inflater.decompress(piece, STEP)
            except zlib.error:
                return
            yield out
            piece = inflater.unconsumed_tail
            if inflater.eof:
                return
            if not piece and len(out) < STEP:
                break


_LZW_ROOTS = [bytes([i]) for i in range(256)] + [b"", b""]  # 256: clear the table, 257: end of data


def _lzw(pieces: Iterable[bytes], *, early_change: int) -> Iterator[bytes]:
    table = list(_LZW_ROOTS)
    width, buffer, bits, previous, out = 9, 0, 0, b"", bytearray()
    for piece in pieces:
        for byte in piece:
            buffer, bits = (buffer << 8) | byte, bits + 8
            if bits < width:
                continue
            bits -= width
            code, buffer = buffer >> bits, buffer & ((1 << bits) - 1)
            if code == 256:
                del table[258:]
                width, previous = 9, b""
                continue
            if code < len(table) and code != 257:
                entry = table[code]
            elif code == len(table) and previous:
                entry = previous + previous[:1]
            else:  # the end of data, or a code no table holds
                yield bytes(out)
                return
            if previous and len(table) < 4096:
                table.append(previous + entry[:1])
            out += entry
            previous = entry
            width = min(12, (len(table) + early_change).bit_length())
            if len(out) >= STEP:
                yield bytes(out)
                out.clear()
    yield bytes(out)


def _run_length(pieces: Iterable[bytes]) -> Iterator[bytes]:
    carry = b""
    for piece in pieces:
        data, out, at = carry + piece, bytearray(), 0
        while at < len(data):
            length = data[at]
            if length == 128:  # the end of data
                yield bytes(out)
                return
            run_end = at + 2 + (length if length < 128 else 0)
            if run_end > len(data):
                break
            out += data[at + 1:run_end] if length < 128 else data[at + 1:at + 2] * (257 - length)
            at = run_end
            if len(out) >= STEP:
                yield bytes(out)
                out.clear()
        carry = data[at:]
        yield bytes(out)


def _hex(pieces: Iterable[bytes]) -> Iterator[bytes]:
    carry = b""
    for piece in pieces:
        digits = carry + _WHITE.sub(b"", piece)
        end = _NOT_HEX.search(digits)  # ">" ends the data; any other byte is damage pdfium stops at
        if end:
            digits = digits[:end.start()]
            digits += b"0" * (len(digits) % 2)  # a last odd digit is followed by 0
        whole = len(digits) - len(digits) % 2
        yield binascii.unhexlify(digits[:whole])
        if end:
            return
        carry = digits[whole:]


def _ascii85(pieces: Iterable[bytes]) -> Iterator[bytes]:
    carry = b""
    for piece in pieces:
        text = carry + _WHITE.sub(b"", piece).replace(b"z", b"!!!!!")
        end = _NOT_A85.search(text)  # "~>" ends the data; any other byte is damage pdfium stops at
        if end:
            text = text[:end.start()]
        whole = len(text) if end else len(text) - len(text) % 5
        try:
            yield base64.a85decode(text[:whole])
        except ValueError:
            return
        if end:
            return
        carry = text[whole:]


def _decoders(early_change: int) -> dict[str, Callable]:
    """The decoding filters by name (pdfium takes the short names of inline images everywhere)."""
    lzw = partial(_lzw, early_change=early_change)
    return {"FlateDecode": _inflate, "Fl": _inflate, "LZWDecode": lzw, "LZW": lzw, "RunLengthDecode": _run_length,
            "RL": _run_length, "ASCIIHexDecode": _hex, "AHx": _hex, "ASCII85Decode": _ascii85, "A85": _ascii85}


_DECODERS = {early_change: _decoders(early_change) for early_change in (0, 1)}
