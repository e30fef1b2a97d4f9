"""python-calamine against openpyxl for reading whole workbooks, side by side in one run: every cell's value of
every sheet, formulas as their cached values (calamine's only way; openpyxl with ``read_only=True,
data_only=True``), over real public workbooks made by Excel and LibreOffice (found inside PyPI packages, see
/work/data_ext/spreadsheets/PROVENANCE.md), two real CSVs written as .xlsx, and a generated workbook of 200,000
cells (20,000 rows of 10 columns: text, whole numbers, decimals, dates). Also ragfunnel's whole reader
(``read_document``: the zip checks, each sheet's rectangle measured from its XML, calamine, the rows laid out),
and the peak memory of each reading the generated workbook, each in a process of its own.

    nice -n 19 .venv/bin/python benchmarks/spreadsheet_readers.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import openpyxl
import python_calamine

from ragfunnel import __version__
from ragfunnel.documents import read_document
from ragfunnel.documents.limits import ReadLimits, open_zip
from ragfunnel.documents.sheets import _xlsx_sizes
from ragfunnel.llm.registry import set_disk_caches

DATA = Path("/work/data_ext/spreadsheets")
REAL = ["xlsx/use_case_01.xlsm", "xlsx/xlsx2csv-test-file.xlsx", "xlsx/cross_sheet.xlsx", "xlsx/sheets.xlsx",
        "converted/seattle-weather.xlsx", "converted/airports.xlsx"]
GENERATED_ROWS, GENERATED_COLUMNS = 20_000, 10
WORDS = ("harbour ferry tide gull rock lighthouse keeper timetable north south east west quay pier buoy "
         "channel beacon dock").split()


def generated(path: Path, *, seed: int = 45) -> Path:
    """A workbook of GENERATED_ROWS rows under a header, written by openpyxl (write-only)."""
    rng = random.Random(seed)
    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet("Data")
    sheet.append([f"column {i + 1}" for i in range(GENERATED_COLUMNS)])
    start = datetime.date(2020, 1, 1)
    for i in range(GENERATED_ROWS - 1):
        sheet.append([f"item {i}", rng.randint(0, 10_000), round(rng.uniform(-100, 100), 2),
                      start + datetime.timedelta(days=i % 2000), " ".join(rng.sample(WORDS, 3)),
                      rng.randint(0, 1_000_000), rng.random(), rng.choice(WORDS), i, round(rng.gauss(0, 1), 4)])
    book.save(path)
    return path


def by_calamine(path: Path) -> int:
    """Every cell's value of every sheet; the cells holding a value."""
    filled = 0
    with python_calamine.CalamineWorkbook.from_path(str(path)) as book:
        for index in range(len(book.sheet_names)):
            for row in book.get_sheet_by_index(index).iter_rows():
                filled += sum(1 for v in row if v != "")
    return filled


def by_openpyxl(path: Path) -> int:
    filled = 0
    book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        for sheet in book.worksheets:
            for row in sheet.iter_rows(values_only=True):
                filled += sum(1 for v in row if v is not None and v != "")
    finally:
        book.close()
    return filled


def by_ragfunnel(path: Path) -> int:
    set_disk_caches(False)  # read each time, not found in the document cache
    return len(read_document(path).sections)


def measured_only(path: Path) -> int:
    """The part of ragfunnel's reader that runs before calamine: every sheet's rectangle measured from its XML."""
    with open_zip(path, ReadLimits(), kind="spreadsheet") as archive:
        return sum(rows * columns for rows, columns in _xlsx_sizes(archive, path).by_sheet.values())


READERS = {"calamine": by_calamine, "openpyxl": by_openpyxl, "ragfunnel_read_document": by_ragfunnel,
           "ragfunnel_rectangles_only": measured_only}

PEAK = """
import json, sys
sys.path.insert(0, sys.argv[3])
import spreadsheet_readers as bench


def high_water_kb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


with open("/proc/self/clear_refs", "w") as refs:  # the peak so far (imports) forgotten: from here on
    refs.write("5")
idle = high_water_kb()
bench.READERS[sys.argv[1]](bench.Path(sys.argv[2]))
print(json.dumps((high_water_kb() - idle) / 1024))
"""


def peak_mb(reader: str, path: Path) -> float:
    """The peak resident memory a reader adds reading ``path``, in a process of its own (MB; Linux)."""
    done = subprocess.run([sys.executable, "-c", PEAK, reader, str(path), str(Path(__file__).parent)],
                          capture_output=True, text=True, check=True, timeout=600)
    return round(json.loads(done.stdout), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="readings of each file by each reader")
    parser.add_argument("--data", type=Path, default=DATA, help="the folder of real spreadsheets")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = [args.data / name for name in REAL if (args.data / name).exists()]
        if len(files) < len(REAL):
            print(f"only {len(files)} of the {len(REAL)} real workbooks are under {args.data}")
        files.append(generated(Path(tmp) / "generated-200k-cells.xlsx"))
        seconds: dict[str, dict[str, list[float]]] = {r: {f.name: [] for f in files} for r in READERS}
        cells: dict[str, dict[str, int]] = {r: {} for r in READERS}
        for f in files:
            for name, read in READERS.items():  # warm: imports, the page cache
                cells[name][f.name] = read(f)
        for i in range(args.rounds):
            for name in (list(READERS) if i % 2 == 0 else list(reversed(READERS))):
                for f in files:
                    started = time.perf_counter()
                    READERS[name](f)
                    seconds[name][f.name].append(time.perf_counter() - started)
        big = files[-1]
        memory = {name: peak_mb(name, big) for name in ("calamine", "openpyxl", "ragfunnel_read_document")}
        rows = [{"file": f.name, "bytes": f.stat().st_size, "cells_with_a_value": cells["calamine"][f.name],
                 "openpyxl_cells_with_a_value": cells["openpyxl"][f.name],
                 **{f"{name}_median_ms": round(1000 * statistics.median(seconds[name][f.name]), 2) for name in READERS},
                 "openpyxl_over_calamine": round(statistics.median(seconds["openpyxl"][f.name])
                                                 / statistics.median(seconds["calamine"][f.name]), 2)}
                for f in files]
    summary = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, "
               f"{platform.python_version()}", "ragfunnel": __version__, "rounds": args.rounds,
               "libraries": {name: version(name) for name in ("python-calamine", "openpyxl")},
               "files": rows, "generated_workbook_peak_mb": memory}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spreadsheet_readers.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{'file':34s} {'cells':>8s} {'calamine':>10s} {'openpyxl':>10s} {'ratio':>6s} {'ragfunnel':>10s} "
          f"{'rectangles':>10s}")
    for r in rows:
        print(f"{r['file']:34s} {r['cells_with_a_value']:8,d} {r['calamine_median_ms']:8.1f}ms "
              f"{r['openpyxl_median_ms']:8.1f}ms {r['openpyxl_over_calamine']:6.1f} "
              f"{r['ragfunnel_read_document_median_ms']:8.1f}ms {r['ragfunnel_rectangles_only_median_ms']:8.1f}ms")
    print("peak MB reading the generated workbook:", memory)


if __name__ == "__main__":
    main()
