"""Shared fixtures, and the tiers: tests marked ``model`` load real bundled models; ``browser``, ``fuzz``, ``ray``
and ``subprocess`` are found in each test's code; every other test is marked ``unit``."""

from __future__ import annotations

import hashlib
import http.server
import inspect
import io
import json
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from ragfunnel.llm import bundled
from tests.helpers.rankers import FixedCosines, TinyCrossEncoder

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
HOTPOT = SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train.json"


# What puts a test in each tier besides ``unit`` (``model`` a test declares; the others are found in its code, or
# in the helpers and fixtures of tests/ it uses): a name it uses, the library a global it uses comes from, or a
# path it uses under the shared data.
TIERS = ("model", "browser", "fuzz", "ray", "subprocess", "data")
_TIER_NAMES = {"headless_chromium": "browser", "ray_cluster": "ray", "RayOptions": "ray",
               "subprocess": "subprocess", "multiprocessing": "subprocess", "Popen": "subprocess"}
_TIER_LIBRARIES = {"selenium": "browser", "hypothesis": "fuzz", "ray": "ray", "subprocess": "subprocess",
                   "multiprocessing": "subprocess"}


def _names(code: types.CodeType) -> set[str]:
    """The global and attribute names ``code`` uses, its nested functions' and lambdas' too."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _library(value: Any) -> str:
    """The top-level package ``value`` (a module, function or class) comes from ('' when it says none)."""
    name = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
    return name.partition(".")[0] if isinstance(name, str) else ""


def _reached(function: Any, seen: set[int]) -> set[str]:
    """The names ``function`` uses and the libraries of the globals they are (``library:NAME``), and those of every
    function or class of ``tests/`` it reaches by them."""
    code = getattr(function, "__code__", None)
    if code is None or id(function) in seen:
        return set()
    seen.add(id(function))
    reached = set()
    for name in _names(code):
        value = function.__globals__.get(name)
        reached |= {name, f"library:{_library(value)}"}
        if isinstance(value, Path) and value.is_relative_to(SHARED):
            reached.add("shared data")
        if _library(value) == "tests":  # a helper or a class of helpers: what it uses, the test uses
            for member in vars(value).values() if inspect.isclass(value) else [value]:
                reached |= _reached(member, seen)
    return reached


def tiers_of(item: pytest.Item) -> set[str]:
    """The tiers of a test: ``model`` where it says so, and ``browser``, ``fuzz``, ``ray`` and ``subprocess`` where
    its code, or a fixture or helper of tests/ it uses, drives Chromium, Hypothesis, Ray or a child process;
    ``data`` where it reads the shared real data (``../shared/data``: corpora, datasets, real documents)."""
    found = {"model"} if item.get_closest_marker("model") else set()
    seen: set[int] = set()
    reached = _reached(getattr(item, "function", None), seen) | set(getattr(item, "fixturenames", ()))
    for definitions in getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).values():
        if _library(definitions[-1].func) == "tests":
            reached |= _reached(definitions[-1].func, seen)
    return (found | {tier for name, tier in _TIER_NAMES.items() if name in reached}
            | {tier for library, tier in _TIER_LIBRARIES.items() if f"library:{library}" in reached}
            | ({"data"} if "shared data" in reached or "hotpot_examples" in reached else set()))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tiers (:func:`tiers_of`); a test in none is a unit test, which ``pytest -m unit``
    runs alone in seconds."""
    for item in items:
        found = tiers_of(item)
        for tier in found - {"model"}:
            item.add_marker(getattr(pytest.mark, tier))
        if not found:
            item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True)
