"""The post-ranker's converted weights cached in the user cache dir (checked, atomic, rebuilt when damaged)."""

import hashlib
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from ragfunnel.retrieve.attention import CHECKSUMS, AttentionPostRanker, verify_checked_dir, write_checked_dir


def write_tiny_model(directory: Path) -> None:
    (directory / "model.safetensors").write_bytes(b"\x00weights\x01" * 100)
    (directory / "config.json").write_text('{"model_type": "tiny"}')
    (directory / "sub").mkdir()
    (directory / "sub" / "tokenizer.json").write_text("{}")


class RecordingRanker(AttentionPostRanker):
    """Remembers what it was loaded from instead of loading; 'saving' writes a tiny fake model."""

    def __init__(self, model, *, gguf_file=None, **kwargs):
        self.source = (Path(model), gguf_file)

    def save_converted(self, directory: Path) -> None:
        write_tiny_model(directory)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_written_dir_verifies_and_lists_every_file_with_its_sha256(tmp_path):
    dest = tmp_path / "entry"
    write_checked_dir(dest, write_tiny_model)
    assert verify_checked_dir(dest) is None
    sums = json.loads((dest / CHECKSUMS).read_text())
    assert sorted(sums) == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    for name, digest in sums.items():
        assert digest == hashlib.sha256((dest / name).read_bytes()).hexdigest()
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]  # no temporary directory left behind


def flip_a_byte(d: Path) -> None:
    data = bytearray((d / "model.safetensors").read_bytes())
    data[5] ^= 1
    (d / "model.safetensors").write_bytes(data)


@pytest.mark.parametrize(("damage", "problem"), [
    (flip_a_byte, "model.safetensors does not match its SHA-256"),
    (lambda d: (d / "model.safetensors").write_bytes(b"\x00wei"), "model.safetensors does not match"),
    (lambda d: (d / "sub" / "tokenizer.json").unlink(), "sub/tokenizer.json is missing"),
    (lambda d: (d / "pytorch_model.bin").write_bytes(b"x"), "pytorch_model.bin is not in checksums.json"),
    (lambda d: (d / CHECKSUMS).unlink(), "no checksums.json: an interrupted write"),
    (lambda d: (d / CHECKSUMS).write_text('{"config.json": '), "checksums.json is unreadable"),
    (lambda d: (d / CHECKSUMS).write_text('["config.json"]'), "checksums.json is not a mapping"),
])
def test_verify_names_what_is_damaged(tmp_path, damage, problem):
    dest = tmp_path / "entry"
    write_checked_dir(dest, write_tiny_model)
    damage(dest)
    assert verify_checked_dir(dest).startswith(problem)


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    def write_then_fail(directory: Path) -> None:
        write_tiny_model(directory)
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_checked_dir(tmp_path / "entry", write_then_fail)
    assert list(tmp_path.iterdir()) == []


def test_an_entry_published_meanwhile_by_another_process_is_kept(tmp_path):
    dest = tmp_path / "entry"
    write_checked_dir(dest, write_tiny_model)
    write_checked_dir(dest, write_tiny_model)  # the rename fails: the entry already exists, and is good
    assert verify_checked_dir(dest) is None
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]


def test_the_first_load_converts_the_gguf_and_later_loads_read_the_cache(tmp_path, cache, caplog):
    gguf = tmp_path / "models" / "tiny.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF tiny")
    entry = cache / "post_ranker" / hashlib.sha256(b"GGUF tiny").hexdigest()  # keyed by the file's digest

    with caplog.at_level(logging.WARNING):
        first = RecordingRanker.from_gguf(gguf)
        second = RecordingRanker.from_gguf(gguf)
    assert first.source == (gguf.parent, "tiny.gguf")
    assert verify_checked_dir(entry) is None
    assert second.source == (entry, None)
    assert caplog.records == []


def test_a_known_digest_is_used_as_given(tmp_path, cache):
    ranker = RecordingRanker.from_gguf(tmp_path / "absent.gguf", sha256="ab" * 32)
    assert ranker.source == (tmp_path, "absent.gguf")
    assert verify_checked_dir(cache / "post_ranker" / ("ab" * 32)) is None


def test_a_damaged_entry_is_reported_once_and_rebuilt_from_the_gguf(tmp_path, cache, caplog):
    entry = cache / "post_ranker" / "cd"
    write_checked_dir(entry, write_tiny_model)
    flip_a_byte(entry)
    with caplog.at_level(logging.WARNING):
        ranker = RecordingRanker.from_gguf(tmp_path / "m.gguf", sha256="cd")
    assert ranker.source == (tmp_path, "m.gguf")
    assert [r.getMessage() for r in caplog.records] == [
        f"the cached post-ranker in {entry} is damaged (model.safetensors does not match its SHA-256); "
        "rebuilding it from m.gguf"]
    assert verify_checked_dir(entry) is None
    assert RecordingRanker.from_gguf(tmp_path / "m.gguf", sha256="cd").source == (entry, None)


def test_a_partial_entry_is_rebuilt(tmp_path, cache, caplog):
    entry = cache / "post_ranker" / "ef"
    entry.mkdir(parents=True)
    (entry / "model.safetensors").write_bytes(b"\x00wei")  # as if copied in by hand and cut short
    with caplog.at_level(logging.WARNING):
        ranker = RecordingRanker.from_gguf(tmp_path / "m.gguf", sha256="ef")
    assert ranker.source == (tmp_path, "m.gguf")
    assert len(caplog.records) == 1 and "interrupted write" in caplog.records[0].getMessage()
    assert verify_checked_dir(entry) is None


