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
from ragfunnel.methods import (
    CONTEXT_METHODS,
    CORPUS_METHODS,
    DEFAULT_CORPUS_METHOD,
    DEFAULT_METHOD,
    METHODS,
    make_method,
    method_kind,
    options_of,
)
from ragfunnel.types import Chunk, Completion, Example, Prediction, Sample, ScoredChunk, StageTrace, Trace

__version__ = "0.1.0"

__all__ = [
    "answer", "make_method", "method_kind", "options_of", "METHODS", "CONTEXT_METHODS", "CORPUS_METHODS",
    "DEFAULT_METHOD", "DEFAULT_CORPUS_METHOD",
    "Chunk", "Completion", "Example", "Prediction", "Sample", "ScoredChunk", "StageTrace", "Trace",
    "RagfunnelError", "ConfigError", "InputError", "ModelError", "BackendUnavailable", "MissingExtra",
]