def no_weights_outside_the_model_tier(request, monkeypatch):
    """A test not marked ``model`` that loads GGUF weights fails, naming the marker: it would make the unit tier
    take minutes (a method left to its default model loads the bundled one)."""
    try:
        import llama_cpp
    except ImportError:  # without llama.cpp no test loads GGUF weights: nothing to guard
        llama_cpp = None
    if llama_cpp is not None and not request.node.get_closest_marker("model"):

        class Refused(llama_cpp.Llama):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                pytest.fail(f"{request.node.nodeid} loaded {kwargs.get('model_path')}: mark it @pytest.mark.model, "
                            "or give its method scripted models")

        monkeypatch.setattr(llama_cpp, "Llama", Refused)
    yield


@pytest.fixture(scope="session")
def hotpot_examples() -> list[dict]:
    if not HOTPOT.exists():
        pytest.skip(f"shared data not found at {HOTPOT}")
    return json.loads(HOTPOT.read_text())


def hotpot_context(example: dict) -> str:
    """The example's ten paragraphs as one text, each headed by its title."""
    return "\n\n".join(f"{title}\n{''.join(sents).strip()}" for title, sents in example["context"])


@pytest.fixture(scope="session", autouse=True)
def no_disk_caches():
    """Tests run every model call for real: the user's call cache and document states stay out of them.

    Tests of the caches turn them on for themselves (monkeypatching the registry's switch).
    """
    from ragfunnel.llm import set_disk_caches

    set_disk_caches(False)
    yield


@pytest.fixture
def chunked_model(tmp_path, monkeypatch):
    """Two importable packages, each carrying one part of a 'model' file."""
    parts = [b"GGUF" + b"a" * 5000, b"b" * 3000]
    for i, data in enumerate(parts, start=1):
        pkg = tmp_path / "site" / f"rf_test_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "cache"))
    whole = b"".join(parts)
    model = bundled.BundledModel(name="test-model", role="test", filename="test.gguf",
                                 packages=("rf_test_part1", "rf_test_part2"),
                                 sha256=hashlib.sha256(whole).hexdigest(), size=len(whole))
    monkeypatch.setitem(bundled.BUNDLED, "test-model", model)
    yield model, whole
    for name in ("rf_test_part1", "rf_test_part2"):
        sys.modules.pop(name, None)


@pytest.fixture
def fake_models(monkeypatch):
    """The cross-encoder and bi-encoder training and load_pre_ranker make, faked; every BPR loss's scores kept."""
    pytest.importorskip("torch")
    from ragfunnel.corpus import distill
    from ragfunnel.retrieve import rerank

    TinyCrossEncoder.made, FixedCosines.made = [], 0
    monkeypatch.setattr(rerank, "CrossEncoderPreRanker", TinyCrossEncoder)
    monkeypatch.setattr(rerank, "BiEncoderPreRanker", FixedCosines)
    losses = []
    bpr = distill.bpr_loss

    def kept_bpr_loss(scores, positive):
        losses.append((scores.detach().clone().numpy(), list(positive)))
        return bpr(scores, positive)

    monkeypatch.setattr(distill, "bpr_loss", kept_bpr_loss)
    return losses


@pytest.fixture(scope="module")
def faiss():
    """FAISS on one thread (a benchmark may share the machine), restored afterwards."""
    module = pytest.importorskip("faiss", reason="needs the [faiss] extra")
    threads = module.omp_get_max_threads()
    module.omp_set_num_threads(1)
    yield module
    module.omp_set_num_threads(threads)


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of two CPUs for the module's tests, shut down after them."""
    ray = pytest.importorskip("ray", reason="needs the [ray] extra")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


@pytest.fixture
def embedding_server():
    """tests/fake_openai.py's server in a thread: its base URL (``.../v1``) and the bodies of the embedding
    requests it answered, which the test may read."""
    from tests.fake_openai import Handler

    requests: list[dict] = []

    class Recording(Handler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers["Content-Length"])
            body = self.rfile.read(length)
            requests.append(json.loads(body))
            self.rfile = io.BytesIO(body)  # for Handler.do_POST to read again
            super().do_POST()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", requests
    server.shutdown()
    server.server_close()
