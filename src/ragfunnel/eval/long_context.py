"""Build long contexts offline: a question's own passages hidden among distractor passages."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from ragfunnel.errors import InputError, option
from ragfunnel.types import Document, Example


@dataclass(frozen=True)
class BuiltContext:
    text: str
    passages: list[Document]
    gold_positions: list[int]  # indices into ``passages`` of the question's own passages

    @property
    def n_words(self) -> int:
        return len(self.text.split())


def build_long_context(
    own: list[Document], pool: list[Document], *, target_words: int, seed: int | str = 0
) -> BuiltContext:
    """Add distractors from ``pool`` (titles not among ``own``) until ``target_words``, then shuffle.

    The same ``seed`` gives the same context; gold positions are recorded.
    """
    rng = random.Random(seed)
    own_titles = {p.title for p in own}
    candidates = [p for p in pool if p.title not in own_titles]
    rng.shuffle(candidates)
    chosen, words = list(own), sum(p.n_words for p in own)
    for p in candidates:
        if words >= target_words:
            break
        chosen.append(p)
        words += p.n_words
    if words < target_words:
        raise InputError(f"the pool holds only {words} words; lower {option('context_words')} below that "
                         "or add passages")
    order = list(range(len(chosen)))
    rng.shuffle(order)
    passages = [chosen[i] for i in order]
    gold = sorted(new for new, old in enumerate(order) if old < len(own))
    return BuiltContext("\n\n".join(p.render() for p in passages), passages, gold)


def lengthen(example: Example, pool: list[Document], *, target_words: int, seed: int = 0) -> Example:
    """``example`` with its own passages hidden among distractors from ``pool`` (``target_words`` long).

    Each example gets its own fixed shuffle (from ``seed`` and its id); the positions of its
    own passages go to ``meta["gold_passages"]``.
    """
    if not example.passages:
        raise InputError(f"example {example.id!r} has no separate passages to hide among distractors; "
                         "long contexts need a dataset with paragraphs (HotpotQA or MuSiQue format)")
    built = build_long_context(example.passages, pool, target_words=target_words, seed=f"{seed}:{example.id}")
    return replace(example, context=built.text, passages=built.passages,
                   meta={**example.meta, "gold_passages": built.gold_positions})
