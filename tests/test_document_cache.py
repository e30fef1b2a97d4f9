"""The document cache (a book read once): keys, the size bound, damaged and foreign entries, an unwritable
directory, concurrent writers, `ragfunnel cache`, and answers identical with and without it. No model loads: a
FakeLLM counts tokens and a hashing embedder stands in for MiniLM."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import multiprocessing
import os
import re
import shutil
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import ragfunnel.retrieve.document_cache as document_cache
from ragfunnel.cli.main import main
from ragfunnel.llm import FakeLLM, registry, speed
from ragfunnel.llm.base import BaseLLM
from ragfunnel.llm.speed import SpeedProfile
from ragfunnel.methods import make_method
from ragfunnel.methods.auto import DocumentLedger
from ragfunnel.retrieve.bm25 import BM25Index, tokenize_ids
from ragfunnel.retrieve.document_cache import DIRECTORY, DocumentCache, entry_key
from ragfunnel.retrieve.embed import MiniLMEmbedder
from ragfunnel.retrieve.ranking import PieceVectors, question_scores
from ragfunnel.scaling.sizing import FirstCallProbe
from ragfunnel.text import chunk_words
from ragfunnel.text.scripts import HAN_CHARACTER

PARAGRAPH = ("Gull Rock Light stands on a granite ledge two miles off the harbour. Its last keeper, Ada "
             "Penhallow, kept the lamp from 1931 until the light was automated in 1968. ")
FILLER = "The tide ran over the shoals and the fishing boats came home before the fog closed the channel. "
WIDTH = MiniLMEmbedder.dim


def book(n: int = 40, seed: str = "") -> str:
    """A text of ``n`` paragraphs, one of them about the keeper; ``seed`` makes another text."""
    return "\n\n".join(PARAGRAPH if i == n // 2 else f"{seed}{FILLER}{i} " * 3 for i in range(n))


class Counting(FakeLLM):
    """Counts tokens as whitespace words, and records the texts it counted and each batch it was given. It names
    what decides its counts (a FakeLLM does not), so they are kept on disk, under its name."""

    def __init__(self, name: str = "fake") -> None:
        super().__init__(lambda prompt, i: "Ada Penhallow", name=name, context_window=8192)
        self.counted: list[str] = []
        self.batches = 0

    @property
    def tokenizer_identity(self) -> str:
        return f"whitespace words ({self.name})"

    def _count_tokens(self, text: str) -> int:
        self.counted.append(text)
        return super()._count_tokens(text)

    def _count_tokens_many(self, texts: list[str]) -> list[int]:
        self.batches += 1
        return super()._count_tokens_many(texts)


class HashingEmbedder:
    """Deterministic unit vectors, as long as MiniLM's, from the words of a text, and a record of what it
    embedded."""

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.encoded.extend(texts)
        out = np.zeros((len(texts), WIDTH), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, hashlib.sha1(word.strip(".,?").encode()).digest()[0] % 16] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


@pytest.fixture
def embedder(monkeypatch) -> HashingEmbedder:
    fake = HashingEmbedder()
    monkeypatch.setattr("ragfunnel.retrieve.embed.bundled_embedder", lambda: fake)
    monkeypatch.setattr("ragfunnel.retrieve.ranking.PIECES", PieceVectors())  # nothing kept from other tests
    return fake


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    """The disk caches on, in a directory of the test's own, and a fresh process-wide document cache."""
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "_disk_caches", True)
    monkeypatch.setattr(document_cache, "DOCUMENTS", DocumentCache())
    return tmp_path / "cache" / DIRECTORY


def fresh_process(monkeypatch) -> None:
    """What a new process starts with: nothing in memory (the disk stays)."""
    monkeypatch.setattr(document_cache, "DOCUMENTS", DocumentCache())
    monkeypatch.setattr("ragfunnel.retrieve.ranking.PIECES", PieceVectors())


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "ragfunnel.retrieve.document_cache"]


def entries(root) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) if root.is_dir() else []


# -- what is kept, and under which key ------------------------------------------------------------


def test_the_chunks_are_the_chunkers_and_come_back_from_disk_in_a_fresh_cache(tmp_path):
    text = book()
    first = DocumentCache(tmp_path).chunks(text, words=30)
    assert first == chunk_words(text, chunk_words=30)
    (key,) = entries(tmp_path)
    assert key == entry_key(text, words=30)
    meta = json.loads((tmp_path / key / "meta.json").read_text())
    assert "text" not in meta and len(meta["spans"]) == 3 * len(first)  # spans of the text, not the text
    again = DocumentCache(tmp_path).chunks(text, words=30)
    assert again == first


def test_each_thing_that_shapes_the_result_makes_another_entry_or_part(tmp_path, embedder):
    text = book()
    cache = DocumentCache(tmp_path)
    keys = {entry_key(text, words=30), entry_key(text, words=31), entry_key(text, words=30, doc_id="other"),
            entry_key(text + " more", words=30)}
    assert len(keys) == 4
    chunks = cache.chunks(text, words=30)
    one, other = Counting("one"), Counting("other")
    counts = cache.chunk_tokens(chunks, one)
    assert counts == [len(c.text.split()) for c in chunks]
    assert cache.chunk_tokens(chunks, other) == counts and other.counted  # another tokenizer counts for itself
    cache.kept_vectors(chunks, "embedder A", width=4).add({b"k" * 20: np.ones(4, dtype=np.float32)})
    assert cache.kept_vectors(chunks, "embedder B", width=4).get([b"k" * 20]) == {}  # another embedder has none
    (key,) = entries(tmp_path)
    parts = sorted(p.name.split("-")[0] for p in (tmp_path / key).iterdir())
    assert parts == ["meta.json", "tokens", "tokens", "vectors"]


