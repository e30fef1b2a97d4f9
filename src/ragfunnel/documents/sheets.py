"""Spreadsheets (.xlsx, .xlsm and .ods, by python-calamine) and CSV/TSV files, as rows a small model can read.

Each sheet is laid out in groups of rows: a group opens with a ``Sheet Q3`` line (a workbook's; a CSV file has
none) and the header (the sheet's first row that holds a value), then as many whole rows, ``value | value``, as
keep the group within one chunk of :data:`~ragfunnel.text.chunking.CHUNK_WORDS` words. Groups are apart by
:data:`~ragfunnel.text.chunking.GROUP_SEPARATOR`, which no word window runs past, so each group is a chunk of its
own (for an index's 100-word passages too): every chunk names its sheet and columns, and no row is cut between
two chunks. A row longer than a chunk less its header (a very wide sheet) may still run over two; so may any row
when a method cuts smaller chunks than the default.

Each row is a section with its sheet and its number as the spreadsheet numbers it (the header's too), so a
citation of a row says ``[sales.xlsx · Q3 · row 14]`` (``[data.csv · row 14]``). Formulas are read as the values
the file keeps for them (what the spreadsheet showed when it was saved), dates and times as ISO text, a whole
number without ``.0``, other numbers to 15 significant digits, as a spreadsheet shows them.

Cells are read up to ``max_sheet_cells``; the rows past it are left out, and one warning says how many and from
where. calamine holds a sheet's whole rectangle of cells, the empty ones too, however few cells the file writes (a
1.5 KB file naming cells A1 and XFD1048576 asks for 512 GB), so before a sheet is loaded its rectangle is measured
from the file's XML, read a piece at a time, and held to ``max_unzipped_mb`` as the unzipped parts are: a larger
sheet is left out, and an ODS file (calamine reads all its sheets at once) whose sheets together are larger is
refused.
"""

from __future__ import annotations

import csv
import datetime
import functools
import io
import itertools
import operator
import posixpath
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from ragfunnel.documents.limits import MB, ReadLimits, open_zip, read_xml_part
from ragfunnel.documents.model import DocumentBuilder, SourceDocument
from ragfunnel.documents.plain import decode_text
from ragfunnel.errors import InputError, MissingExtra, option
from ragfunnel.text.chunking import CHUNK_WORDS, GROUP_SEPARATOR, count_words

# How long a "[file name]" line may be, in words: a context of several files opens each with one
# (LocatedContext.join), in the same chunk as the file's first group of rows.
NAME_LINE_WORDS = 8
GROUP_JOINER = f"\n{GROUP_SEPARATOR}\n"
# What calamine holds for each cell of a sheet's rectangle, empty or not (its value type); for an ODS file, a
# formula's text beside it, for the cells it reads and again for the rectangle it keeps of them.
CELL_BYTES = 32
ODS_CELL_BYTES = 32 + 24
_SNIFF_CHARS = 64 * 1024
_HEADER_SAMPLE_ROWS = 20
# Characters a cell may hold that no prose does (controls; the file and group separators among them): a space.
_CONTROLS = {c: " " for c in range(32) if chr(c) not in "\t\n\r"} | {0x7F: " "}


@dataclass(frozen=True)
class _Row:
    number: int  # as the spreadsheet numbers it: 1-based, the header's too
    text: str  # its cells, "a | b | c" (trailing empty cells left out)
    words: int


def _row(number: int, values: Iterable[object]) -> _Row | None:
    """A row's line, or None when it holds no value."""
    cells = [_cell_text(v) for v in values]
    while cells and not cells[-1]:
        cells.pop()
    if not cells:
        return None
    text = " | ".join(cells)
    return _Row(number, text, count_words(text))


def _cell_text(value: object) -> str:
    kind = type(value)
    if kind is str:  # one line, spaces collapsed; a control character (a separator among them) is a space
        return " ".join((value if value.isprintable() else value.translate(_CONTROLS)).split())
    if kind is float:
        # 15 significant digits, as a spreadsheet shows a number: 0.1 + 0.2 is kept as 0.30000000000000004
        return str(int(value)) if value.is_integer() and -1e15 < value < 1e15 else f"{value:.15g}"
    if kind is bool:
        return "TRUE" if value else "FALSE"
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return " ".join(str(value).split())


