"""Run directories and grids made without a model: synthetic grid rows, a FakeLLM eval, a fake method."""

import json
import math

from ragfunnel.errors import ModelError
from ragfunnel.eval.runner import run_eval
from ragfunnel.llm import FakeLLM
from ragfunnel.methods import make_method
from ragfunnel.scaling.grid import Config, default_grid
from ragfunnel.types import Document, Example, Prediction, StageTrace, Trace

EPS = 0.01
DRAG_GRID = default_grid(["zero-shot", "rag", "drag"], documents=(0, 1, 2, 5, 10), shots=(0, 1, 2, 4))


def f1_of(config):
    """The run's truth: logit F1 = 0.4 ln(k+ε) + 0.15 ln(m+ε) - 1."""
    k, m, _ = config.theta
    return 1 / (1 + math.exp(-(0.4 * math.log(k + EPS) + 0.15 * math.log(m + EPS) - 1)))


def tokens_of(config):
    k, m, _ = config.theta
    return 100 + 100 * k * (m + 1) + 50 * m


def write_run(run_dir, configs, budgets=(1000, 4000)):
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"dataset": "synthetic", "budgets": list(budgets)}))
    with (run_dir / "rows.jsonl").open("w") as out:
        for c in configs:
            for q in ("q0", "q1"):
                out.write(json.dumps({
                    "example_id": q, "strategy": c.strategy, "documents": c.documents, "shots": c.shots,
                    "iterations": c.iterations, "answer": "x", "references": ["y"],
                    "metrics": {"f1": f1_of(c), "em": 0.0, "accuracy": 0.0},
                    "effective_tokens": tokens_of(c), "max_call_tokens": tokens_of(c), "seconds": 0.5,
                    "trace": {"stages": []}}) + "\n")
    return run_dir


def grid_inputs(tmp_path):
    from ragfunnel.corpus.index_build import build_index
    from ragfunnel.types import Document

    docs = [Document("d1", "Paris", "Paris is the capital of France and its largest city."),
            Document("d2", "Lyon", "Lyon is a city in France on the Rhone."),
            Document("d3", "Berlin", "Berlin is the capital of Germany.")]
    build_index(docs, tmp_path / "ix", source="test")
    dataset = tmp_path / "questions.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is the capital of France? ({i})",
                                           "answers": ["Paris"]}) + "\n" for i in range(3)))
    demos = tmp_path / "demos.jsonl"
    demos.write_text(json.dumps({"question": "What is the capital of Germany?", "answer": "Berlin"}) + "\n")
    return dataset, demos


# Words 0-60 are filler, 61-66 the supporting passage; 20-word chunks put it in the last chunk.
PASSAGES = [Document("Fill", "Fill", " ".join(f"filler{i}" for i in range(60))),
            Document("Bridge", "Bridge", "The bridge opened in 1932.")]
CONTEXT = "\n\n".join(d.render() for d in PASSAGES)


def unreachable(prompt, i):
    raise ModelError("the server at http://localhost:9 is unreachable")


def make_run(path, budget, n=3):
    llm = FakeLLM(lambda prompt, i: "1932" if "opened in 1932" in prompt else "unknown")
    methods = {"op": make_method("op", strong=llm, budget=budget, chunk_words=20),
               "lc": make_method("lc", strong=llm),
               "vanilla": make_method("vanilla", strong=FakeLLM(unreachable), budget=budget, chunk_words=20)}
    exs = [Example(id=str(i), question="When did the bridge open?", context=CONTEXT, answers=["1932"],
                   passages=PASSAGES, meta={"supporting_titles": ["Bridge"]}) for i in range(n)]
    received = {"op": {"budget": budget}, "lc": {}, "vanilla": {"budget": budget}}  # as `ragfunnel eval` records
    run_eval(exs, methods, path, config={"dataset": "bridges.jsonl", "method_options": received}, progress=False)


class FakeMethod:
    """Answers "Paris" when it retrieves documents, else "London"; call j of n reads 100(k+1)(m+1) + 10j tokens."""

    def __init__(self, config, fail=False):
        self.config, self.fail = config, fail

    def run(self, question):
        if self.fail:
            raise ModelError("the model crashed")
        k, m, n = self.config.theta
        calls = [StageTrace(f"call{j}", input_tokens=100 * (k + 1) * (m + 1) + 10 * j) for j in range(n)]
        return Prediction("Paris" if k else "London", "fake", [], Trace(calls))


def examples(n):
    return [Example(id=f"q{i}", question=f"Where is landmark {i}?", answers=["Paris"]) for i in range(n)]


CONFIGS = [Config("zero-shot", 0, 0), Config("rag", 1, 0), Config("iterdrag", 1, 0, 2)]