def test_counts_bm25_and_vectors_are_read_back_not_recomputed(tmp_path, monkeypatch, embedder):
    text = book()
    cache = DocumentCache(tmp_path)
    llm = Counting()
    chunks = cache.chunks(text, words=30)
    counts = cache.chunk_tokens(chunks, llm)
    scores = cache.chunk_bm25(chunks).score(["who kept the lamp?"])
    np.testing.assert_array_equal(scores, BM25Index([c.text for c in chunks]).score(["who kept the lamp?"]))

    later = DocumentCache(tmp_path)  # another process
    monkeypatch.setattr(document_cache, "tokenize_ids", lambda texts: pytest.fail("BM25 tokenised again"))
    chunks = later.chunks(text, words=30)
    fresh = Counting()
    assert later.chunk_tokens(chunks, fresh) == counts and fresh.counted == []
    np.testing.assert_array_equal(later.chunk_bm25(chunks).score(["who kept the lamp?"]), scores)


def test_vectors_are_added_to_and_a_later_question_embeds_only_pieces_not_embedded_before(cache_root, monkeypatch,
                                                                                            embedder):
    first_question, second_question = "Who kept the lamp at Gull Rock?", "What came after 350 and 351?"
    chunks = document_cache.document_chunks(book(400), words=30)  # over 192 chunks: BM25's best are embedded
    question_scores(first_question, chunks)
    first = list(embedder.encoded)
    fresh_process(monkeypatch)
    chunks = document_cache.document_chunks(book(400), words=30)
    question_scores(first_question, chunks)
    assert embedder.encoded[len(first):] == [first_question]  # the question alone
    question_scores(second_question, chunks)
    new = embedder.encoded[len(first) + 1:]
    assert second_question in new and len(new) > 1  # the chunks about 350 and 351 had not been embedded
    pieces = [t for t in embedder.encoded if t not in (first_question, second_question)]
    assert len(pieces) == len(set(pieces))  # no piece embedded twice


def test_a_chunk_list_that_is_not_a_documents_chunks_is_worked_on_without_the_cache(tmp_path):
    cache = DocumentCache(tmp_path)
    chunks = cache.chunks(book(), words=30)
    llm = Counting()
    assert cache.chunk_tokens(chunks[3:9], llm) == [len(c.text.split()) for c in chunks[3:9]]
    assert [p.name.split("-")[0] for p in (tmp_path / entries(tmp_path)[0]).iterdir()] == ["meta.json"]


def test_counting_many_texts_asks_the_backend_once_for_the_ones_not_counted():
    llm = Counting()
    assert llm.count_tokens_many(["a b", "c", "a b"]) == [2, 1, 2]
    assert llm.count_tokens_many(["c", "d e f"]) == [1, 3]
    assert llm.count_tokens_many(["d e f"]) == [3]
    assert llm.counted == ["a b", "c", "d e f"] and llm.batches == 2


# -- the whole text's tokens (auto's plan) ----------------------------------------------------------


def test_the_whole_texts_count_is_exact_near_the_limit_and_kept(tmp_path):
    text = book()
    cache = DocumentCache(tmp_path)
    llm = Counting()
    exact = len(text.split())
    assert cache.text_tokens(text, llm, words=30, exact_up_to=exact) == exact
    assert text in llm.counted
    later, fresh = DocumentCache(tmp_path), Counting()
    assert later.text_tokens(text, fresh, words=30, exact_up_to=exact) == exact and fresh.counted == []  # kept


def test_the_whole_texts_count_does_not_depend_on_what_the_cache_holds(tmp_path):
    """Far past the limit the answer is the estimate, even where an earlier run kept the exact count: auto's plan
    (its predicted seconds, its reasons) is the same whatever ran before."""
    text = book(200)
    estimate = DocumentCache(tmp_path / "empty").text_tokens(text, Counting(), words=30, exact_up_to=1_000)
    cache = DocumentCache(tmp_path / "used")
    exact = cache.text_tokens(text, Counting(), words=30)  # an earlier run that needed it exactly
    assert exact == len(text.split()) != estimate
    assert DocumentCache(tmp_path / "used").text_tokens(text, Counting(), words=30, exact_up_to=1_000) == estimate
    assert cache.text_tokens(text, Counting(), words=30, exact_up_to=1_000) == estimate


def test_far_past_the_limit_the_count_is_the_chunks_sum_and_the_text_is_not_tokenised_again(tmp_path):
    text = book(200)
    cache = DocumentCache(tmp_path)
    llm = Counting()
    estimate = cache.text_tokens(text, llm, words=30, exact_up_to=1_000)
    chunks = cache.chunks(text, words=30)
    assert text not in llm.counted and set(llm.counted) == {c.text for c in chunks}  # each chunk once, not the text
    assert abs(estimate - len(text.split())) <= document_cache.BOUNDARY_TOKENS * (len(chunks) + 1)


# -- the size bound -----------------------------------------------------------------------------------


def entry_bytes(root) -> int:
    return sum(p.stat().st_size for e in entries(root) for p in (root / e).iterdir())


