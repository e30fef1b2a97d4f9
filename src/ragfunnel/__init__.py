"""ragfunnel: answer questions over text too long or too large to hand an LLM whole."""

from ragfunnel.api import answer, answer_located, search
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
from ragfunnel.types import (
    Chunk,
    Citation,
    Completion,
    Example,
    Prediction,
    Sample,
    ScoredChunk,
    StageTrace,
    Trace,
)
from ragfunnel.version import __version__

__all__ = [
    "__version__",
    "answer", "answer_located", "search", "make_method", "method_kind", "options_of",
    "METHODS", "CONTEXT_METHODS", "CORPUS_METHODS",
    "DEFAULT_METHOD", "DEFAULT_CORPUS_METHOD",
    "Chunk", "Citation", "Completion", "Example", "Prediction", "Sample", "ScoredChunk", "StageTrace", "Trace",
    "RagfunnelError", "ConfigError", "InputError", "ModelError", "BackendUnavailable", "MissingExtra",
]
