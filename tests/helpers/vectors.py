"""Seeded synthetic vectors with neighbourhoods, and a corpus of random words to embed as them."""

import numpy as np

from ragfunnel.types import Document

DIM = 32
CENTERS = np.random.default_rng(0).standard_normal((100, DIM), dtype=np.float32)


def clustered(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = CENTERS[rng.integers(len(CENTERS), size=n)] + rng.standard_normal((n, DIM), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


WORDS = "gull rock light keeper granite ferry harbour island puffin gannet cliff diary storm lamp tower".split()


def corpus() -> list[Document]:
    """Twenty documents of 60 words: 240 passages of 5 words."""
    rng = np.random.default_rng(7)
    return [Document(f"d{i}", f"Title {i}", " ".join(rng.choice(WORDS, size=60))) for i in range(20)]
