"""PDFs built to exhaust their reader, each written by hand here: compressed streams that expand a
thousandfold (alone, together, behind any chain of filters), a page tree that lists one page over and over,
one that lists itself, text past its limit, pages that draw millions of characters from a few kilobytes, a
reader that runs past its time. Each is refused while it is read, in one line naming the limit and the flag
that raises it, without the memory the bomb asks for (measured in a subprocess). And encrypted PDFs that open
without a password are read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from ragfunnel.documents import ReadLimits, read_context, read_document
from ragfunnel.errors import ConfigError, InputError
from tests.helpers.cli import invoke, one_line
from tests.helpers.documents import MIB, TEXT_OPS, deflated_spaces, make_pdf, one_page, stream, write_pdf

pytest.importorskip("pypdfium2", reason="needs the [documents] extra")


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
    with pytest.raises(InputError, match="a compressed stream expands past 2 MB .* raise the limit with "
                                         "max_pdf_stream_mb"):
        read_document(bomb, ReadLimits(max_pdf_stream_mb=2))


MEASURE = """
import json, resource, sys
from ragfunnel.documents import ReadLimits, read_document
import ragfunnel.documents.pdf  # the reader's own modules are loaded before the idle size is taken
idle = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    read_document(sys.argv[1], ReadLimits(**json.loads(sys.argv[2])))
    error = None
except Exception as e:
    error = f"{type(e).__name__}: {e}"
