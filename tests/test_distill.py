"""Local-to-global distillation: aggregation, labels, BPR loss, label collection and training."""

import json
import math

import numpy as np
import pytest

from ragfunnel.corpus.distill import (
    Labelled,
    aggregate_scores,
    collect_labels,
    label_positives,
    train_pre_ranker,
)
from ragfunnel.corpus.funnel import FunnelRetriever
from ragfunnel.corpus.index import CorpusIndex, build_index
from ragfunnel.errors import ConfigError, InputError
from ragfunnel.types import Example
from tests.conftest import HOTPOT
from tests.test_funnel import DOCS, WordOverlap


def test_aggregation_mixes_the_best_and_the_mean_passage():
    scores = aggregate_scores(np.array([0.2, 0.6, 0.4, 0.1]), np.array([0, 0, 1, 2]), 4, alpha=0.75)
    # doc 0: 0.75 * 0.6 + 0.25 * 0.4 = 0.55; docs 1 and 2 have one passage; doc 3 none.
    np.testing.assert_allclose(scores[:3], [0.55, 0.4, 0.1])
    assert math.isnan(scores[3])
    np.testing.assert_allclose(aggregate_scores(np.array([0.2, 0.6]), np.array([0, 0]), 1, alpha=0.0), [0.4])
    with pytest.raises(ConfigError, match="alpha"):
        aggregate_scores(np.array([0.1]), np.array([0]), 1, alpha=1.5)


def test_positives_are_answer_hits_and_the_top_k_scored_documents():
    scores = np.array([0.55, 0.4, 0.1, np.nan])
    hits = np.array([False, False, True, False])
    assert label_positives(scores, hits, top_k=1).tolist() == [True, False, True, False]
    assert label_positives(scores, hits, top_k=2).tolist() == [True, True, True, False]
    # A document without a score never enters the top K, however many are asked for.
    assert label_positives(scores, np.zeros(4, bool), top_k=9).tolist() == [True, True, True, False]


def test_bpr_loss_against_hand_computed_values():
    torch = pytest.importorskip("torch")
    from ragfunnel.corpus.distill import bpr_loss

    loss = bpr_loss(torch.tensor([2.0, 0.0, 1.0]), [True, False, False])
    # pairs (2 - 0) and (2 - 1): mean of log(1 + e^-2) and log(1 + e^-1)
    assert float(loss) == pytest.approx((math.log1p(math.exp(-2)) + math.log1p(math.exp(-1))) / 2, rel=1e-6)
    assert bpr_loss(torch.tensor([1.0, 2.0]), [True, True]) is None


def test_labels_are_collected_once_per_question_and_resume(tmp_path):
    build_index(DOCS, tmp_path / "ix", source="test")
    retriever = FunnelRetriever(CorpusIndex(tmp_path / "ix"), pre_ranker=WordOverlap(), post_ranker=WordOverlap(),
                                top_clusters=4, top_documents=3, passage_words=8)
    examples = [Example("q1", "Who kept the Gull Rock light?", answers=["Martha Quill"]),
                Example("q2", "How often does the island ferry run?", answers=["twice daily"])]
    path = tmp_path / "labels.jsonl"
    first = collect_labels(retriever, examples[:1], path, top_k=1, progress=False)
    (q1,) = first
    # The three documents the pre-ranker kept, then the fourth of the retrieved clusters as an easy negative.
    assert len(q1.titles) == 4 and q1.hits[q1.titles.index("Martha Quill")]
    assert q1.scores[3] is None and q1.positive[3] is False and all(s is not None for s in q1.scores[:3])
    assert sum(q1.positive) >= 1 and not all(q1.positive)
    with path.open("a") as f:
        f.write('{"example_id": "q2", "quest')  # killed mid-write
    both = collect_labels(retriever, examples, path, top_k=1, progress=False)
    assert [x.example_id for x in both] == ["q1", "q2"]
    assert [json.loads(line)["example_id"] for line in path.read_text().splitlines()] == ["q1", "q2"]
    with pytest.raises(ConfigError, match="different configuration .differs in: top_positives"):
        collect_labels(retriever, examples, path, top_k=3, progress=False)


def test_training_needs_a_question_with_both_kinds_of_document(tmp_path):
    pytest.importorskip("torch", reason="needs the [attention] extra")
    only_positive = Labelled("q", "Q?", ["A"], ["text"], [1.0], [True], [True])
    with pytest.raises(InputError, match="both a positive and a negative"):
        train_pre_ranker([only_positive], init="unused", out=tmp_path)


def _hotpot_labels(n: int) -> list[Labelled]:
    """Real HotpotQA questions; each one's ten paragraphs labelled positive where they hold the answer."""
    rows = [r for r in json.loads(HOTPOT.read_text()) if r["answer"].lower() not in ("yes", "no")][:n]
    out = []
    for r in rows:
        titles = [t for t, _ in r["context"]]
        texts = ["".join(s) for _, s in r["context"]]
        hits = [r["answer"].lower() in x.lower() for x in texts]
        out.append(Labelled(r["_id"], r["question"], titles, texts, [None] * len(texts), hits, hits))
    return [x for x in out if any(x.positive) and not all(x.positive)]


