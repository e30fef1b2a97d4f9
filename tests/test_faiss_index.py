"""A corpus index with a FAISS file: the manifest records and checks it, `search --flat` uses it, a damaged or
foreign one is refused with the rebuild command, and without the [faiss] extra everything works exactly.

The passage embeddings are seeded synthetic vectors (``_embed`` replaced), so no model loads.
"""

import hashlib
import json
import logging
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from ragfunnel.cli.main import main
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.index_manifest import FAISS_FILE, IndexConfig, file_sha256
from ragfunnel.errors import ConfigError, InputError, MissingExtra
from tests.helpers.vectors import DIM, clustered, corpus

pytest.importorskip("networkx", reason="needs the [corpus] extra")

REBUILD = "rebuild it with `ragfunnel index CORPUS --out"


@pytest.fixture(autouse=True)
def synthetic_embeddings(monkeypatch):
    """Passages embedded as seeded clustered vectors instead of by MiniLM, of the dimension MiniLM is taken to
    have here (an index's vectors must match its embedder's)."""
    monkeypatch.setattr("ragfunnel.corpus.index_build._embed", lambda texts, desc, **_: clustered(len(texts), seed=11))
    monkeypatch.setattr("ragfunnel.retrieve.embed.MiniLMEmbedder.dim", DIM)



@pytest.fixture
def without_faiss(monkeypatch):
    """As if the [faiss] extra were not installed: `import faiss` fails and no spec is found."""
    monkeypatch.setitem(sys.modules, "faiss", None)


def build(root, faiss=None, force=False):
    return build_index(corpus(), root, IndexConfig(flat=True, passage_words=5, faiss=faiss), source="test", force=force)


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


def forge(root, **changes) -> None:
    """Edit the manifest as a forger would: the changes, then a checksum recomputed to match them."""
    data = {k: v for k, v in {**json.loads((root / "manifest.json").read_text()), **changes}.items()
            if k != "manifest_sha256"}
    data["manifest_sha256"] = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
                                             ).hexdigest()
    (root / "manifest.json").write_text(json.dumps(data))


def listed_as_it_is(root, name: str) -> dict:
    """The manifest's ``files`` with ``name``'s entry made to match the file now there."""
    files = json.loads((root / "manifest.json").read_text())["files"]
    return {**files, name: {"bytes": (root / name).stat().st_size, "sha256": file_sha256(root / name)}}


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_the_faiss_index_round_trips_through_the_checksummed_manifest(faiss, tmp_path, kind):
    m = build(tmp_path / "ix", faiss=kind)
    assert m.passages == 240 and m.faiss.kind == kind and m.faiss.faiss_version == faiss.__version__
    written = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert written["faiss"] == {"kind": kind, "params": m.faiss.params, "faiss_version": faiss.__version__}
    assert written["files"][FAISS_FILE]["sha256"] == file_sha256(tmp_path / "ix" / FAISS_FILE)
    ix = CorpusIndex(tmp_path / "ix")
    assert ix.manifest == m and ix.flat_search_kind == f"faiss {kind}"
    for query in clustered(5, seed=12):
        rows, scores = ix.nearest_passages(query, 4)
        want_rows, want_scores = ix.nearest_passages(query, 4, exact=True)
        if kind == "flat":
            np.testing.assert_array_equal(rows, want_rows)
        assert len(rows) == 4 and len(set(rows) & set(want_rows)) >= 3
        np.testing.assert_allclose(scores, np.asarray(ix._vectors[rows] @ query, dtype=np.float64), rtol=1e-6)


def test_an_unset_faiss_option_builds_by_size_and_keeps_what_an_index_has(faiss, tmp_path):
    assert build(tmp_path / "ix").faiss.kind == "flat"  # 240 passages: exact
    assert build(tmp_path / "ix", faiss="auto").faiss.kind == "flat"  # up to date, kept
    with pytest.raises(ConfigError, match="set force to rebuild it"):
        build(tmp_path / "ix", faiss="hnsw")
    with pytest.raises(ConfigError, match="set force to rebuild it"):
        build(tmp_path / "ix", faiss="none")
    plain = build(tmp_path / "ix", faiss="none", force=True)
    assert plain.faiss is None and FAISS_FILE not in plain.files
    assert "faiss" not in json.loads((tmp_path / "ix" / "manifest.json").read_text())  # as before FAISS
    assert build(tmp_path / "ix") == plain  # unset: whatever the index has is up to date
    assert CorpusIndex(tmp_path / "ix").flat_search_kind == "exact"


def test_a_corrupted_faiss_file_is_refused_by_its_checksum(faiss, tmp_path):
    build(tmp_path / "ix", faiss="hnsw")
    with (tmp_path / "ix" / FAISS_FILE).open("r+b") as f:
        f.seek(200)
        f.write(b"\xff\xff\xff\xff")
    with pytest.raises(InputError, match="flat.faiss is corrupted") as error:
        CorpusIndex(tmp_path / "ix")
    assert one_line(error).endswith(f"{REBUILD} {tmp_path / 'ix'} --flat --passage-words 5 --faiss hnsw --force`")