def test_the_bound_holds_as_documents_are_added_past_it_and_the_least_recently_used_go_first(tmp_path):
    DocumentCache(tmp_path / "probe").chunks(book(seed="0"), words=30)
    size = entry_bytes(tmp_path / "probe")
    root = tmp_path / "documents"
    cache = DocumentCache(root, max_bytes=int(3.5 * size))
    texts = [book(seed=str(i)) for i in range(8)]
    for i, text in enumerate(texts):
        cache.chunks(text, words=30)
        os.utime(root / entry_key(text, words=30) / "meta.json", (1000 + i, 1000 + i))  # used one after another
        assert entry_bytes(root) <= cache.max_bytes
    assert entries(root) == sorted(entry_key(t, words=30) for t in texts[-3:])
    assert cache.info().entries == 3 and cache.info().bytes <= cache.max_bytes


def test_reading_an_entry_makes_it_the_most_recently_used(tmp_path):
    texts = [book(seed=str(i)) for i in range(3)]
    probe = DocumentCache(tmp_path)
    for text in texts:
        probe.chunks(text, words=30)
    size = entry_bytes(tmp_path) // 3
    for i, text in enumerate(texts):  # oldest first on disk
        os.utime(tmp_path / entry_key(text, words=30) / "meta.json", (100 + i, 100 + i))
    DocumentCache(tmp_path).chunks(texts[0], words=30)  # read from disk: now the most recent
    DocumentCache(tmp_path, max_bytes=int(3.5 * size)).chunks(book(seed="new"), words=30)
    assert entry_key(texts[0], words=30) in entries(tmp_path)
    assert entry_key(texts[1], words=30) not in entries(tmp_path)


# -- damaged, foreign and unwritable ----------------------------------------------------------------------


def test_a_damaged_entry_is_dropped_with_one_warning_and_rebuilt(tmp_path, caplog):
    text = book()
    expected = DocumentCache(tmp_path).chunks(text, words=30)
    (key,) = entries(tmp_path)
    (tmp_path / key / "meta.json").write_text('{"format": "ragfunnel-document-1", "spans": [1, 2')
    with caplog.at_level(logging.WARNING):
        assert DocumentCache(tmp_path).chunks(text, words=30) == expected
        assert DocumentCache(tmp_path).chunks(text, words=30) == expected  # rebuilt: no second warning
    (warning,) = warnings_of(caplog)
    assert "damaged" in warning and key in warning
    assert json.loads((tmp_path / key / "meta.json").read_text())["key"] == key


@pytest.mark.parametrize("damage", ["truncated", "garbage", "wrong shape", "pickle"])
def test_a_damaged_part_is_dropped_with_one_warning_and_computed_again(tmp_path, caplog, damage):
    text = book()
    cache = DocumentCache(tmp_path)
    chunks = cache.chunks(text, words=30)
    expected = cache.chunk_tokens(chunks, Counting())
    (path,) = (tmp_path / entries(tmp_path)[0]).glob("tokens-*.npy")
    raw = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(raw[: len(raw) - 9])
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(raw)))
    elif damage == "wrong shape":
        np.save(path, np.arange(3, dtype=np.int64))
    else:
        np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    later = DocumentCache(tmp_path)
    with caplog.at_level(logging.WARNING):
        llm = Counting()
        assert later.chunk_tokens(later.chunks(text, words=30), llm) == expected and llm.counted
    (warning,) = warnings_of(caplog)
    assert "damaged" in warning and path.name in warning
    assert np.load(path).tolist()[:-1] == expected  # written again


def test_an_entry_of_another_version_is_never_found_and_one_that_claims_to_be_is_damaged(tmp_path, monkeypatch,
                                                                                          caplog):
    text = book()
    expected = DocumentCache(tmp_path).chunks(text, words=30)
    (key,) = entries(tmp_path)
    meta = json.loads((tmp_path / key / "meta.json").read_text())
    monkeypatch.setattr(document_cache, "__version__", "99.0")  # what another version writes goes elsewhere
    assert DocumentCache(tmp_path).chunks(text, words=30) == expected
    assert len(entries(tmp_path)) == 2
    monkeypatch.undo()
    (tmp_path / key / "meta.json").write_text(json.dumps({**meta, "version": "0.0.1", "spans": [0, 1, 1]}))
    with caplog.at_level(logging.WARNING):
        assert DocumentCache(tmp_path).chunks(text, words=30) == expected
    (warning,) = warnings_of(caplog)
    assert "damaged" in warning and json.loads((tmp_path / key / "meta.json").read_text()) == meta


