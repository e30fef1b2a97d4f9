"""The document cache (a book read once): keys, the size bound, damaged and foreign entries, an unwritable
directory, concurrent writers, `ragfunnel cache`, and answers identical with and without it. No model loads: a
FakeLLM counts tokens and a hashing embedder stands in for MiniLM."""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import multiprocessing
import os

import numpy as np
import pytest
from click.testing import CliRunner

import ragfunnel.retrieve.document_cache as document_cache
from ragfunnel.cli.main import main
from ragfunnel.llm import FakeLLM, registry, speed
from ragfunnel.llm.speed import SpeedProfile
from ragfunnel.methods import make_method
from ragfunnel.retrieve.bm25 import BM25Index
from ragfunnel.retrieve.document_cache import DIRECTORY, DocumentCache, entry_key
from ragfunnel.retrieve.ranking import PieceVectors, question_scores
from ragfunnel.text import chunk_words

PARAGRAPH = ("Gull Rock Light stands on a granite ledge two miles off the harbour. Its last keeper, Ada "
             "Penhallow, kept the lamp from 1931 until the light was automated in 1968. ")
FILLER = "The tide ran over the shoals and the fishing boats came home before the fog closed the channel. "


def book(n: int = 40, seed: str = "") -> str:
    """A text of ``n`` paragraphs, one of them about the keeper; ``seed`` makes another text."""
    return "\n\n".join(PARAGRAPH if i == n // 2 else f"{seed}{FILLER}{i} " * 3 for i in range(n))


class Counting(FakeLLM):
    """Counts tokens as whitespace words, and records the texts it counted and each batch it was given."""

    def __init__(self, name: str = "fake") -> None:
        super().__init__(lambda prompt, i: "Ada Penhallow", name=name, context_window=8192)
        self.counted: list[str] = []
        self.batches = 0

    def _count_tokens(self, text: str) -> int:
        self.counted.append(text)
        return super()._count_tokens(text)

    def _count_tokens_many(self, texts: list[str]) -> list[int]:
        self.batches += 1
        return super()._count_tokens_many(texts)


class HashingEmbedder:
    """Deterministic unit vectors from the words of a text, and a record of what it embedded."""

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.encoded.extend(texts)
        out = np.zeros((len(texts), 16), dtype=np.float32)
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
    cache.kept_vectors(chunks, "embedder A").add({b"k" * 20: np.ones(4, dtype=np.float32)})
    assert cache.kept_vectors(chunks, "embedder B").get([b"k" * 20]) == {}  # another embedder has none
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
    assert later.text_tokens(text, fresh, words=30, exact_up_to=10) == exact and fresh.counted == []  # kept


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


def test_an_entry_of_another_version_is_ignored_and_rebuilt(tmp_path, monkeypatch, caplog):
    text = book()
    expected = DocumentCache(tmp_path).chunks(text, words=30)
    (key,) = entries(tmp_path)
    meta = json.loads((tmp_path / key / "meta.json").read_text())
    (tmp_path / key / "meta.json").write_text(json.dumps({**meta, "version": "0.0.1", "spans": [0, 1, 1]}))
    with caplog.at_level(logging.WARNING):
        assert DocumentCache(tmp_path).chunks(text, words=30) == expected
    assert warnings_of(caplog) == [] and json.loads((tmp_path / key / "meta.json").read_text()) == meta
    monkeypatch.setattr(document_cache, "__version__", "99.0")  # what a later version writes goes elsewhere
    assert DocumentCache(tmp_path).chunks(text, words=30) == expected
    assert len(entries(tmp_path)) == 2


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


@pytest.mark.parametrize("method", ["op", "fb", "auto"])
def test_answers_chunks_and_scores_are_identical_with_and_without_the_cache(cache_root, monkeypatch, embedder,
                                                                            method):
    text, question = book(300), "Who was the last keeper of Gull Rock Light?"

    for name in ("light", "strong"):
        monkeypatch.setitem(speed._measured, f"Counting:{name}", SpeedProfile(400, 40))

    def answer():
        p = make_method(method, light=Counting("light"), strong=Counting("strong"), budget=160, chunk_words=30,
                        **({"samples": 2} if method != "op" else {})).run(question, text)
        return (p.answer, [(sc.chunk, sc.score) for sc in p.chunks_used],
                [(sc.chunk, sc.score) for sc in (p.ranking or [])])

    monkeypatch.setattr(registry, "_disk_caches", False)
    without = answer()
    assert not cache_root.exists()
    monkeypatch.setattr(registry, "_disk_caches", True)
    fresh_process(monkeypatch)
    cold = answer()
    fresh_process(monkeypatch)
    warm = answer()  # everything from disk
    assert entries(cache_root)
    assert without == cold == warm
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
