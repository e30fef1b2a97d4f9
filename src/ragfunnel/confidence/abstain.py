"""Abstention: answer "unanswerable" where the confidence says the answer is more likely wrong than wanted."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ragfunnel.errors import ConfigError
from ragfunnel.types import Prediction, Stage, Trace, stage

# What an abstaining answer says: the word LongBench's prompts ask for when the text does not hold the
# answer, and what Self-Route and ragfunnel.prompts.is_unanswerable read as declining.
NOT_FOUND = "unanswerable"


def abstain(prediction: Prediction, below: float) -> Prediction:
    """``prediction`` unchanged, or (its confidence under ``below``) answering :data:`NOT_FOUND`, with an
    ``abstain`` stage recording the answer it withheld."""
    if prediction.confidence is None or prediction.confidence >= below:
        return prediction
    with stage(Stage.ABSTAIN, n_in=1, detail={"withheld": prediction.answer,
                                              "confidence": round(prediction.confidence, 4), "below": below}) as trace:
        withheld = replace(prediction, answer=NOT_FOUND)
    return replace(withheld, trace=Trace([*prediction.trace.stages, trace]))


def abstained(prediction: Prediction) -> bool:
    return any(s.name == Stage.ABSTAIN for s in prediction.trace.stages)


@dataclass(frozen=True)
class Abstaining:
    """A method that abstains below a confidence (``ask --abstain``, ``eval --abstain``)."""

    method: Any
    below: float

    def __post_init__(self) -> None:
        if not 0 <= self.below <= 1:
            raise ConfigError(f"abstain must be a confidence in [0, 1], got {self.below}")

    @property
    def name(self) -> str:
        return self.method.name

    def run(self, *args: Any, **kwargs: Any) -> Prediction:
        return abstain(self.method.run(*args, **kwargs), self.below)
