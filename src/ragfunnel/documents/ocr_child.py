"""Pages read by OCR in a process of its own, under an address-space limit: :mod:`ragfunnel.documents.ocr` starts
it (through :mod:`ragfunnel.documents.reader_process`) and kills it when it runs past its time.

``python -P ocr_child.py image FILE MEMORY_MB MAX_PIXELS`` reads an image file (each frame of a TIFF is a page);
``python -P ocr_child.py pdf FILE MEMORY_MB MAX_PIXELS DPI PAGE...`` renders the PDF's pages (1-based) at DPI, fewer
dots where a page would pass MAX_PIXELS, and reads them. It writes one JSON object a line to stdout:

- first ``{"pages": N}``, the pages it will read;
- then ``{"page": n, "lines": [[text, confidence], ...], "dpi": d}`` for each page, in order (``dpi`` for PDF pages);
- or, where reading stops, ``{"error": "too_large" | "unreadable" | "missing", "detail": ...}``.

Lines are the engine's text boxes in reading order, column by column, joined where they stand side by side on one
line; every box is kept, however low its confidence (RapidOCR drops those under 0.5 unless told not to). When Python
cannot allocate, the process exits with :data:`OUT_OF_MEMORY`. Only the standard library, the engine and
:mod:`ragfunnel.documents.child_io` (by path) are imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from statistics import median_high

if __package__:  # imported as a module of ragfunnel (tests, the parent's constants)
    from ragfunnel.documents.child_io import OUT_OF_MEMORY, limit_memory, say
else:  # run by path (-P): its folder goes after the standard library, where its html.py shadows nothing
    sys.path.append(os.path.dirname(__file__))
    from child_io import OUT_OF_MEMORY, limit_memory, say

POINTS_PER_INCH = 72
MIN_DPI = 100  # a page that would need fewer dots to fit the pixel limit is refused, not read blurred
# Boxes on one line: their vertical centres lie within this share of the taller box's height.
SAME_LINE = 0.5
COLUMN_LINE = 8  # a column of text has lines at least this many line heights long (a table's cells are shorter)
COLUMN_LINES = 3  # ... and at least this many of them
SHORT_BOX = 3  # a box shorter than this many line heights (a speck, a lone word) is placed by the columns around it
GUTTER_WIDTH = 0.5  # a gutter is at least this many line heights wide (LaTeX's two columns: 0.9)
GUTTER_COVER = 0.2  # long boxes may cross a gutter over this share of the region's height
BAND_GAP = 0.8  # blank space this many line heights tall parts blocks read one after the other


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
    """``[[text, confidence], ...]``: the engine's boxes in reading order (:func:`blocks`: column by column) joined
    into lines; a line's confidence is its boxes' mean, weighted by their characters."""
    items = [(_rectangle(box), " ".join(text.split()), score)
             for box, text, score in zip(boxes, texts, scores, strict=False) if text.strip()]
    lines: list[list] = []
    for block in blocks(items):
        lines += _block_lines(block)
    return [[text, round(confidence, 4)] for text, confidence in lines]


def blocks(items: list) -> list[list]:
    """The boxes cut into blocks read one after another (a recursive XY-cut): at a gutter between columns of text,
    else at a blank band taller than line spacing (a title above columns), else one block.

    A gutter (:func:`_gutters`, the widest tried first) is a strip half a line wide or more that long boxes cross
    over at most a fifth of the region's height: a figure's caption centred across it does not hide it. The columns
    read one after the other have long lines (a table's short cells are read row by row); what crosses the gutter is
    read before them when it lies above them (a heading), else between them (a figure's caption), and short boxes
    (specks of a photo, a lone word) go with the column nearest them."""
    if len(items) < 2:
        return [items]
    height = median_high([r[3] - r[1] for r, _, _ in items])
    for start, end in _gutters(items, height):
        left, across, right = [], [], []
        for item in items:
            x0, _, x1, _ = item[0]
            if x1 - x0 < SHORT_BOX * height:
                (left if (x0 + x1) / 2 < (start + end) / 2 else right).append(item)
            else:
                (left if x1 <= start else right if x0 >= end else across).append(item)
        if _side_by_side(left, right, across, height):
            top = min(r[1] for r, _, _ in left + right if r[2] - r[0] >= SHORT_BOX * height)
            above = [item for item in across if item[0][3] <= top]  # a heading over both columns
            between = [item for item in across if item[0][3] > top]
            return [*blocks(above), *blocks(left), *([between] if between else []), *blocks(right)]
    bands = _split(items, axis=1, gap=BAND_GAP * height)
    if len(bands) > 1:
        return [block for part in bands for block in blocks(part)]
    return [items]


def _side_by_side(left: list, right: list, across: list, height: float) -> bool:
    """Whether ``left`` and ``right`` are columns of text beside each other: each has lines of text (at least
    :data:`COLUMN_LINES` long boxes, their median :data:`COLUMN_LINE` line heights long), they share most of their
    height, and few long boxes cross between them (ragged lines of one column do not make a gutter)."""
    sides = [[r for r, _, _ in part if r[2] - r[0] >= SHORT_BOX * height] for part in (left, right)]
    if any(len(side) < COLUMN_LINES or median_high([r[2] - r[0] for r in side]) < COLUMN_LINE * height
           for side in sides):
        return False
    (top_a, bottom_a), (top_b, bottom_b) = [(min(r[1] for r in side), max(r[3] for r in side)) for side in sides]
    shared = min(bottom_a, bottom_b) - max(top_a, top_b)
    crossing = sum(r[2] - r[0] >= SHORT_BOX * height for r, _, _ in across)
    return shared >= 0.5 * min(bottom_a - top_a, bottom_b - top_b) and crossing <= 0.25 * sum(map(len, sides))


def _gutters(items: list, height: float) -> list[tuple[float, float]]:
    """The strips, widest first, at least :data:`GUTTER_WIDTH` lines wide and inside the region, that long boxes
    cover over at most :data:`GUTTER_COVER` of the region's height."""
    long = [r for r, _, _ in items if r[2] - r[0] >= SHORT_BOX * height]
    if len(long) < 2:
        return []
    left, right = min(r[0] for r in long), max(r[2] for r in long)
    span = max(r[3] for r in long) - min(r[1] for r in long)
    step = max(height / 4, 1.0)
    cells = int((right - left) / step) + 1
    cover = [0.0] * cells
    for x0, y0, x1, y1 in long:
        for cell in range(int((x0 - left) / step), min(int((x1 - left) / step) + 1, cells)):
            cover[cell] += y1 - y0
    found, run = [], None
    for cell, covered in enumerate([*cover, span]):  # the sentinel ends a run at the right edge
        if covered <= GUTTER_COVER * span and 0 < cell < cells - 1:
            run = (run[0], cell) if run else (cell, cell)
        elif run:
            if (run[1] - run[0] + 1) * step >= GUTTER_WIDTH * height:
                found.append((left + run[0] * step, left + (run[1] + 1) * step))
            run = None
    return sorted(found, key=lambda strip: strip[0] - strip[1])


def _block_lines(block: list) -> list[list]:
    """One block's boxes top to bottom, those side by side on one line joined left to right."""
    lines: list[list] = []
    rows: list[list] = []
    for item in sorted(block, key=lambda item: (item[0][1] + item[0][3]) / 2):
        (left, top, right, bottom), _, _ = item
        centre, height = (top + bottom) / 2, bottom - top
        last = rows[-1][-1][0] if rows else None
        if last and abs(centre - (last[1] + last[3]) / 2) <= SAME_LINE * max(height, last[3] - last[1]):
            rows[-1].append(item)
        else:
            rows.append([item])
    for row in rows:
        row.sort(key=lambda item: item[0][0])
        text = " ".join(t for _, t, _ in row)
        chars = sum(len(t) for _, t, _ in row)
        lines.append([text, sum(score * len(t) for _, t, score in row) / chars])
    return lines


def _rectangle(box: list) -> tuple[float, float, float, float]:
    xs, ys = [point[0] for point in box], [point[1] for point in box]
    return min(xs), min(ys), max(xs), max(ys)


def _split(items: list, *, axis: int, gap: float) -> list[list]:
    """``items`` in runs along ``axis`` (0: x, 1: y) whose extents leave at least ``gap`` between runs."""
    ordered = sorted(items, key=lambda item: item[0][axis])
    parts, end = [], None
    for item in ordered:
        start, stop = item[0][axis], item[0][axis + 2]
        if end is None or start - end >= gap:
            parts.append([])
        parts[-1].append(item)
        end = stop if end is None or start - end >= gap else max(end, stop)
    return parts


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
