"""Spreadsheets and CSV files: rows in groups that each fit one chunk under their sheet's name and header, rows
cited by their own numbers, cached formula values, dialects sniffed, the cell limit, and hostile files (bombs,
truncated and renamed files, entity declarations, FIFOs and links in a folder), each refused in one line."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ragfunnel.documents import LocatedContext, ReadLimits, cite, read_document, read_documents
from ragfunnel.documents.sheets import GROUP_JOINER, NAME_LINE_WORDS
from ragfunnel.errors import InputError, option
from ragfunnel.text import check_context, chunk_words, word_windows
from ragfunnel.text.chunking import CHUNK_WORDS, GROUP_SEPARATOR, count_words
from ragfunnel.text.scripts import WORD_UNIT
from ragfunnel.types import Prediction, ScoredChunk, Trace
from tests.helpers.documents import patched_zip, refused

pytest.importorskip("python_calamine", reason="needs the [documents] extra")
openpyxl = pytest.importorskip("openpyxl", reason="writes the workbooks these tests read")

# Real spreadsheets made by other people (Excel, LibreOffice), found inside PyPI packages: see PROVENANCE.md there.
REAL = Path("/work/data_ext/spreadsheets")
needs_real = pytest.mark.skipif(not REAL.exists(), reason=f"real spreadsheets not found at {REAL}")


def workbook(path: Path, sheets: dict[str, list[list]], *, at: str = "A1", hidden: tuple[str, ...] = ()) -> Path:
    """An .xlsx written by openpyxl: each sheet's rows from cell ``at`` on."""
    book = openpyxl.Workbook()
    book.remove(book.active)
    column, row = openpyxl.utils.cell.coordinate_from_string(at)
    first = openpyxl.utils.cell.column_index_from_string(column)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for i, values in enumerate(rows):
            for j, value in enumerate(values):
                sheet.cell(row=row + i, column=first + j, value=value)
        if name in hidden:
            sheet.sheet_state = "hidden"
    book.save(path)
    return path


def ods(path: Path, tables: str, *, styles: str = "") -> Path:
    """An .ods file whose content holds ``tables`` (table:table elements) and automatic ``styles``."""
    content = ('<?xml version="1.0" encoding="UTF-8"?><office:document-content '
               'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
               'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
               'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
               'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.2">'
               f'<office:automatic-styles>{styles}</office:automatic-styles><office:body><office:spreadsheet>'
               f'{tables}</office:spreadsheet></office:body></office:document-content>')
    manifest = ('<?xml version="1.0" encoding="UTF-8"?><manifest:manifest '
                'xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.2">'
                '<manifest:file-entry manifest:full-path="/" '
                'manifest:media-type="application/vnd.oasis.opendocument.spreadsheet"/>'
                '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
                '</manifest:manifest>')
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/vnd.oasis.opendocument.spreadsheet",
                   compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/manifest.xml", manifest)
        z.writestr("content.xml", content)
    return path


def ods_row(*cells: str, repeated: int = 1) -> str:
    return f'<table:table-row table:number-rows-repeated="{repeated}">{"".join(cells)}</table:table-row>'


def ods_text(value: str) -> str:
    return f'<table:table-cell office:value-type="string"><text:p>{value}</text:p></table:table-cell>'


def ods_number(value: float, repeated: int = 1) -> str:
    return (f'<table:table-cell table:number-columns-repeated="{repeated}" office:value-type="float" '
            f'office:value="{value}"><text:p>{value}</text:p></table:table-cell>')


def ods_empty(repeated: int = 1) -> str:
    return f'<table:table-cell table:number-columns-repeated="{repeated}"/>'


