"""benchmarks/flat_search_scale.py at 5,000 clustered vectors: every kind measured, recall held against exact search."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there; flat_search_scale imports index_scale
    spec.loader.exec_module(module)
    return module


_load("index_scale")
bench = _load("flat_search_scale")


@pytest.fixture(scope="module")
def run_dir(faiss, tmp_path_factory) -> Path:
    """One run over 5,000 vectors and 20 held-out queries, merged into a JSON that already holds an old entry."""
    out = tmp_path_factory.mktemp("flat_search")
    path = out / "flat_search_scale.json"
    path.write_text(json.dumps({"1000000": {"passages": 1000000, "search": {"p50_ms": 62.79}}}))
    entries = bench.run(5_000, 20, ["exact", "flat", "hnsw", "ivf"], seed=13, out=out / "vectors", embed=False)
    bench.merge(path, entries)
    return out


@pytest.fixture
def results(run_dir) -> dict:
    return json.loads((run_dir / "flat_search_scale.json").read_text())


def test_every_kind_is_merged_beside_the_old_entries(results):
    assert set(results) == {"1000000", "exact-5000", "flat-5000", "hnsw-5000", "ivf-5000"}
    assert results["1000000"]["search"]["p50_ms"] == 62.79
    for kind in ("exact", "flat", "hnsw", "ivf"):
        entry = results[f"{kind}-5000"]
        assert entry["kind"] == kind and entry["passages"] == 5000 and entry["search"]["queries"] == 19
        assert entry["search"]["p50_ms"] > 0 and entry["index_bytes"] > 0 and entry["p50_ratio"] > 0
    assert results["exact-5000"]["meets_target"] is None and results["exact-5000"]["p50_ratio"] == 1.0
    assert results["hnsw-5000"]["params"] == {"M": 32, "ef_construction": 200, "ef_search": 128}


def test_exact_and_flat_faiss_find_exact_searchs_top_10(results):
    assert results["exact-5000"]["recall_at_10"] == 1.0
    assert results["flat-5000"]["recall_at_10"] == 1.0


def test_clustered_vectors_let_hnsw_find_the_top_10(results):
    assert results["hnsw-5000"]["recall_at_10"] >= 0.95


def test_the_vector_and_index_files_are_removed(run_dir):
    assert not list((run_dir / "vectors").iterdir())


def test_held_out_queries_are_not_rows_of_the_index(tmp_path):
    centres = bench.write_group_centres(tmp_path / "centres.npy", 100, seed=1)
    bench.write_vectors(tmp_path / "vectors.npy", centres, 1_000, seed=1)
    vectors = np.load(tmp_path / "vectors.npy")
    queries = bench.draw(centres, np.random.default_rng([1, 2]), 20)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert (queries @ vectors.T).max() < 0.99  # near, never the same vector
    assert (queries @ vectors.T).max(axis=1).mean() > 0.4  # each has close neighbours (its group)
