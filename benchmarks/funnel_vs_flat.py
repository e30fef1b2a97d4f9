"""FunnelRAG's progressive retrieval against flat retrieval on the shared corpora (the paper's Table 2 analog).

For each dataset (HotpotQA and MuSiQue train questions with their pooled corpora) the script
builds an index with flat passages and stored document vectors (so the bi-encoder pre-ranker
looks documents up, as ``ragfunnel index --embed-documents`` sets it up for users), distils a
cross-encoder pre-ranker from the attention post-ranker on training questions, then, on held-out
test questions, times every retrieval
configuration stage by stage and measures answer recall AR@1..4 (an answer string in the top K
units; units are clusters "c", documents "d" or 100-word passages "p"):

    flat 4p                dense MiniLM exact search -> 4 passages
    flat 16p->4p           dense -> 16 passages -> generator attention -> 4
    prog 4c                BM25 over clusters -> 4 clusters
    prog Kc->4d            BM25 -> K clusters -> MiniLM bi-encoder pre-ranking -> 4 documents
    prog Kc->8d->4p        ... -> 8 documents -> passages -> generator attention -> 4 passages
    (+ distilled)          the same two with the distilled cross-encoder as pre-ranker

and the strong model's EM/F1 answering from flat 4p and from the full funnel (before/after
distillation) on the first ``--generate`` test questions. Rows go to
``OUT/<dataset>/rows.jsonl`` as each question finishes (re-running resumes); the summary to
``OUT/funnel_vs_flat.json`` and ``OUT/funnel_vs_flat.md``. Yes/no questions are left out:
their answer string says nothing about retrieval.

At a few thousand passages both pipelines' time is the query embedding; the flat baseline's
exact search only starts to cost at scale. ``--filler N`` measures that in the same run: the
dataset's corpus is padded with N synthetic documents of ``index_scale.py`` (pseudo-word texts,
hyperlinked among themselves) whose passage and document vectors are random unit vectors, since
MiniLM would take hours over a million texts on two cores and exact search costs the same
whatever the vectors hold. The real documents' title mentions are written as links (the graph
mode of a corpus with links), so they cluster as they do alone. Work and results go to
``<dataset>+filler<N>/`` and ``funnel_vs_flat+filler<N>.{json,md}``.

    .venv/bin/python benchmarks/funnel_vs_flat.py --test 40 --train 60 --generate 20
    .venv/bin/python benchmarks/funnel_vs_flat.py --datasets hotpotqa --filler 1000000 --generate 0
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from contextlib import contextmanager
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

import ragfunnel.corpus.index_build as index_build
from index_scale import synthetic_corpus
from ragfunnel.corpus import load_corpus
from ragfunnel.corpus.distill import LABELS_FILE, collect_labels, train_pre_ranker
from ragfunnel.corpus.funnel import FunnelRetriever
from ragfunnel.corpus.graph import relation_graph
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.index_manifest import MANIFEST, IndexConfig
from ragfunnel.eval.datasets import load_dataset
from ragfunnel.eval.runner import score
from ragfunnel.journal import read_rows
from ragfunnel.llm import DEFAULT_STRONG, resolve
from ragfunnel.methods.base import generate_answer
from ragfunnel.metrics import answer_recall_at_k
from ragfunnel.retrieve.attention import load_post_ranker
from ragfunnel.retrieve.embed import MiniLMEmbedder, minilm_directory
from ragfunnel.retrieve.fusion import best_k
from ragfunnel.retrieve.rerank import BiEncoderPreRanker, load_pre_ranker
from ragfunnel.text import word_windows
from ragfunnel.types import Chunk, Document, Example, Stage, stage

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DATASETS = {
    "hotpotqa": (DATA / "hotpotqa_train_hipporag" / "hotpotqa_train.json",
                 DATA / "hotpotqa_train_hipporag" / "hotpotqa_train_corpus.json"),
    "musique": (DATA / "musique_train_hipporag" / "musique_train.json",
                DATA / "musique_train_hipporag" / "musique_train_corpus.json"),
}
KS = (1, 2, 3, 4)
FLAT_CANDIDATES = 16  # passages the flat baseline hands the attention re-ranker (about what the funnel post-ranks)


def padded(real: list[Document], filler: int, seed: int = 0) -> list[Document]:
    """``real`` with its title mentions written as links, then ``filler`` synthetic documents."""
    graph = relation_graph(real)
    linked = [replace(d, links=tuple(real[int(j)].title for j in graph.neighbors(i))) for i, d in enumerate(real)]
    return linked + [replace(d, id=f"filler-{d.id}") for d in synthetic_corpus(filler, seed)]


@contextmanager
def random_vectors_after(real: list[Document], passage_words: int, seed: int = 0):
    """While building an index of ``padded(real, ...)``: MiniLM embeds the real documents and their
    passages (they come first), every synthetic one gets a random unit vector."""
    real_texts = {"embed documents": len(real),
                  "embed passages": sum(len(word_windows(d.text, passage_words)) for d in real)}
    embed = index_build._embed
    rng = np.random.default_rng(seed)

    def embed_real_only(texts: list[str], desc: str, step: int = 256, **options) -> np.ndarray:
        n = real_texts[desc]
        vectors = np.empty((len(texts), MiniLMEmbedder.dim), dtype=np.float32)
        vectors[:n] = embed(texts[:n], desc, step, **options)
        for start in range(n, len(texts), 100_000):
            block = rng.standard_normal((min(100_000, len(texts) - start), MiniLMEmbedder.dim), dtype=np.float32)
            vectors[start:start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
        return vectors

    index_build._embed = embed_real_only
    try:
        yield
    finally:
        index_build._embed = embed


def recall(texts: list[str], answers: list[str]) -> dict[str, float]:
    return {f"AR@{k}": answer_recall_at_k(texts, answers, k) for k in KS}


def timed(fn, *args):
    started = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - started


class Bench:
    def __init__(self, index: CorpusIndex, post_ranker, distilled, top_clusters: int | None):
        self.index = index
        self.post = post_ranker
        self.funnels = {
            "": FunnelRetriever(index, pre_ranker=BiEncoderPreRanker(stored=index.document_vectors),
                                post_ranker=post_ranker,
                                top_clusters=top_clusters),
            " (distilled)": FunnelRetriever(index, pre_ranker=distilled, post_ranker=post_ranker,
                                            top_clusters=top_clusters),
        }

    def question(self, e: Example) -> dict:
        q, answers, row = e.question, e.answers, {}
        (best, _), t_dense = timed(self.index.flat_search, q, FLAT_CANDIDATES)
        flat = [self.index.passage(int(p)) for p in best]
        flat_texts = [f"{d.title}\n{t}" for d, t in flat]
        row["flat 4p"] = {"seconds": [t_dense], **recall(flat_texts[:4], answers), "passages": flat_texts[:4]}
        scores, t_att = timed(self.post.score, q, flat_texts)
        reranked = [flat_texts[int(i)] for i in best_k(scores, 4)[0]]
        row[f"flat {FLAT_CANDIDATES}p->4p"] = {"seconds": [t_dense, t_att], **recall(reranked, answers)}

        funnel = self.funnels[""]
        (clusters, _), t_bm25 = timed(self.index.cluster_bm25.top_k, q, 4)
        cluster_texts = ["\n\n".join(self.index.document(i).render() for i in self.index.cluster(int(c)))
                         for c in clusters]
        row["prog 4c"] = {"seconds": [t_bm25], **recall(cluster_texts, answers)}
        (doc_ids, _), t_bm25 = timed(funnel.retrieve, q)
        k = funnel.top_clusters
        for suffix, f in self.funnels.items():
            (kept, _), t_pre = timed(f.pre_rank, q, doc_ids)
            row[f"prog {k}c->4d{suffix}"] = {"seconds": [t_bm25, t_pre], **recall([d.render() for d in kept[:4]],
                                                                                   answers)}
            passages = f.passages(kept)
            started = time.perf_counter()
            best, _ = best_k(f.post_scores(q, passages), 4)
            t_post = time.perf_counter() - started
            texts = [f"{passages[int(i)][0].title}\n{passages[int(i)][1]}" for i in best]
            row[f"prog {k}c->8d->4p{suffix}"] = {"seconds": [t_bm25, t_pre, t_post], **recall(texts, answers),
                                                 "passages": texts}
        return row


def answer(llm, e: Example, passages: list[str]) -> dict:
    chunks = [Chunk(f"p{i}", t, "-", i, len(t.split())) for i, t in enumerate(passages)]
    with stage(Stage.GENERATE, n_in=len(chunks)) as trace:
        gen = generate_answer(trace, llm, task="qa", variant="plain", question=e.question, chunks=chunks,
                              choices=None, max_tokens=32)
    return {"answer": gen.answer, **score(e, gen.answer), "seconds": gen.stage.seconds}


def examples_of(path: Path) -> list[Example]:
    return [e for e in load_dataset(path).examples if not {a.lower() for a in e.answers} & {"yes", "no"}]


def run_dataset(name: str, args, post_ranker) -> list[dict]:
    questions, corpus = DATASETS[name]
    label = run_label(name, args)
    work = args.work / label
    docs = load_corpus(corpus)
    embedded = IndexConfig(flat=True, embed_documents=True)
    if args.filler:
        with random_vectors_after(docs, passage_words=100):
            manifest = build_index(padded(docs, args.filler), work / "index", embedded,
                                   source=f"{corpus} + {args.filler} filler")
    else:
        manifest = build_index(docs, work / "index", embedded, source=str(corpus))
    index = CorpusIndex(work / "index")
    warm_up(index)
    examples = examples_of(questions)
    test, train = examples[:args.test], examples[args.test:args.test + args.train]

    model_dir = work / "distilled"
    if args.labels_only or not (model_dir / "model.safetensors").exists():
        teacher = FunnelRetriever(index, pre_ranker=BiEncoderPreRanker(stored=index.document_vectors),
                                  post_ranker=post_ranker,
                                  top_clusters=args.top_clusters)
        labelled = collect_labels(teacher, train, work / LABELS_FILE)
        if args.labels_only:
            return []
        train_pre_ranker(labelled, init=minilm_directory(), out=model_dir, epochs=args.epochs)
    distill_log = json.loads((model_dir / "distill.json").read_text())

    bench = Bench(index, post_ranker, load_pre_ranker(model_dir, stored=index.document_vectors), args.top_clusters)
    out = args.out / label
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    rows = read_rows(rows_path)
    done = {r["example_id"] for r in rows}
    strong = resolve(args.strong) if args.generate else None
    with rows_path.open("a") as f:
        for i, e in enumerate(tqdm([e for e in test if e.id not in done], desc=name, unit="question")):
            row = {"example_id": e.id, "question": e.question, "answers": e.answers, "configs": bench.question(e)}
            if len(done) + i < args.generate:
                configs = row["configs"]
                k = bench.funnels[""].top_clusters
                row["generation"] = {c: answer(strong, e, configs[c]["passages"])
                                     for c in ("flat 4p", f"prog {k}c->8d->4p", f"prog {k}c->8d->4p (distilled)")}
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
            rows.append(row)
    return [{"dataset": label, "documents": manifest.documents, "clusters": manifest.clusters,
             "passages": manifest.passages, "index_build_seconds": manifest.build_seconds,
             "distillation": distill_log, "rows": rows}]


def run_label(name: str, args) -> str:
    return f"{name}+filler{args.filler}" if args.filler else name


def warm_up(index: CorpusIndex) -> None:
    """Page the memory-mapped vectors and BM25 arrays in and load the embedder, as a serving process has."""
    index.flat_search("warm up", 1)
    index.cluster_bm25.top_k("warm up", 1)
    if index.document_vectors is not None:
        float(np.asarray(index.document_vectors).sum())


def recorded(name: str, args) -> dict:
    """What a previous run left: the rows so far, the index's sizes and the distillation log (no model runs)."""
    label = run_label(name, args)
    work = args.work / label
    manifest = json.loads((work / "index" / MANIFEST).read_text())
    return {"dataset": label, "documents": manifest["documents"], "clusters": manifest["clusters"],
            "passages": manifest["passages"], "index_build_seconds": manifest["build_seconds"],
            "distillation": json.loads((work / "distilled" / "distill.json").read_text()),
            "rows": read_rows(args.out / label / "rows.jsonl")}