def test_an_unwritable_cache_warns_once_and_loads_from_the_gguf(tmp_path, monkeypatch, caplog):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path / "a-file" / "cache"))  # root-proof: not a directory
    with caplog.at_level(logging.WARNING):
        ranker = RecordingRanker.from_gguf(tmp_path / "m.gguf", sha256="01")
    assert ranker.source == (tmp_path, "m.gguf")
    assert len(caplog.records) == 1
    assert caplog.records[0].getMessage().startswith("cannot cache the converted post-ranker in ")


def test_cache_false_converts_and_writes_nothing(tmp_path, cache):
    ranker = RecordingRanker.from_gguf(tmp_path / "m.gguf", sha256="23", cache=False)
    assert ranker.source == (tmp_path, "m.gguf")
    assert not cache.exists()


def test_quiet_transformers_silences_and_then_restores_its_settings():
    hf_logging = pytest.importorskip("transformers.utils.logging", reason="needs the [attention] extra")
    from transformers import modeling_gguf_pytorch_utils as gguf_reader

    from ragfunnel.retrieve.attention import quiet_transformers

    before = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(), gguf_reader.tqdm
    with quiet_transformers():
        assert hf_logging.get_verbosity() == hf_logging.ERROR
        assert not hf_logging.is_progress_bar_enabled()
        assert gguf_reader.tqdm(range(3)).disable  # the de-quantising bar, which is plain tqdm
    assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(), gguf_reader.tqdm) == before


class TokenizerStub:
    def save_pretrained(self, directory):
        (Path(directory) / "tokenizer.json").write_text("{}")


def tiny_model_as_transformers_5_leaves_it_after_reading_a_gguf():
    torch = pytest.importorskip("torch", reason="needs the [attention] extra")
    transformers = pytest.importorskip("transformers", reason="needs the [attention] extra")
    gguf_quantizer = pytest.importorskip("transformers.quantizers.quantizer_gguf", reason="transformers 4 has none")
    from transformers.utils.quantization_config import GgufConfig

    config = transformers.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config).eval()
    quantization = GgufConfig(gguf_file="tiny.gguf")
    model.hf_quantizer, model.config.quantization_config = gguf_quantizer.GgufHfQuantizer(quantization), quantization
    model.is_quantized = True
    ranker = object.__new__(AttentionPostRanker)
    ranker.model, ranker.tokenizer = model, TokenizerStub()
    return torch, transformers, ranker


def test_a_model_de_quantised_from_gguf_is_saved_as_a_plain_safetensors_checkpoint(tmp_path):
    torch, transformers, ranker = tiny_model_as_transformers_5_leaves_it_after_reading_a_gguf()
    write_checked_dir(tmp_path / "entry", ranker.save_converted)
    assert verify_checked_dir(tmp_path / "entry") is None
    assert "quantization_config" not in json.loads((tmp_path / "entry" / "config.json").read_text())
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "entry", dtype=torch.float32)
    ids = torch.tensor([[1, 5, 9, 2]])
    with torch.inference_mode():
        assert torch.equal(reloaded(input_ids=ids).logits, ranker.model(input_ids=ids).logits)


def test_a_model_with_weights_still_packed_is_not_cached(tmp_path):
    from ragfunnel.errors import ModelError

    torch, _, ranker = tiny_model_as_transformers_5_leaves_it_after_reading_a_gguf()
    ranker.model.model.layers[0].mlp.register_buffer("qweight", torch.zeros(8, dtype=torch.uint8))
    with pytest.raises(ModelError, match="packed in GGUF blocks"):
        write_checked_dir(tmp_path / "entry", ranker.save_converted)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.model
def test_the_cached_post_ranker_scores_exactly_as_the_one_read_from_gguf(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch", reason="needs the [attention] extra")
    pytest.importorskip("transformers", reason="needs the [attention] extra")
    from ragfunnel.errors import ModelError
    from ragfunnel.llm import bundled

    try:
        gguf = bundled.ensure("qwen2.5-0.5b")
    except ModelError as e:
        pytest.skip(str(e))
    sha = bundled.get("qwen2.5-0.5b").sha256
    monkeypatch.setenv("RAGFUNNEL_CACHE", str(tmp_path))  # after ensure(): the GGUF stays where it is
    question = "Who kept the Gull Rock light?"
    passages = ["The Gull Rock light was kept by Ada Penrose from 1871 until her death.",
                "Gulls nest on the cliffs of the northern islands every spring.",
                "The lighthouse service was reorganised in 1880 under a new board."]

    try:
        converted = AttentionPostRanker.from_gguf(gguf, sha256=sha)
        expected, ids = converted.score(question, passages), converted._segments(question, passages)
        del converted
        assert (tmp_path / "post_ranker" / sha / CHECKSUMS).is_file()

        cached = AttentionPostRanker.from_gguf(tmp_path / "absent.gguf", sha256=sha)  # only the cache can serve it
        assert cached.model.dtype == torch.float32
        assert cached._segments(question, passages) == ids
        np.testing.assert_array_equal(cached.score(question, passages), expected)
    finally:
        shutil.rmtree(tmp_path / "post_ranker", ignore_errors=True)  # 2.5 GB that pytest would keep in /tmp
