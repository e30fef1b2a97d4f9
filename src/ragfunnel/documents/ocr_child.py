"""Pages read by OCR in a process of its own, under an address-space limit: :mod:`ragfunnel.documents.ocr` starts
it (through :mod:`ragfunnel.documents.reader_process`) and kills it when it runs past its time.

``python -P ocr_child.py image FILE MEMORY_MB MAX_PIXELS`` reads an image file (each frame of a TIFF is a page);
``python -P ocr_child.py pdf FILE MEMORY_MB MAX_PIXELS DPI PAGE...`` renders the PDF's pages (1-based) at DPI, fewer
dots where a page would pass MAX_PIXELS, and reads them. It writes one JSON object a line to stdout:

- first ``{"pages": N}``, the pages it will read;
- then ``{"page": n, "lines": [[text, confidence], ...], "dpi": d}`` for each page, in order (``dpi`` for PDF pages);
- or, where reading stops, ``{"error": "too_large" | "unreadable" | "missing", "detail": ...}``.

Lines are the engine's text boxes joined where they stand side by side on one line, top to bottom; every box is
kept, however low its confidence (RapidOCR drops those under 0.5 unless told not to). When Python cannot allocate,
the process exits with :data:`OUT_OF_MEMORY`. Only the standard library and the engine are imported.
"""

from __future__ import annotations

import json
import resource
import sys
from collections.abc import Iterator

OUT_OF_MEMORY = 3  # the same status as reader_process.OUT_OF_MEMORY (this script imports nothing of ragfunnel)
MB = 1024 * 1024
POINTS_PER_INCH = 72
MIN_DPI = 100  # a page that would need fewer dots to fit the pixel limit is refused, not read blurred
# Boxes on one line: their vertical centres lie within this share of the taller box's height.
SAME_LINE = 0.5


def main(argv: list[str]) -> int:
    mode, path, memory_mb, max_pixels, *rest = argv
    try:
        from PIL import Image
        from rapidocr import RapidOCR
    except ImportError as e:
        say(error="missing", detail=e.name or "rapidocr")
        return 0
    Image.MAX_IMAGE_PIXELS = None  # the size is checked here before anything is decoded, with the caller's limit
    # No text-line angle classifier: on upright pages it turns lines it takes for upside down, and reads them wrong.
    engine = RapidOCR(params={"Global.text_score": 0.0, "Global.use_cls": False, "Global.log_level": "error"})
    limit_memory(float(memory_mb))
    try:
        pages = image_pages(path, int(max_pixels)) if mode == "image" else \
            pdf_pages(path, int(max_pixels), float(rest[0]), [int(p) for p in rest[1:]])
        for number, picture, dpi in pages:
            found = engine(picture)
            boxes = [] if found.boxes is None else found.boxes.tolist()
            lines = joined_lines(boxes, list(found.txts or ()), [float(s) for s in found.scores or ()])
            say(page=number, lines=lines, **({"dpi": dpi} if dpi else {}))
    except MemoryError:
        return OUT_OF_MEMORY
    return 0


def limit_memory(memory_mb: float) -> None:
    """The engine and its models are loaded first: the limit bounds reading pages, not loading the library."""
    limit = int(memory_mb * MB)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:  # a lower limit set on the whole service stays: it cannot be raised
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def image_pages(path: str, max_pixels: int) -> Iterator[tuple[int, object, None]]:
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(path)  # reads the header only
    except (UnidentifiedImageError, OSError, ValueError) as e:
        return say(error="unreadable", detail=str(e))
    frames = getattr(image, "n_frames", 1)
    say(pages=frames)
    for index in range(frames):
        try:
            image.seek(index)
            width, height = image.size
            if width * height > max_pixels:  # before a pixel is decoded: a 100,000 x 100,000 PNG is a few kB
                return say(error="too_large", detail=f"{width:,} x {height:,} pixels")
            picture = image.convert("RGB")
        except (OSError, ValueError, SyntaxError) as e:  # truncated or damaged data, found as it is decoded
            return say(error="unreadable", detail=str(e) or type(e).__name__)
        yield index + 1, picture, None


def pdf_pages(path: str, max_pixels: int, dpi: float, numbers: list[int]) -> Iterator[tuple[int, object, float]]:
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(path)
    except pdfium.PdfiumError as e:
        return say(error="unreadable", detail=str(e))
    say(pages=len(numbers))
    try:
        for number in numbers:
            page = pdf[number - 1]
            width, height = page.get_size()  # points
            fitted = min(dpi, POINTS_PER_INCH * (max_pixels / max(width * height, 1.0)) ** 0.5)
            if fitted < MIN_DPI:
                return say(error="too_large", detail=f"page {number} is {width / 72:.0f} x {height / 72:.0f} inches")
            picture = page.render(scale=fitted / POINTS_PER_INCH).to_pil().convert("RGB")
            page.close()
            yield number, picture, round(fitted, 1)
    except pdfium.PdfiumError as e:
        say(error="unreadable", detail=f"pdfium: {e}")
    finally:
        pdf.close()


def joined_lines(boxes: list, texts: list[str], scores: list[float]) -> list[list]:
    """``[[text, confidence], ...]``: the engine's boxes (in its reading order) joined into lines; a line's
    confidence is its boxes' mean, weighted by their characters."""
    lines: list[list] = []
    last = None  # (centre, height, right edge) of the previous box
    for box, text, score in zip(boxes, texts, scores, strict=False):
        ys = [point[1] for point in box]
        top, bottom = min(ys), max(ys)
        centre, height, left = (top + bottom) / 2, bottom - top, min(point[0] for point in box)
        text = " ".join(text.split())
        if not text:
            continue
        if last and abs(centre - last[0]) <= SAME_LINE * max(height, last[1]) and left >= last[2] - height:
            previous, weight = lines[-1]
            chars = len(previous) + len(text)
            lines[-1] = [f"{previous} {text}", (weight * len(previous) + score * len(text)) / chars]
        else:
            lines.append([text, score])
        last = (centre, height, max(point[0] for point in box))
    return [[text, round(confidence, 4)] for text, confidence in lines]


def say(**message) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
