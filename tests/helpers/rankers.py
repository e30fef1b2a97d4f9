"""Stand-in rankers: word overlap, a tiny trainable cross-encoder and fixed bi-encoder cosines (no model)."""

import json
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ragfunnel.types import Document


class WordOverlap:
    """Scores a text by how many of the question's words it contains (a transparent stand-in ranker)."""

    def __init__(self):
        self.seen: list[list[str]] = []

    def score(self, question, items):
        texts = [i.render() if isinstance(i, Document) else i for i in items]
        self.seen.append(texts)
        words = set(question.lower().replace("?", "").split())
        return np.array([len(words & set(t.lower().replace(".", " ").split())) for t in texts], dtype=float)


FEATURES = 16


def word_counts(documents) -> np.ndarray:
    """Each document's words hashed into FEATURES counts: what the tiny cross-encoder reads."""
    rows = np.zeros((len(documents), FEATURES), dtype=np.float32)
    for r, d in enumerate(documents):
        for word in d.render().lower().split():
            rows[r, zlib.crc32(word.encode()) % FEATURES] += 1
    return rows


class TinyCrossEncoder:
    """Stands in for CrossEncoderPreRanker: a "pre-trained" layer and a new one-logit head on word counts.

    It saves a config.json and safetensors as a Hugging Face model does, and records the documents
    it scored (``made`` lists every instance, in the order they were made).
    """

    made: list = []

    def __init__(self, model, *, num_labels=None, **_):
        torch = pytest.importorskip("torch")

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = torch.nn.Linear(FEATURES, FEATURES)
                self.classifier = torch.nn.Linear(FEATURES, 1)

            def forward(self, x):
                return self.classifier(torch.tanh(self.encoder(x)))

            def save_pretrained(self, out, safe_serialization=True):
                from safetensors.torch import save_file

                (Path(out) / "config.json").write_text(json.dumps({"model_type": "tiny"}))
                weights = {k: v.contiguous() for k, v in self.state_dict().items()}
                save_file(weights, str(Path(out) / "model.safetensors"))

        self.name = str(model)
        self.model = Model()
        self.new_parameters = {"classifier.weight", "classifier.bias"}
        self.tokenizer = SimpleNamespace(save_pretrained=lambda out: (Path(out) / "tokenizer.json").write_text("{}"))
        self.scored: list[list[str]] = []
        TinyCrossEncoder.made.append(self)

    def logits(self, question, documents):
        import torch

        self.scored.append([d.title for d in documents])
        return self.model(torch.as_tensor(word_counts(documents)))[:, 0]

    def score(self, question, documents):
        import torch

        with torch.no_grad():
            return self.logits(question, documents).numpy().astype(np.float64)


class FixedCosines:
    """Stands in for the bundled bi-encoder: document i's cosine is 0.1 * (i + 1)."""

    made = 0

    def __init__(self, *_, **__):
        FixedCosines.made += 1

    def score(self, question, documents):
        return 0.1 * np.arange(1, len(documents) + 1)
