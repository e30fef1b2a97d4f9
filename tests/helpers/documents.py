"""Documents for reader tests: small files in each format, built byte by byte (known pages, damaged parts,
bombs), a folder of them, and the shared real files made by other people's tools."""

from __future__ import annotations

import io
import zipfile
import zlib
from pathlib import Path

import pytest

from ragfunnel.documents import ReadLimits, read_document
from ragfunnel.errors import InputError
from tests.conftest import SHARED

REAL = SHARED / "documents_real"
needs_real = pytest.mark.skipif(not REAL.exists(), reason=f"shared documents not found at {REAL}")


def make_pdf(path: Path, pages: list[str], *, roman_first: int = 0) -> Path:
    """A PDF with one line of Helvetica text per page; the first ``roman_first`` pages are labelled i, ii, ...
    and the rest 1, 2, ... (a /PageLabels number tree)."""
    objects: list[bytes] = []
    n = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n))
    font = 3 + 2 * n
    labels = (f"/PageLabels << /Nums [0 << /S /r >> {roman_first} << /S /D >>] >>" if roman_first else "")
    objects.append(f"<< /Type /Catalog /Pages 2 0 R {labels} >>".encode())
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode())
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                       f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return write_pdf(path, objects)


def make_unicode_pdf(path: Path, pages: list[str], *, line_chars: int = 40) -> Path:
    """A PDF whose text is any Unicode of the Basic Multilingual Plane (Chinese included): a Type0 font with
    Identity-H codes equal to code points and a /ToUnicode map back to them, as PDF makers write CJK text.
    The font is not embedded: readers extract the text through the map, which is all these tests need."""
    chars = sorted({c for page in pages for c in page if c != "\n"})
    n = len(pages)
    font = 3 + 2 * n
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>",
                            f"<< /Type /Pages /Kids [{' '.join(f'{3 + 2 * i} 0 R' for i in range(n))}] "
                            f"/Count {n} >>".encode()]
    for i, text in enumerate(pages):
        lines = [line[j:j + line_chars] for line in text.split("\n") for j in range(0, max(len(line), 1), line_chars)]
        shown = " ".join(f"<{line.encode('utf-16-be').hex().upper()}> Tj 0 -16 Td" for line in lines)
        stream = f"BT /F1 12 Tf 72 760 Td {shown} ET".encode()
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                       f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(f"<< /Type /Font /Subtype /Type0 /BaseFont /SongStd /Encoding /Identity-H "
                   f"/DescendantFonts [{font + 1} 0 R] /ToUnicode {font + 3} 0 R >>".encode())
    objects.append(f"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /SongStd /CIDSystemInfo << /Registry (Adobe) "
                   f"/Ordering (Identity) /Supplement 0 >> /FontDescriptor {font + 2} 0 R /DW 1000 >>".encode())
    objects.append(b"<< /Type /FontDescriptor /FontName /SongStd /Flags 4 /FontBBox [0 -200 1000 900] "
                   b"/ItalicAngle 0 /Ascent 900 /Descent -200 /CapHeight 700 /StemV 80 >>")
    blocks = []
    for j in range(0, len(chars), 100):  # a bfchar block holds at most 100 entries
        part = chars[j:j + 100]
        blocks.append(f"{len(part)} beginbfchar\n" + "".join(
            f"<{c.encode('utf-16-be').hex().upper()}> <{c.encode('utf-16-be').hex().upper()}>\n" for c in part)
            + "endbfchar")
    cmap = ("/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Identity-Unicode def "
            "/CMapType 2 def 1 begincodespacerange <0000> <FFFF> endcodespacerange\n" + "\n".join(blocks)
            + "\nendcmap CMapName currentdict /CMap defineresource pop end end").encode()
    objects.append(b"<< /Length %d >>\nstream\n" % len(cmap) + cmap + b"\nendstream")
    return write_pdf(path, objects)


def write_pdf(path: Path, objects: list[bytes]) -> Path:
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    path.write_bytes(out.getvalue())
    return path


TEXT_OPS = b"BT /F1 12 Tf 72 720 Td (Gull Rock timetable) Tj ET\n"
MIB = 1024 * 1024