@dataclass
class _Cells:
    """Cells read so far against ``max_sheet_cells`` (a row's empty cells within its sheet's rectangle count), and
    once a row does not fit, where that was and how many rows were left out from there on."""

    limit: int
    read: int = 0
    stopped: tuple[str | None, int] | None = None  # the sheet (None: a CSV file's) and row not read
    left_rows: int = 0

    def take(self, cells: int, sheet: str | None, row: int) -> bool:
        if self.read + cells <= self.limit:
            self.read += cells
            return True
        self.stopped = (sheet, row)
        return False

    def warning(self) -> str | None:
        if self.stopped is None:
            return None
        sheet, row = self.stopped
        where = f"sheet {sheet} row {row:,}" if sheet is not None else f"row {row:,}"
        return (f"read up to the max_sheet_cells limit of {self.limit:,} cells; left out {self.left_rows:,} "
                f"row{'s' if self.left_rows != 1 else ''} from {where} on; raise the limit with "
                f"{option('max_sheet_cells')}")


class _Layout:
    """Lays tables out in groups of rows (see the module's docstring) into a document builder."""

    def __init__(self, builder: DocumentBuilder):
        self.builder = builder
        self.groups = 0
        self.budget = self.words = self.rows = 0

    def table(self, sheet: str | None, header: _Row | None, rows: Iterable[_Row]) -> None:
        """A sheet's rows (a CSV file's: ``sheet`` None) under their header (None: the file has none)."""
        self.sheet, self.header = sheet, header
        self.lead = count_words(f"Sheet {sheet}") if sheet is not None else 0
        self._open()
        for row in rows:
            if self.rows and self.words + row.words > self.budget:
                self._open()
            self.builder.add(row.text, joiner=self.joiner, sheet=self.sheet, row=row.number)
            self.joiner = "\n"
            self.words += row.words
            self.rows += 1

    def _open(self) -> None:
        """A new group: its sheet's line and header, after a group separator."""
        self.joiner = GROUP_JOINER  # before the group's first line
        if self.sheet is not None:
            self.builder.add(f"Sheet {self.sheet}", joiner=self.joiner, sheet=self.sheet)
            self.joiner = "\n"
        if self.header is not None:
            self.builder.add(self.header.text, joiner=self.joiner, sheet=self.sheet, row=self.header.number)
            self.joiner = "\n"
        # the document's first group shares its chunk with the "[file name]" line of a context of several files
        self.budget = CHUNK_WORDS - (NAME_LINE_WORDS if not self.groups else 0)
        self.groups += 1
        self.words = self.lead + (self.header.words if self.header is not None else 0)
        self.rows = 0


def _kept(numbered: Iterable[tuple[int, list]], cells: _Cells, sheet: str | None) -> Iterator[_Row]:
    """The rows that hold a value, until one does not fit within the cell limit (empty rows cost nothing)."""
    for number, values in numbered:
        row = _row(number, values)
        if row is None:
            continue
        if not cells.take(len(values), sheet, number):
            return
        yield row


def _table(layout: _Layout, numbered: Iterable[tuple[int, list]], cells: _Cells, sheet: str | None, *,
           header: bool = True) -> bool:
    """One sheet's (or CSV file's) rows laid out; whether any was kept."""
    rows = _kept(numbered, cells, sheet)
    first = next(rows, None)
    if first is None:
        return False
    layout.table(sheet, first, rows) if header else layout.table(sheet, None, itertools.chain([first], rows))
    return True


# --- CSV and TSV -------------------------------------------------------------------------------------------


def read_csv(path: Path, raw: bytes, limits: ReadLimits) -> SourceDocument:
    """A CSV or TSV file: its dialect sniffed (else a comma, a tab for .tsv), the first row a header unless it
    looks like the rows under it (a number over a column of numbers), each record one row."""
    text = decode_text(raw, path.name)
    dialect = _dialect(text, path)
    builder = DocumentBuilder(path.name, "csv")
    cells = _Cells(limits.max_sheet_cells)
    try:
        records = [r for r in itertools.islice(_records(text, dialect), _HEADER_SAMPLE_ROWS + 1) if r]
        numbered = enumerate(_records(text, dialect), start=1)
        kept = _table(_Layout(builder), numbered, cells, None, header=_has_header(records))
        if cells.stopped is not None:  # the record that did not fit, and those after it
            cells.left_rows = 1 + sum(1 for _, record in numbered if record)
    except csv.Error as e:
        raise InputError(f"{path.name} cannot be read as CSV ({e}); check its quoting, or save it again as CSV "
                         "from a spreadsheet") from None
    if not kept:
        raise InputError(f"{path.name} holds no values; pass a CSV file with rows")
    warning = cells.warning()
    return builder.build(warnings=(warning,) if warning else ())


