"""What a client may set per request, and what only the operator may.

Every option of every method is set in exactly one of three places:

- a typed, bounded field of the method's client model (:data:`CLIENT_OPTIONS`, ``extra="forbid"``,
  strict types, so ``"budget": "huge"`` or ``"samples": "5"`` is refused with 422 naming the option);
- :data:`OPERATOR_ONLY`: options that name a model, a file, a directory, an index or a URL. A request
  that could set one could make the server read a file or call a URL of the client's choosing with the
  operator's API key, so only ``ragfunnel serve``'s command line sets them;
- the request's own ``task`` field, checked when the request arrives.

``tests/test_serve_options.py`` walks the method registry, so a new option lands in one of them or fails.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragfunnel.errors import ConfigError
from ragfunnel.methods import METHODS
from ragfunnel.methods.fbrag import MAX_SAMPLES

# option -> where the operator sets it
OPERATOR_ONLY: dict[str, str] = {
    "light": "serve --light",
    "strong": "serve --strong",
    "pre_ranker": "serve --pre-ranker",
    "post_ranker": "serve --post-ranker",
    "index": "serve --index NAME=DIR, then the request's index field",
    "demonstrations": "not settable over the API; run drag/iterdrag with --demonstrations from the CLI",
}

MAX_TOKENS = 4096  # per generated answer or draft; far above any task's own answer length


def _default(name: str, option: str) -> Any:
    """Method ``name``'s own default for ``option`` (shown in the schema; never sent to the method)."""
    return inspect.signature(METHODS[name][1].__init__).parameters[option].default


class ClientOptions(BaseModel):
    """Options every method that writes an answer takes."""

    model_config = ConfigDict(extra="forbid", strict=True)
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS, description="Answer tokens (default: the task's).")


class LongContextOptions(ClientOptions):
    pass


class RetrievalOptions(ClientOptions):
    budget: int = Field(_default("op", "budget"), ge=1, le=1_000_000,
                        description="Context tokens the answering model reads.")
    chunk_words: int = Field(_default("op", "chunk_words"), ge=10, le=10_000, description="Words per chunk.")


class DraftingOptions(RetrievalOptions):
    stage1_budget: int | None = Field(None, ge=1, le=1_000_000, description="Context tokens the drafting model reads.")
    samples: int = Field(_default("fb", "samples"), ge=1, le=MAX_SAMPLES, description="Drafts (K).")
    seed: int = Field(_default("fb", "seed"), ge=0, le=2**31 - 1)
    draft_from: Literal["warm", "selection", "document"] = _default("fb", "draft_from")
    fusion: Literal["normalized", "raw"] = _default("fb", "fusion")


class FBOptions(DraftingOptions):
    eta_forward: float | None = Field(None, ge=0, le=1e6, description="Weight of the drafts' scores (default: "
                                      "0.5 for fb, 1 for fb-f).")
    eta_backward: float | None = Field(None, ge=0, le=1e6, description="Weight of the question's scores "
                                       "(default: 0.5 for fb, 0 for fb-f).")
    temperature: float = Field(_default("fb", "temperature"), ge=0, le=5)
    top_p: float = Field(_default("fb", "top_p"), gt=0, le=1)
    top_k: int = Field(_default("fb", "top_k"), ge=0, le=100_000)
    sample_max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    agreement_weighted: bool = Field(_default("fb", "agreement_weighted"), description=(
        "Scale the drafts' weight by how far their answers agree."))


class AutoOptions(DraftingOptions):
    max_seconds: float | None = Field(None, gt=0, le=1e6, description="Rule out methods predicted slower.")
    prefer: Literal["speed", "balanced", "quality"] = Field(_default("auto", "prefer"), description=(
        "How far auto climbs past OP-RAG while the answer is unsure."))


class FunnelOptions(ClientOptions):
    top_clusters: int | None = Field(None, ge=1, le=10_000)
    top_documents: int = Field(_default("funnel", "top_documents"), ge=1, le=1_000)
    top_passages: int = Field(_default("funnel", "top_passages"), ge=1, le=1_000)


class DragOptions(ClientOptions):
    documents: int = Field(_default("drag", "documents"), ge=0, le=1_000)
    shots: int = Field(_default("drag", "shots"), ge=0, le=1_000)


class IterDragOptions(DragOptions):
    max_tokens: int = Field(_default("iterdrag", "max_tokens"), ge=1, le=MAX_TOKENS)  # per step, never None
    iterations: int = Field(_default("iterdrag", "iterations"), ge=1, le=20)


CLIENT_OPTIONS: dict[str, type[ClientOptions]] = {
    "auto": AutoOptions, "fb-f": FBOptions, "fb": FBOptions, "op": RetrievalOptions, "vanilla": RetrievalOptions,
    "self-route": RetrievalOptions, "lc": LongContextOptions,
    "funnel": FunnelOptions, "drag": DragOptions, "iterdrag": IterDragOptions,
}


def client_options(method: str) -> list[str]:
    """The options a request may set for ``method``."""
    return sorted(CLIENT_OPTIONS[method].model_fields)


def checked_options(method: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options a client set for ``method``, validated; a ConfigError names the first bad one."""
    for name in sorted(set(options) & set(OPERATOR_ONLY)):
        raise ConfigError(f"option {name!r} is set by the server's operator ({OPERATOR_ONLY[name]}), not per request")
    if "task" in options:
        raise ConfigError("option 'task' goes in the request's own 'task' field, not in its options")
    model = CLIENT_OPTIONS[method]
    unknown = sorted(set(options) - set(model.model_fields))
    if unknown:
        raise ConfigError(f"method {method} does not take {', '.join(unknown)}; a request may set "
                          f"{', '.join(client_options(method))}")
    try:
        return model.model_validate(options).model_dump(exclude_unset=True, exclude_none=True)
    except ValidationError as e:
        raise ConfigError(describe_errors(e.errors(), prefix="option ")) from None


def describe_errors(errors: list[Any], *, prefix: str = "") -> str:
    """Pydantic's first complaint in one line: which field, what is wrong, and what came (shortened)."""
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"]) or "the value"
    given = first.get("input")
    shown = "" if given is None and first["type"] == "missing" else f" (got {_short(given)})"
    return f"{prefix}{where!r}: {first['msg']}{shown}"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"
