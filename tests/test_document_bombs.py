"""PDFs built to exhaust their reader, each written by hand here: compressed streams that expand a
thousandfold (alone, together, behind any chain of filters), a page tree that lists one page over and over,
one that lists itself, text past its limit. Each is refused while it is read, in one line naming the limit
and the flag that raises it, without the memory the bomb asks for (measured in a subprocess).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import logging
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from ragfunnel.documents import ReadLimits, read_context, read_document
from ragfunnel.errors import ConfigError, InputError
from tests.documents_helpers import make_pdf
from tests.test_hostile_cli import invoke, one_line

pytest.importorskip("pypdfium2", reason="needs the [documents] extra")

TEXT_OPS = b"BT /F1 12 Tf 72 720 Td (Gull Rock timetable) Tj ET\n"
MIB = 1024 * 1024


def pdf_bytes(objects: list[bytes]) -> bytes:
    """A PDF of ``objects`` (object 1 is the catalog), with a correct cross-reference table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % offset for offset in offsets))
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def stream(data: bytes, dictionary: bytes = b"") -> bytes:
    return b"<< /Length %d %s >>\nstream\n" % (len(data), dictionary) + data + b"\nendstream"


def one_page(path: Path, *contents: bytes, kids: bytes = b"[3 0 R]", count: int = 1) -> Path:
    """A PDF whose page 3 draws the content streams ``contents`` (objects 5, 6 ...) in Helvetica."""
    refs = b" ".join(b"%d 0 R" % (5 + i) for i in range(len(contents)))
    path.write_bytes(pdf_bytes([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids %s /Count %d >>" % (kids, count),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents [%s] "
        b"/Resources << /Font << /F1 4 0 R >> >> >>" % refs,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        *contents]))
    return path


def deflated_spaces(mib: int, *, after: bytes = TEXT_OPS) -> bytes:
    """``after`` behind ``mib`` MiB of spaces, deflated a MiB at a time (never held whole)."""
    deflater = zlib.compressobj(9)
    spaces = b" " * MIB
    return b"".join([*(deflater.compress(spaces) for _ in range(mib)), deflater.compress(after), deflater.flush()])


def lzw(data: bytes) -> bytes:
    """PDF's LZWDecode (early change 1) of ``data``: a reference encoder for the reader's decoder."""
    table, width, out, buffer, bits = {}, 9, bytearray(), 0, 0  # (code of a word, next byte) -> code

    def emit(code: int) -> None:
        nonlocal buffer, bits
        buffer, bits = (buffer << width) | code, bits + width
        while bits >= 8:
            bits -= 8
            out.append((buffer >> bits) & 0xFF)
        buffer &= (1 << bits) - 1

    emit(256)
    word = data[0]
    for byte in data[1:]:
        if (word, byte) in table:
            word = table[word, byte]
            continue
        emit(word)
        if len(table) < 4096 - 258:
            table[word, byte] = 258 + len(table)
        word = byte
        width = min(12, (258 + len(table)).bit_length())
    emit(word)
    emit(257)
    return bytes(out + (bytes([(buffer << (8 - bits)) & 0xFF]) if bits else b""))


def run_length(data: bytes) -> bytes:
    """RunLengthDecode of ``data`` as literal runs of 128 bytes."""
    return b"".join(bytes([len(part) - 1]) + part for part in (data[i:i + 128] for i in range(0, len(data), 128))) \
        + b"\x80"


# Every chain of decoding filters pdfium follows, with a way to write it.
CHAINS = {
    "FlateDecode": (b"/Filter /FlateDecode", zlib.compress),
    "a string in its dictionary says stream": (b"/Filter /FlateDecode /Title (a stream\n)", zlib.compress),
    "names written with #xx": (b"/Fil#74er /Fl#61teDecode", zlib.compress),
    "ASCIIHex then Flate": (b"/Filter [/AHx /FlateDecode]", lambda d: binascii.hexlify(zlib.compress(d)) + b">"),
    "ASCII85 then Flate": (b"/Filter [/A85 /Fl]", lambda d: base64.a85encode(zlib.compress(d)) + b"~>"),
    "Flate twice": (b"/Filter [/FlateDecode /FlateDecode]", lambda d: zlib.compress(zlib.compress(d))),
    "RunLength then Flate": (b"/Filter [/RunLengthDecode /FlateDecode]", lambda d: run_length(zlib.compress(d))),
    "LZW": (b"/Filter /LZWDecode", lzw),
}


@pytest.mark.parametrize("chain", list(CHAINS))
def test_every_decoding_chain_is_followed_both_to_read_and_to_refuse(tmp_path, chain):
    dictionary, encode = CHAINS[chain]
    small = one_page(tmp_path / "small.pdf", stream(encode(TEXT_OPS), dictionary))
    assert "Gull Rock timetable" in read_document(small, ReadLimits(max_pdf_stream_mb=1)).text
    bomb = one_page(tmp_path / "bomb.pdf", stream(encode(b" " * (6 * MIB) + TEXT_OPS), dictionary))
    assert bomb.stat().st_size < MIB / 10
    with pytest.raises(InputError, match="a compressed stream expands past 2 MB .* pass --max-pdf-stream-mb"):
        read_document(bomb, ReadLimits(max_pdf_stream_mb=2))


