"""ragfunnel: answer questions over text too long or too large to hand an LLM whole."""

from ragfunnel.api import answer
from ragfunnel.errors import (
    BackendUnavailable,
    ConfigError,
    InputError,
    MissingExtra,
    ModelError,
    RagfunnelError,
)
from ragfunnel.methods import DEFAULT_METHOD, METHODS, make_method
from ragfunnel.types import Chunk, Completion, Example, Prediction, Sample, ScoredChunk, StageTrace, Trace

__version__ = "0.1.0"

__all__ = [
    "answer", "make_method", "METHODS", "DEFAULT_METHOD",
    "Chunk", "Completion", "Example", "Prediction", "Sample", "ScoredChunk", "StageTrace", "Trace",
    "RagfunnelError", "ConfigError", "InputError", "ModelError", "BackendUnavailable", "MissingExtra",
]
