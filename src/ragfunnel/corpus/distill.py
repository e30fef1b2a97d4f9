"""Local-to-global distillation (FunnelRAG §3.2): the post-ranker's judgement teaches the pre-ranker.

For each training question the funnel runs as usual up to post-ranking. The passage scores
are aggregated to their documents, S_d = α·max_p S_p + (1−α)·mean_p S_p; the documents with
the top-K aggregated scores, and every document that contains a reference answer, are the
positives; the other documents the pre-ranker kept are the negatives (Eq. 5). A cross-encoder is
then trained with the pairwise BPR loss −log σ(S⁺ − S⁻) (Eq. 6).

By default two things are added that the paper does not have: easy negatives (other documents of
the retrieved clusters, see :func:`label_question`), and a score that is a correction to the
bundled bi-encoder's, ``w · cosine + logit`` with the new head starting at zero (trained from a
new head alone on 40 questions, the cross-encoder ranked HotpotQA documents no better than chance).
``plain=True`` (``funnel distill --plain``) trains as the paper does: Eq. 5 and 6 alone, on the
cross-encoder's own score, which is then also all the saved model gives at search time.

Labels are written to a JSON Lines file as they are made (a run resumes where it stopped);
the trained model is saved as a plain Hugging Face directory (safetensors) that
:class:`~ragfunnel.retrieve.rerank.CrossEncoderPreRanker` loads by path.
"""

from __future__ import annotations

import json
import logging
import random
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ragfunnel.corpus.funnel import FunnelRetriever
from ragfunnel.corpus.index import CorpusIndex
from ragfunnel.errors import ConfigError, InputError, option
from ragfunnel.journal import VERSION_KEY, Appender, claim_config, exclusive, out_file, read_jsonl, saving
from ragfunnel.metrics import best_over_references, contains_answer
from ragfunnel.types import Document, Example
from ragfunnel.version import __version__

log = logging.getLogger(__name__)

DEFAULT_ALPHA = 0.75  # the paper's suggestion: mostly the best passage, partly the document's average
DEFAULT_TOP_POSITIVES = 2
DEFAULT_EASY_NEGATIVES = 8  # documents of the retrieved clusters outside D_m, see label_question
DEFAULT_PRIOR_WEIGHT = 10.0  # cosines of a question's candidates differ by ~0.1-0.3: one to three logits
LABELS_FILE, LOG_FILE = "distill_labels.jsonl", "distill.json"


def aggregate_scores(passage_scores: np.ndarray, owners: np.ndarray, n_documents: int, *,
                     alpha: float = DEFAULT_ALPHA) -> np.ndarray:
    """Each document's α·max + (1−α)·mean of its passages' scores; NaN for a document with no passage.

    ``owners[p]`` is the document (0..n_documents-1) passage ``p`` was cut from.
    """
    if not 0 <= alpha <= 1:
        raise ConfigError(f"alpha must be in [0, 1], got {alpha}")
    scores = np.asarray(passage_scores, dtype=np.float64)
    out = np.full(n_documents, np.nan)
    for d in range(n_documents):
        mine = scores[np.asarray(owners) == d]
        if mine.size:
            out[d] = alpha * mine.max() + (1 - alpha) * mine.mean()
    return out


def label_positives(document_scores: np.ndarray, hits: np.ndarray, *, top_k: int = DEFAULT_TOP_POSITIVES) -> np.ndarray:
    """D⁺ = documents holding an answer ∪ the top-K by aggregated score (documents without a score never rank)."""
    scores = np.where(np.isnan(document_scores), -np.inf, document_scores)
    positive = np.asarray(hits, dtype=bool).copy()
    ranked = [i for i in np.argsort(-scores, kind="stable") if np.isfinite(scores[i])]
    positive[ranked[:top_k]] = True
    return positive


def bpr_loss(scores, positive):
    """Mean over (positive, negative) pairs of −log σ(s⁺ − s⁻), for a torch tensor of scores.

    The paper sums over pairs; the mean keeps the step size independent of how many
    documents a question has. ``None`` when the question has no pair to learn from.
    """
    import torch

    mask = torch.as_tensor(positive, dtype=torch.bool)
    if mask.all() or not mask.any():
        return None
    differences = scores[mask][:, None] - scores[~mask][None, :]
    return torch.nn.functional.softplus(-differences).mean()


