"""Hostile input on the corpus side: damaged or forged index manifests, corpora whose fields have the
wrong types, and pre-/post-ranker specs that name no model. Each is refused with one typed line that
names the bad file or value and the fix. No model is loaded and the network is never reached."""

import hashlib
import json
import os
import socket
import sys
import time

import pytest

from ragfunnel.bounded import RefusedPath, UnreadableFile
from ragfunnel.corpus import load_corpus, readers
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.corpus.index_build import build_index
from ragfunnel.corpus.readers import MAX_CORPUS_LINE_BYTES, MAX_JSON_CORPUS_BYTES
from ragfunnel.errors import ConfigError, InputError, ModelError
from ragfunnel.types import Document

REBUILD = "rebuild it with `ragfunnel index CORPUS --out"


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


def corpus():
    return [Document("a", "Gull Rock", "The lighthouse on Gull Rock was built of granite.", ("Martha Quill",)),
            Document("b", "Martha Quill", "Martha Quill kept the Gull Rock light for thirty years.", ("Gull Rock",)),
            Document("c", "Seabirds", "Puffins and gannets nest on the cliffs every spring.")]


@pytest.fixture
def index(tmp_path):
    build_index(corpus(), tmp_path / "ix", source="test")
    return tmp_path / "ix"


def manifest_of(root) -> dict:
    return json.loads((root / "manifest.json").read_text())


def forge(root, **changes) -> None:
    """Edit the manifest as a forger would: the changes, then a checksum recomputed to match them."""
    data = {k: v for k, v in {**manifest_of(root), **changes}.items() if k != "manifest_sha256"}
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    data["manifest_sha256"] = hashlib.sha256(canonical).hexdigest()
    (root / "manifest.json").write_text(json.dumps(data))


def refused(root, match: str) -> str:
    with pytest.raises(InputError, match=match) as error:
        CorpusIndex(root)
    return one_line(error)


# --- the index manifest ---------------------------------------------------------------------------------

@pytest.mark.parametrize("content", [b'{"format": "ragfunnel-corpus-index", "version": 2, "x": "\xff"}',
                                     b"not json", b"[" * 100_000])
def test_a_manifest_that_is_not_utf8_json_is_refused_with_the_rebuild_command(index, content):
    (index / "manifest.json").write_bytes(content)
    message = refused(index, r"manifest.json is corrupted \(not UTF-8 JSON\)")
    assert f"{REBUILD} {index} --force`" in message


def test_a_manifest_of_the_wrong_json_type_is_refused(index):
    (index / "manifest.json").write_text(json.dumps([manifest_of(index)]))
    assert REBUILD in refused(index, r"manifest.json is corrupted \(a JSON list, not an object\)")


@pytest.mark.parametrize("changes, match", [
    ({"files": "documents.jsonl"}, "'files' is str, not an object of file names"),
    ({"documents": "3"}, "'documents' is str, not int"),
    ({"clusters": True}, "'clusters' is bool, not int"),
    ({"edges": -1}, "'edges' is negative"),
    ({"build_seconds": None}, "'build_seconds' is NoneType, not float"),
    ({"files": {"documents.jsonl": "3368ffc9"}}, r"the entry of 'documents.jsonl' is not \{"),
])
def test_manifest_fields_of_the_wrong_type_are_refused(index, changes, match):
    forge(index, **changes)
    assert REBUILD in refused(index, match)


def test_an_empty_file_list_does_not_skip_the_checks(index):
    files = manifest_of(index)["files"]
    forge(index, files={})
    refused(index, "'files' does not list documents.jsonl")
    forge(index, files={k: v for k, v in files.items() if k != "documents.bm25/params.index.json"})
    refused(index, "'files' does not list documents.bm25/params.index.json")


@pytest.mark.parametrize("name", ["../../etc/hostname", "/etc/hostname", "documents.bm25/../../x", "", "."])
def test_file_names_outside_the_index_are_refused_before_anything_is_read(index, monkeypatch, name):
    def no_reading(path):
        raise AssertionError(f"{path} was hashed")

    monkeypatch.setattr("ragfunnel.corpus.index.file_sha256", no_reading)
    forge(index, files={**manifest_of(index)["files"], name: {"bytes": 1, "sha256": "0" * 64}})
    refused(index, "is not a relative path inside the index directory")