def xlsx_parts(path: Path, sheet_xml: str, *, extra: dict[str, bytes] | None = None) -> Path:
    """A minimal .xlsx written part by part: one sheet, S, whose part is ``sheet_xml``."""
    main = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    relations = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    package = "http://schemas.openxmlformats.org/package/2006/relationships"
    parts = {
        "[Content_Types].xml": '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
                               'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-'
                               'package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
                               '<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-'
                               'officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/'
                               'sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.'
                               'worksheet+xml"/></Types>',
        "_rels/.rels": f'<?xml version="1.0"?><Relationships xmlns="{package}"><Relationship Id="rId1" '
                       f'Type="{relations}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
        "xl/workbook.xml": f'<?xml version="1.0"?><workbook xmlns="{main}" xmlns:r="{relations}"><sheets>'
                           '<sheet name="S" sheetId="1" r:id="rId1"/></sheets></workbook>',
        "xl/_rels/workbook.xml.rels": f'<?xml version="1.0"?><Relationships xmlns="{package}"><Relationship '
                                      f'Id="rId1" Type="{relations}/worksheet" Target="worksheets/sheet1.xml"/>'
                                      '</Relationships>',
        "xl/worksheets/sheet1.xml": f'<?xml version="1.0"?><worksheet xmlns="{main}"><sheetData>{sheet_xml}'
                                    '</sheetData></worksheet>',
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in parts.items():
            z.writestr(name, data)
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return path


def inline(ref: str, text: str) -> str:
    return f'<c r="{ref}" t="inlineStr"><is><t>{text}</t></is></c>'


def prediction(answer: str, chunks) -> Prediction:
    return Prediction(answer=answer, method="op", chunks_used=[ScoredChunk(c, 1.0) for c in chunks], trace=Trace())


def rows_of(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip()]


# --- what a workbook reads as ---------------------------------------------------------------------------------

def test_a_sheet_reads_as_its_name_its_header_and_its_rows_numbered_as_the_spreadsheet_does(tmp_path):
    path = workbook(tmp_path / "sales.xlsx", {
        "Q3": [["Name", "Amount", "When", None], ["Ann", 3.0, datetime.date(2024, 3, 1)],
               ["Bob", 2.5, datetime.datetime(2024, 3, 1, 12, 30), None], [None], ["Cy", 0.1 + 0.2, True, "  a\tb \n"]],
        "Q4": [["Name"], ["Dee"]]}, at="C5")
    doc = read_document(path)
    assert doc.format == "spreadsheet" and doc.warnings == ()
    assert doc.text == ("Sheet Q3\nName | Amount | When\nAnn | 3 | 2024-03-01\nBob | 2.5 | 2024-03-01 12:30:00\n"
                        "Cy | 0.3 | TRUE | a b" + GROUP_JOINER + "Sheet Q4\nName\nDee")
    placed = [(doc.text[s.start:s.end], s.sheet, s.row) for s in doc.sections]
    assert placed == [("Sheet Q3", "Q3", None), ("Name | Amount | When", "Q3", 5), ("Ann | 3 | 2024-03-01", "Q3", 6),
                      ("Bob | 2.5 | 2024-03-01 12:30:00", "Q3", 7), ("Cy | 0.3 | TRUE | a b", "Q3", 9),
                      ("Sheet Q4", "Q4", None), ("Name", "Q4", 5), ("Dee", "Q4", 6)]


def test_the_header_opens_every_group_and_a_group_fits_one_chunk(tmp_path):
    rows = [["Name", "Amount"]] + [[f"item{i}", i] for i in range(100)]
    doc = read_document(workbook(tmp_path / "book.xlsx", {"Q3": rows}))
    groups = doc.text.split(GROUP_JOINER)
    # "Sheet Q3" and "Name | Amount" are 5 words, each row 3 ("item7 | 7"); the first group leaves room for the
    # "[book.xlsx]" line of a context of several files
    first_budget, budget = CHUNK_WORDS - NAME_LINE_WORDS, CHUNK_WORDS
    per_first, per_group = (first_budget - 5) // 3, (budget - 5) // 3
    assert (per_first, per_group) == (29, 31)
    assert [len(rows_of(g)) - 2 for g in groups] == [29, 31, 31, 9]
    assert all(g.startswith("Sheet Q3\nName | Amount\n") for g in groups)
    chunks = chunk_words(doc.text)
    assert [c.text for c in chunks] == groups  # each group is one chunk, whole
    with_name = chunk_words(LocatedContext.join([doc, read_document(workbook(tmp_path / "b.xlsx", {"S": rows}))]).text)
    assert with_name[0].text.startswith("[book.xlsx]\nSheet Q3") and with_name[0].n_words <= CHUNK_WORDS
    assert len(with_name) == 8 and all(GROUP_SEPARATOR not in c.text for c in with_name)


def test_no_chunk_of_the_default_size_cuts_a_row_or_holds_two_groups(tmp_path):
    rows = [[f"c{j}" for j in range(9)]] + [[f"v{i}.{j} text" for j in range(9)] for i in range(300)]
    doc = read_document(workbook(tmp_path / "wide.xlsx", {"Data": rows}))
    lines = set(rows_of(doc.text))
    for chunk in chunk_words(doc.text):
        assert chunk.text.startswith("Sheet Data\nc0 | c1") and chunk.n_words <= CHUNK_WORDS
        assert set(rows_of(chunk.text)) <= lines  # whole rows only


def test_a_row_longer_than_a_chunk_runs_over_two_chunks_but_the_next_group_starts_fresh(tmp_path):
    long = [f"word{i}" for i in range(150)]
    doc = read_document(workbook(tmp_path / "long.xlsx", {"S": [["Note"], [" ".join(long)], ["short"]]}))
    chunks = chunk_words(doc.text)
    # "Sheet S" and "Note" are 3 words: the first chunk holds 97 words of the row, the second the other 53
    assert [c.text for c in chunks] == ["Sheet S\nNote\n" + " ".join(long[:97]), " ".join(long[97:]),
                                        "Sheet S\nNote\nshort"]


def test_a_cited_row_names_its_sheet_and_row(tmp_path):
    rows = [["Region", "Manager", "Revenue"]] + [[f"Region {i}", f"Manager {i}", 1000 + i] for i in range(40)]
    rows[14] = ["North", "Ada Brun", 5120]
    doc = read_document(workbook(tmp_path / "sales.xlsx", {"Summary": [["total"]], "Q3": rows}))
    context = LocatedContext.join([doc])
    [citation, *_] = cite(prediction("Ada Brun", chunk_words(context.text)), context, "Who manages the North region?")
    assert citation.quote == "North | Ada Brun | 5120"
    assert (citation.sheet, citation.row) == ("Q3", 15) and citation.label() == "[sales.xlsx \u00b7 Q3 \u00b7 row 15]"
    section = doc.section_at(doc.text.index("North"))
    assert (section.sheet, section.row) == ("Q3", 15)


def test_hidden_and_empty_sheets_are_left_out_and_hidden_ones_named(tmp_path):
    path = workbook(tmp_path / "h.xlsx", {"Lookup": [["secret", 1]], "Empty": [], "Data": [["a"], ["b"]]},
                    hidden=("Lookup",))
    doc = read_document(path)
    assert doc.text == "Sheet Data\na\nb" and doc.warnings == ("hidden sheet left out: Lookup",)


def test_an_ods_file_keeps_its_row_numbers_past_leading_empty_and_repeated_rows(tmp_path):
    hidden_style = ('<style:style style:name="ta2" style:family="table">'
                    '<style:table-properties table:display="false"/></style:style>')
    tables = ('<table:table table:name="Tides">' + ods_row(ods_empty(3), repeated=2)
              + ods_row(ods_empty(2), ods_text("Port"), ods_text("High water"))
              + ods_row(ods_empty(2), ods_text("Tarrow"), ods_number(4.5))
              + ods_row(ods_empty(2), ods_text("Gull Rock"), ods_number(5), repeated=2)
              + ods_row(ods_empty(1024), repeated=1_048_000) + "</table:table>"
              + '<table:table table:name="Old" table:style-name="ta2">' + ods_row(ods_text("x")) + "</table:table>")
    doc = read_document(ods(tmp_path / "tides.ods", tables, styles=hidden_style))
    assert doc.text == "Sheet Tides\nPort | High water\nTarrow | 4.5\nGull Rock | 5\nGull Rock | 5"
    assert [s.row for s in doc.sections] == [None, 3, 4, 5, 6]
    assert doc.warnings == ("hidden sheet left out: Old",)


# --- formulas, real workbooks ------------------------------------------------------------------------------------

@needs_real
def test_formulas_read_as_the_values_excel_and_libreoffice_kept_for_them():
    # LibreOffice: D2 =SUM(Sheet1!A:A) kept 24, D3 =SUM(2:2) kept 30, A4 =Sheet2!A2+A2 kept 2
    libre = read_document(REAL / "xlsx" / "cross_sheet.xlsx")
    assert libre.text.startswith("Sheet Sheet1\nHello | This | Is | A Table\n1 | 1 | 1 | 24 |  | 3\n1 | 5 | 13 | 30\n"
                                 "2 | 6 | 14\n")
    assert libre.section_at(libre.text.index("1 | 5 | 13 | 30")).row == 3
    # Excel: A10 =SUM(A1:B2) kept 10; an array formula First!A2:C7+Second!A2:C7 kept 0.30000000000000004 and so on
    excel = read_document(REAL / "xlsx" / "SUM.xlsx")
    assert excel.text == "Sheet Sheet1\n1 | 2\n3 | 4\n10" and excel.sections[-1].row == 10
    third = read_document(REAL / "xlsx" / "use_case_01.xlsm").text.split("Sheet Third\n")[1]
    assert third.startswith("Head 1 | Head 2 | Head 3\n0.2 | 0.3 | 0.3\n0.5 | 0.6 | 0.7\n0.8 | 0.9 | 1.1\n")


@needs_real
@pytest.mark.parametrize("path", sorted(p for p in REAL.glob("*/*") if p.suffix in (".xlsx", ".xlsm", ".ods")),
                         ids=lambda p: p.name)
def test_every_real_workbook_is_read_or_refused_in_one_line(path):
    try:
        doc = read_document(path)
    except InputError as e:
        assert "\n" not in str(e) and path.name in str(e)
        return
    assert doc.sections and all(s.sheet for s in doc.sections)
    assert check_context(doc.text) == doc.text  # few enough separators to read as text
    for chunk in chunk_words(doc.text):
        assert GROUP_SEPARATOR not in chunk.text


@needs_real
def test_a_real_csv_and_its_workbook_cite_the_row_that_answers():
    for path, label in ((REAL / "csv" / "airports.csv", "[airports.csv \u00b7 row 1506]"),
                        (REAL / "converted" / "airports.xlsx", "[airports.xlsx \u00b7 Airports \u00b7 row 1506]")):
        if not path.exists():
            continue
        doc = read_document(path)
        assert len(rows_of(doc.text)) > 3376  # every row, and the header over each group
        context = LocatedContext.join([doc])
        cited = cite(prediction("Kill Devil Hills", chunk_words(context.text)), context,
                     "In which town is the First Flight airport (FFA)?")
        assert cited[0].label() == label and cited[0].quote.startswith("FFA | First Flight | Kill Devil Hills | NC")


@needs_real
def test_a_real_workbook_indexed_as_a_corpus_keeps_its_groups_in_passages(tmp_path):
    from ragfunnel.corpus import load_corpus

    source = REAL / "converted" / "airports.xlsx"
    if not source.exists():
        pytest.skip("converted airports.xlsx not found")
    (tmp_path / "airports.xlsx").write_bytes(source.read_bytes())
    [document] = load_corpus(tmp_path)
    windows = [document.text[a:b] for a, b in word_windows(document.text, 100)]
    assert len(windows) > 100 and all(w.startswith("Sheet Airports\niata | name | city") for w in windows)


# --- CSV ---------------------------------------------------------------------------------------------------------

def test_csv_dialects_are_sniffed(tmp_path):
    (tmp_path / "semi.csv").write_text('Ort;Einwohner;Notiz\nKiel;246601;"Hafen; Ostsee"\nLübeck;218095;Marzipan\n')
    semi = read_document(tmp_path / "semi.csv")
    assert semi.format == "csv"
    assert semi.text == "Ort | Einwohner | Notiz\nKiel | 246601 | Hafen; Ostsee\nLübeck | 218095 | Marzipan"
    (tmp_path / "tides.tsv").write_text("port\thigh water\nTarrow\t04:50\nGull Rock\t05:10\n")
    assert read_document(tmp_path / "tides.tsv").text == "port | high water\nTarrow | 04:50\nGull Rock | 05:10"
    (tmp_path / "one.csv").write_text("name\nAda\nBrun\n")  # one column: no delimiter to sniff
    assert read_document(tmp_path / "one.csv").text == "name\nAda\nBrun"


def test_a_csv_header_is_sniffed_and_a_headerless_file_gets_none(tmp_path):
    (tmp_path / "numbers.csv").write_text("".join(f"{i},{i * i}\n" for i in range(1, 60)))
    numbers = read_document(tmp_path / "numbers.csv")
    groups = numbers.text.split(GROUP_JOINER)
    assert groups[0].startswith("1 | 1\n2 | 4\n") and groups[1].startswith(f"{len(rows_of(groups[0])) + 1} | ")
    (tmp_path / "named.csv").write_text("n,square\n" + "".join(f"{i},{i * i}\n" for i in range(1, 60)))
    named = read_document(tmp_path / "named.csv").text.split(GROUP_JOINER)
    assert all(g.startswith("n | square\n") for g in named) and len(named) > 1


def test_a_csv_row_is_cited_by_its_record_number(tmp_path):
    lines = ["date,keeper,light"] + [f"2024-01-{d:02d},Keeper {d},on" for d in range(1, 20)]
    lines[13] = "2024-01-13,Ada Penhallow,off"
    (tmp_path / "log.csv").write_text("\n".join(lines) + "\n")
    doc = read_document(tmp_path / "log.csv")
    context = LocatedContext.join([doc])
    [citation, *_] = cite(prediction("Ada Penhallow", chunk_words(context.text)), context,
                          "Who kept the light on 2024-01-13?")
    assert citation.label() == "[log.csv \u00b7 row 14]" and citation.sheet is None and citation.lines is None


def test_a_damaged_csv_is_one_line(tmp_path):
    (tmp_path / "huge.csv").write_text('a,b\n1,"' + "x" * 200_000 + '"\n')
    with pytest.raises(InputError, match=r"^huge.csv cannot be read as CSV \(field larger than field limit"):
        read_document(tmp_path / "huge.csv")
    (tmp_path / "bin.csv").write_bytes(b"a,b\n\x00\x01\x02,3\n")
    with pytest.raises(InputError, match="bin.csv looks binary"):
        read_document(tmp_path / "bin.csv")


def test_a_control_character_in_a_cell_never_becomes_a_separator(tmp_path):
    prose = "The ferry to Gull Rock leaves at nine. " * 20
    (tmp_path / "c.csv").write_text(f"a,b\nx{GROUP_SEPARATOR}y,z\x1cw\n{prose},\n")
    # the long row does not fit the first group: it opens the next, under the header
    assert read_document(tmp_path / "c.csv").text == f"a | b\nx y | z w{GROUP_JOINER}a | b\n{prose.strip()}"


# --- the cell limit ----------------------------------------------------------------------------------------------

def test_cells_past_the_limit_are_left_out_with_one_warning(tmp_path, caplog):
    sheets = {"Q1": [["a", "b"], [1, 2]], "Q3": [["a", "b", "c"]] + [[i, i, i] for i in range(5)],
              "Q4": [["x"], ["y"], ["z"], [None], ["w"]]}
    doc = read_document(workbook(tmp_path / "big.xlsx", sheets), ReadLimits(max_sheet_cells=20))
    # Q1 takes 4 cells, Q3's header and its first four rows 15 more; its last row (3 cells) would pass 20: it and
    # Q4's 5 rows (its empty one too, within its rectangle) are left out
    assert rows_of(doc.text.split(GROUP_JOINER)[-1]) == ["Sheet Q3", "a | b | c", "0 | 0 | 0", "1 | 1 | 1",
                                                         "2 | 2 | 2", "3 | 3 | 3"]
    assert doc.warnings == ("read up to the max_sheet_cells limit of 20 cells; left out 6 rows from sheet Q3 row 6 "
                            f"on; raise the limit with {option('max_sheet_cells')}",)
    assert "big.xlsx: read up to the max_sheet_cells limit" in caplog.text
    (tmp_path / "big.csv").write_text("a,b\n" + "1,2\n" * 10)
    csv_doc = read_document(tmp_path / "big.csv", ReadLimits(max_sheet_cells=6))
    assert rows_of(csv_doc.text) == ["a | b", "1 | 2", "1 | 2"]
    assert csv_doc.warnings[0].startswith("read up to the max_sheet_cells limit of 6 cells; left out 8 rows from "
                                          "row 4 on")


def test_a_sheet_too_large_to_hold_is_left_out_before_it_is_loaded(tmp_path):
    path = xlsx_parts(tmp_path / "far.xlsx", '<row r="1">' + inline("A1", "a") + inline("B1", "b") + "</row>"
                      + '<row r="5000">' + inline("Z5000", "z") + "</row>")
    # 5,000 rows of 26 columns: 130,000 cells of 32 bytes, 4 MB
    with pytest.raises(InputError) as refused:
        read_document(path, ReadLimits(max_unzipped_mb=1))
    assert str(refused.value) == ("far.xlsx: sheet S left out: its rectangle of 130,000 cells (empty ones included) "
                                  "would take 4 MB to hold, over the 1 MB limit (a bomb?); raise it with "
                                  "max_unzipped_mb")
    assert read_document(path).text.startswith("Sheet S\na | b\n")


# A few hundred bytes that ask calamine for 17 billion cells (550 GB): read in a child process with 2 GB of
# address space, so a reader that let the file through fails this test instead of the test run.
READ_LIMITED = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from ragfunnel.documents import read_document
try:
    read_document(sys.argv[1])
    print(json.dumps("read"))
except Exception as e:
    print(json.dumps(f"{type(e).__name__}: {e}"))
"""


def read_limited(path: Path) -> str:
    done = subprocess.run([sys.executable, "-c", READ_LIMITED, str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_a_sparse_xlsx_asking_for_billions_of_cells_is_refused_in_one_line(tmp_path):
    path = xlsx_parts(tmp_path / "sparse.xlsx", '<row r="1">' + inline("A1", "a") + "</row><row r=\"1048576\">"
                      + inline("XFD1048576", "b") + "</row>")
    assert path.stat().st_size < 2000
    assert read_limited(path) == ("InputError: sparse.xlsx: sheet S left out: its rectangle of 17,179,869,184 cells "
                                  "(empty ones included) would take 524,288 MB to hold, over the 500 MB limit (a "
                                  "bomb?); raise it with max_unzipped_mb")


def test_an_ods_repeating_a_row_of_repeated_cells_is_refused_in_one_line(tmp_path):
    path = ods(tmp_path / "repeat.ods", '<table:table table:name="T">'
               + ods_row(ods_number(1, repeated=16384), repeated=1_048_576) + "</table:table>")
    # calamine reads a row's 16,384 cells once, then keeps the row 1,048,576 times
    assert read_limited(path) == ("InputError: repeat.ods's sheets would take 917,505 MB to hold (17,179,885,568 "
                                  "cells, empty ones within their rectangles included; sheet T: 17,179,885,568), "
                                  "over the 500 MB limit (a bomb?); an ODS file is read whole; raise it with "
                                  "max_unzipped_mb")


# --- hostile files -----------------------------------------------------------------------------------------------

def test_a_zip_bomb_spreadsheet_is_refused(tmp_path):
    bomb = xlsx_parts(tmp_path / "bomb.xlsx", inline("A1", "a"),
                      extra={"xl/sharedStrings.xml": b"<sst>" + b" " * (30 << 20) + b"</sst>"})
    refused(bomb, r"part xl/sharedStrings.xml expands \d+-fold, over the limit of 200 .*raise it with max_zip_ratio")
    refused(bomb, r"expands to 30 MB, over the 5 MB limit .*max_unzipped_mb",
            ReadLimits(max_unzipped_mb=5, max_zip_ratio=10_000))


def test_truncated_and_renamed_spreadsheets_are_one_line(tmp_path):
    good = workbook(tmp_path / "good.xlsx", {"S": [["a"], ["b"]] * 200})
    data = good.read_bytes()
    (tmp_path / "cut.xlsx").write_bytes(data[: len(data) // 2])
    refused(tmp_path / "cut.xlsx", "damaged or truncated")
    (tmp_path / "text.xlsx").write_text("name,amount\nAda,3\n")
    refused(tmp_path / "text.xlsx", r"text.xlsx is named .xlsx but is not one")
    (tmp_path / "cut.ods").write_bytes(ods(tmp_path / "whole.ods", '<table:table table:name="T">'
                                           + ods_row(ods_text("a")) + "</table:table>").read_bytes()[:300])
    refused(tmp_path / "cut.ods", "damaged or truncated")


def test_a_damaged_sheet_part_is_one_line(tmp_path):
    path = xlsx_parts(tmp_path / "broken.xlsx", '<row r="1"><c r="A1" t="inlineStr"><is><t>a</t></is></row>')
    refused(path, r"^broken.xlsx cannot be read as a spreadsheet \(.*\); it is damaged or truncated")


def test_a_deck_renamed_xlsx_is_read_as_the_deck_it_is(tmp_path):
    pptx = pytest.importorskip("pptx")
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Harbour"
    deck.save(tmp_path / "deck.xlsx")
    doc = read_document(tmp_path / "deck.xlsx")
    assert doc.format == "slides" and doc.text == "Harbour"


@pytest.mark.parametrize("part", ["xl/worksheets/sheet1.xml", "xl/sharedStrings.xml", "xl/workbook.xml"])
def test_xml_entity_declarations_are_refused_in_any_part(tmp_path, part):
    laughs = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "lol"><!ENTITY b "&a;&a;&a;&a;">]>'
    path = xlsx_parts(tmp_path / "laughs.xlsx", inline("A1", "a"))
    with zipfile.ZipFile(path) as z:
        parts = {name: z.read(name) for name in z.namelist()}
    parts[part] = laughs + parts.get(part, b"<sst/>").split(b"?>", 1)[-1]
    with zipfile.ZipFile(path, "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)
    refused(path, f"part {part} declares XML entities")
    content = ods(tmp_path / "laughs.ods", '<table:table table:name="T">' + ods_row(ods_text("&b;")) + "</table:table>")
    with zipfile.ZipFile(content) as z:
        parts = {name: z.read(name) for name in z.namelist()}
    parts["content.xml"] = laughs + parts["content.xml"].split(b"?>", 1)[1]
    with zipfile.ZipFile(content, "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)
    refused(content, "part content.xml declares XML entities")


def test_a_folder_of_hostile_spreadsheets_never_aborts(tmp_path, caplog):
    folder = tmp_path / "books"
    folder.mkdir()
    workbook(folder / "good.xlsx", {"S": [["port"], ["Tarrow"]]})
    (folder / "notes.csv").write_text("port,time\nGull Rock,9\n")
    xlsx_parts(folder / "bomb.xlsx", inline("A1", "a"), extra={"xl/sharedStrings.xml": b" " * (30 << 20)})
    (folder / "cut.xlsx").write_bytes((folder / "good.xlsx").read_bytes()[:500])
    (folder / "text.xlsx").write_text("just text")
    os.mkfifo(folder / "pipe.xlsx")
    outside = workbook(tmp_path / "vault.xlsx", {"S": [["code"], [4711]]})
    (folder / "outside.xlsx").symlink_to(outside)
    documents = read_documents([folder])
    assert [d.name for d in documents] == ["good.xlsx", "notes.csv"]
    said = caplog.text
    for name, why in (("bomb.xlsx", "zip bomb"), ("cut.xlsx", "damaged or truncated"), ("text.xlsx", "is not one"),
                      ("pipe.xlsx", "not a regular file"), ("outside.xlsx", "resolves outside")):
        assert f"{name}" in said and why in said, (name, said)
    assert "4711" not in "".join(d.text for d in documents)


def test_the_group_separator_counts_words_as_the_chunker_does():
    text = "Sheet Q3\na | b" + GROUP_JOINER + "Sheet Q3\na | b"
    assert count_words(text) == 10 and [text[a:b] for a, b in word_windows(text, 100)] == ["Sheet Q3\na | b"] * 2
    # ASCII text is counted by its whitespace: the same count as the chunker's word units
    for sample in ("a\x1cb\x1ec d\x00e", " x\t|\x0by\x7f ", "Sheet Q3\n", "", "水 water", "ไทยไทยไทย a"):
        assert count_words(sample) == len(WORD_UNIT.findall(sample)), sample


@pytest.mark.parametrize("how", [{"encrypted": True}, {"method": 9}], ids=["encrypted", "deflate64"])
def test_a_part_zipfile_cannot_open_is_one_line(tmp_path, how):
    path = patched_zip(workbook(tmp_path / "locked.xlsx", {"S": [["a"], ["b"]]}), "xl/worksheets/sheet1.xml", **how)
    refused(path, r"^locked.xlsx: part xl/worksheets/sheet1.xml cannot be read \(.*\); open the file and save it "
                  "again without a password$")


def test_a_workbook_of_many_small_sheets_is_asked_about_as_text(tmp_path):
    sheets = {f"Pier {i}": [["port", "time"], ["Tarrow", 9]] for i in range(30)}
    context = LocatedContext.join([read_document(workbook(tmp_path / "piers.xlsx", sheets))])
    assert check_context(context.text) == context.text