@dataclass(frozen=True)
class Labelled:
    """One training question: the documents the pre-ranker kept and what the post-ranker made of them."""

    example_id: str
    question: str
    titles: list[str]
    texts: list[str]
    scores: list[float | None]  # aggregated post-ranking score per document (None: no passage was scored)
    hits: list[bool]  # the document contains a reference answer
    positive: list[bool]
    # The first `kept` documents are the ones the pre-ranker kept (the paper's D_m), the rest easy
    # negatives; None in labels written before this was recorded.
    kept: int | None = None

    def documents(self) -> list[Document]:
        return [Document(f"{self.example_id}/{i}", t, x) for i, (t, x) in enumerate(zip(self.titles, self.texts,
                                                                                       strict=True))]

    def without_easy_negatives(self, top_documents: int | None = None) -> Labelled:
        """The paper's candidates alone: the documents the pre-ranker kept, with their labels (Eq. 5).

        For labels written before ``kept`` was recorded, pass the ``top_documents`` they were made
        with (``distill_labels.config.json``): the pre-ranker's documents come first.
        """
        kept = self.kept
        if kept is None:
            if top_documents is None:
                raise InputError(f"the labels of {self.example_id!r} do not record which documents are easy "
                                 "negatives; label again, or pass the top_documents they were made with")
            kept = min(top_documents, len(self.titles))
        # The positives need no relabelling: easy negatives carry no score, so never enter the top K.
        return Labelled(self.example_id, self.question, self.titles[:kept], self.texts[:kept], self.scores[:kept],
                        self.hits[:kept], self.positive[:kept], kept)


def draw_easy_negatives(index: CorpusIndex, doc_ids: list[int], kept: set[int], n: int, seed: str) -> list[Document]:
    """Up to ``n`` of the retrieved documents ``doc_ids`` outside ``kept`` (index positions), in an order
    shuffled with ``seed`` (an example's id, so a re-run draws the same ones)."""
    rest = [i for i in doc_ids if i not in kept]
    random.Random(seed).shuffle(rest)
    return [index.document(i) for i in rest[:n]]


def answer_hits(documents: list[Document], answers: list[str]) -> np.ndarray:
    """Whether each document contains a reference answer."""
    return np.array([best_over_references(contains_answer, d.render(), answers) > 0 for d in documents], dtype=bool)


def label_question(retriever: FunnelRetriever, example: Example, *, alpha: float = DEFAULT_ALPHA,
                   top_k: int = DEFAULT_TOP_POSITIVES, easy_negatives: int = DEFAULT_EASY_NEGATIVES) -> Labelled:
    """Run the funnel's stages for one question and label the pre-ranker's documents.

    Beyond the paper's D_m (the documents the pre-ranker kept), up to ``easy_negatives`` other
    documents of the retrieved clusters are added as negatives (and any that holds an answer
    as a positive), drawn with a seed from the example's id. A scorer trained from a new head
    on D_m alone only ever sees near misses and ranks unrelated documents above the answer's
    (measured on HotpotQA: AR@4 over documents fell from 60% to 5%).
    """
    doc_ids, _ = retriever.retrieve(example.question)
    kept, _ = retriever.pre_rank(example.question, doc_ids)
    passages = retriever.passages(kept)
    position = {d.id: i for i, d in enumerate(kept)}
    owners = np.array([position[d.id] for d, _ in passages])
    scores = aggregate_scores(retriever.post_scores(example.question, passages), owners, len(kept), alpha=alpha)
    extra = draw_easy_negatives(retriever.index, doc_ids, {d.position for d in kept}, easy_negatives, example.id)
    documents = kept + extra
    hits = answer_hits(documents, example.answers)
    positive = label_positives(np.concatenate([scores, np.full(len(extra), np.nan)]), hits, top_k=top_k)
    return Labelled(example.id, example.question, [d.title for d in documents], [d.text for d in documents],
                    [None if np.isnan(s) else float(s) for s in scores] + [None] * len(extra), hits.tolist(),
                    positive.tolist(), len(kept))