def test_a_symlink_out_of_the_index_is_refused(index, tmp_path):
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_bytes((index / "documents.jsonl").read_bytes())  # same bytes: its checksum matches
    (index / "documents.jsonl").unlink()
    (index / "documents.jsonl").symlink_to(outside)
    refused(index, "documents.jsonl leads outside the index directory")


def test_an_edited_manifest_no_longer_matches_its_checksum(index):
    (index / "manifest.json").write_text(json.dumps({**manifest_of(index), "documents": 999999}))
    assert REBUILD in refused(index, "manifest.json was altered")


@pytest.mark.parametrize("changes, match", [
    ({"documents": 999999}, "documents.offsets.npy has 4 rows where the manifest implies 1000000"),
    ({"clusters": 999999}, "clusters.offsets.npy has 3 rows where the manifest implies 1000000"),
    ({"passages": 999999}, "'files' does not list flat.spans.npy"),
])
def test_forged_counts_are_refused_against_the_files(index, changes, match):
    forge(index, **changes)
    assert REBUILD in refused(index, match)


def test_a_forged_count_is_refused_without_verifying_checksums_too(index):
    forge(index, documents=2)
    refused(index, "has 4 rows where the manifest implies 3")
    with pytest.raises(InputError, match="where the manifest implies 3"):
        CorpusIndex(index, verify=False)


def test_an_index_from_before_manifest_checksums_is_refused(index):
    (index / "manifest.json").write_text(json.dumps(
        {k: v for k, v in manifest_of(index).items() if k != "manifest_sha256"}))
    assert REBUILD in refused(index, "carries no checksum")


def test_a_damaged_manifest_is_rebuilt_only_when_asked(index):
    (index / "manifest.json").write_text("[]")
    with pytest.raises(ConfigError, match="or a damaged one; set force") as error:
        build_index(corpus(), index, source="test")
    one_line(error)
    assert build_index(corpus(), index, source="test", force=True).documents == 3
    assert len(CorpusIndex(index)) == 3


# --- corpus readers -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, rows, match", [
    ("c.jsonl", [{"title": "A", "text": 5}], r"c.jsonl:1: 'text' must be a string, not a number"),
    ("c.jsonl", [{"title": 7, "text": "t"}], r"c.jsonl:1: 'title' must be a string, not a number"),
    ("c.jsonl", [{"title": "A", "text": "t", "links": "B"}],
     r"c.jsonl:1: 'links' must be a list of titles, not a string"),
    ("c.jsonl", [{"title": "A", "text": "t"}, {"title": "B", "text": "u", "links": [1]}],
     r"c.jsonl:2: 'links' must be a list of titles, not a list holding a number"),
    ("c.jsonl", [{"title": "A", "text": "t", "links": 0}], r"'links' must be a list of titles, not a number"),
    ("c.jsonl", [{"id": {"n": 1}, "text": "t"}], r"c.jsonl:1: 'id' must be a string or a whole number, not an object"),
    ("c.jsonl", [{"id": "1", "contents": 5}], r"c.jsonl:1: 'contents' must be a string, not a number"),
    ("c.jsonl", [{"wikipedia_title": "A", "text": [1, 2]}],
     r"c.jsonl:1: 'text' must be a list of paragraphs \(strings\), not a list holding a number"),
    ("c.jsonl", [{"wikipedia_title": 3, "text": ["A", "x"]}], r"'wikipedia_title' must be a string, not a number"),
    ("c.json", {"Gull Rock": [1, 2]}, r"c.json, title 'Gull Rock': 'sentences' must be a list of sentences"),
    ("c.json", {"Gull Rock": 5}, r"'sentences' must be a list of sentences \(strings\) or a string, not a number"),
    ("c.json", [{"title": "A", "text": "t"}, {"title": "B", "text": ["u"]}],
     r"c.json, passage 2: 'text' must be a string, not a list"),
])
def test_corpus_fields_of_the_wrong_type_name_file_row_and_field(tmp_path, name, rows, match):
    path = tmp_path / name
    path.write_text("\n".join(map(json.dumps, rows)) if name.endswith(".jsonl") else json.dumps(rows))
    with pytest.raises(InputError, match=match) as error:
        load_corpus(path)
    assert one_line(error).endswith("fix the row")


