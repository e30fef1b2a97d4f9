"""`ragfunnel funnel distill` as a user runs it, with stand-in models (no download, no model run)."""

import json

import pytest
from click.testing import CliRunner

from ragfunnel import __version__
from ragfunnel.cli.funnel import funnel
from ragfunnel.corpus.index_build import build_index
from ragfunnel.errors import ConfigError
from ragfunnel.journal import VERSION_KEY
from tests.helpers.corpora import DOCS
from tests.helpers.rankers import FixedCosines, TinyCrossEncoder, WordOverlap


def run(*args: str):
    """The `funnel` group alone (`ragfunnel` turns its library errors into one line: tests/test_cli.py)."""
    return CliRunner().invoke(funnel, list(args))


@pytest.fixture
def distilling(tmp_path, monkeypatch, fake_models):
    """A tiny index and training set; word overlap as the pre-ranker and the teacher; what the CLI passed on."""
    from ragfunnel.corpus import distill
    from ragfunnel.retrieve import attention, embed, rerank

    build_index(DOCS, tmp_path / "ix", source="test")
    questions = tmp_path / "train.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in [
        {"id": "q1", "question": "Who kept the Gull Rock light?", "answers": ["Martha Quill"]},
        {"id": "q2", "question": "How often does the island ferry run?", "answers": ["twice daily"]}]))
    monkeypatch.setattr(attention, "load_post_ranker", lambda spec, **kw: WordOverlap())
    # The CLI's pre-ranker is made with the index's stored vectors; training's prior without.
    monkeypatch.setattr(rerank, "BiEncoderPreRanker", lambda **kw: WordOverlap() if "stored" in kw else FixedCosines())
    monkeypatch.setattr(embed, "minilm_directory", lambda: "tiny")
    passed = {}

    def spy(name):
        real = getattr(distill, name)

        def call(*args, **kwargs):
            passed[name] = kwargs
            return real(*args, **kwargs)
        return call

    for name in ("collect_labels", "train_pre_ranker"):
        monkeypatch.setattr(distill, name, spy(name))

    def distil(*options: str):
        return run("distill", str(tmp_path / "ix"), "--questions", str(questions), "--out",
                   str(tmp_path / "pre"), "--top-clusters", "4", "--top-documents", "3", "--top-positives", "1",
                   "--epochs", "1", *options)

    return distil, passed, tmp_path / "pre"


def test_help_shows_plain():
    result = run("distill", "--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "--plain" in text and "Eq. 5 and 6" in text and "no easy negatives" in text
    assert "[default: 8; 0 with --plain]" in text and "[default: 10; 0 with --plain]" in text


def test_plain_is_passed_through_and_the_model_records_it(distilling):
    from ragfunnel.corpus.distill import LABELS_FILE, LOG_FILE
    from ragfunnel.retrieve.rerank import PRIOR_FILE, load_pre_ranker

    distil, passed, out = distilling
    result = distil("--plain")
    assert result.exit_code == 0, result.output
    assert "plain (the paper's Eq. 5-6" in result.output
    assert passed["collect_labels"]["plain"] is True and passed["collect_labels"]["easy_negatives"] is None
    assert passed["train_pre_ranker"]["plain"] is True and passed["train_pre_ranker"]["prior_weight"] is None
    rows = [json.loads(line) for line in (out / LABELS_FILE).read_text().splitlines()]
    assert len(rows) == 2 and all(len(r["titles"]) == r["kept"] <= 3 for r in rows)  # no easy negative labelled
    labels_config = json.loads((out / "distill_labels.config.json").read_text())
    assert labels_config["easy_negatives"] == 0 and labels_config[VERSION_KEY] == __version__
    training_log = json.loads((out / LOG_FILE).read_text())
    assert training_log[VERSION_KEY] == __version__
    assert training_log["plain"] is True and not (out / PRIOR_FILE).exists()
    assert FixedCosines.made == 0 and type(load_pre_ranker(out)) is TinyCrossEncoder


def test_the_default_keeps_easy_negatives_and_the_prior(distilling):
    from ragfunnel.corpus.distill import LABELS_FILE, LOG_FILE
    from ragfunnel.retrieve.rerank import PRIOR_FILE

    distil, passed, out = distilling
    result = distil()
    assert result.exit_code == 0, result.output
    assert "as a correction to 10 x the bi-encoder's cosine" in result.output
    assert passed["collect_labels"]["plain"] is False and passed["train_pre_ranker"]["plain"] is False
    rows = [json.loads(line) for line in (out / LABELS_FILE).read_text().splitlines()]
    assert any(len(r["titles"]) > r["kept"] for r in rows)  # the corpus's fourth document, as an easy negative
    assert json.loads((out / LOG_FILE).read_text())["plain"] is False
    assert json.loads((out / PRIOR_FILE).read_text())["weight"] == 10.0


@pytest.mark.parametrize("options, message", [
    (["--prior-weight", "5"], "drop --prior-weight 5, or --plain"),
    (["--easy-negatives", "4", "--prior-weight", "2.5"], "drop --easy-negatives 4 and --prior-weight 2.5, or --plain"),
])
def test_plain_refuses_what_it_leaves_out(distilling, options, message):
    distil, passed, out = distilling
    result = distil("--plain", *options)
    assert isinstance(result.exception, ConfigError) and message in str(result.exception) and not passed


def test_plain_takes_zero_for_what_it_leaves_out(distilling):
    distil, passed, _ = distilling
    result = distil("--plain", "--easy-negatives", "0", "--prior-weight", "0")
    assert result.exit_code == 0, result.output
    assert passed["train_pre_ranker"]["plain"] is True
