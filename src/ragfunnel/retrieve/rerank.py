"""Pre-rankers: score whole documents against a question (FunnelRAG's second stage).

Three kinds behind one protocol, chosen by a spec string (:func:`load_pre_ranker`):

``minilm``          a bi-encoder (cosine of question and document): the corpus index's embedder, which is the
                    bundled all-MiniLM-L6-v2 unless the index was built with ``--embedder``; offline default
``llm:SPEC``        an LLM asked, per document, whether it helps answer the question (yes > no)
anything else       a cross-encoder by local directory or Hugging Face name, e.g. ``BAAI/bge-reranker-v2-m3``
                    once downloaded (``hf download``; loading never reaches for the network), or the
                    directory ``ragfunnel funnel distill`` writes (with a ``prior.json`` there, the
                    cross-encoder's logit is added to the weighted bi-encoder cosine)
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from ragfunnel.bounded import UnreadableFile, read_json_file
from ragfunnel.errors import InputError
from ragfunnel.retrieve.attention import model_directory, model_load_errors, require_torch
from ragfunnel.retrieve.embedders import DEFAULT_EMBEDDER
from ragfunnel.types import Document, SamplingParams

DEFAULT_PRE_RANKER = "minilm"
CROSS_ENCODER_TOKENS = 256  # question + document, truncated from the document's end
PRIOR_FILE = "prior.json"  # in a distilled model's directory: the weight of the bi-encoder cosine it corrects
MAX_PRIOR_BYTES = 64 << 10  # one weight and a note
CROSS_ENCODERS = "a cross-encoder or encoder directory (config.json and weights) or Hugging Face name"
PRE_RANKERS = ("a cross-encoder directory (as `ragfunnel funnel distill` writes) or Hugging Face name, `minilm`, "
               "or `llm:SPEC`")


class PreRanker(Protocol):
    """Scores whole documents for a question; higher is better."""

    def score(self, question: str, documents: list[Document]) -> np.ndarray: ...


class BiEncoderPreRanker:
    """Cosine similarity between embeddings of the question and of each document's opening.

    ``embedder`` (default: the bundled MiniLM) encodes both. ``stored`` holds its embedding of every
    document of a corpus index (row i for the document at position i, as ``ragfunnel index
    --embed-documents`` writes them); documents read from that index are then looked up instead of
    encoded, with the same scores. Stored vectors must come from ``embedder``: pass the index's
    (``CorpusIndex.embedder``) with them.
    """

    def __init__(self, embedder=None, *, stored: np.ndarray | None = None):
        from ragfunnel.retrieve.embed import bundled_embedder

        self.embedder = embedder or bundled_embedder()
        self.stored = stored

    def score(self, question: str, documents: list[Document]) -> np.ndarray:
        positions = [d.position for d in documents]
        if self.stored is not None and None not in positions:
            vectors = np.asarray(self.stored[positions])
        else:
            vectors = self.embedder.encode([d.render() for d in documents])
        (query,) = self.embedder.encode([question])
        return np.asarray(vectors @ query, dtype=np.float64)


class CrossEncoderPreRanker:
    """A sequence-classification model reading ``(question, document)`` pairs; its relevance logit is the score.

    Any Hugging Face cross-encoder works (one output logit, or the last of several), read from a
    local directory or the local Hugging Face cache, never the network.
    """

    def __init__(self, model: str | Path, *, max_tokens: int = CROSS_ENCODER_TOKENS, batch_size: int = 16,
                 threads: int = 2, num_labels: int | None = None):
        directory = model_directory(model, role="cross-encoder", expected=CROSS_ENCODERS)
        torch, transformers = require_torch()
        torch.set_num_threads(threads)
        self.name = str(model)
        self.max_tokens, self.batch_size = max_tokens, batch_size
        # num_labels=1 turns a plain encoder (or a two-class model) into a one-logit scorer to train.
        head = {"num_labels": num_labels} if num_labels else {}
        with model_load_errors(f"cross-encoder {directory}", CROSS_ENCODERS):
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
            self.model, loading = transformers.AutoModelForSequenceClassification.from_pretrained(
                str(directory), local_files_only=True, output_loading_info=True, **head)
        # Weights the checkpoint did not hold (a new scoring head): training gives them a larger step.
        self.new_parameters = {*loading["missing_keys"], *(k[0] if isinstance(k, tuple) else k
                                                          for k in loading["mismatched_keys"])}
        self.model.eval()

    def logits(self, question: str, documents: list[Document]):
        """Relevance logits as a torch tensor (with gradients when the model is training)."""
        batch = self.tokenizer([question] * len(documents), [d.render() for d in documents], padding=True,
                               truncation="only_second", max_length=self.max_tokens, return_tensors="pt")
        out = self.model(**batch).logits
        return out[:, -1]

    def score(self, question: str, documents: list[Document]) -> np.ndarray:
        torch, _ = require_torch()
        scores = []
        with torch.inference_mode():
            for start in range(0, len(documents), self.batch_size):
                scores.append(self.logits(question, documents[start:start + self.batch_size]).float().numpy())
        return np.concatenate(scores).astype(np.float64) if scores else np.zeros(0)


class PriorCrossEncoderPreRanker:
    """A cross-encoder that corrects the bundled bi-encoder: ``weight * cosine + logit``.

    What ``ragfunnel funnel distill`` trains by default. Its new scoring head starts at zero, so
    before training it ranks exactly as the bi-encoder does, and the few dozen questions a user
    labels move it from there instead of teaching relevance from nothing.
    """

    def __init__(self, model: str | Path, *, weight: float, stored: np.ndarray | None = None):
        self.cross_encoder = CrossEncoderPreRanker(model)
        self.bi_encoder = BiEncoderPreRanker(stored=stored)
        self.weight = weight

    def score(self, question: str, documents: list[Document]) -> np.ndarray:
        return self.weight * self.bi_encoder.score(question, documents) + self.cross_encoder.score(question, documents)


def read_prior_weight(model_dir: Path) -> float | None:
    """The bi-encoder weight a distilled model was trained with; None for a plain cross-encoder."""
    path = model_dir / PRIOR_FILE
    fix = "distil the model again or delete the file to use the cross-encoder alone"
    try:
        saved = read_json_file(path, max_bytes=MAX_PRIOR_BYTES, what="prior weight file")
    except FileNotFoundError:
        return None
    except UnreadableFile as e:  # not a regular file, too big, not JSON, nested past reason
        raise InputError(f"{path} is corrupted ({e.problem}); {fix}") from None
    try:
        return float(saved["weight"])
    except (ValueError, KeyError, TypeError):
        raise InputError(f"{path} is corrupted (no numeric \"weight\"); {fix}") from None


class LLMYesNoPreRanker:
    """Asks an LLM, one document at a time, whether the document helps answer the question.

    A "yes" scores 1 and anything else 0; documents with equal scores keep the order the
    retrieval stage gave them (the funnel breaks ties by position).
    """

    def __init__(self, llm):
        from ragfunnel.llm import resolve

        self.llm = resolve(llm)

    def score(self, question: str, documents: list[Document]) -> np.ndarray:
        prompts = [
            f"Here is a document.\n\n{d.render()}\n\nDoes this document contain information that helps answer the "
            f"question below? Reply with yes or no only.\nQuestion: {question}\nReply:"
            for d in documents
        ]
        replies = self.llm.generate(prompts, SamplingParams(max_tokens=2, temperature=0.0))
        return np.array([1.0 if r[0].text.strip().lower().startswith("yes") else 0.0 for r in replies])


def load_pre_ranker(spec: str | Path, *, stored: np.ndarray | None = None, embedder=None) -> PreRanker:
    """``minilm``, ``llm:MODEL-SPEC``, or a cross-encoder's local directory or Hugging Face name.

    ``stored``: an index's document vectors (``CorpusIndex.document_vectors``), which ``minilm`` reads;
    ``embedder``: the index's embedder (``CorpusIndex.embedder``), which ``minilm`` encodes with. A
    distilled model's prior is the bundled MiniLM's cosine it was trained with, so it reads ``stored``
    only when the index's embedder is that MiniLM.
    A directory that is not a model, or a name not in the local Hugging Face cache, is refused here,
    listing the pre-rankers there are, before torch is imported.
    """
    spec = str(spec)
    if spec == "minilm":
        return BiEncoderPreRanker(embedder=embedder, stored=stored)
    if spec.startswith("llm:"):
        return LLMYesNoPreRanker(spec.removeprefix("llm:"))
    weight = read_prior_weight(Path(spec))
    directory = model_directory(spec, role="pre-ranker", expected=PRE_RANKERS)
    if weight is not None:
        minilm = embedder is None or embedder.spec == DEFAULT_EMBEDDER
        return PriorCrossEncoderPreRanker(directory, weight=weight, stored=stored if minilm else None)
    return CrossEncoderPreRanker(directory)
