"""Slide decks: each slide's title, its shapes' text in order (groups read inside), tables as rows and speaker
notes, one section a slide cited by its number; hostile decks (bombs, truncated and renamed files, entity
declarations, FIFOs and links in a folder) refused in one line, the folder read on."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pytest

from ragfunnel.documents import LocatedContext, cite, read_document, read_documents
from ragfunnel.errors import InputError, MissingExtra
from ragfunnel.text import chunk_words
from ragfunnel.types import Prediction, ScoredChunk, Trace
from tests.helpers.documents import patched_zip, refused

pptx = pytest.importorskip("pptx", reason="needs the [documents] extra")
from pptx.util import Inches  # noqa: E402

REAL = Path("/work/data_ext/spreadsheets/pptx")  # decks made by PowerPoint, from python-pptx's sdist
needs_real = pytest.mark.skipif(not REAL.exists(), reason=f"real decks not found at {REAL}")


def deck(path: Path) -> Path:
    """Four slides: a title and bullets; a title, a table and notes; a blank one; two text boxes in a group."""
    presentation = pptx.Presentation()
    first = presentation.slides.add_slide(presentation.slide_layouts[1])
    first.shapes.title.text = "Harbour report"
    first.placeholders[1].text_frame.text = "Ferries run daily.\nThe light is kept by Ada Brun."
    second = presentation.slides.add_slide(presentation.slide_layouts[5])
    second.shapes.title.text = "Timetable"
    note = second.shapes.add_textbox(Inches(1), Inches(1.5), Inches(4), Inches(1))
    note.text_frame.text = "Summer\vtimes"  # a line break inside a paragraph
    table = second.shapes.add_table(3, 3, Inches(1), Inches(3), Inches(6), Inches(2)).table
    for r, row in enumerate([["Port", "Leaves", "Arrives"], ["Tarrow", "09:00", "09:40"], ["Gull Rock", "10:15", ""]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    second.notes_slide.notes_text_frame.text = "Ask the keeper about the winter timetable."
    presentation.slides.add_slide(presentation.slide_layouts[6])  # blank: no text
    fourth = presentation.slides.add_slide(presentation.slide_layouts[6])
    group = fourth.shapes.add_group_shape()
    for i, text in enumerate(["Inside the group", "and its second box"]):
        group.shapes.add_textbox(Inches(1), Inches(1 + i), Inches(3), Inches(1)).text_frame.text = text
    presentation.save(path)
    return path


def test_slides_read_in_order_with_title_text_tables_and_notes(tmp_path):
    doc = read_document(deck(tmp_path / "deck.pptx"))
    assert doc.format == "slides"
    assert doc.text == ("Harbour report\nFerries run daily.\nThe light is kept by Ada Brun.\n\n"
                        "Timetable\nSummer\ntimes\nPort | Leaves | Arrives\nTarrow | 09:00 | 09:40\nGull Rock | 10:15\n"
                        "Notes:\nAsk the keeper about the winter timetable.\n\n"
                        "Inside the group\nand its second box")
    assert [s.slide for s in doc.sections] == [1, 2, 4]  # the blank third slide is left out, its number kept
    assert [s.describe() for s in doc.sections] == ["slide 1", "slide 2", "slide 4"]


def test_a_cited_slide_is_named_by_its_number(tmp_path):
    context = LocatedContext.join([read_document(deck(tmp_path / "deck.pptx"))])
    [citation, *_] = cite(Prediction(answer="09:40", method="op", trace=Trace(),
                                     chunks_used=[ScoredChunk(c, 1.0) for c in chunk_words(context.text)]),
                          context, "When does the Tarrow ferry arrive?")
    assert citation.quote == "Tarrow | 09:00 | 09:40"
    assert citation.slide == 2 and citation.label() == "[deck.pptx \u00b7 slide 2]"


def test_a_deck_without_text_is_refused_in_one_line(tmp_path):
    presentation = pptx.Presentation()
    presentation.slides.add_slide(presentation.slide_layouts[6])
    presentation.save(tmp_path / "blank.pptx")
    with pytest.raises(InputError, match=r"^blank.pptx holds no text on its slides"):
        read_document(tmp_path / "blank.pptx")


def test_a_missing_library_names_the_extra(tmp_path, monkeypatch):
    path = deck(tmp_path / "deck.pptx")
    monkeypatch.setitem(sys.modules, "pptx", None)
    with pytest.raises(MissingExtra, match=r"'python-pptx' is not installed; install it with: pip install "
                                           r"'ragfunnel\[documents\]'"):
        read_document(path)


def test_a_missing_spreadsheet_library_names_the_extra(tmp_path, monkeypatch):
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook()
    book.active.append(["a"])
    book.save(tmp_path / "book.xlsx")
    monkeypatch.setitem(sys.modules, "python_calamine", None)
    with pytest.raises(MissingExtra, match="'python-calamine' is not installed"):
        read_document(tmp_path / "book.xlsx")


@needs_real
@pytest.mark.parametrize("path", sorted(REAL.glob("*.pptx")), ids=lambda p: p.name)
def test_every_real_deck_is_read_or_refused_in_one_line(path):
    try:
        doc = read_document(path)
    except InputError as e:
        assert "\n" not in str(e) and path.name in str(e) and "holds no text" in str(e)
        return
    assert doc.sections and all(s.slide for s in doc.sections)


@needs_real
def test_a_real_decks_groups_and_table_are_read():
    doc = read_document(REAL / "test_slides.pptx")
    assert doc.text == "Test text\nGroup test text\nBox 1\nBox 2\nCol head 1 | Col head 2\nCell text 1 | Cell text 2"


# --- hostile decks -----------------------------------------------------------------------------------------------

def rewritten(path: Path, change: dict[str, bytes]) -> Path:
    """``path`` (a zip) with the parts in ``change`` replaced or added."""
    with zipfile.ZipFile(path) as z:
        parts = {name: z.read(name) for name in z.namelist()}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in {**parts, **change}.items():
            z.writestr(name, data)
    return path


def test_a_zip_bomb_deck_is_refused(tmp_path):
    bomb = rewritten(deck(tmp_path / "bomb.pptx"), {"ppt/media/zeros.bin": b"\0" * (30 << 20)})
    refused(bomb, r"part ppt/media/zeros.bin expands \d+-fold, over the limit of 200 .*raise it with max_zip_ratio")


def test_truncated_damaged_and_renamed_decks_are_one_line(tmp_path):
    data = deck(tmp_path / "whole.pptx").read_bytes()
    (tmp_path / "cut.pptx").write_bytes(data[: len(data) // 2])
    refused(tmp_path / "cut.pptx", "damaged or truncated")
    broken = rewritten(deck(tmp_path / "broken.pptx"), {"ppt/slides/slide1.xml": b"<p:sld><unclosed>"})
    refused(broken, r"^broken.pptx cannot be read as PPTX \(.*\); it is damaged; open and save it again$")
    (tmp_path / "text.pptx").write_text("Harbour report: ferries run daily.")
    refused(tmp_path / "text.pptx", r"text.pptx is named .pptx but is not one")
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook()
    book.active.append(["port"])
    book.active.append(["Tarrow"])
    book.save(tmp_path / "sheet.pptx")  # a workbook under a deck's name: read as what it is
    assert read_document(tmp_path / "sheet.pptx").text == "Sheet Sheet\nport\nTarrow"


@pytest.mark.parametrize("part", ["ppt/slides/slide1.xml", "ppt/presentation.xml", "[Content_Types].xml"])
def test_xml_entity_declarations_are_refused(tmp_path, part):
    path = deck(tmp_path / "laughs.pptx")
    with zipfile.ZipFile(path) as z:
        original = z.read(part)
    laughs = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "lol"><!ENTITY b "&a;&a;&a;&a;">]>'
    rewritten(path, {part: laughs + original.split(b"?>", 1)[-1]})
    refused(path, f"part {part.replace('[', '.').replace(']', '.')} declares XML entities")


def test_a_folder_of_hostile_decks_never_aborts(tmp_path, caplog):
    folder = tmp_path / "decks"
    folder.mkdir()
    deck(folder / "good.pptx")
    rewritten(deck(folder / "bomb.pptx"), {"ppt/media/zeros.bin": b"\0" * (30 << 20)})
    (folder / "cut.pptx").write_bytes((folder / "good.pptx").read_bytes()[:2000])
    (folder / "text.pptx").write_text("just text")
    os.mkfifo(folder / "pipe.pptx")
    (folder / "outside.pptx").symlink_to(deck(tmp_path / "vault.pptx"))
    documents = read_documents([folder])
    assert [d.name for d in documents] == ["good.pptx"]
    said = caplog.text
    for name, why in (("bomb.pptx", "zip bomb"), ("cut.pptx", "damaged or truncated"), ("text.pptx", "is not one"),
                      ("pipe.pptx", "not a regular file"), ("outside.pptx", "resolves outside")):
        assert name in said and why in said, (name, said)


@pytest.mark.parametrize("how", [{"encrypted": True}, {"method": 9}], ids=["encrypted", "deflate64"])
def test_a_part_zipfile_cannot_open_is_one_line(tmp_path, how):
    path = patched_zip(deck(tmp_path / "locked.pptx"), "ppt/slides/slide1.xml", **how)
    refused(path, r"^locked.pptx: part ppt/slides/slide1.xml cannot be read \(.*\); open the file and save it "
                  "again without a password$")
