"""LLM protocol, backends and the model registry."""

from ragfunnel.llm.base import (
    LLM,
    BaseLLM,
    Cancellation,
    Cancelled,
    Capabilities,
    cancelled_by,
    current_cancellation,
    reading_progress,
    streaming,
)
from ragfunnel.llm.fake import FakeLLM
from ragfunnel.llm.registry import DEFAULT_LIGHT, DEFAULT_STRONG, resolve, set_disk_caches
from ragfunnel.types import SamplingParams

__all__ = ["LLM", "BaseLLM", "Capabilities", "Cancellation", "Cancelled", "cancelled_by", "current_cancellation",
           "streaming", "reading_progress", "SamplingParams", "FakeLLM", "resolve", "set_disk_caches", "DEFAULT_LIGHT",
           "DEFAULT_STRONG"]