def _records(text: str, dialect: type[csv.Dialect] | csv.Dialect) -> Iterator[list[str]]:
    return csv.reader(io.StringIO(text, newline=""), dialect)


def _dialect(text: str, path: Path) -> type[csv.Dialect] | csv.Dialect:
    sample = text[:_SNIFF_CHARS]
    if len(text) > _SNIFF_CHARS and "\n" in sample:
        sample = sample[:sample.rindex("\n")]
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:  # one column, or too few rows to tell
        return csv.excel_tab if path.suffix.lower() == ".tsv" else csv.excel


def _has_header(records: list[list[str]]) -> bool:
    """Whether the first record names the columns: it does unless, over the columns of numbers, it holds numbers
    more often than not (csv.Sniffer's test, which also sniffs a dialect of its own and calls text-only files
    headerless)."""
    if len(records) < 2:
        return True
    first, rest = records[0], records[1:]
    votes = 0
    for i, cell in enumerate(first):
        below = [r[i] for r in rest if i < len(r) and r[i].strip()]
        if below and all(_is_number(v) for v in below):
            votes += -1 if _is_number(cell) else 1
    return votes >= 0


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


# --- workbooks ----------------------------------------------------------------------------------------------


def read_spreadsheet(path: Path, limits: ReadLimits) -> SourceDocument:
    """An .xlsx, .xlsm or .ods workbook: each visible sheet in workbook order (hidden ones named in a warning)."""
    try:
        import python_calamine
    except ImportError:
        raise MissingExtra("python-calamine", "documents") from None
    with open_zip(path, limits, kind="spreadsheet") as archive:
        ods = "xl/workbook.xml" not in archive.namelist()
        sizes = _ods_sizes(archive, path, limits) if ods else _xlsx_sizes(archive, path)
    try:
        workbook = python_calamine.CalamineWorkbook.from_path(str(path))
    except python_calamine.PasswordError:
        raise InputError(f"{path.name} is password-protected; save a copy without the password first") from None
    except Exception as e:  # calamine raises CalamineError, XmlError, ZipError, ValueError ... for damaged files
        raise InputError(_damaged(path, e)) from None
    with workbook:
        return _workbook_document(path, workbook, sizes, limits)


def _workbook_document(path: Path, workbook, sizes: _Sizes, limits: ReadLimits) -> SourceDocument:
    from python_calamine import SheetTypeEnum, SheetVisibleEnum

    builder = DocumentBuilder(path.name, "spreadsheet")
    layout, cells = _Layout(builder), _Cells(limits.max_sheet_cells)
    hidden, too_large, kept = [], [], False
    for index, sheet in enumerate(workbook.sheets_metadata):
        if sheet.typ != SheetTypeEnum.WorkSheet:
            continue  # a chart, dialog or macro sheet holds no cells of data
        if sheet.visible != SheetVisibleEnum.Visible:
            hidden.append(sheet.name)
            continue
        rows, columns = sizes.of(sheet.name)
        if cells.stopped is not None:  # past the cell limit: its rows are counted, not read
            cells.left_rows += rows
            continue
        if rows * columns * CELL_BYTES > limits.max_unzipped_mb * MB:
            too_large.append(f"sheet {sheet.name} left out: its rectangle of {rows * columns:,} cells (empty ones "
                             f"included) would take {rows * columns * CELL_BYTES / MB:,.0f} MB to hold, over the "
                             f"{limits.max_unzipped_mb:g} MB limit (a bomb?); raise it with "
                             f"{option('max_unzipped_mb')}")
            continue
        try:
            data = workbook.get_sheet_by_index(index)
            # calamine numbers the rows from the sheet's first, empty ones included: row 1 is index 0
            kept = _table(layout, enumerate(data.iter_rows(), start=1), cells, sheet.name) or kept
        except Exception as e:  # a sheet part calamine cannot parse
            raise InputError(_damaged(path, e)) from None
        if cells.stopped is not None and data.end is not None:  # stopped in this sheet: the rest of it
            cells.left_rows += data.end[0] + 1 - cells.stopped[1] + 1
    warnings = too_large + ([f"hidden sheet{'s' if len(hidden) > 1 else ''} left out: {', '.join(hidden)}"]
                            if hidden else [])
    if (warning := cells.warning()) is not None:
        warnings.append(warning)
    if not kept:
        if too_large:
            raise InputError(f"{path.name}: {too_large[0]}")
        raise InputError(f"{path.name} holds no values in its visible sheets; pass a workbook with cells")
    return builder.build(warnings=tuple(warnings))