@pytest.mark.parametrize("failure", ["not a directory", "disk full"])
def test_a_cache_dir_that_cannot_be_written_answers_without_it_with_one_warning(tmp_path, monkeypatch, caplog,
                                                                               embedder, failure):
    if failure == "not a directory":
        (tmp_path / "a-file").write_text("")
        root = tmp_path / "a-file" / "documents"  # mkdir fails even as root
    else:
        root = tmp_path / "documents"

        def full(path, data, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(document_cache, "write_atomic", full)
    cache = DocumentCache(root)
    monkeypatch.setattr(document_cache, "DOCUMENTS", cache)
    op = make_method("op", strong=Counting(), budget=120, chunk_words=30)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            p = op.run("Who was the last keeper of Gull Rock Light?", book(seed="x"))
            assert p.answer == "Ada Penhallow" and any("Penhallow" in sc.chunk.text for sc in p.chunks_used)
    (warning,) = warnings_of(caplog)
    assert "cannot keep document work" in warning and str(root) in warning
    assert ("disk is full" in warning) == (failure == "disk full")


def run_writer(root: str, text: str, rounds: int) -> None:
    """One of two processes writing the same entry over and over (a fresh cache each round, as a new process)."""
    for _ in range(rounds):
        cache = DocumentCache(root)
        chunks = cache.chunks(text, words=30)
        cache.chunk_tokens(chunks, Counting())
        cache.chunk_bm25(chunks)
        cache.text_tokens(text, Counting(), words=30)


def test_two_processes_writing_one_entry_never_give_a_reader_a_torn_file(tmp_path, caplog):
    text = book(120)
    expected = chunk_words(text, chunk_words=30)
    llm = Counting()
    counts = [len(c.text.split()) for c in expected]
    scores = BM25Index([c.text for c in expected]).score(["who kept the lamp?"])
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=run_writer, args=(str(tmp_path), text, 40)) for _ in range(2)]
    for w in writers:
        w.start()
    with caplog.at_level(logging.WARNING):
        reads = 0
        while any(w.is_alive() for w in writers) or reads < 5:
            reader = DocumentCache(tmp_path)
            chunks = reader.chunks(text, words=30)
            assert chunks == expected
            assert reader.chunk_tokens(chunks, llm) == counts
            np.testing.assert_array_equal(reader.chunk_bm25(chunks).score(["who kept the lamp?"]), scores)
            assert reader.text_tokens(text, llm, words=30) == len(text.split())
            reads += 1
    for w in writers:
        w.join(timeout=60)
        assert w.exitcode == 0
    assert warnings_of(caplog) == []
    assert not list(tmp_path.rglob("*.partial"))


# -- identical with and without, and the switches ---------------------------------------------------


def plain_text_tokens(text, llm, *, words, exact_up_to=None):
    """What :func:`text_tokens` promises, computed without any cache: the reference its results are held to."""
    if exact_up_to is not None:
        chunks = chunk_words(text, chunk_words=words)
        estimate = sum(llm.count_tokens(c.text) for c in chunks) + document_cache._boundaries(text, chunks)
        if estimate - document_cache.BOUNDARY_TOKENS * (len(chunks) + 1) > exact_up_to:
            return estimate
    return llm.count_tokens(text)


def without_the_cache(monkeypatch) -> None:
    """The work as it was done before the cache: the chunker, the models' own counts and a BM25 index built for
    each question, called directly."""
    monkeypatch.setattr(registry, "_disk_caches", False)
    def plain_chunks(text, *, words, doc_id="context"):
        return chunk_words(text, chunk_words=words, doc_id=doc_id)

    for where in ("ragfunnel.methods.base", "ragfunnel.retrieve.document_cache"):
        monkeypatch.setattr(f"{where}.document_chunks", plain_chunks)
    monkeypatch.setattr("ragfunnel.methods.base.chunk_tokens",
                        lambda chunks, llm: [llm.count_tokens(c.text) for c in chunks])
    monkeypatch.setattr("ragfunnel.methods.auto.text_tokens", plain_text_tokens)
    monkeypatch.setattr("ragfunnel.retrieve.ranking.chunk_bm25", lambda chunks: BM25Index([c.text for c in chunks]))
    monkeypatch.setattr("ragfunnel.retrieve.ranking.kept_vectors", lambda chunks, embedder, *, width: None)


@pytest.mark.parametrize("method", ["op", "fb", "auto"])
@pytest.mark.parametrize("paragraphs", [40, 300])  # within the strong model's window, and far past it
def test_answers_chunks_scores_and_the_plan_are_identical_with_and_without_the_cache(cache_root, monkeypatch,
                                                                                      embedder, method, paragraphs):
    text, question = book(paragraphs), "Who was the last keeper of Gull Rock Light?"
    for name in ("light", "strong"):
        monkeypatch.setitem(speed._measured, f"Counting:{name}", SpeedProfile(400, 40))
    monkeypatch.setattr("ragfunnel.methods.auto.LEDGER", None)  # what earlier questions cost: not this test's

    def answer():
        monkeypatch.setattr("ragfunnel.methods.auto.LEDGER", DocumentLedger())
        (cache_root.parent / "documents.json").unlink(missing_ok=True)
        p = make_method(method, light=Counting("light"), strong=Counting("strong"), budget=160, chunk_words=30,
                        **({"samples": 2} if method != "op" else {})).run(question, text)
        stages = p.trace.stages if p.trace else []
        return (p.answer, [(sc.chunk, sc.score) for sc in p.chunks_used],
                [(sc.chunk, sc.score) for sc in (p.ranking or [])],
                [s.detail for s in stages if s.name == "choose"])

    with monkeypatch.context() as plain:
        without_the_cache(plain)
        without = answer()
    assert not cache_root.exists()
    fresh_process(monkeypatch)
    cold = answer()
    fresh_process(monkeypatch)
    warm = answer()  # everything from disk
    assert entries(cache_root)
    document_cache.text_tokens(text, Counting("strong"), words=30)  # an exact count kept, as a user's run may
    fresh_process(monkeypatch)
    after = answer()
    assert without == cold == warm == after
    assert (method == "auto") == bool(without[3])
    chunks = document_cache.document_chunks(text, words=30)
    fresh_process(monkeypatch)
    np.testing.assert_array_equal(question_scores(question, document_cache.document_chunks(text, words=30)),
                                  question_scores(question, list(chunks)))