def easy_negatives_for(easy_negatives: int | None, *, plain: bool) -> int:
    """How many easy negatives to label: none for ``plain`` (the paper's D_m alone), else the default."""
    if plain and easy_negatives:
        raise ConfigError(f"plain distillation labels the pre-ranker's documents alone (Eq. 5); "
                          f"easy_negatives={easy_negatives} contradicts it: leave it unset or 0, or drop plain")
    if easy_negatives is None:
        return 0 if plain else DEFAULT_EASY_NEGATIVES
    if easy_negatives < 0:
        raise ConfigError(f"easy_negatives must be >= 0, got {easy_negatives}")
    return easy_negatives


def collect_labels(retriever: FunnelRetriever, examples: list[Example], path: str | Path, *,
                   alpha: float = DEFAULT_ALPHA, top_k: int = DEFAULT_TOP_POSITIVES,
                   easy_negatives: int | None = None, plain: bool = False, progress: bool = True) -> list[Labelled]:
    """Label every example, appending each to ``path`` as it is done; examples already there are kept.

    ``easy_negatives`` defaults to DEFAULT_EASY_NEGATIVES, and to none with ``plain`` (the paper's labels).

    One process at a time labels into a file (``PATH.lock``); labels made with other settings (``PATH``
    with the suffix ``.config.json``) are refused; Ctrl-C keeps every finished label and raises Interrupted.
    """
    from tqdm.auto import tqdm

    path = out_file(Path(path))
    easy_negatives = easy_negatives_for(easy_negatives, plain=plain)
    settings = {"alpha": alpha, "top_positives": top_k, "easy_negatives": easy_negatives,
                "top_documents": retriever.top_documents,
                "pre_ranker": type(retriever.pre_ranker).__name__, "post_ranker": type(retriever.post_ranker).__name__,
                VERSION_KEY: __version__}
    with exclusive(path.with_name(path.name + ".lock"), path):
        claim_config(path.with_suffix(".config.json"), settings, what=path)
        done = {}
        for number, row in read_jsonl(path, what="label"):
            try:
                labelled = Labelled(**row)
            except (KeyError, TypeError):
                raise InputError(f"{path}:{number} is not a label row of `ragfunnel funnel distill`; move the file "
                                 "aside to label afresh") from None
            if labelled.kept is None and not easy_negatives:  # an older row, but without easy negatives: all kept
                labelled = replace(labelled, kept=len(labelled.titles))
            done[labelled.example_id] = labelled
        todo = [e for e in examples if e.id not in done]
        if done:
            log.info("%s: %d questions labelled, %d to go", path, len(done), len(todo))
        with closing(Appender(path)) as out, saving(path, lambda: len(done)):
            for example in tqdm(todo, desc="label documents", unit="question", disable=None if progress else True):
                labelled = label_question(retriever, example, alpha=alpha, top_k=top_k, easy_negatives=easy_negatives)
                done[example.id] = labelled
                out.append(asdict(labelled))
    return [done[e.id] for e in examples if e.id in done]


def zero_new_head(model, new_parameters: set[str]) -> None:
    """Zero the new output layer (one logit), so the untrained scorer gives every document 0."""
    import torch

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module.out_features == 1 and f"{name}.weight" in new_parameters:
            with torch.no_grad():
                module.weight.zero_()
                if module.bias is not None:
                    module.bias.zero_()


@dataclass
class TrainingLog:
    init: str
    questions: int  # with at least one positive and one negative
    pairs: int
    epochs: int
    learning_rate: float
    head_learning_rate: float
    seed: int
    prior_weight: float  # of the bi-encoder cosine the cross-encoder corrects (0: the cross-encoder alone)
    plain: bool = False  # trained as the paper: D_m alone (no easy negatives), no prior (Eq. 5-6)
    epoch_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0


def prior_weight_for(prior_weight: float | None, *, plain: bool) -> float:
    """The bi-encoder prior's weight: none for ``plain`` (the paper scores with the pre-ranker alone), else the
    default."""
    if plain and prior_weight:
        raise ConfigError(f"plain distillation trains the cross-encoder's own score (Eq. 6); prior_weight="
                          f"{prior_weight} contradicts it: leave it unset or 0, or drop plain")
    if prior_weight is None:
        return 0.0 if plain else DEFAULT_PRIOR_WEIGHT
    return float(prior_weight)


