"""Shared fixtures. Tests marked ``model`` load real bundled models; every other test is marked ``unit``."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import sys
import threading
from pathlib import Path

import pytest

from ragfunnel.llm import bundled
from tests.helpers.rankers import FixedCosines, TinyCrossEncoder

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
HOTPOT = SHARED / "hotpotqa_train_hipporag" / "hotpotqa_train.json"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that loads no model is a unit test: ``pytest -m unit`` runs them alone."""
    for item in items:
        if item.get_closest_marker("model") is None:
            item.add_marker(pytest.mark.unit)


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