def test_no_cache_keeps_it_off_the_disk(cache_root, monkeypatch, embedder):
    monkeypatch.setattr(registry, "_disk_caches", False)
    make_method("op", strong=Counting(), budget=120, chunk_words=30).run("Who kept the lamp?", book())
    assert not cache_root.exists()


def test_ragfunnel_cache_shows_and_clears_the_documents(cache_root, embedder):
    make_method("op", strong=Counting(), budget=120, chunk_words=30).run("Who kept the lamp?", book())
    (key,) = entries(cache_root)
    shown = CliRunner().invoke(main, ["cache", "info"])
    assert shown.exit_code == 0, shown.output
    assert f"{cache_root}: 1 documents'" in shown.output
    as_json = json.loads(CliRunner().invoke(main, ["cache", "info", "--json"]).output)
    assert as_json["documents"]["entries"] == 1 and as_json["documents"]["bytes"] > 0
    cleared = CliRunner().invoke(main, ["cache", "clear"])
    assert cleared.exit_code == 0 and f"removed 1 documents' work from {cache_root}" in cleared.output
    assert entries(cache_root) == []


# -- hostile and damaged files, and what the cache dir may be -------------------------------------------


def npy_header_only(shape: tuple[int, ...]) -> bytes:
    """An .npy file whose header promises ``shape`` int64s, followed by two of them."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<i8", "fortran_order": False, "shape": shape})
    return buffer.getvalue() + np.zeros(2, dtype=np.int64).tobytes()


def npz_of(members: dict[str, bytes], *, compression: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.mark.parametrize("damage", ["truncated", "a flipped byte", "compressed", "a member not .npy",
                                    "a header promising terabytes", "another width"])
def test_damaged_or_hostile_array_files_are_dropped_with_one_warning_and_the_work_done_again(tmp_path, caplog,
                                                                                            damage):
    text = book()
    cache = DocumentCache(tmp_path)
    chunks = cache.chunks(text, words=30)
    counts = cache.chunk_tokens(chunks, Counting())
    scores = cache.chunk_bm25(chunks).score(["who kept the lamp?"])
    cache.kept_vectors(chunks, "embedder", width=WIDTH).add({b"k" * 20: np.ones(WIDTH, dtype=np.float32)})
    directory = tmp_path / entries(tmp_path)[0]
    (bm25,), (tokens,), (vectors,) = (list(directory.glob(f"{part}-*")) for part in ("bm25", "tokens", "vectors"))
    raw = bm25.read_bytes()
    if damage == "truncated":  # a write that never reached the disk whole
        bm25.write_bytes(raw[: len(raw) // 2])
    elif damage == "a flipped byte":
        bm25.write_bytes(raw[:200] + bytes([raw[200] ^ 0xFF]) + raw[201:])
    elif damage == "compressed":
        with np.load(bm25) as arrays:
            buffer = io.BytesIO()
            np.savez_compressed(buffer, **{k: arrays[k] for k in arrays.files})
        bm25.write_bytes(buffer.getvalue())
    elif damage == "a member not .npy":
        bm25.write_bytes(npz_of({"ids.npy": b"not an array", "lengths": b"", "terms.txt": b"x"}))
    elif damage == "a header promising terabytes":
        tokens.write_bytes(npy_header_only((1 << 40,)))
    else:
        vectors.write_bytes(npz_of({"keys.npy": npy_bytes(np.zeros((1, 20), dtype=np.uint8)),
                                    "vectors.npy": npy_bytes(np.ones((1, 16), dtype=np.float32))}))
    damaged = {"a header promising terabytes": tokens, "another width": vectors}.get(damage, bm25)
    later = DocumentCache(tmp_path)
    with caplog.at_level(logging.WARNING):
        chunks = later.chunks(text, words=30)
        assert later.chunk_tokens(chunks, Counting()) == counts
        np.testing.assert_array_equal(later.chunk_bm25(chunks).score(["who kept the lamp?"]), scores)
        assert later.kept_vectors(chunks, "embedder", width=WIDTH).get([b"\0" * 20]) == {}
    (warning,) = warnings_of(caplog)
    assert "damaged" in warning and damaged.name in warning
    assert damaged == vectors or damaged.exists()  # computed again and written again (vectors: when added to)


def test_a_planted_symbolic_link_is_never_followed_for_an_entry_or_a_part(tmp_path, caplog):
    text, elsewhere = book(), tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "documents"
    root.mkdir()
    key = entry_key(text, words=30)
    (root / key).symlink_to(elsewhere, target_is_directory=True)  # before the entry is ever written
    cache = DocumentCache(root)
    with caplog.at_level(logging.WARNING):
        chunks = cache.chunks(text, words=30)
        cache.chunk_tokens(chunks, Counting())
    assert list(elsewhere.iterdir()) == []  # nothing written through the link
    assert (root / key).is_dir() and not (root / key).is_symlink()

    shutil.copytree(root / key, elsewhere, dirs_exist_ok=True)
    shutil.rmtree(root / key)
    (root / key).symlink_to(elsewhere, target_is_directory=True)  # after: an entry that reads well, elsewhere
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert DocumentCache(root).chunks(text, words=30) == chunks
    (warning,) = warnings_of(caplog)
    assert "symbolic link" in warning and not (root / key).is_symlink()
    assert sorted(p.name for p in elsewhere.iterdir())[0] == "meta.json"  # what it pointed at is left alone

    counting = DocumentCache(root)
    counting.chunk_tokens(counting.chunks(text, words=30), Counting())
    (tokens,) = (root / key).glob("tokens-*.npy")
    outside = tmp_path / "outside.npy"
    np.save(outside, np.zeros(len(chunks) + 1, dtype=np.int64))  # well formed, and wrong
    tokens.unlink()
    tokens.symlink_to(outside)
    caplog.clear()
    later = DocumentCache(root)
    with caplog.at_level(logging.WARNING):
        assert later.chunk_tokens(later.chunks(text, words=30), Counting()) == [len(c.text.split()) for c in chunks]
    (warning,) = warnings_of(caplog)
    assert "symbolic link" in warning and not tokens.is_symlink()
    assert np.load(outside).tolist() == [0] * (len(chunks) + 1)


def test_a_cache_dir_setting_that_names_a_file_answers_without_the_cache_with_one_warning(tmp_path, monkeypatch,
                                                                                        caplog, embedder):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "a-file"))
    monkeypatch.setattr(registry, "_disk_caches", True)
    monkeypatch.setattr(document_cache, "DOCUMENTS", DocumentCache())
    op = make_method("op", strong=Counting(), budget=120, chunk_words=30)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            p = op.run("Who was the last keeper of Gull Rock Light?", book(seed="x"))
            assert p.answer == "Ada Penhallow" and any("Penhallow" in sc.chunk.text for sc in p.chunks_used)
    (warning,) = warnings_of(caplog)
    assert "is a file, not a directory" in warning and "memory only" in warning


def test_an_entry_that_cannot_be_read_now_is_worked_on_without_the_cache_and_kept(tmp_path, monkeypatch, caplog):
    text = book()
    expected = DocumentCache(tmp_path).chunks(text, words=30)
    (key,) = entries(tmp_path)

    def failing(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(document_cache, "read_json_file", failing)
    monkeypatch.setattr(document_cache, "read_regular_file", failing)
    with caplog.at_level(logging.WARNING):
        later = DocumentCache(tmp_path)
        chunks = later.chunks(text, words=30)
        assert chunks == expected and later.chunk_tokens(chunks, Counting()) == [len(c.text.split()) for c in chunks]
    (warning,) = warnings_of(caplog)
    assert "cannot read" in warning and "Input/output error" in warning
    assert entries(tmp_path) == [key]  # not removed: the disk may read again


def test_a_models_name_alone_keeps_no_counts_on_disk_and_llama_cpp_names_its_version_and_weights(tmp_path):
    cache = DocumentCache(tmp_path)
    chunks = cache.chunks(book(), words=30)
    assert FakeLLM(lambda p, i: "").tokenizer_identity is None  # a name says nothing of the counts
    assert cache.chunk_tokens(chunks, FakeLLM(lambda p, i: "")) == [len(c.text.split()) for c in chunks]
    assert not list((tmp_path / entries(tmp_path)[0]).glob("tokens-*"))
    assert FirstCallProbe(Counting("strong")).tokenizer_identity == Counting("strong").tokenizer_identity
    llama_cpp = pytest.importorskip("llama_cpp")
    from ragfunnel.llm.llamacpp import LlamaCppLLM

    llm = LlamaCppLLM(tmp_path / "model.gguf", sha256="ab" * 32)
    assert llm.tokenizer_identity == f"llama.cpp {llama_cpp.__version__}:{'ab' * 32}"


def test_counts_written_by_two_processes_are_merged_not_replaced(tmp_path):
    text = book()
    one, other = DocumentCache(tmp_path), DocumentCache(tmp_path)
    chunks_one, chunks_other = one.chunks(text, words=30), other.chunks(text, words=30)
    name = f"tokens-{document_cache.part_id(Counting().tokenizer_identity)}.npy"
    other._tokens(other._entry_of(chunks_other), name)  # read before the first one wrote: nothing counted
    one.chunk_tokens(chunks_one, Counting())
    exact = one.text_tokens(text, Counting(), words=30)
    fresh = Counting()
    assert DocumentCache(tmp_path).text_tokens(text, fresh, words=30) == exact and fresh.counted == []
    other_llm = Counting()
    other.chunk_tokens(chunks_other, other_llm)  # counted again in memory there, and merged with the disk's
    fresh = Counting()
    assert DocumentCache(tmp_path).text_tokens(text, fresh, words=30) == exact and fresh.counted == []


def test_a_context_with_lone_surrogates_makes_one_entry(cache_root, monkeypatch, embedder):
    monkeypatch.setitem(speed._measured, "Counting:strong", SpeedProfile(400, 40))
    monkeypatch.setitem(speed._measured, "Counting:light", SpeedProfile(400, 40))
    auto = make_method("auto", light=Counting("light"), strong=Counting("strong"), budget=160, chunk_words=30)
    auto.plan("Who kept the lamp?", book() + " \ud800")
    assert len(entries(cache_root)) == 1


# -- threads and processes at once ------------------------------------------------------------------------


def test_threads_sharing_the_cache_get_the_term_ids_of_a_run_alone(cache_root):
    texts = [book(150, seed=f"{i}{i}x ") for i in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(texts) + 1)

    def ask(text: str) -> None:
        try:
            start.wait()
            chunks = document_cache.document_chunks(text, words=30)
            document_cache.chunk_bm25(chunks).score(["who kept the lamp?"])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def query() -> None:
        start.wait()
        for _ in range(30):
            BM25Index([FILLER, PARAGRAPH]).score(["the keeper of the lamp"])

    threads = [threading.Thread(target=ask, args=(t,)) for t in texts] + [threading.Thread(target=query)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for text in texts:
        alone = tokenize_ids(c.text for c in chunk_words(text, chunk_words=30))
        (path,) = (cache_root / entry_key(text, words=30)).glob("bm25-*.npz")
        with np.load(path) as kept:
            np.testing.assert_array_equal(kept["ids"], alone.ids)
            np.testing.assert_array_equal(kept["lengths"], alone.lengths)
            assert kept["terms"].tobytes().decode().split("\n") == list(alone.vocab)


def test_eviction_racing_a_live_writer_never_breaks_either(tmp_path, caplog):
    text, root = book(60), tmp_path / "documents"
    expected = chunk_words(text, chunk_words=30)
    counts = [len(c.text.split()) for c in expected]
    errors: list[BaseException] = []
    done = threading.Event()

    def write() -> None:
        try:
            for _ in range(60):
                cache = DocumentCache(root)  # a fresh process each time
                chunks = cache.chunks(text, words=30)
                assert chunks == expected and cache.chunk_tokens(chunks, Counting()) == counts
                cache.chunk_bm25(chunks)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            done.set()

    def evict() -> None:
        i = 0
        while not done.is_set():
            DocumentCache(root, max_bytes=1).chunks(book(3, seed=str(i)), words=30)  # removes every other entry
            i += 1

    threads = [threading.Thread(target=write), threading.Thread(target=evict)]
    with caplog.at_level(logging.WARNING):
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == [] and warnings_of(caplog) == []
    DocumentCache(root).clear()
    assert list(root.iterdir()) == []


# -- the code the entries were made by -----------------------------------------------------------------------

# What the chunker and BM25's tokeniser make of GOLDEN_TEXT, hashed, for each FORMAT. Entries are found by FORMAT
# (and ragfunnel's version, which does not change with every commit): a change to either function that keeps
# FORMAT would serve the old chunks and terms.
GOLDEN_TEXT = ("Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my "
               "purse,\n\nand nothing particular to interest me on shore, I thought I would sail about a little "
               "and see the watery part of the world. 海上的日子很长。 Über-Straße\u00a0x  y")
GOLDEN = {"ragfunnel-document-1": "67bcbddf2cd83fe8188423cb18f3a1f588fd557e6fa38d1e9332d2ced4706272"}


def test_the_chunks_and_term_ids_are_the_ones_format_was_written_for():
    chunks = chunk_words(GOLDEN_TEXT, chunk_words=7)
    # Terms of the chunks without Chinese: how Chinese is cut depends on whether jieba is installed, which
    # tokeniser_identity() already tells apart.
    tokens = tokenize_ids(c.text for c in chunks if not re.search(HAN_CHARACTER, c.text))
    made = json.dumps([[(c.start, len(c.text), c.n_words) for c in chunks], tokens.ids.tolist(),
                       tokens.lengths.tolist(), list(tokens.vocab), document_cache._boundaries(GOLDEN_TEXT, chunks)],
                      ensure_ascii=False)
    digest = hashlib.sha256(made.encode()).hexdigest()
    assert document_cache.FORMAT in GOLDEN, f"add {document_cache.FORMAT!r}: {digest!r} to GOLDEN"
    assert digest == GOLDEN[document_cache.FORMAT], (
        "the chunker or BM25's terms changed: bump document_cache.FORMAT and add the new digest to GOLDEN "
        f"({digest!r}), so no entry made by the old code is served (if a package upgrade changed the terms, "
        "tokeniser_identity() already keeps them apart: update the digest alone)")


# -- a real tokenizer ------------------------------------------------------------------------------------------

DOCUMENTS_REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "documents_real"


class VocabularyCounts(BaseLLM):
    """Counts with a GGUF model's vocabulary alone (no weights)."""

    def __init__(self, vocab) -> None:
        super().__init__()
        self.name, self._vocab = "vocabulary", vocab

    def _count_tokens(self, text: str) -> int:
        return self._vocab.count_tokens(text.encode("utf-8"))