def test_a_faiss_file_this_faiss_cannot_read_is_refused_with_the_rebuild_command(faiss, tmp_path):
    # A file from another FAISS version, listed with its own checksum: it passes the checksum, not the load.
    root = tmp_path / "ix"
    m = build(root, faiss="ivf")
    (root / FAISS_FILE).write_bytes((root / FAISS_FILE).read_bytes()[:300])
    forge(root, files=listed_as_it_is(root, FAISS_FILE), faiss={**json.loads((root / "manifest.json").read_text())[
        "faiss"], "faiss_version": "0.9.0"})
    ix = CorpusIndex(root)
    with pytest.raises(InputError, match=rf"flat.faiss cannot be read by FAISS {faiss.__version__} "
                                         r"\(written by FAISS 0.9.0: .+\); rebuild it") as error:
        ix.nearest_passages(clustered(1, seed=13)[0], 4)
    assert one_line(error).endswith(f"{REBUILD} {root} --flat --passage-words 5 --faiss ivf --force`")
    assert m.faiss.faiss_version != "0.9.0"


def test_a_faiss_file_of_another_type_than_the_manifest_says_is_refused(faiss, tmp_path):
    root = tmp_path / "ix"
    build(root, faiss="flat")
    forge(root, faiss={"kind": "hnsw", "params": {"M": 32, "ef_construction": 64, "ef_search": 128},
                       "faiss_version": faiss.__version__})
    with pytest.raises(InputError, match="holds a FAISS IndexFlatIP, where the manifest says hnsw"):
        CorpusIndex(root).nearest_passages(clustered(1, seed=13)[0], 4)


@pytest.mark.parametrize("changes, match", [
    ({"faiss": {"kind": "lsh", "params": {}, "faiss_version": "1"}}, "unknown FAISS index type 'lsh'"),
    ({"faiss": {"kind": "ivf", "params": {"nlist": -1, "nprobe": 1}, "faiss_version": "1"}}, "'nlist' is -1"),
    ({"faiss": "hnsw"}, "'faiss' is not"),
    ({"faiss": {"kind": "flat", "params": {}, "faiss_version": "1"}, "files": "drop flat.faiss"},
     "'files' does not list flat.faiss"),
])
def test_a_forged_faiss_description_is_refused(faiss, tmp_path, changes, match):
    root = tmp_path / "ix"
    build(root, faiss="flat")
    if changes.get("files") == "drop flat.faiss":
        files = json.loads((root / "manifest.json").read_text())["files"]
        changes = {**changes, "files": {k: v for k, v in files.items() if k != FAISS_FILE}}
    forge(root, **changes)
    with pytest.raises(InputError, match=match) as error:
        CorpusIndex(root)
    assert REBUILD in one_line(error)


def test_asking_for_faiss_without_the_extra_names_the_install(without_faiss, tmp_path):
    with pytest.raises(MissingExtra) as error:
        build(tmp_path / "ix", faiss="hnsw")
    assert one_line(error).endswith("install it with: pip install 'ragfunnel[faiss]'")
    assert not (tmp_path / "ix").exists()  # refused before any work
    assert build(tmp_path / "ix").faiss is None  # unset: exact search, as without FAISS


def test_the_cli_names_the_install_in_one_line(without_faiss, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) for d in corpus()))
    result = CliRunner().invoke(main, ["index", str(path), "--out", str(tmp_path / "ix"), "--flat", "--faiss", "ivf"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == ["error: the optional dependency 'faiss' is not installed; "
                                                  "install it with: pip install 'ragfunnel[faiss]'"]


def test_an_index_with_faiss_is_searched_exactly_without_the_extra(faiss, tmp_path, monkeypatch, caplog):
    root = tmp_path / "ix"
    build(root, faiss="hnsw")
    query = clustered(1, seed=14)[0]
    want = CorpusIndex(root).nearest_passages(query, 4, exact=True)
    monkeypatch.setitem(sys.modules, "faiss", None)
    ix = CorpusIndex(root)
    assert ix.flat_search_kind == "exact"
    with caplog.at_level(logging.WARNING, logger="ragfunnel"):
        for _ in range(2):
            rows, scores = ix.nearest_passages(query, 4)
            np.testing.assert_array_equal(rows, want[0])
    assert [r.getMessage() for r in caplog.records].count(
        f"{root} has a FAISS index but FAISS is not installed, so every vector is searched; "
        "install it with: pip install 'ragfunnel[faiss]'") == 1


@pytest.mark.parametrize("options, match", [
    ({"faiss": "lsh"}, "faiss must be one of auto, flat, hnsw, ivf, ivfpq, none, got 'lsh'"),
    ({"faiss": "hnsw", "flat": False}, "faiss=hnsw indexes the flat passages' vectors; set flat too"),
])
def test_bad_faiss_options_are_refused(tmp_path, options, match):
    with pytest.raises(ConfigError, match=match):
        build_index(corpus(), tmp_path / "ix", IndexConfig(**{"flat": True, **options}), source="test")


def test_ivfpq_on_too_few_passages_names_the_alternatives(faiss, tmp_path):
    with pytest.raises(ConfigError, match="needs at least 9984 passages .* this corpus has 240; use faiss=auto"):
        build(tmp_path / "ix", faiss="ivfpq")


def test_exact_goes_with_flat(tmp_path):
    result = CliRunner().invoke(main, ["search", str(tmp_path), "Who kept the light?", "--exact"])
    assert result.exit_code == 1 and "--exact goes with --flat" in result.stderr