def _damaged(path: Path, error: Exception) -> str:
    detail = " ".join(str(error).split())[:200] or type(error).__name__
    return (f"{path.name} cannot be read as a spreadsheet ({detail}); it is damaged or truncated; open and save it "
            "again")


# How a sheet's rectangle is measured before calamine holds it: the XML is read a piece at a time (each piece cut
# before a "<", so no tag is split), keeping only counts.

_PIECE = 1 << 20
_ENTITY = b"<!ENTITY"


def _pieces(archive: zipfile.ZipFile, name: str, path: Path) -> Iterator[bytes]:
    """Part ``name`` a piece at a time, each piece ending before a tag; refused if it declares entities."""
    tail = b""
    try:
        with archive.open(name) as part:
            while block := part.read(_PIECE):
                data = tail + block
                cut = data.rfind(b"<")
                cut = cut if cut > 0 else len(data)
                piece, tail = data[:cut], data[cut:]
                _no_entities(piece, name, path)
                yield piece
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as e:
        raise InputError(f"{path.name}: part {name} cannot be read ({e}); the file is damaged or truncated") from None
    except (RuntimeError, NotImplementedError) as e:  # an encrypted part, a compression zipfile does not read
        raise InputError(f"{path.name}: part {name} cannot be read ({e}); open the file and save it again "
                         "without a password") from None
    _no_entities(tail, name, path)
    yield tail


def _no_entities(piece: bytes, name: str, path: Path) -> None:
    if _ENTITY in piece:
        raise InputError(f"{path.name}: part {name} declares XML entities, which ragfunnel does not expand "
                         "(entity expansion attacks); remove the declarations or export the file again")


def _other_parts(archive: zipfile.ZipFile, path: Path, measured: Iterable[str]) -> None:
    """Every XML part not measured, refused if it declares entities."""
    skip = set(measured)
    for name in archive.namelist():
        if name not in skip and name.endswith((".xml", ".rels")):
            for _ in _pieces(archive, name, path):
                pass


@dataclass(frozen=True)
class _Sizes:
    """Each sheet's rectangle as calamine will hold it (rows, columns), by name; a sheet not found there is
    bounded by the largest."""

    by_sheet: dict[str, tuple[int, int]]

    def of(self, sheet: str) -> tuple[int, int]:
        return self.by_sheet.get(sheet) or max(self.by_sheet.values(), key=lambda s: s[0] * s[1], default=(0, 0))


def _xlsx_sizes(archive: zipfile.ZipFile, path: Path) -> _Sizes:
    """Each sheet's rectangle in cells (from its first row and column with a value to its last, as calamine will
    hold it); every part checked for entity declarations on the way."""
    parts = {name: _xlsx_rectangle(archive, name, path) for name in archive.namelist()
             if re.fullmatch(r"xl/(?:worksheets|macrosheets|dialogsheets)/[^/]+\.xml", name)}
    _other_parts(archive, path, parts)
    named = {sheet: parts[part] for sheet, part in _xlsx_sheet_parts(archive, path).items() if part in parts}
    return _Sizes(named if len(named) == len(parts) else {**named, "": max(parts.values(), key=lambda s: s[0] * s[1])})