@pytest.mark.model
def test_the_chunks_sum_is_within_the_boundary_bound_of_the_whole_texts_count_on_real_prose():
    from ragfunnel.documents.read import read_document
    from ragfunnel.llm import bundled
    from ragfunnel.llm.gguf import GGUFVocab

    book_path = DOCUMENTS_REAL / "epub" / "moby-dick.epub"
    if not book_path.exists():
        pytest.skip(f"shared documents not found at {book_path}")
    pytest.importorskip("llama_cpp")
    status = bundled.status("qwen2.5-0.5b")
    if not status.ready:
        pytest.skip(f"bundled:qwen2.5-0.5b is not ready ({status.note})")
    text = read_document(book_path).text[:120_000]
    vocab = GGUFVocab(Path(status.path))
    try:
        llm = VocabularyCounts(vocab)
        cache = DocumentCache(None)
        for words in (30, 100):
            chunks = cache.chunks(text, words=words)
            estimate = cache.text_tokens(text, llm, words=words, exact_up_to=0)
            exact = cache.text_tokens(text, llm, words=words)
            assert abs(estimate - exact) <= document_cache.BOUNDARY_TOKENS * (len(chunks) + 1), (estimate, exact)
            assert estimate != sum(llm.count_tokens(c.text) for c in chunks) or exact == estimate
    finally:
        vocab.close()