def _margin(ranker, labelled: list[Labelled]) -> float:
    """Mean over questions of (mean positive score - mean negative score)."""
    gaps = []
    for x in labelled:
        s = ranker.score(x.question, x.documents())
        pos = np.array(x.positive)
        gaps.append(s[pos].mean() - s[~pos].mean())
    return float(np.mean(gaps))


def _distil(model_dir, prior_weight: float) -> tuple[list[Labelled], object]:
    """Six real HotpotQA questions' labels, and a pre-ranker distilled on them for two epochs."""
    if not HOTPOT.exists():
        pytest.skip("shared data absent")
    pytest.importorskip("torch")
    from ragfunnel.retrieve.embed import minilm_directory

    labelled = _hotpot_labels(6)
    log = train_pre_ranker(labelled, init=minilm_directory(), out=model_dir, epochs=2, learning_rate=5e-5, seed=0,
                           prior_weight=prior_weight, progress=False)
    return labelled, log


@pytest.mark.model
def test_distillation_moves_the_pre_rankers_scores_towards_the_labels(tmp_path):
    labelled, log = _distil(tmp_path / "model", prior_weight=0)
    from ragfunnel.retrieve.rerank import CrossEncoderPreRanker, load_pre_ranker

    # The new head starts at zero, so every document scored 0 before training: a margin of 0.
    after = _margin(CrossEncoderPreRanker(tmp_path / "model"), labelled)
    assert log.questions == len(labelled) and log.epoch_loss[-1] < log.epoch_loss[0]
    assert after > 0.03, after  # 0.07 here, from 0
    assert type(load_pre_ranker(tmp_path / "model")) is CrossEncoderPreRanker  # no prior.json without a prior
    assert (tmp_path / "model" / "model.safetensors").stat().st_size > 1e6
    assert not list((tmp_path / "model").glob("*.bin"))  # plain safetensors, no pickle


@pytest.mark.model
def test_a_distilled_correction_starts_from_the_bi_encoder_and_moves_towards_the_labels(tmp_path):
    labelled, log = _distil(tmp_path / "model", prior_weight=10.0)
    from ragfunnel.retrieve.rerank import BiEncoderPreRanker, PriorCrossEncoderPreRanker, load_pre_ranker

    before = 10.0 * _margin(BiEncoderPreRanker(), labelled)  # the untrained model: its zero head adds nothing
    ranker = load_pre_ranker(tmp_path / "model")
    assert isinstance(ranker, PriorCrossEncoderPreRanker) and ranker.weight == 10.0 == log.prior_weight
    x = labelled[0]
    np.testing.assert_allclose(ranker.score(x.question, x.documents()),
                               10.0 * ranker.bi_encoder.score(x.question, x.documents())
                               + ranker.cross_encoder.score(x.question, x.documents()), rtol=1e-6)
    after = _margin(ranker, labelled)
    assert after > before + 0.03, (before, after)  # 0.67 -> 0.73 here


def test_a_corrupted_prior_file_is_named(tmp_path):
    from ragfunnel.retrieve.rerank import PRIOR_FILE, load_pre_ranker

    (tmp_path / PRIOR_FILE).write_text('{"weight": "ten"}')
    with pytest.raises(InputError, match="prior.json is corrupted"):
        load_pre_ranker(tmp_path)


def test_ctrl_c_while_labelling_keeps_the_finished_labels(tmp_path, monkeypatch):
    from ragfunnel.corpus import distill
    from ragfunnel.errors import Interrupted

    build_index(DOCS, tmp_path / "ix", source="test")
    retriever = FunnelRetriever(CorpusIndex(tmp_path / "ix"), pre_ranker=WordOverlap(), post_ranker=WordOverlap(),
                                top_clusters=4, top_documents=3, passage_words=8)
    examples = [Example("q1", "Who kept the Gull Rock light?", answers=["Martha Quill"]),
                Example("q2", "How often does the island ferry run?", answers=["twice daily"])]
    label = distill.label_question

    def second_is_interrupted(retriever, example, **kw):
        if example.id == "q2":
            raise KeyboardInterrupt  # Ctrl-C while the second question is labelled
        return label(retriever, example, **kw)

    monkeypatch.setattr(distill, "label_question", second_is_interrupted)
    path = tmp_path / "labels.jsonl"
    with pytest.raises(Interrupted, match=rf"^interrupted: 1 rows saved in {path}; re-run to resume$"):
        collect_labels(retriever, examples, path, top_k=1, progress=False)
    monkeypatch.setattr(distill, "label_question", label)
    assert [x.example_id for x in collect_labels(retriever, examples, path, top_k=1, progress=False)] == ["q1", "q2"]