def train_pre_ranker(labelled: list[Labelled], *, init: str | Path, out: str | Path, epochs: int = 3,
                     learning_rate: float = 3e-5, head_learning_rate: float = 1e-3, seed: int = 0,
                     prior_weight: float | None = None, plain: bool = False, progress: bool = True) -> TrainingLog:
    """Fine-tune a cross-encoder from ``init`` on the labels with BPR; save it to ``out``.

    ``init`` is a cross-encoder, or an encoder such as the bundled MiniLM whose new scoring head
    then starts at zero; weights new to the checkpoint train at ``head_learning_rate`` (a new head
    learns nothing in a few hundred steps at the encoder's rate). With ``prior_weight`` > 0 the
    score trained (and the one ``load_pre_ranker(out)`` gives) is ``prior_weight`` × the bundled
    bi-encoder's cosine + the cross-encoder's logit; the weight is written to ``out/prior.json``.
    ``prior_weight`` defaults to DEFAULT_PRIOR_WEIGHT.

    ``plain`` trains as the paper: on each question's D_m alone (easy negatives in the labels are
    dropped) and on the cross-encoder's logit alone, so ``out`` gets no ``prior.json`` and the model
    scores without the bi-encoder at search time too; ``out/distill.json`` records ``"plain": true``.
    Every loss is still the mean over a question's pairs, where Eq. 6 sums them (see :func:`bpr_loss`).
    """
    import torch
    from tqdm.auto import tqdm
    from transformers.utils import logging as hf_logging

    from ragfunnel.retrieve.rerank import PRIOR_FILE, BiEncoderPreRanker, CrossEncoderPreRanker

    prior_weight = prior_weight_for(prior_weight, plain=plain)
    if plain:
        labelled = [x.without_easy_negatives() for x in labelled]
    usable = [x for x in labelled if any(x.positive) and not all(x.positive)]
    if not usable:
        raise InputError("no labelled question has both a positive and a negative document; label more questions "
                         f"(or lower {option('top_positives')})")
    if epochs < 1 or min(learning_rate, head_learning_rate) <= 0 or prior_weight < 0:
        raise ConfigError(f"epochs must be >= 1, learning rates > 0 and the prior weight >= 0, got {epochs}, "
                          f"{learning_rate}, {head_learning_rate}, {prior_weight}")
    torch.manual_seed(seed)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a new classification head is expected here, not worth a warning
    try:
        ranker = CrossEncoderPreRanker(init, num_labels=1)
    finally:
        hf_logging.set_verbosity(verbosity)
    model = ranker.model
    zero_new_head(model, ranker.new_parameters)
    priors: list = [0.0] * len(usable)
    if prior_weight:
        bi_encoder = BiEncoderPreRanker()
        priors = [prior_weight * torch.as_tensor(bi_encoder.score(x.question, x.documents()), dtype=torch.float32)
                  for x in usable]
    new = [p for n, p in model.named_parameters() if n in ranker.new_parameters]
    pretrained = [p for n, p in model.named_parameters() if n not in ranker.new_parameters]
    optimizer = torch.optim.AdamW([{"params": pretrained, "lr": learning_rate},
                                   {"params": new, "lr": head_learning_rate}])
    pairs = sum(sum(x.positive) * (len(x.positive) - sum(x.positive)) for x in usable)
    log_ = TrainingLog(str(init), len(usable), pairs, epochs, learning_rate, head_learning_rate, seed, prior_weight,
                       plain=plain)
    order = random.Random(seed)
    started = time.perf_counter()
    model.train()
    with tqdm(total=epochs * len(usable), desc="distil pre-ranker", unit="question",
              disable=None if progress else True) as bar:
        for _ in range(epochs):
            batch = list(range(len(usable)))
            order.shuffle(batch)
            total = 0.0
            for i in batch:
                x = usable[i]
                loss = bpr_loss(priors[i] + ranker.logits(x.question, x.documents()), x.positive)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += loss.item()
                bar.update()
            log_.epoch_loss.append(round(total / len(batch), 6))
    model.eval()
    log_.seconds = round(time.perf_counter() - started, 2)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    ranker.tokenizer.save_pretrained(out)
    (out / PRIOR_FILE).unlink(missing_ok=True)
    if prior_weight:
        (out / PRIOR_FILE).write_text(json.dumps({"prior": "bundled MiniLM cosine", "weight": prior_weight}))
    (out / LOG_FILE).write_text(json.dumps({**asdict(log_), VERSION_KEY: __version__}, indent=2))
    return log_
