"""OCR: image files and a PDF's scanned pages read by RapidOCR in a child process, lines kept with their confidence,
refusals in one line. The tests that run the engine are in the model tier (it loads ONNX models); the rest
check what happens before and around it."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from ragfunnel.documents import ReadLimits, read_document, read_documents
from ragfunnel.documents.model import DocumentBuilder
from ragfunnel.documents.ocr import LOW_CONFIDENCE, UNCLEAR, OcrLine, add_lines, unclear_warning
from ragfunnel.documents.ocr_child import joined_lines
from ragfunnel.documents.progress import reading_files
from ragfunnel.errors import InputError
from tests.helpers.documents import make_pdf

pytest.importorskip("PIL", reason="needs the [ocr] extra")
from PIL import Image, ImageDraw, ImageFont  # noqa: E402

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
LINES = ["The lighthouse keeper was Ada Penhallow.", "The ferry to Gull Rock leaves at nine."]


def text_image(path: Path, lines: list[str] = LINES) -> Path:
    """A 300-dpi-like picture of ``lines`` in a sans-serif font, black on white."""
    if not FONT.exists():
        pytest.skip("needs the DejaVu fonts to draw text")
    image = Image.new("RGB", (1800, 140 + 90 * len(lines)), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(str(FONT), 48)
    for i, line in enumerate(lines):
        draw.text((80, 70 + 90 * i), line, fill="black", font=font)
    image.save(path)
    return path


def png_bomb(path: Path, side: int = 100_000) -> Path:
    """A PNG whose header claims ``side`` x ``side`` pixels, in a few hundred bytes."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 1000))
                     + chunk(b"IEND", b""))
    return path


def test_boxes_side_by_side_are_one_line_and_each_line_keeps_its_confidence():
    boxes = [[[10, 10], [200, 10], [200, 50], [10, 50]], [[220, 12], [400, 12], [400, 52], [220, 52]],
             [[10, 80], [300, 80], [300, 120], [10, 120]]]
    lines = joined_lines(boxes, ["Gull", "Rock", "nine  o'clock"], [0.9, 0.5, 0.3])
    # "Gull" (4 characters at 0.9) and "Rock" (4 at 0.5) weigh equally; the next box is a line below
    assert lines == [["Gull Rock", 0.7], ["nine o'clock", 0.3]]


def _box(left: float, top: float, right: float, height: float = 40) -> list:
    return [[left, top], [right, top], [right, top + height], [left, top + height]]


def test_columns_are_read_one_after_the_other_under_their_title_and_a_tables_rows_stay_whole():
    title = (_box(100, 0, 1900), "Two columns", 0.9)
    left = [(_box(100, 100 + 60 * i, 950), f"left {i}", 0.9) for i in range(3)]
    right = [(_box(1050, 100 + 60 * i, 1900), f"right {i}", 0.9) for i in range(3)]
    mixed = [title] + [box for pair in zip(left, right, strict=True) for box in pair]  # the engine's order: by line
    lines = joined_lines(*map(list, zip(*mixed, strict=True)))
    assert [text for text, _ in lines] == ["Two columns", "left 0", "left 1", "left 2", "right 0", "right 1",
                                           "right 2"]
    cells = [(_box(100 + 400 * c, 60 * r, 250 + 400 * c), f"r{r}c{c}", 0.9) for r in range(3) for c in range(3)]
    lines = joined_lines(*map(list, zip(*cells, strict=True)))
    assert [text for text, _ in lines] == ["r0c0 r0c1 r0c2", "r1c0 r1c1 r1c2", "r2c0 r2c1 r2c2"]


def test_low_confidence_lines_are_marked_never_dropped():
    builder = DocumentBuilder("scan.png", "image")
    lines = [OcrLine("Ada Penhallow", 0.98), OcrLine("G#ll R0ck", LOW_CONFIDENCE - 0.1)]
    add_lines(builder, lines, page=3)
    document = builder.build(pages=3, warnings=unclear_warning({3: lines}))
    assert document.text == f"Ada Penhallow\n{UNCLEAR}G#ll R0ck"
    assert [(s.page, s.confidence) for s in document.sections] == [(3, 0.98), (3, LOW_CONFIDENCE - 0.1)]
    assert document.warnings == (f"1 line read by OCR with low confidence (under 0.5), marked {UNCLEAR.strip()}",)


def test_a_decompression_bomb_png_is_refused_from_its_header(tmp_path):
    with pytest.raises(InputError, match=r"bomb\.png: .*10000000000 pixels.*over the limit of 50 megapixels "
                                         r"\(a decompression bomb\?\); raise it with max_image_megapixels") as e:
        read_document(png_bomb(tmp_path / "bomb.png"))
    assert "\n" not in str(e.value)
    Image.new("L", (3000, 3000)).save(tmp_path / "big.png")  # under PIL's own limit, over ours
    with pytest.raises(InputError, match="3,000 x 3,000 pixels, over the limit of 5 megapixels"):
        read_document(tmp_path / "big.png", ReadLimits(max_image_megapixels=5))


