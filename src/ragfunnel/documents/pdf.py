"""PDF, from its text layer: pypdfium2 (fast, page labels and outline), with pdfminer.six for files whose
structure pypdfium2 cannot parse (a broken cross-reference table).

Both read in a process of their own (:mod:`ragfunnel.documents.pdf_child`), under an address-space limit and a
time limit: what pdfium allocates grows with what a page draws, not with the file's size, so only a process can
bound it, and this one never grows. Before that process starts, :func:`check_streams` decodes every compressed
stream a piece at a time, keeping nothing, and refuses the file once one stream or all of them expand past
``limits``: a flate bomb is refused in a fraction of a second rather than at the memory limit. Pages and text
are counted as they arrive. Whatever stops the reading is one line naming the file.
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
import logging
import mmap
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ragfunnel.documents.limits import MB, ReadLimits
from ragfunnel.documents.model import DocumentBuilder, SourceDocument
from ragfunnel.documents.ocr import OcrLine, add_lines, ocr_available, ocr_pdf_pages, unclear_warning
from ragfunnel.documents.reader_process import Bounds, ReaderProcess, child_command
from ragfunnel.errors import InputError, MissingExtra, option

log = logging.getLogger(__name__)

ENCRYPTED = ("{name} is encrypted (password-protected); decrypt it first, e.g. qpdf --decrypt "
             "--password=PASSWORD {name} out.pdf")
NO_TEXT = "{name} has no extractable text: no page holds text or a scanned image"
NEEDS_OCR = "{name} has no text layer (scanned pages); reading it needs OCR: pip install 'ragfunnel[ocr]'"
DAMAGED = "damaged PDF: {name} ({problem}); repair it with qpdf first (e.g. qpdf {name} repaired.pdf)"
UNREADABLE = ("{name} cannot be read as a PDF ({problem}); it is damaged or truncated; repair it first "
              "(e.g. qpdf {name} repaired.pdf)")


@dataclass(frozen=True)
class _Page:
    number: int
    label: str | None
    heading: tuple[str, ...]
    text: str
    scanned: bool  # no text, but images: a scan, read by OCR


def read_pdf(path: Path, limits: ReadLimits) -> SourceDocument:
    """A PDF's text layer, page by page; its pages of images without text (scans) read by OCR when the ``ocr``
    extra is installed (:mod:`ragfunnel.documents.ocr`), else left out with a warning, or refused when no page
    has text."""
    if importlib.util.find_spec("pypdfium2") is None:  # looked up, not imported: pdfium loads in the child only
        raise MissingExtra("pypdfium2", "documents")
    check_streams(path, limits)
    bounds = Bounds(limits.max_pdf_memory_mb, "max_pdf_memory_mb", limits.max_pdf_seconds, "max_pdf_seconds", DAMAGED)
    command = [*child_command("pdf_child.py"), str(path), f"{limits.max_pdf_memory_mb:g}"]
    with ReaderProcess(command, path.name, bounds) as reader:
        reader_name, pages = _pages(reader.messages(), path.name, limits)
    return _document(path, reader_name, pages, limits)


def _document(path: Path, reader: str, pages: list[_Page], limits: ReadLimits) -> SourceDocument:
    name = path.name
    scanned = [page.number for page in pages if page.scanned]
    read_by_ocr: dict[int, list[OcrLine]] = {}
    warnings: tuple[str, ...] = ()
    if scanned and ocr_available():
        read_by_ocr = ocr_pdf_pages(path, scanned, limits)
        warnings = unclear_warning(read_by_ocr)
    elif scanned:
        if not any(page.text.strip() for page in pages):
            raise InputError(NEEDS_OCR.format(name=name))
        warnings = (f"{len(scanned)} scanned page{'s' if len(scanned) > 1 else ''} of {name} left out "
                    f"({_page_list(scanned)}): reading {'them' if len(scanned) > 1 else 'it'} needs OCR: "
                    "pip install 'ragfunnel[ocr]'",)
    builder = DocumentBuilder(name, "pdf")
    for page in pages:
        if page.number in read_by_ocr:
            add_lines(builder, read_by_ocr[page.number], page=page.number, page_label=page.label,
                      heading=page.heading)
        else:
            builder.add(page.text, page=page.number, page_label=page.label, heading=page.heading)
    document = builder.build(pages=max((page.number for page in pages), default=0), warnings=warnings)
    if reader == "pdfminer" and not document.text:  # pdfium could not open it either: damage is likelier than a scan
        raise InputError(f"{name} is damaged or truncated (no page could be read); repair it first "
                         f"(e.g. qpdf {name} repaired.pdf)")
    if not document.text.strip():
        raise InputError(NO_TEXT.format(name=name))
    return document


def _page_list(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:10]))
    return f"page{'s' if len(numbers) > 1 else ''} {shown}" + (", ..." if len(numbers) > 10 else "")


def _pages(messages: Iterator[dict], name: str, limits: ReadLimits) -> tuple[str, list[_Page]]:
    """The reader the child used and the pages its messages describe, refused once its pages or text pass
    ``limits``."""
    found: list[_Page] = []
    reader, pages, characters = "pdfium", 0, 0
    for message in messages:
        if "error" in message:
            raise _refusal(message, name)
        if "reader" in message:
            reader, pages = message["reader"], message.get("pages", 0)
            if reader == "pdfminer":
                log.info("pypdfium2 cannot open %s (%s); reading it with pdfminer.six", name, message["because"])
            _check_pages(name, pages, limits)
            continue
        number, text = message["page"], message["text"]
        _check_pages(name, number, limits)  # pdfminer finds the pages one by one
        characters += len(text)
        _check_text(name, characters, number, limits)
        found.append(_Page(number, message["label"], tuple(message["heading"]), _clean(text),
                           scanned=message.get("images", 0) > 0))
    return reader, found


def _refusal(message: dict, name: str) -> Exception:
    kind, detail = message["error"], message.get("detail")
    if kind == "missing":
        return MissingExtra(detail, "documents")
    if kind == "encrypted":
        return InputError(ENCRYPTED.format(name=name))
    return InputError((DAMAGED if kind == "damaged" else UNREADABLE).format(name=name, problem=detail))


def _check_pages(name: str, pages: int, limits: ReadLimits) -> None:
    if pages > limits.max_pdf_pages:
        raise InputError(f"{name} has {pages:,} pages, over the limit of {limits.max_pdf_pages:,} (a page tree "
                         f"that lists pages over and over?); raise it with {option('max_pdf_pages')}")


def _check_text(name: str, characters: int, page: int, limits: ReadLimits) -> None:
    if characters > limits.max_pdf_text_chars:
        raise InputError(f"{name} holds over {limits.max_pdf_text_chars:,} characters of text by page {page:,}; "
                         f"raise the limit with {option('max_pdf_text_chars')}")


# pdfium marks a hyphen it found at a line end with U+0002 (U+FFFE in some builds); other control
# characters are glyphs of math and symbol fonts that map to no text (and U+001C separates files).
_CONTROLS = {c: " " for c in range(32) if chr(c) not in "\n\t"} | {0x02: "-", 0xFFFE: "-"}


def _clean(text: str) -> str:
    return text.translate(_CONTROLS)


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
    of them past ``limits.max_inflated_mb``. Every decoding filter pdfium applies is followed (Flate, LZW,
    RunLength, ASCIIHex, ASCII85, chained in any order), counting each stage's output; image codecs end a chain,
    as pdfium leaves images encoded when it reads text. An encrypted file is left to the limits of the process
    that reads it: its streams cannot be decoded without its key."""
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if not _ENCRYPT.search(data):
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
                              f"(a decompression bomb?); raise the limit with {option('max_pdf_stream_mb')}")
        return InputError(f"{self.name}: its compressed streams expand past {self.limits.max_inflated_mb:g} MB in "
                          f"all (a decompression bomb?); raise the limit with {option('max_inflated_mb')}")


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
