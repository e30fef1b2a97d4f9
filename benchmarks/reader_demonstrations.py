"""Demonstrations for the reader (issue 42, item 4): OP-RAG's strong model with and without three short solved
examples in front of the passages, paired question by question in one process.

The first ``N`` questions of each multi-hop setting of ``benchmarks/confidence.py`` (train questions hidden among
their corpus' passages until the context holds 2,000 words). For each, OP-RAG's chunks (the shared ranking,
1,500 tokens, document order) are read twice by the bundled 1.5B, greedy: once with the default path's prompt,
once with the same prompt after a short lead-in and the three worked examples of ``prompts/reader_shots.py``
(invented people and places: a bridge question answered at its last hop, a comparison, a one-step question), each
as passages, question and answer. One row per question goes to ``OUT`` (JSONL, resumable): both answers, token
F1 of each, both generate calls' seconds and prompt tokens.

    .venv/bin/python benchmarks/reader_demonstrations.py 8 benchmarks/results/reader_demonstrations/rows.jsonl \
        musique,hotpotqa
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from confidence import _runs
from ragfunnel.eval.runner import score
from ragfunnel.llm import DEFAULT_STRONG, resolve
from ragfunnel.llm.registry import set_disk_caches
from ragfunnel.methods.base import join_chunks, prepare, retrieve_by_query
from ragfunnel.prompts import build_prompt
from ragfunnel.prompts.parsing import clean_answer
from ragfunnel.prompts.reader_shots import READER_SHOTS
from ragfunnel.types import SamplingParams


def shots() -> str:
    out = ["Three solved examples show how to answer: when the question describes something instead of naming it, "
           "find what it is first, and answer the question's last step, not the first."]
    for s in READER_SHOTS:
        docs = "\n".join(d.text for d in s.documents)
        out.append(f"Passages:\n{docs}\nQuestion: {s.question}\nAnswer: {s.answer}")
    return "\n\n".join(out) + "\n\nNow the real task.\n\n"


def main() -> None:
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    set_disk_caches(False)
    n, out, settings = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(",")
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {json.loads(line)["id"] for line in out.open()} if out.exists() else set()
    llm = resolve(DEFAULT_STRONG)
    demo = shots()
    for name, examples, task, _profile, _config in _runs(settings, n, 2000):
        for e in examples:
            if e.id in done:
                continue
            q, chunks = prepare(e.question, e.context, words=100)
            kept = retrieve_by_query(q, chunks, budget=1500, llm=llm).kept
            plain = build_prompt(task, "plain", question=q, context=join_chunks([sc.chunk for sc in kept]))
            began = time.perf_counter()
            a = llm.generate([plain], SamplingParams(max_tokens=32, temperature=0.0))[0][0]
            ta, began = time.perf_counter() - began, time.perf_counter()
            b = llm.generate([demo + plain], SamplingParams(max_tokens=32, temperature=0.0))[0][0]
            tb = time.perf_counter() - began
            pa, pb = clean_answer(a.text), clean_answer(b.text)
            row = {"id": e.id, "setting": name, "q": q, "refs": e.answers, "plain": pa, "demos": pb,
                   "f1_plain": score(e, pa)["f1"], "f1_demos": score(e, pb)["f1"], "t_plain": ta, "t_demos": tb,
                   "prompt_tokens": [a.prompt_tokens, b.prompt_tokens]}
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(name, round(row["f1_plain"], 2), round(row["f1_demos"], 2), round(ta, 1), round(tb, 1), "|", pa,
                  "|", pb, flush=True)


if __name__ == "__main__":
    main()