def test_fb_tells_a_book_past_the_light_window_from_its_chunks_counts_without_reading_it_whole(cache_root):
    from ragfunnel.methods.base import prepare  # noqa: PLC0415
    from ragfunnel.methods.fbrag import FBRAG  # noqa: PLC0415
    book = " ".join(f"word{i}" for i in range(100_000))  # about 12 times the light model's 8,192-token window
    light = Counting("light")
    question, chunks = prepare("What is word7?", book, words=100)
    assert not FBRAG().document_fits(light, chunks, question=question, choices=None)
    assert max(len(t) for t in light.counted) < len(book) / 10  # chunk by chunk, never the whole book
    assert len(light.counted) == document_cache.COUNT_BATCH < len(chunks)  # and only until it is past the window


@pytest.mark.parametrize("kept", [False, True])
def test_tokens_past_answers_as_the_whole_sum_does(cache_root, kept):
    llm = Counting()
    cache = DocumentCache()
    text = " ".join(f"w{i}" for i in range(1_000))  # 100 chunks of 10 words: 1,000 tokens in all
    chunks = cache.chunks(text, words=10) if kept else chunk_words(text, chunk_words=10)
    for limit, slack, past in [(999, 0, True), (1_000, 0, False), (797, 2, True), (798, 2, False), (0, 0, True)]:
        assert cache.tokens_past(chunks, llm, limit, slack=slack) is past, (limit, slack)
    assert cache.chunk_tokens(chunks, llm) == [10] * 100