def summarise(result: dict) -> dict:
    rows = result["rows"]
    configs = list(rows[0]["configs"])
    table = {}
    for c in configs:
        cells = [r["configs"][c] for r in rows]
        stages = np.mean([x["seconds"] for x in cells], axis=0)
        table[c] = {"n": len(cells), "seconds": round(float(stages.sum()), 4),
                    "stage_seconds": [round(float(s), 4) for s in stages],
                    **{f"AR@{k}": round(100 * float(np.mean([x[f"AR@{k}"] for x in cells])), 1) for k in KS}}
    generated = [r["generation"] for r in rows if "generation" in r]
    gen = {c: {"n": len(generated), "EM": round(100 * float(np.mean([g[c]["em"] for g in generated])), 1),
               "F1": round(100 * float(np.mean([g[c]["f1"] for g in generated])), 1)}
           for c in (generated[0] if generated else {})}
    return {k: v for k, v in result.items() if k != "rows"} | {"retrieval": table, "generation": gen}


def markdown(summaries: list[dict]) -> str:
    lines = []
    for s in summaries:
        lines += [f"### {s['dataset']}: {s['documents']} documents, {s['clusters']} clusters, "
                  f"{s['passages']} passages", "",
                  "| configuration | n | time per question, s (by stage) | AR@1 | AR@2 | AR@3 | AR@4 |",
                  "|---|---|---|---|---|---|---|"]
        for c, t in s["retrieval"].items():
            stages = " + ".join(f"{x:.3f}" for x in t["stage_seconds"])
            lines.append(f"| {c} | {t['n']} | {t['seconds']:.3f} ({stages}) | {t['AR@1']} | {t['AR@2']} | "
                         f"{t['AR@3']} | {t['AR@4']} |")
        if s["generation"]:
            lines += ["", "| generator input | n | EM | F1 |", "|---|---|---|---|"]
            lines += [f"| {c} | {g['n']} | {g['EM']} | {g['F1']} |" for c, g in s["generation"].items()]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="hotpotqa,musique", help="comma-separated: " + ", ".join(DATASETS))
    parser.add_argument("--test", type=int, default=40, help="held-out test questions per dataset")
    parser.add_argument("--train", type=int, default=60, help="distillation questions per dataset")
    parser.add_argument("--generate", type=int, default=20, help="test questions the strong model answers")
    parser.add_argument("--top-clusters", type=int, help="stage 1 clusters [default: the funnel's, 5%% of them]")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--filler", type=int, default=0,
                        help="pad each corpus with this many synthetic documents (random vectors), to time at scale")
    parser.add_argument("--strong", default=DEFAULT_STRONG)
    parser.add_argument("--post-ranker", default="bundled:qwen2.5-0.5b")
    parser.add_argument("--work", type=Path, default=Path("benchmarks/out/funnel"), help="indexes and models")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/funnel"))
    parser.add_argument("--labels-only", action="store_true",
                        help="build the index and the distillation labels, then stop (for benchmarks/distill_prior.py)")
    parser.add_argument("--report-only", action="store_true",
                        help="summarise the rows already written (e.g. of a stopped run) without running models")
    args = parser.parse_args()
    names = [n.strip() for n in args.datasets.split(",")]
    if not all(DATASETS[n][0].exists() for n in names):
        parser.error(f"shared data not found under {DATA}")
    if args.labels_only:
        post_ranker = load_post_ranker(args.post_ranker)
        for n in names:
            run_dataset(n, args, post_ranker)
        return
    if args.report_only:
        summaries = [summarise(recorded(n, args)) for n in names]
    else:
        post_ranker = load_post_ranker(args.post_ranker)
        summaries = [summarise(r) for n in names for r in run_dataset(n, args, post_ranker)]
    summary = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
               f"Python {platform.python_version()}", "args": {k: str(v) for k, v in vars(args).items()},
               "results": summaries}
    stem = f"funnel_vs_flat+filler{args.filler}" if args.filler else "funnel_vs_flat"
    (args.out / f"{stem}.json").write_text(json.dumps(summary, indent=2))
    (args.out / f"{stem}.md").write_text(markdown(summaries))
    print(markdown(summaries))


if __name__ == "__main__":
    main()
