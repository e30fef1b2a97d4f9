"""How likely an answer is right: signals read from what a method already has, one cheap judgement by the
answering model, and a calibrated model that turns them into a probability (see docs/confidence.md)."""

from ragfunnel.confidence.abstain import NOT_FOUND, Abstaining, abstain, abstained
from ragfunnel.confidence.assess import (
    JUDGE_CHECK,
    assess,
    current_calibration,
    judge,
    measuring_every_signal,
    using_calibration,
)

__all__ = ["NOT_FOUND", "Abstaining", "abstain", "abstained", "JUDGE_CHECK", "assess", "current_calibration",
           "judge", "measuring_every_signal", "using_calibration"]