# -- a file's reading, kept (ragfunnel.documents.read_cache) ------------------------------------------------------


@pytest.fixture
def counted_readers(monkeypatch) -> list[str]:
    """Each reader's calls, by format; the readers still read."""
    from ragfunnel.documents import read as read_module  # noqa: PLC0415

    calls: list[str] = []
    real = read_module._reader

    def counting(kind):
        reader = real(kind)
        return lambda path, limits: (calls.append(kind), reader(path, limits))[1]

    monkeypatch.setattr(read_module, "_reader", counting)
    return calls


def test_a_pdf_and_an_epub_are_read_once_and_given_back_whole_under_the_name_given_now(cache_root, counted_readers,
                                                                                     tmp_path):
    from ragfunnel.documents import read_document  # noqa: PLC0415
    from tests.helpers.documents import make_epub, make_pdf  # noqa: PLC0415

    pdf = make_pdf(tmp_path / "report.pdf", ["First page text.", "Second page text."], roman_first=1)
    epub = make_epub(tmp_path / "book.epub", [("One", "The first chapter."), ("Two", "The second chapter.")])
    for path in (pdf, epub):
        first = read_document(path)
        copy = tmp_path / f"copy-of-{path.name}"
        shutil.copyfile(path, copy)
        again = read_document(copy)
        assert (again.format, again.text, again.sections, again.pages) == (first.format, first.text, first.sections,
                                                                           first.pages)
        assert again.name == copy.name and again.section_at(len(again.text) - 1) == first.sections[-1]
    assert counted_readers == ["pdf", "epub"]
    assert DocumentCache(cache_root).info().entries == 2
    assert CliRunner().invoke(main, ["cache", "clear"]).exit_code == 0
    read_document(pdf)
    assert counted_readers == ["pdf", "epub", "pdf"]


def test_a_changed_file_or_other_limits_are_read_again_and_no_cache_reads_every_time(cache_root, counted_readers,
                                                                                    tmp_path):
    from ragfunnel.documents import ReadLimits, read_document  # noqa: PLC0415
    from ragfunnel.llm import set_disk_caches  # noqa: PLC0415
    from tests.helpers.documents import make_epub  # noqa: PLC0415

    path = make_epub(tmp_path / "book.epub", [("One", "Before the change.")])
    read_document(path)
    make_epub(path, [("One", "After the change.")])
    assert "After the change." in read_document(path).text
    read_document(path, ReadLimits(max_document_mb=10))
    assert counted_readers == ["epub"] * 3
    set_disk_caches(False)
    try:
        read_document(path)
        read_document(path)
    finally:
        set_disk_caches(True)
    assert counted_readers == ["epub"] * 5


@pytest.mark.parametrize("damage", ["not json", '{"reading": "ragfunnel-read-1"}', "sections"])
def test_a_damaged_reading_is_dropped_with_one_warning_and_read_again(cache_root, counted_readers, tmp_path, caplog,
                                                                      damage):
    from ragfunnel.documents import read_document  # noqa: PLC0415
    from tests.helpers.documents import make_epub  # noqa: PLC0415

    path = make_epub(tmp_path / "book.epub", [("One", "The only chapter.")])
    first = read_document(path)
    (meta,) = cache_root.glob(f"*/{document_cache.META}")
    if damage == "sections":
        record = json.loads(meta.read_text())
        record["sections"][0][1] = 10**6  # past the text's end
        damage = json.dumps(record)
    meta.write_text(damage)
    with caplog.at_level(logging.WARNING):
        assert read_document(path).text == first.text
    assert counted_readers == ["epub", "epub"]
    assert sum("damaged" in r.getMessage() for r in caplog.records) == 1