def _xlsx_rectangle(archive: zipfile.ZipFile, name: str, path: Path) -> tuple[int, int]:
    """The rows and columns of the rectangle from a sheet's first cell with a value to its last (rows without
    cells, which LibreOffice writes down to row 1,048,576, hold none). A cell written without its place (``r``)
    takes the next one in its row, in its row's place or the next, so it is bounded by those."""
    top = left = 1 << 30
    bottom = right = unplaced_cells = unplaced_rows = last_row = 0
    patterns = None
    for piece in _pieces(archive, name, path):
        if patterns is None:  # the worksheet's namespace prefix, if it has one ("<x:c r=...>")
            root = _SHEET_ROOT.search(piece)
            patterns = _XlsxPatterns.of(root.group(1) or b"" if root else b"")
        columns, rows, unplaced = patterns.cells(piece)
        unplaced_cells += unplaced
        row_numbers = patterns.row_at.findall(piece)
        unplaced_rows += patterns.rows(piece) - len(row_numbers)
        if row_numbers:
            last_row = max(last_row, max(map(int, row_numbers)))
        if columns:
            top, bottom = min(top, min(rows)), max(bottom, max(rows))
            numbers = [_column(c) for c in columns]
            left, right = min(left, min(numbers)), max(right, max(numbers))
    if unplaced_cells:  # they may start at A1, and run past the last row and column given
        top, left = 1, 1
        bottom, right = max(bottom, last_row + unplaced_rows, 1), max(right, 1) + unplaced_cells
    return (bottom - top + 1, right - left + 1) if right else (0, 0)


_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_SHEET_ROOT = re.compile(rb"<(\w+:)?(?:worksheet|dialogsheet|macrosheet)[\s>]")


@dataclass(frozen=True)
class _XlsxPatterns:
    """How a sheet's cells and rows are found, for one namespace prefix. Writers put a cell's place first
    (``<c r="B7" ...>``), which is found fast; a piece with a cell that does not is read again the slow way."""

    cell: bytes  # "<c"
    row: bytes
    placed_first: re.Pattern  # a cell with a value (not "<c .../>"), its place first
    placed: re.Pattern  # the same, its place anywhere
    any_placed: re.Pattern  # any cell with a place, "<c .../>" too
    row_at: re.Pattern

    @classmethod
    @functools.cache
    def of(cls, prefix: bytes) -> _XlsxPatterns:
        cell, row = b"<" + re.escape(prefix) + b"c", b"<" + re.escape(prefix) + b"row"
        place = rb"r=\"([A-Z]{1,3})([0-9]{1,7})\""
        return cls(b"<" + prefix + b"c", b"<" + prefix + b"row",
                   re.compile(cell + rb" " + place + rb"[^>]*(?<!/)>"),
                   re.compile(cell + rb"\s[^>]*?\b" + place + rb"[^>]*(?<!/)>"),
                   re.compile(cell + rb"\s[^>]*?\b" + place),
                   re.compile(row + rb"\s[^>]*?\br=\"([0-9]{1,7})\""))

    def cells(self, piece: bytes) -> tuple[set[bytes], list[int], int]:
        """The columns and rows of a piece's cells with a value, and how many cells it writes without a place."""
        opened = piece.count(self.cell + b" ") + piece.count(self.cell + b">")
        if opened == piece.count(self.cell + b' r="'):
            found, unplaced = self.placed_first.findall(piece), 0
        else:
            found, unplaced = self.placed.findall(piece), opened - len(self.any_placed.findall(piece))
        return set(map(_FIRST, found)), list(map(int, map(_SECOND, found))), unplaced

    def rows(self, piece: bytes) -> int:
        return piece.count(self.row + b" ") + piece.count(self.row + b">") + piece.count(self.row + b"/>")


def _column(letters: bytes) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + letter - 64
    return number


def _xlsx_sheet_parts(archive: zipfile.ZipFile, path: Path) -> dict[str, str]:
    """Each sheet's name and the part that holds its cells, as the workbook and its relationships say."""
    try:
        workbook = ElementTree.fromstring(read_xml_part(archive, "xl/workbook.xml", path))
        rels = ElementTree.fromstring(read_xml_part(archive, "xl/_rels/workbook.xml.rels", path))
    except (ElementTree.ParseError, InputError):
        return {}
    targets = {r.get("Id"): r.get("Target", "") for r in rels.iter() if r.tag.endswith("Relationship")}
    parts = {}
    for sheet in workbook.iter():
        if not sheet.tag.endswith("}sheet"):
            continue
        rid = next((v for k, v in sheet.attrib.items() if k.endswith("}id")), None)
        target = targets.get(rid, "")
        part = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join("xl", target))
        parts[sheet.get("name", "")] = part
    return parts


