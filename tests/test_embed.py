"""The bundled MiniLM embedder (marker: model — it loads the bundled ONNX weights)."""

import numpy as np
import pytest

pytestmark = pytest.mark.model


def test_embeddings_are_unit_vectors_that_rank_paraphrases_first():
    from ragfunnel.retrieve.embed import bundled_embedder

    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "A man is riding a horse."]
    v = bundled_embedder().encode(texts)
    assert v.shape == (4, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    sims = v @ v.T
    assert sims[0, 1] > 0.7 and sims[0, 1] > max(sims[0, 2], sims[0, 3])  # the paraphrase is nearest
    assert np.allclose(bundled_embedder().encode(texts[::-1]), v[::-1], atol=1e-5)  # order and batching


def test_long_texts_are_truncated_not_refused():
    from ragfunnel.retrieve.embed import bundled_embedder

    (v,) = bundled_embedder().encode(["lighthouse " * 2000])
    assert np.isfinite(v).all()