def test_null_stands_for_an_absent_optional_field(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": None, "title": None, "text": "t", "links": None}) + "\n"
                    + json.dumps({"id": 7, "title": "B", "text": "u"}) + "\n")
    assert load_corpus(path) == [Document("1", "", "t"), Document("7", "B", "u")]


def test_a_deeply_nested_corpus_row_is_refused(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("[" * 100_000 + "\n")
    with pytest.raises(InputError, match="c.jsonl:1: JSON nested too deeply") as error:
        load_corpus(path)
    one_line(error)


@pytest.mark.parametrize("page, match", [
    ("<ns>0</ns><id>2</id><revision><text>Text.</text></revision>", r"page 2 has no <title>"),
    ("<title> </title><ns>0</ns><id>2</id><revision><text>Text.</text></revision>", r"page 2 has no <title>"),
    ("<title>B</title><ns>0</ns><revision><text>Text.</text></revision>", r"page 2 has no <id>"),
])
def test_a_mediawiki_page_without_title_or_id_is_refused(tmp_path, page, match):
    pytest.importorskip("mwparserfromhell")
    path = tmp_path / "dump.xml"
    path.write_text("<mediawiki><page><title>A</title><ns>0</ns><id>1</id><revision><text>See [[B]].</text>"
                    f"</revision></page><page>{page}</page></mediawiki>")
    with pytest.raises(InputError, match=match) as error:
        load_corpus(path)
    assert one_line(error).endswith("fix the export (MediaWiki writes a <title> and an <id> for every page)")


def test_a_sparse_corpus_file_stops_at_the_line_limit(tmp_path):
    path = tmp_path / "c.jsonl"
    path.touch()
    os.truncate(path, MAX_CORPUS_LINE_BYTES + (1 << 20))  # NULs without a newline, taking no disk
    with pytest.raises(UnreadableFile) as error:
        load_corpus(path)
    assert one_line(error) == (f"corpus file {path} is over {MAX_CORPUS_LINE_BYTES:,} bytes on line 1; pass a "
                               f"JSON Lines corpus: one passage a line, each under {MAX_CORPUS_LINE_BYTES >> 20} MiB")


def test_a_json_corpus_over_its_cap_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "MAX_JSON_CORPUS_BYTES", 1000)  # so a regression reads a kilobyte, not gigabytes
    path = tmp_path / "c.json"
    path.write_text("{")
    os.truncate(path, 1001)
    with pytest.raises(RefusedPath, match=r"c.json is 1,001 bytes, over the limit of 1,000; pass a regular file of "
                                          f"at most {MAX_JSON_CORPUS_BYTES >> 30} GiB, or a larger corpus as "
                                          "JSON Lines") as error:
        load_corpus(path)
    one_line(error)


def test_a_corpus_id_of_5000_digits_is_one_line_naming_file_and_row(tmp_path):
    digits, limit = "1" * 5000, f"{sys.get_int_max_str_digits():,}"
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": 1, "text": "t"}) + "\n" + f'{{"id": {digits}, "text": "u"}}\n')
    with pytest.raises(InputError) as error:
        load_corpus(path)
    assert one_line(error) == (f"{path}:2: 'id' has over {limit} digits, more than Python reads as a number; "
                               "write it as a string")
    path = tmp_path / "c.json"
    path.write_text(f'[{{"id": {digits}, "text": "u"}}]')
    with pytest.raises(InputError, match=f"c.json: a number has over {limit} digits") as error:
        load_corpus(path)
    one_line(error)


# --- pre- and post-ranker specs -------------------------------------------------------------------------

@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test: loading must look only at local files."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model loader reached for the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def not_a_model(tmp_path, kind: str):
    """A path that is no transformers model directory, and the problem the error should name."""
    directory = tmp_path / kind
    directory.mkdir()
    if kind == "random files":
        (directory / "notes.txt").write_text("hello")
        (directory / "weights.bin").write_bytes(os.urandom(64))
        return directory, "no config.json"
    if kind == "bad config":
        (directory / "config.json").write_bytes(b"\x89PNG\r\n")
        return directory, "config.json is not JSON"
    if kind == "no weights":
        (directory / "config.json").write_text('{"model_type": "bert"}')
        return directory, "no weights: none of model.safetensors"
    if kind == "FIFO config":  # would block a plain read until someone writes to it
        os.mkfifo(directory / "config.json")
        return directory, "config.json is not a regular file"
    if kind == "a file":
        (directory / "model.safetensors").write_bytes(os.urandom(64))
        return directory / "model.safetensors", "it is a file"
    return directory, "no config.json"  # empty


