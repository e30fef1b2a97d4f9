"""Questions over real public spreadsheets: is the answer right, and does its first citation name the row (and
sheet) that holds it?

The sheets are real data sets (vega_datasets 0.9.0 on PyPI: NOAA's Seattle weather, 1,461 rows; ourairports.com's
U.S. airports, 3,376 rows; monthly stock prices, 560 rows), as workbooks (``converted/*.xlsx``: one sheet, header in
row 1) and as CSV, in ``/work/data_ext/spreadsheets/`` (see its PROVENANCE.md; fetched from PyPI). Each question is
written from one row chosen at random (seeded) by a template that names what identifies the row and asks for one of
its cells, so its answer is known and lies in exactly that row:

- weather: "What was the maximum temperature (temp_max) in Seattle on 2013-07-15?" (the date is unique);
- airports: "In which city is the airport named Thigpen?" (names repeated in the sheet, and names holding their
  city's, are not chosen);
- stocks: "What was the price of AAPL in Mar 1 2004?" (symbol and date unique together).

A hit is an answer holding the cell's value (numbers compared as numbers); a cited row is a first citation whose
sheet and row are that row's. ``ragfunnel.answer(question, files=[sheet])`` with the default models and method,
disk caches off.

    .venv/bin/python benchmarks/spreadsheet_questions.py --per-sheet 6 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import time
from collections import Counter
from datetime import date
from pathlib import Path

from ragfunnel import answer
from ragfunnel.llm.registry import set_disk_caches

DATA = Path("/work/data_ext/spreadsheets")
SHEETS = {  # file, sheet name (None for CSV), its CSV (the same rows), a template
    "weather": (DATA / "converted" / "seattle-weather.xlsx", "Seattle", DATA / "csv" / "seattle-weather.csv"),
    "airports": (DATA / "converted" / "airports.xlsx", "Airports", DATA / "csv" / "airports.csv"),
    "stocks": (DATA / "csv" / "stocks.csv", None, DATA / "csv" / "stocks.csv"),
}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def questions(kind: str, rows: list[dict[str, str]], rng: random.Random, n: int) -> list[dict]:
    """``n`` questions about rows of one sheet: (question, answer value, the row's number in the sheet)."""
    if kind == "airports":
        names = Counter(r["name"] for r in rows)
        # a city named in the airport's name would be an echo of the question, which nothing cites
        usable = [(i, r) for i, r in enumerate(rows)
                  if names[r["name"]] == 1 and r["city"] and r["city"].lower() not in r["name"].lower()]
    else:
        usable = list(enumerate(rows))
    made = []
    for i, row in rng.sample(usable, n):
        if kind == "weather":
            day = row["date"].replace("/", "-")  # as the workbook holds it: a date, which the reader writes in ISO
            q, a = f"What was the maximum temperature (temp_max) in Seattle on {day}?", row["temp_max"]
        elif kind == "airports":
            q, a = f"In which city is the airport named {row['name']}?", row["city"]
        else:
            q, a = f"What was the price of {row['symbol']} in {row['date']}?", row["price"]
        made.append({"question": q, "answer": a, "row": i + 2})  # the header is row 1
    return made


def holds(said: str, expected: str) -> bool:
    if _NUMBER.fullmatch(expected):
        return any(abs(float(x) - float(expected)) < 1e-6 for x in _NUMBER.findall(said.replace(",", "")))
    return expected.lower() in said.lower()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-sheet", type=int, default=6, help="questions per sheet")
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    if not DATA.exists():
        raise SystemExit(f"error: {DATA} is missing; fetch the spreadsheets as its PROVENANCE.md says")
    set_disk_caches(False)
    rng = random.Random(args.seed)
    results = []
    for kind, (path, sheet, table) in SHEETS.items():
        with table.open(newline="") as f:
            rows = list(csv.DictReader(f))
        for item in questions(kind, rows, rng, args.per_sheet):
            started = time.perf_counter()
            prediction = answer(item["question"], files=[path])
            first = prediction.citations[0] if prediction.citations else None
            result = {"sheet": kind, **item, "said": prediction.answer, "method": prediction.method,
                      "seconds": round(time.perf_counter() - started, 1),
                      "right": holds(prediction.answer, item["answer"]),
                      "first_citation": first.label() if first else None,
                      "cited_row": bool(first and first.row == item["row"] and first.sheet == sheet),
                      "row_among_chunks_read": any(
                          f"{item['answer']}" in sc.chunk.text for sc in prediction.chunks_used)}
            results.append(result)
            print(json.dumps(result, ensure_ascii=False), flush=True)
    summary = {"date": date.today().isoformat(), "questions": len(results),
               "right": sum(r["right"] for r in results), "cited_row": sum(r["cited_row"] for r in results),
               "cited_row_of_right": sum(r["cited_row"] for r in results if r["right"]),
               "per_sheet": {kind: {"questions": sum(r["sheet"] == kind for r in results),
                                    "right": sum(r["right"] for r in results if r["sheet"] == kind),
                                    "cited_row": sum(r["cited_row"] for r in results if r["sheet"] == kind)}
                             for kind in SHEETS},
               "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spreadsheet_questions.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    print(json.dumps({k: v for k, v in summary.items() if k != "results"}, indent=1))


if __name__ == "__main__":
    main()
