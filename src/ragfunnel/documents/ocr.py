"""Text read from pictures: image files (PNG, JPEG, TIFF, WebP) and the pages of a PDF that have no text layer,
by RapidOCR (PP-OCR's detection and recognition models, Chinese and English, as ONNX inside its PyPI wheel, on the
CPU: ``pip install 'ragfunnel[ocr]'``).

The engine runs in a process of its own (:mod:`ragfunnel.documents.ocr_child`) under ``limits``: the pixels of one
image or rendered page (an image is measured from its header, before a pixel is decoded: a decompression bomb is
refused in one line), the process's memory, and its seconds. Each line the engine reads becomes a section of the
document with its page and the engine's confidence; a line under :data:`LOW_CONFIDENCE` is kept and marked
:data:`UNCLEAR`, and the document's warnings say how many were. Progress goes to the
:func:`ragfunnel.documents.progress.reading_files` sink in effect, a page at a time.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from ragfunnel.documents.limits import ReadLimits
from ragfunnel.documents.model import DocumentBuilder, SourceDocument
from ragfunnel.documents.progress import report_progress
from ragfunnel.documents.reader_process import Bounds, ReaderProcess, child_command
from ragfunnel.errors import InputError, MissingExtra, option

OCR_DPI = 300  # scanned pages are rendered at the resolution scanners commonly write
LOW_CONFIDENCE = 0.5  # the engine's own cut-off: below it, a line is more often wrong than right
UNCLEAR = "[unclear] "  # how a low-confidence line begins in the text a model reads
CRASHED = "{name} could not be read by OCR ({problem}); check that it opens in an image viewer"


@dataclass(frozen=True)
class OcrLine:
    text: str
    confidence: float  # the engine's, 0-1

    def shown(self) -> str:
        """The line as a model reads it: marked when the engine doubts it."""
        return (UNCLEAR if self.confidence < LOW_CONFIDENCE else "") + self.text


def ocr_available() -> bool:
    """Whether the OCR extra is installed (looked up, not imported: the engine loads in the child only)."""
    return importlib.util.find_spec("rapidocr") is not None


def read_image(path: Path, limits: ReadLimits) -> SourceDocument:
    """An image file read by OCR; each frame of a multi-page TIFF is a page."""
    if not ocr_available():  # a refusal of this file, not of the folder it is in (as a scanned PDF's)
        raise InputError(f"{path.name} is an image; reading it needs OCR: pip install 'ragfunnel[ocr]'")
    check_image(path, limits)
    pages = _read(["image", str(path)], path.name, limits, what=f"OCR {path.name}")
    builder = DocumentBuilder(path.name, "image")
    for number, lines in pages.items():
        add_lines(builder, lines, page=number if len(pages) > 1 else None)
    document = builder.build(pages=len(pages), warnings=unclear_warning(pages))
    if not document.text:
        raise InputError(f"{path.name}: OCR found no text in it; is it a picture of text, and the right way up?")
    return document


def check_image(path: Path, limits: ReadLimits) -> None:
    """Refuse an image whose header says it is damaged or larger than ``limits``, before the OCR process starts
    (the header alone is read: a decompression bomb's pixels are never decoded)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            width, height = image.size
    except Image.DecompressionBombError as e:  # past twice PIL's own limit, which is above ours
        raise _refusal({"error": "too_large", "detail": str(e).split(" exceeds")[0]}, path.name, limits) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise _refusal({"error": "unreadable", "detail": str(e) or type(e).__name__}, path.name, limits) from None
    if width * height > limits.max_image_megapixels * 1_000_000:
        raise _refusal({"error": "too_large", "detail": f"{width:,} x {height:,} pixels"}, path.name, limits)


def ocr_pdf_pages(path: Path, numbers: list[int], limits: ReadLimits) -> dict[int, list[OcrLine]]:
    """The lines OCR reads on the PDF's pages ``numbers`` (1-based), rendered at :data:`OCR_DPI`."""
    argv = ["pdf", str(path), f"{OCR_DPI}", *map(str, numbers)]
    return _read(argv, path.name, limits, what=f"OCR {path.name}")


def add_lines(builder: DocumentBuilder, lines: list[OcrLine], **place) -> None:
    """One page's lines, each a section of its own (with its confidence), one line apart; a blank line before
    the page."""
    for i, line in enumerate(lines):
        builder.add(line.shown(), joiner="\n" if i else "\n\n", confidence=line.confidence, **place)


def unclear_warning(pages: dict[int, list[OcrLine]]) -> tuple[str, ...]:
    doubted = sum(line.confidence < LOW_CONFIDENCE for lines in pages.values() for line in lines)
    if not doubted:
        return ()
    return (f"{doubted} line{'s' if doubted > 1 else ''} read by OCR with low confidence (under "
            f"{LOW_CONFIDENCE:g}), marked {UNCLEAR.strip()}",)


def _read(argv: list[str], name: str, limits: ReadLimits, *, what: str) -> dict[int, list[OcrLine]]:
    mode, path, *rest = argv
    pixels = int(limits.max_image_megapixels * 1_000_000)
    command = [*child_command("ocr_child.py"), mode, path, f"{limits.max_ocr_memory_mb:g}", str(pixels), *rest]
    bounds = Bounds(limits.max_ocr_memory_mb, "max_ocr_memory_mb", limits.max_ocr_seconds, "max_ocr_seconds", CRASHED)
    pages: dict[int, list[OcrLine]] = {}
    total = 0
    with ReaderProcess(command, name, bounds) as reader:
        for message in reader.messages():
            if "error" in message:
                raise _refusal(message, name, limits)
            if "pages" in message:
                total = message["pages"]
                report_progress(what, 0, total)
                continue
            pages[message["page"]] = [OcrLine(text, confidence) for text, confidence in message["lines"]]
            report_progress(what, len(pages), total)
    return pages


def _refusal(message: dict, name: str, limits: ReadLimits) -> Exception:
    kind, detail = message["error"], message.get("detail")
    if kind == "missing":
        return MissingExtra(detail, "ocr")
    if kind == "too_large":
        return InputError(f"{name}: {detail}, over the limit of {limits.max_image_megapixels:g} megapixels "
                          f"(a decompression bomb?); raise it with {option('max_image_megapixels')}")
    return InputError(f"{name} cannot be read as an image ({detail}); open it in an image viewer and save it again")