print(json.dumps({"error": error, "idle_kb": idle, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "child_peak_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def read_in_a_subprocess(path: Path, **limits: float) -> dict:
    """The error reading ``path`` gave, the reading process's peak memory above its idle size, and the peak of
    the process it read the pages in (MB)."""
    done = subprocess.run([sys.executable, "-c", MEASURE, str(path), json.dumps(limits)], capture_output=True,
                          text=True, timeout=120, check=True)
    measured = json.loads(done.stdout)
    return {"error": measured["error"], "above_idle_mb": (measured["peak_kb"] - measured["idle_kb"]) / 1024,
            "child_peak_mb": measured["child_peak_kb"] / 1024}


def test_a_flate_bomb_page_is_refused_while_it_inflates_and_memory_stays_flat(tmp_path):
    bomb = one_page(tmp_path / "bomb.pdf", stream(deflated_spaces(300), b"/Filter /FlateDecode"))
    assert bomb.stat().st_size < 400_000  # 300 MB of spaces; pdfium alone would hold 600 MB of it
    started = time.monotonic()
    read = read_in_a_subprocess(bomb, max_pdf_stream_mb=16)
    assert read["error"] == ("InputError: bomb.pdf: a compressed stream expands past 16 MB (a decompression bomb?); "
                             "raise the limit with max_pdf_stream_mb")
    assert read["above_idle_mb"] < 50, read
    assert time.monotonic() - started < 30


def test_streams_each_under_the_limit_are_refused_past_the_document_limit(tmp_path):
    parts = [stream(deflated_spaces(3), b"/Filter /FlateDecode") for _ in range(5)]
    path = one_page(tmp_path / "many.pdf", *parts)
    assert "Gull Rock timetable" in read_document(path, ReadLimits(max_pdf_stream_mb=4, max_inflated_mb=16)).text
    with pytest.raises(InputError, match=r"many.pdf: its compressed streams expand past 12 MB in all .* "
                                         r"raise the limit with max_inflated_mb"):
        read_document(path, ReadLimits(max_pdf_stream_mb=4, max_inflated_mb=12))


def test_a_page_tree_listing_one_page_over_and_over_is_refused_at_once(tmp_path):
    times = 50_000
    path = one_page(tmp_path / "tree.pdf", stream(TEXT_OPS), kids=b"[" + b"3 0 R " * times + b"]", count=times)
    started = time.monotonic()
    with pytest.raises(InputError, match=r"tree.pdf has 50,000 pages, over the limit of 1,000 .* "
                                         r"raise it with max_pdf_pages"):
        read_document(path, ReadLimits(max_pdf_pages=1000))
    assert time.monotonic() - started < 5
    assert read_in_a_subprocess(path)["error"].endswith("raise it with max_pdf_pages")  # the default, 10,000


def test_text_past_its_limit_stops_the_reading(tmp_path):
    path = make_pdf(tmp_path / "long.pdf", ["Harbour notes and tides " * 4] * 5)
    assert read_document(path, ReadLimits(max_pdf_text_chars=1000)).pages == 5
    with pytest.raises(InputError, match=r"long.pdf holds over 250 characters of text by page 3; "
                                         r"raise the limit with max_pdf_text_chars"):
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


# Pages that draw millions of characters from a few kilobytes: pdfium takes about 190 bytes a character, whatever
# the file's size, so only the memory limit of the process that reads them stops them.

def drawn_lines(mib: int) -> bytes:
    """A content stream of ``mib`` MiB of text operators, one 200-character line each, deflated (to what every
    stream limit allows)."""
    line = b"(" + b"x" * 200 + b") '\n"
    return zlib.compress(b"BT /F1 1 Tf 1 TL 0 792 Td\n" + line * (mib * MIB // len(line)) + b"ET", 9)


def form_drawn(path: Path) -> Path:
    """A page that draws one form of 10,000 characters a thousand times."""
    form = zlib.compress(b"BT /F1 1 Tf (" + b"x" * 10_000 + b") Tj ET", 9)
    return write_pdf(path, [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R "
        b"/Resources << /XObject << /X 6 0 R >> >> >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        stream(zlib.compress(b"/X Do " * 1000, 9), b"/Filter /FlateDecode"),
        stream(form, b"/Filter /FlateDecode /Type /XObject /Subtype /Form /BBox [0 0 612 792] "
                     b"/Resources << /Font << /F1 4 0 R >> >>")])


def lines_for_pdfminer(path: Path) -> Path:
    """A MiB of text operators behind a catalog whose page tree is missing: pdfium cannot open the file, and
    pdfminer.six, which finds the page by its type, took 4.4 GB and over two minutes to lay it out."""
    one_page(path, stream(drawn_lines(1), b"/Filter /FlateDecode"))
    path.write_bytes(path.read_bytes().replace(b"/Pages 2 0 R", b"/Pages 9 0 R"))
    return path


def lines_drawn(path: Path) -> Path:
    return one_page(path, stream(drawn_lines(16), b"/Filter /FlateDecode"))


DRAWING_BOMBS = {"16 MiB of text operators": lines_drawn, "one form drawn 1,000 times": form_drawn,
                 "text operators read by pdfminer.six": lines_for_pdfminer}


@pytest.mark.parametrize("bomb", list(DRAWING_BOMBS))
def test_a_page_drawing_millions_of_characters_is_refused_at_the_memory_limit_and_the_reader_stays_flat(
        tmp_path, bomb):
    path = DRAWING_BOMBS[bomb](tmp_path / "bomb.pdf")
    assert path.stat().st_size < 100_000  # pdfium alone took 1.8 GB (text operators) and 2.5 GB (the form)
    started = time.monotonic()
    read = read_in_a_subprocess(path, max_pdf_memory_mb=128)
    assert read["error"].startswith("InputError: reading bomb.pdf needed more than 128 MB"), read
    assert read["error"].endswith("; raise it with max_pdf_memory_mb") and "\n" not in read["error"]
    assert read["above_idle_mb"] < 50 and read["child_peak_mb"] < 128, read
    assert time.monotonic() - started < 30


def test_the_memory_limit_is_a_flag(tmp_path):
    path = form_drawn(tmp_path / "bomb.pdf")
    one_line(invoke("ask", "Q?", "--context", path, "--max-pdf-memory-mb", "128"),
             "reading bomb.pdf needed more than 128 MB")


def test_a_reader_past_its_time_is_killed_and_one_line(tmp_path):
    path = form_drawn(tmp_path / "slow.pdf")
    started = time.monotonic()
    with pytest.raises(InputError) as refused:
        read_document(path, ReadLimits(max_pdf_seconds=0.3))
    assert str(refused.value) == "reading slow.pdf took over 0.3 s; raise the limit with max_pdf_seconds"
    assert time.monotonic() - started < 5
    one_line(invoke("ask", "Q?", "--context", path, "--max-pdf-seconds", "0.3"),
             "raise the limit with --max-pdf-seconds")


# Encrypted by the standard security handler, revision 2 (40-bit RC4; PDF 1.7, 7.6.3), with an owner password
# and, if given, a user password: the one a reader must be told.
PASSWORD_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")
FILE_ID = b"ragfunnel-sealed"
NO_PRINT_CHANGE_OR_COPY = -64  # the permission bits 3-6 cleared


def rc4(key: bytes, data: bytes) -> bytes:
    state, j = list(range(256)), 0
    for i in range(256):
        j = (j + state[i] + key[i % len(key)]) % 256
        state[i], state[j] = state[j], state[i]
    out, i, j = bytearray(), 0, 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + state[i]) % 256
        state[i], state[j] = state[j], state[i]
        out.append(byte ^ state[(state[i] + state[j]) % 256])
    return bytes(out)


def padded(password: bytes) -> bytes:
    return (password + PASSWORD_PAD)[:32]


def sealed_page(path: Path, content: bytes, dictionary: bytes = b"", *, user_password: bytes = b"") -> Path:
    """``one_page`` with one content stream, encrypted; only the owner password is set unless ``user_password``
    is, and printing, changing and copying are forbidden."""
    padded_user = padded(user_password)
    owner = rc4(hashlib.md5(padded(b"owner secret")).digest()[:5], padded_user)
    key = hashlib.md5(padded_user + owner + struct.pack("<i", NO_PRINT_CHANGE_OR_COPY) + FILE_ID).digest()[:5]
    object_key = hashlib.md5(key + (5).to_bytes(3, "little") + (0).to_bytes(2, "little")).digest()[:10]
    one_page(path, stream(rc4(object_key, content), dictionary))
    encrypt = b"/Encrypt << /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P %d >> /ID [<%s> <%s>]" % (
        owner.hex().encode(), rc4(key, PASSWORD_PAD).hex().encode(), NO_PRINT_CHANGE_OR_COPY,
        FILE_ID.hex().encode(), FILE_ID.hex().encode())
    path.write_bytes(path.read_bytes().replace(b"/Root 1 0 R", b"/Root 1 0 R " + encrypt))
    return path


def test_an_encrypted_pdf_that_opens_without_a_password_is_read(tmp_path):
    path = sealed_page(tmp_path / "restricted.pdf", TEXT_OPS)
    assert read_document(path).text == "Gull Rock timetable"


def test_an_encrypted_pdf_that_needs_a_password_is_refused_in_one_line(tmp_path):
    path = sealed_page(tmp_path / "sealed.pdf", TEXT_OPS, user_password=b"user secret")
    with pytest.raises(InputError) as refused:
        read_document(path)
    assert str(refused.value) == ("sealed.pdf is encrypted (password-protected); decrypt it first, e.g. qpdf "
                                  "--decrypt --password=PASSWORD sealed.pdf out.pdf")


def test_an_encrypted_flate_bomb_is_left_to_the_memory_limit(tmp_path):
    """Its streams cannot be decoded without the key, so the stream check passes it; pdfium would hold
    200 MB decoding it."""
    path = sealed_page(tmp_path / "bomb.pdf", deflated_spaces(100), b"/Filter /FlateDecode")
    read = read_in_a_subprocess(path, max_pdf_stream_mb=16, max_pdf_memory_mb=128)
    assert read["error"].startswith("InputError: reading bomb.pdf needed more than 128 MB"), read
    assert read["above_idle_mb"] < 50, read


def test_limits_must_be_above_zero():
    with pytest.raises(ConfigError, match="max_pdf_pages must be at least 1, got 0"):
        ReadLimits(max_pdf_pages=0)