def stream(data: bytes, dictionary: bytes = b"") -> bytes:
    return b"<< /Length %d %s >>\nstream\n" % (len(data), dictionary) + data + b"\nendstream"


def one_page(path: Path, *contents: bytes, kids: bytes = b"[3 0 R]", count: int = 1) -> Path:
    """A PDF whose page 3 draws the content streams ``contents`` (objects 5, 6 ...) in Helvetica."""
    refs = b" ".join(b"%d 0 R" % (5 + i) for i in range(len(contents)))
    return write_pdf(path, [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids %s /Count %d >>" % (kids, count),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents [%s] "
        b"/Resources << /Font << /F1 4 0 R >> >> >>" % refs,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        *contents])


def deflated_spaces(mib: int, *, after: bytes = TEXT_OPS) -> bytes:
    """``after`` behind ``mib`` MiB of spaces, deflated a MiB at a time (never held whole)."""
    deflater = zlib.compressobj(9)
    spaces = b" " * MIB
    return b"".join([*(deflater.compress(spaces) for _ in range(mib)), deflater.compress(after), deflater.flush()])


CONTAINER = b"""<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>
<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>"""


def make_epub(path: Path, chapters: list[tuple[str, str]], *, extra: dict[str, bytes] | None = None,
              chapter_prefix: bytes = b"") -> Path:
    """An EPUB 3 with one XHTML file per (title, text) chapter and a nav document naming them."""
    items = "".join(f'<item id="c{i}" href="c{i}.xhtml" media-type="application/xhtml+xml"/>'
                    for i in range(len(chapters)))
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters)))
    opf = (f'<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0"><manifest>'
           f'<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>{items}'
           f'</manifest><spine>{spine}</spine></package>')
    links = "".join(f'<li><a href="c{i}.xhtml">{title}</a></li>' for i, (title, _) in enumerate(chapters))
    nav = (f'<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><body>'
           f'<nav epub:type="toc"><ol>{links}</ol></nav></body></html>')
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", CONTAINER)
        z.writestr("OEBPS/content.opf", opf)
        z.writestr("OEBPS/nav.xhtml", nav)
        for i, (title, text) in enumerate(chapters):
            body = "".join(f"<p>{p}</p>" for p in text.split("\n\n"))
            z.writestr(f"OEBPS/c{i}.xhtml", chapter_prefix + (
                f'<html xmlns="http://www.w3.org/1999/xhtml"><body><h1>{title}</h1>{body}</body></html>').encode())
        for name, data in (extra or {}).items():
            z.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
    return path


def _folder(tmp_path):
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "harbour.md").write_text("# Harbour\n\nThe ferry to Gull Rock leaves at nine every morning.\n\n"
                                       "## Gulls\n\nGulls nest on the rock in spring.\n")
    make_pdf(folder / "sub" / "timetable.pdf", ["Winter timetable", "The last boat returns at six."])
    make_epub(folder / "tales.epub", [("Chapter 1. Storms.", "A storm sank the old pier in 1998."),
                                      ("Chapter 2. Lights.", "The lighthouse keeper is called Ada Brun.")])
    return folder


def patched_zip(path: Path, part: str, *, method: int | None = None, encrypted: bool = False) -> Path:
    """``path`` (a zip) with ``part`` marked encrypted, or as compressed by ``method``, in its local and central
    headers: what zipfile cannot open (an AES-encrypted or Deflate64 part)."""
    data = bytearray(path.read_bytes())
    name = part.encode()
    for signature, flags, compression, name_at in ((b"PK\x03\x04", 6, 8, 30), (b"PK\x01\x02", 8, 10, 46)):
        at = data.find(signature)
        while at >= 0:
            if data[at + name_at:at + name_at + len(name)] == name:
                if encrypted:
                    data[at + flags] |= 1
                if method is not None:
                    data[at + compression:at + compression + 2] = method.to_bytes(2, "little")
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))
    return path


def refused(path: Path, match: str, limits: ReadLimits | None = None) -> str:
    """The one-line InputError reading ``path`` raises, naming the file."""
    with pytest.raises(InputError, match=match) as e:
        read_document(path, limits or ReadLimits())
    message = str(e.value)
    assert "\n" not in message and path.name in message
    return message