MEASURE = """
import json, resource, sys
from ragfunnel.documents import ReadLimits, read_document
import pypdfium2  # the reader's own libraries are loaded before the idle size is taken
idle = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    read_document(sys.argv[1], ReadLimits(**json.loads(sys.argv[2])))
    error = None
except Exception as e:
    error = f"{type(e).__name__}: {e}"
print(json.dumps({"error": error, "idle_kb": idle, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def read_in_a_subprocess(path: Path, **limits: float) -> dict:
    """The error reading ``path`` gave, and the reading process's peak memory above its idle size (MB)."""
    done = subprocess.run([sys.executable, "-c", MEASURE, str(path), json.dumps(limits)], capture_output=True,
                          text=True, timeout=120, check=True)
    measured = json.loads(done.stdout)
    return {"error": measured["error"], "above_idle_mb": (measured["peak_kb"] - measured["idle_kb"]) / 1024}


def test_a_flate_bomb_page_is_refused_while_it_inflates_and_memory_stays_flat(tmp_path):
    bomb = one_page(tmp_path / "bomb.pdf", stream(deflated_spaces(300), b"/Filter /FlateDecode"))
    assert bomb.stat().st_size < 400_000  # 300 MB of spaces; pdfium alone would hold 600 MB of it
    started = time.monotonic()
    read = read_in_a_subprocess(bomb, max_pdf_stream_mb=16)
    assert read["error"] == ("InputError: bomb.pdf: a compressed stream expands past 16 MB (a decompression bomb?); "
                             "pass --max-pdf-stream-mb to raise the limit")
    assert read["above_idle_mb"] < 50, read
    assert time.monotonic() - started < 30


def test_streams_each_under_the_limit_are_refused_past_the_document_limit(tmp_path):
    parts = [stream(deflated_spaces(3), b"/Filter /FlateDecode") for _ in range(5)]
    path = one_page(tmp_path / "many.pdf", *parts)
    assert "Gull Rock timetable" in read_document(path, ReadLimits(max_pdf_stream_mb=4, max_inflated_mb=16)).text
    with pytest.raises(InputError, match=r"many.pdf: its compressed streams expand past 12 MB in all .* "
                                         r"pass --max-inflated-mb to raise the limit"):
        read_document(path, ReadLimits(max_pdf_stream_mb=4, max_inflated_mb=12))


def test_a_page_tree_listing_one_page_over_and_over_is_refused_at_once(tmp_path):
    times = 50_000
    path = one_page(tmp_path / "tree.pdf", stream(TEXT_OPS), kids=b"[" + b"3 0 R " * times + b"]", count=times)
    started = time.monotonic()
    with pytest.raises(InputError, match=r"tree.pdf has 50,000 pages, over the limit of 1,000 .* "
                                         r"pass --max-pdf-pages to raise it"):
        read_document(path, ReadLimits(max_pdf_pages=1000))
    assert time.monotonic() - started < 5
    assert read_in_a_subprocess(path)["error"].endswith("pass --max-pdf-pages to raise it")  # the default, 10,000


def test_text_past_its_limit_stops_the_reading(tmp_path):
    path = make_pdf(tmp_path / "long.pdf", ["Harbour notes and tides " * 4] * 5)
    assert read_document(path, ReadLimits(max_pdf_text_chars=1000)).pages == 5
    with pytest.raises(InputError, match=r"long.pdf holds over 250 characters of text by page 3; "
                                         r"pass --max-pdf-text-chars to raise the limit"):
        read_document(path, ReadLimits(max_pdf_text_chars=250))


def test_a_page_tree_that_lists_itself_is_one_line_and_skipped_in_a_folder(tmp_path, caplog):
    folder = tmp_path / "docs"
    folder.mkdir()
    looped = one_page(folder / "looped.pdf", stream(TEXT_OPS), kids=b"[3 0 R 2 0 R]", count=2)
    (folder / "notes.txt").write_text("Gulls nest on the rock.")
    with pytest.raises(InputError) as refused:
        read_document(looped)
    assert str(refused.value).startswith("damaged PDF: looped.pdf (pdfium: ")
    assert str(refused.value).endswith("repair it with qpdf first (e.g. qpdf looped.pdf repaired.pdf)")
    caplog.set_level(logging.WARNING)
    located = read_context([folder])
    assert [d.name for d in located.documents] == ["notes.txt"]
    assert "skipped" in caplog.text and "damaged PDF: looped.pdf" in caplog.text
    one_line(invoke("ask", "Where do gulls nest?", "--context", looped), "damaged PDF: looped.pdf")


def test_an_encrypted_pdf_is_refused_before_its_streams_are_decoded(tmp_path):
    path = make_pdf(tmp_path / "sealed.pdf", ["Sealed text"])
    path.write_bytes(path.read_bytes().replace(b"/Root 1 0 R", b"/Root 1 0 R /Encrypt << /Filter /Standard >>"))
    with pytest.raises(InputError, match=r"sealed.pdf is encrypted \(password-protected\); decrypt it first"):
        read_document(path)


def test_limits_must_be_above_zero():
    with pytest.raises(ConfigError, match="max_pdf_pages is 0; it must be a number above 0"):
        ReadLimits(max_pdf_pages=0)
