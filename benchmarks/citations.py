"""Do citations point at passages that state the answer? Measured on the right answers of eval runs.

For every right answer (token F1 >= 0.5, LongBench's own score >= 0.5) of a run written by
``benchmarks/confidence.py``, the chunks the method read are cited again from the question's context, as
``ask`` and ``serve`` cite them (:func:`ragfunnel.documents.cite`), and compared with citing every chunk read
(each by its best sentence, whether or not it states the answer, even an answer that repeats the question:
the baseline):

- precision: the share of citations whose quote holds a reference answer (normalised, as ``answer_rank`` finds it);
- recall: the share of right answers with at least one such citation;
- "no passage read states this answer": right answers left without a citation.

Only short answers are scored (a reference of more than five words is seldom quoted word for word, and no
quote holds "yes" or "no").

    .venv/bin/python benchmarks/citations.py --run benchmarks/results/default_path
    .venv/bin/python benchmarks/citations.py --run benchmarks/results/confidence --chunk-words 300
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path
from unittest import mock

import ragfunnel.documents.citations as citations
from confidence import _runs, load_rows
from ragfunnel.confidence.measures import is_right
from ragfunnel.documents import LocatedContext, cite
from ragfunnel.metrics import normalize_answer
from ragfunnel.text import chunk_words
from ragfunnel.text.chunking import count_words
from ragfunnel.types import Chunk, Prediction, ScoredChunk, Trace

SHORT_ANSWER_WORDS = 5


def holds_reference(quote: str, references: list[str]) -> bool:
    text = f" {normalize_answer(quote)} "
    return any(f" {r} " in text for r in map(normalize_answer, references) if r)


def measure(run: Path, *, chunk_size: int, context_words: int, debug: bool = False) -> dict:
    rows = [(s, r) for s, r in load_rows(run) if is_right(r.metrics)]
    settings = sorted({"longbench" if s.startswith("longbench") else s for s, _ in rows})
    examples = {(name, e.id): e for name, found, *_ in _runs(settings, 1000, context_words) for e in found}
    counts = {mode: {"answers": 0, "cited": 0, "citations": 0, "stating": 0, "with_stating": 0}
              for mode in ("stating_only", "every_chunk")}
    for setting, row in rows:
        example = examples.get((setting, row.example_id))
        if (example is None or not example.context or max(len(a.split()) for a in example.answers) > SHORT_ANSWER_WORDS
                or normalize_answer(row.answer) in ("yes", "no")):  # no quote holds "yes": nothing to measure
            continue
        if row.method == "lc":  # read the context whole, as one chunk
            used = [ScoredChunk(Chunk("context", example.context, "context", 0, count_words(example.context), 0), 1.0)]
        else:
            chunks = chunk_words(example.context, chunk_words=chunk_size)
            used = [ScoredChunk(chunks[c["position"]], c["score"]) for c in row.chunks_used
                    if c["position"] < len(chunks)]
        prediction = Prediction(answer=row.answer, method=row.method, chunks_used=used, trace=Trace())
        context = LocatedContext.of_text(example.context)
        for mode in counts:
            if mode == "every_chunk":
                with mock.patch.object(citations.Asked, "stated_by", lambda *a, **k: True):
                    found = cite(prediction, context, example.question)
            else:
                found = cite(prediction, context, example.question)
            stating = sum(holds_reference(c.quote, example.answers) for c in found)
            c = counts[mode]
            c["answers"] += 1
            c["cited"] += bool(found)
            c["citations"] += len(found)
            c["stating"] += stating
            c["with_stating"] += stating > 0
            if mode == "stating_only" and stating < len(found) and debug:
                print(f"--- {row.method} {example.answers} answer={row.answer!r}: "
                      f"{[cc.quote[:150] for cc in found if not holds_reference(cc.quote, example.answers)]}")
    return {mode: {**c, "precision": round(c["stating"] / c["citations"], 3) if c["citations"] else None,
                   "recall": round(c["with_stating"] / c["answers"], 3) if c["answers"] else None,
                   "left_uncited": c["answers"] - c["cited"]}
            for mode, c in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=Path("benchmarks/results/default_path"))
    parser.add_argument("--chunk-words", type=int, default=None, help="the run's chunk size [default: the method's]")
    parser.add_argument("--context-words", type=int, default=2000)
    parser.add_argument("--show-misses", action="store_true", help="print the right answers no quote states")
    args = parser.parse_args()
    from ragfunnel.text.chunking import CHUNK_WORDS

    result = {"date": str(date.today()), "run": str(args.run),
              **measure(args.run, chunk_size=args.chunk_words or CHUNK_WORDS, context_words=args.context_words,
                        debug=args.show_misses)}
    (args.run / "citations.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
