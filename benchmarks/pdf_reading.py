"""What reading a PDF in a limited child process costs: `read_document` (stream check, then pdfium in a child
under an address-space and time limit) against pypdfium2 called in this process with no check or limit, side
by side in one run over the real PDFs of ../shared/data/documents_real/pdf.

    .venv/bin/python benchmarks/pdf_reading.py --out benchmarks/results/pdf_reading
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import date
from pathlib import Path

import pypdfium2 as pdfium

from ragfunnel import __version__
from ragfunnel.documents import read_document
from ragfunnel.errors import InputError

PDFS = Path(__file__).resolve().parents[2] / "shared" / "data" / "documents_real" / "pdf"


def in_process(path: Path) -> None:
    """The pages' text by pypdfium2 in this process: the old reader's work, without its limits."""
    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError:
        return  # encrypted or broken: the old reader stopped here too (or went on to pdfminer)
    try:
        for index in range(len(pdf)):
            pdf[index].get_textpage().get_text_range()
    finally:
        pdf.close()


def limited(path: Path) -> None:
    try:
        read_document(path)
    except InputError:
        pass  # the encrypted file: refused, as it should be


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/pdf_reading"))
    args = parser.parse_args()
    files = sorted(PDFS.glob("*.pdf"))
    if not files:
        parser.error(f"no PDFs under {PDFS}")
    readers = {"in_process": in_process, "child_process": limited}
    for read in readers.values():  # warm: imports, the page cache
        for f in files:
            read(f)
    ms: dict[str, dict[str, list[float]]] = {name: {f.name: [] for f in files} for name in readers}
    for i in range(args.rounds):
        for name in (list(readers) if i % 2 == 0 else list(reversed(readers))):
            for f in files:
                started = time.perf_counter()
                readers[name](f)
                ms[name][f.name].append(1000 * (time.perf_counter() - started))
    medians = {name: {f: statistics.median(t) for f, t in per.items()} for name, per in ms.items()}
    means = {name: statistics.fmean(m.values()) for name, m in medians.items()}
    summary = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {platform.python_version()}",
               "ragfunnel": __version__, "rounds": args.rounds, "median_ms_per_file": medians,
               "mean_of_medians_ms": means,
               "added_ms_per_file": round(means["child_process"] - means["in_process"], 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pdf_reading.json").write_text(json.dumps(summary, indent=2))
    for f in files:
        print(f"{f.name:36s} {medians['in_process'][f.name]:7.1f} ms  {medians['child_process'][f.name]:7.1f} ms")
    print(f"mean: in process {means['in_process']:.1f} ms, child process {means['child_process']:.1f} ms "
          f"(+{summary['added_ms_per_file']} ms a file)")


if __name__ == "__main__":
    main()