@pytest.mark.parametrize("name", ["cut.png", "cut.jpg"])
def test_a_truncated_or_renamed_image_is_one_line(tmp_path, name):
    whole = tmp_path / f"whole{Path(name).suffix}"
    Image.new("RGB", (400, 300), "white").save(whole)
    (tmp_path / name).write_bytes(whole.read_bytes()[:40])
    with pytest.raises(InputError, match=rf"{name} cannot be read as an image \(.*\); open it in an image viewer"):
        read_document(tmp_path / name)
    (tmp_path / "photo.png").write_text("not a picture at all")
    with pytest.raises(InputError, match=r"photo\.png is named \.png but is not one"):
        read_document(tmp_path / "photo.png")


def test_without_the_ocr_extra_a_scan_names_the_extra_and_a_mixed_pdf_keeps_its_text(tmp_path, monkeypatch):
    import ragfunnel.documents.ocr as ocr
    import ragfunnel.documents.pdf as pdf

    monkeypatch.setattr(ocr, "ocr_available", lambda: False)
    monkeypatch.setattr(pdf, "ocr_available", lambda: False)
    with pytest.raises(InputError, match=r"page\.png is an image; reading it needs OCR: pip install "
                                         r"'ragfunnel\[ocr\]'"):
        read_document(text_image(tmp_path / "page.png"))
    (tmp_path / "notes.txt").write_text("Typed notes.")
    assert [d.name for d in read_documents([tmp_path])] == ["notes.txt"]  # the folder is read, the image skipped
    scan = _image_pdf(tmp_path / "scan.pdf", tmp_path / "page.png")
    with pytest.raises(InputError, match=r"scan\.pdf has no text layer \(scanned pages\); reading it needs OCR: "
                                         r"pip install 'ragfunnel\[ocr\]'"):
        read_document(scan)
    mixed = _joined_pdf(tmp_path / "mixed.pdf", make_pdf(tmp_path / "text.pdf", ["Typed page one"]), scan)
    document = read_document(mixed)
    assert document.text == "Typed page one" and document.pages == 2
    assert document.warnings == ("1 scanned page of mixed.pdf left out (page 2): reading it needs OCR: "
                                 "pip install 'ragfunnel[ocr]'",)


def test_a_folder_with_a_bomb_and_a_fifo_among_images_never_aborts(tmp_path, caplog):
    import os

    folder = tmp_path / "scans"
    folder.mkdir()
    png_bomb(folder / "bomb.png")
    os.mkfifo(folder / "pipe.png")
    (folder / "notes.txt").write_text("The ferry leaves at nine.")
    (folder / "outside.png").symlink_to(png_bomb(tmp_path / "elsewhere.png"))
    documents = read_documents([folder])
    assert [d.name for d in documents] == ["notes.txt"]
    said = caplog.text
    assert "bomb.png" in said and "decompression bomb" in said
    assert "pipe.png: it is not a regular file" in said and "outside.png: it resolves outside" in said


def _image_pdf(path: Path, image: Path) -> Path:
    Image.open(image).convert("RGB").save(path, resolution=150)
    return path


def _joined_pdf(path: Path, *parts: Path) -> Path:
    import pypdfium2 as pdfium

    joined = pdfium.PdfDocument.new()
    for part in parts:
        source = pdfium.PdfDocument(part)
        joined.import_pages(source)
    joined.save(path)
    return path


@pytest.mark.model
def test_an_image_and_the_scanned_pages_of_a_mixed_pdf_are_read_with_pages_and_progress(tmp_path):
    heard = []
    with reading_files(lambda what, done, total: heard.append((what, done, total))):
        image = read_document(text_image(tmp_path / "page.png"))
        scan = _image_pdf(tmp_path / "scan.pdf", tmp_path / "page.png")
        mixed = read_document(_joined_pdf(tmp_path / "mixed.pdf", make_pdf(tmp_path / "text.pdf", ["Typed page one"]),
                                          scan))
    assert image.format == "image" and image.text.splitlines() == LINES
    assert all(s.page is None and s.confidence > LOW_CONFIDENCE for s in image.sections)
    assert mixed.text.split("\n\n") == ["Typed page one", "\n".join(LINES)]
    assert [s.page for s in mixed.sections] == [1, 2, 2] and mixed.sections[0].confidence is None
    assert heard == [("OCR page.png", 0, 1), ("OCR page.png", 1, 1), ("OCR mixed.pdf", 0, 1), ("OCR mixed.pdf", 1, 1)]


@pytest.mark.model
def test_chinese_text_is_read(tmp_path):
    fonts = [p for p in Path("/usr/share/fonts").rglob("*") if p.suffix in (".ttc", ".ttf", ".otf")
             and any(k in p.name.lower() for k in ("wqy", "cjk", "droidsansfallback", "uming", "ukai"))]
    if not fonts:
        pytest.skip("needs a Chinese font (e.g. Debian's fonts-wqy-microhei) to draw the page")
    image = Image.new("RGB", (1600, 260), "white")
    ImageDraw.Draw(image).text((60, 80), "灯塔看守人名叫艾达，渡船九点开。", fill="black",
                               font=ImageFont.truetype(str(fonts[0]), 64))
    image.save(tmp_path / "zh.png")
    assert read_document(tmp_path / "zh.png").text.replace(" ", "") == "灯塔看守人名叫艾达，渡船九点开。"