# An .ods file's tables, rows, cells and runs of spaces, with their attributes.
_ODS_TAG = re.compile(rb"<(/?)(table:table-row|table:table-cell|table:covered-table-cell|table:table|text:s)"
                      rb"(?=[\s/>])([^>]*)>")
_REPEAT = re.compile(rb"table:number-(?:rows|columns)-repeated=\"([0-9]+)\"")
_SPACES = re.compile(rb"text:c=\"([0-9]+)\"")
_NAME = re.compile(rb"table:name=\"([^\"]*)\"")
_VALUE = re.compile(rb"office:(?:value|string-value|date-value|time-value|boolean-value)=|table:formula="
                    rb"|office:value-type=\"string\"")


@dataclass
class _OdsTable:
    """What calamine will hold of one table: the cells it reads row by row (runs of empty cells before a value
    included), and the rectangle it keeps, repeated rows repeated."""

    name: str
    read: int = 0
    rows: int = 0  # rows so far, repeats counted
    top: int | None = None  # rows before its first row with a value
    bottom: int = 0  # rows up to its last row with a value
    left: int = 1 << 62
    right: int = -1

    @property
    def shape(self) -> tuple[int, int]:
        """The rectangle's rows and columns."""
        return (self.bottom - self.top, self.right - self.left + 1) if self.top is not None else (0, 0)

    @property
    def held(self) -> int:
        """The cells calamine holds for it at once: those read, and the rectangle kept of them."""
        rows, columns = self.shape
        return self.read + rows * columns


def _ods_sizes(archive: zipfile.ZipFile, path: Path, limits: ReadLimits) -> _Sizes:
    """Each table's rectangle as calamine will hold it; refused when all tables together (calamine reads them all
    when it opens the file), with their runs of spaces, would take more than ``max_unzipped_mb``."""
    tables: list[_OdsTable] = []
    table: _OdsTable | None = None
    column = pending = repeats = spaces = 0
    first = last = None
    for piece in _pieces(archive, "content.xml", path):
        for closing, tag, attributes in _ODS_TAG.findall(piece):
            if tag == b"text:s":
                spaces += int(m.group(1)) if (m := _SPACES.search(attributes)) else 1
            elif tag == b"table:table":
                if closing:
                    table = None
                elif not attributes.endswith(b"/"):
                    name = m.group(1).decode(errors="replace") if (m := _NAME.search(attributes)) else ""
                    table = _OdsTable(name)
                    tables.append(table)
            elif table is None:
                continue
            elif tag == b"table:table-row":
                if not closing:
                    repeats = int(m.group(1)) if (m := _REPEAT.search(attributes)) else 1
                    column = pending = 0
                    first = last = None
                if closing or attributes.endswith(b"/"):
                    table.read += column
                    if first is not None:
                        table.top = table.rows if table.top is None else table.top
                        table.bottom = table.rows + repeats
                        table.left, table.right = min(table.left, first), max(table.right, last)
                    table.rows += repeats
            elif not closing:  # a cell: empty ones are held only when a cell after them in the row is read
                count = int(m.group(1)) if (m := _REPEAT.search(attributes)) else 1
                column += pending
                pending = 0
                if _VALUE.search(attributes):
                    first = column if first is None else first
                    column += count
                    last = column - 1
                else:
                    pending = count
    held = sum(t.held for t in tables)
    if held * ODS_CELL_BYTES + spaces > limits.max_unzipped_mb * MB:
        largest = max(tables, key=lambda t: t.held)
        raise InputError(f"{path.name}'s sheets would take {(held * ODS_CELL_BYTES + spaces) / MB:,.0f} MB to hold "
                         f"({held:,} cells, empty ones within their rectangles included; sheet {largest.name}: "
                         f"{largest.held:,}), over the {limits.max_unzipped_mb:g} MB limit (a bomb?); an ODS file is "
                         f"read whole; raise it with {option('max_unzipped_mb')}")
    _other_parts(archive, path, ["content.xml"])
    return _Sizes({t.name: t.shape for t in tables})