KINDS = ["empty", "random files", "bad config", "no weights", "a file", "FIFO config"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_pre_ranker_that_is_not_a_model_is_named_with_the_choices(tmp_path, no_network, kind):
    from ragfunnel.retrieve.rerank import load_pre_ranker

    path, problem = not_a_model(tmp_path, kind)
    with pytest.raises(ModelError, match=f"pre-ranker {path} is not a model directory \\({problem}") as error:
        load_pre_ranker(path)
    message = one_line(error)
    assert all(choice in message for choice in ("ragfunnel funnel distill", "`minilm`", "`llm:SPEC`"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_post_ranker_that_is_not_a_model_is_named_with_the_choices(tmp_path, no_network, kind):
    from ragfunnel.retrieve.attention import load_post_ranker

    path, problem = not_a_model(tmp_path, kind)
    with pytest.raises(ModelError, match=f"post-ranker {path} is not a model directory \\({problem}") as error:
        load_post_ranker(str(path))
    assert all(choice in one_line(error) for choice in ("bundled:NAME", "gguf:PATH"))


@pytest.mark.parametrize("load, role", [("pre", "pre-ranker"), ("post", "post-ranker")])
def test_a_hugging_face_name_not_in_the_local_cache_fails_fast(no_network, load, role):
    pytest.importorskip("huggingface_hub")
    from ragfunnel.retrieve.attention import load_post_ranker
    from ragfunnel.retrieve.rerank import load_pre_ranker

    name = "ragfunnel-tests/no-such-model"
    started = time.perf_counter()
    with pytest.raises(ModelError, match=f"{role} {name} is not found locally") as error:
        (load_pre_ranker if load == "pre" else load_post_ranker)(name)
    assert time.perf_counter() - started < 5
    assert one_line(error).endswith(f"download it once with network access (`hf download {name}`) or pass a local "
                                    "directory")


def test_a_path_that_is_no_hugging_face_name_does_not_exist(tmp_path, no_network):
    pytest.importorskip("huggingface_hub")
    from ragfunnel.retrieve.rerank import load_pre_ranker

    with pytest.raises(ModelError, match=f"pre-ranker {tmp_path}/nope/model does not exist; pass a cross-encoder"):
        load_pre_ranker(tmp_path / "nope" / "model")


@pytest.mark.parametrize("content, match", [
    (b"just some text, not a model\n", "is not a GGUF file"),
    (b"", "is not a GGUF file"),
    (None, "does not exist; check the path"),
])
def test_a_gguf_post_ranker_that_is_not_gguf_is_named(tmp_path, monkeypatch, no_network, content, match):
    from ragfunnel.retrieve.attention import load_post_ranker

    monkeypatch.setattr("ragfunnel.retrieve.attention.file_sha256", lambda path: pytest.fail(f"{path} was hashed"))
    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelError, match=rf"post-ranker: (model file )?{path} {match}") as error:
        load_post_ranker(f"gguf:{path}")
    one_line(error)


def test_a_gguf_post_ranker_that_is_a_directory_is_named(tmp_path, no_network):
    from ragfunnel.retrieve.attention import load_post_ranker

    with pytest.raises(ModelError, match=f"post-ranker: model file {tmp_path} is a directory"):
        load_post_ranker(f"gguf:{tmp_path}")


def test_weights_that_transformers_cannot_read_are_one_model_error(tmp_path, no_network):
    pytest.importorskip("transformers")
    from ragfunnel.retrieve.rerank import load_pre_ranker

    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    (tmp_path / "model.safetensors").write_bytes(os.urandom(1000))
    with pytest.raises(ModelError, match=f"cross-encoder {tmp_path} could not be loaded \\(SafetensorError: ") as error:
        load_pre_ranker(tmp_path)
    one_line(error)
