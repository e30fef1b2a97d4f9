"""Post-ranking passages by a generator's attention (FunnelRAG's third stage).

FunnelRAG reads FiD's cross-attention from the first decoder token. Offline we use a bundled
decoder-only model loaded by transformers from its GGUF file: the passages and the question
go into one prompt, and the position that predicts the first answer token is the query.
For every layer and head we take that position's attention over each passage's tokens, keep
the ``rep_tokens`` highest weights (the passage's representative tokens; question and
instruction tokens never count) and average them; a passage's score is the mean over layers
and heads.

Only the query position's attention row is ever materialised: the forward pass runs with
SDPA, and a registered attention function recomputes that one row per layer from the layer's
query and keys (heads x tokens floats), so memory stays linear in the prompt length.

Reading a GGUF file makes transformers de-quantise every tensor (~40 s for the 0.5B model), so
the first load saves the converted model as safetensors in the user cache dir
(``post_ranker/<SHA-256 of the GGUF>/``, with a ``checksums.json`` of every file) and later
loads read that instead. A damaged entry is rebuilt; an unwritable cache only costs speed.

Models are read from local files only: a Hugging Face name must already be in the local Hugging Face
cache (offline, transformers would retry the download for about a minute before failing), and a
file or directory that is not a model is refused before torch is imported.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache, partial
from pathlib import Path
from typing import Protocol

import numpy as np

from ragfunnel.bounded import RefusedPath, UnreadableFile, read_json_file
from ragfunnel.errors import InputError, MissingExtra, ModelError
from ragfunnel.llm.fingerprint import file_sha256, sha256_of_file

ATTENTION_NAME = "ragfunnel_last_row"
DEFAULT_REP_TOKENS = 4  # the paper's best setting in most cases
CHECKSUMS = "checksums.json"
MAX_CHECKSUMS_BYTES = 1 << 20  # a digest per file of a converted model: a few hundred bytes
MODEL_CONFIG_BYTES = 4 << 20  # a transformers config.json is a few kilobytes
POST_RANKERS = ("bundled:NAME, gguf:PATH to a GGUF file, or a causal LM's directory or Hugging Face name "
                "(config.json and weights)")
# The weight files transformers looks for in a model directory (single or sharded).
MODEL_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")

log = logging.getLogger(__name__)


class PostRanker(Protocol):
    """Scores passages for a question; higher is better. A FiD/T5 scorer implements the same call."""

    def score(self, question: str, passages: list[str]) -> np.ndarray: ...


_capture = threading.local()


def require_torch():
    """torch and transformers, or an error naming the extra that installs them."""
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingExtra("torch and transformers", "attention") from None
    return torch, transformers


def model_directory(spec: str | Path, *, role: str, expected: str) -> Path:
    """The local directory of the transformers model ``spec``: a directory as given, or the snapshot of a
    Hugging Face name in the local cache, never the network. A ModelError names what is missing."""
    path = Path(spec).expanduser()
    if not path.exists():
        try:
            from huggingface_hub import snapshot_download
            from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
        except ImportError:
            raise MissingExtra("huggingface_hub", "attention") from None
        try:
            path = Path(snapshot_download(str(spec), local_files_only=True))
        except HFValidationError:
            raise ModelError(f"{role} {spec} does not exist; pass {expected}") from None
        except LocalEntryNotFoundError:
            raise ModelError(f"{role} {spec} is not found locally (no such directory, nor in the Hugging Face "
                             f"cache); download it once with network access (`hf download {spec}`) or pass a "
                             "local directory") from None
    if problem := _not_a_model(path):
        raise ModelError(f"{role} {path} is not a model directory ({problem}); pass {expected}")
    return path


def _not_a_model(path: Path) -> str | None:
    """What keeps ``path`` from being a transformers model directory, or None."""
    if not path.is_dir():
        return "it is a file"
    try:
        config = read_json_file(path / "config.json", max_bytes=MODEL_CONFIG_BYTES, what="model config")
    except FileNotFoundError:
        return "no config.json"
    except RefusedPath as e:  # a FIFO, a device, far too big
        return f"config.json is {e.problem}"
    except UnreadableFile:
        return "config.json is not JSON"
    if not isinstance(config, dict):
        return "config.json is not a JSON object"
    if not any((path / name).is_file() for name in MODEL_WEIGHTS):
        return f"no weights: none of {', '.join(MODEL_WEIGHTS)}"
    return None


@contextmanager
def model_load_errors(what: str, expected: str) -> Iterator[None]:
    """transformers' errors while loading ``what`` as one ModelError line: it raises OSError, ValueError, a
    safetensors error ... for files that only look like a model."""
    from safetensors import SafetensorError

    try:
        yield
    except (OSError, ValueError, SafetensorError) as e:
        first = next(iter(str(e).splitlines()), "")
        raise ModelError(f"{what} could not be loaded ({type(e).__name__}: {first}); pass {expected}") from e


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' progress bars and info logs off for the block, its own settings restored after."""
    from transformers.utils import logging as hf_logging

    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_reader
    except ImportError:
        gguf_reader = None
    # The GGUF reader's de-quantising bar is plain tqdm, deaf to disable_progress_bar().
    gguf_bar = getattr(gguf_reader, "tqdm", None)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if gguf_bar is not None:
        gguf_reader.tqdm = partial(gguf_bar, disable=True)
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
        if gguf_bar is not None:
            gguf_reader.tqdm = gguf_bar


@lru_cache(maxsize=1)
def _register_attention() -> None:
    torch, transformers = require_torch()
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def attention_rows(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        out = sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                     **kwargs)
        rows = getattr(_capture, "rows", None)
        if rows is not None:
            keys = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)  # grouped-query heads
            scale = scaling if scaling is not None else query.shape[-1] ** -0.5
            # The last position attends to every earlier one (causal), so it needs no mask.
            logits = query[:, :, -1:].float() @ keys.float().transpose(2, 3)
            rows.append(torch.softmax(logits * scale, dim=-1)[0, :, 0, :])  # heads x tokens
        return out

    transformers.AttentionInterface.register(ATTENTION_NAME, attention_rows)


class AttentionPostRanker:
    """Generator-attention passage scores from a GGUF (or Hugging Face) causal LM run by transformers."""

    def __init__(self, model: str | Path, *, gguf_file: str | None = None, rep_tokens: int = DEFAULT_REP_TOKENS,
                 threads: int = 2):
        """``model``: a model directory or Hugging Face name, or with ``gguf_file`` the directory holding it."""
        if gguf_file is None:
            model = model_directory(model, role="post-ranker", expected=POST_RANKERS)
        torch, transformers = require_torch()
        _register_attention()
        torch.set_num_threads(threads)
        self.rep_tokens = rep_tokens
        what = f"post-ranker {Path(model, gguf_file or '')}"
        with quiet_transformers(), model_load_errors(what, POST_RANKERS):
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(model), gguf_file=gguf_file,
                                                                        local_files_only=True)
            self.model = transformers.AutoModelForCausalLM.from_pretrained(
                str(model), gguf_file=gguf_file, attn_implementation=ATTENTION_NAME, dtype=torch.float32,
                local_files_only=True)
        self.model.eval()

    @classmethod
    def from_gguf(cls, path: str | Path, *, sha256: str | None = None, cache: bool = True,
                  **kwargs) -> AttentionPostRanker:
        """Load a GGUF file, or its converted copy from the user cache dir (see the module docstring).

        ``sha256`` is the file's digest when already known (bundled models); otherwise it is computed
        once per version of the file. ``cache=False`` always converts and writes nothing.
        """
        path = Path(path)
        if not cache:
            return cls(path.parent, gguf_file=path.name, **kwargs)
        from ragfunnel.llm.cache_paths import cache_dir

        entry = cache_dir() / "post_ranker" / (sha256 or file_sha256(path))
        if entry.exists():
            problem = verify_checked_dir(entry)
            if problem is None:
                log.debug("reading the converted post-ranker from %s", entry)
                return cls(entry, **kwargs)
            log.warning("the cached post-ranker in %s is damaged (%s); rebuilding it from %s", entry, problem,
                        path.name)
            _discard(entry)
        log.info("converting %s for transformers; later starts read the converted copy in %s", path.name, entry)
        ranker = cls(path.parent, gguf_file=path.name, **kwargs)
        try:
            write_checked_dir(entry, ranker.save_converted)
            log.info("cached the converted post-ranker in %s (%.0f MB)", entry,
                     sum(p.stat().st_size for p in entry.iterdir()) / 1e6)
        except Exception as e:  # caching only saves time: a failure to write must not fail the load
            log.warning("cannot cache the converted post-ranker in %s (%s: %s); every start will convert %s again",
                        entry, type(e).__name__, e, path.name)
        return ranker

    def save_converted(self, directory: Path) -> None:
        """Write the model (safetensors), its config and its tokenizer into ``directory``."""
        quantizer = getattr(self.model, "hf_quantizer", None)
        if quantizer is not None:
            # transformers 5 keeps its GGUF quantizer on a model it de-quantised and refuses to save such a
            # model; once every weight is a float tensor that record is stale, so it goes (the config's too).
            packed = [name for name, t in self.model.state_dict().items() if not t.is_floating_point()]
            if packed:
                raise ModelError(f"transformers kept {len(packed)} weights packed in GGUF blocks ({packed[0]} ...); "
                                 "only a fully de-quantised model can be cached")
            quantizer.remove_quantization_config(self.model)
        with quiet_transformers():
            # safetensors: transformers 4's default and transformers 5's only format (it has no switch).
            self.model.save_pretrained(directory)
            self.tokenizer.save_pretrained(directory)
        if not any(directory.glob("*.safetensors")):
            raise ModelError(f"transformers saved no safetensors file in {directory}")

    def _segments(self, question: str, passages: list[str]) -> tuple[list[int], list[tuple[int, int]]]:
        """Prompt token ids and each passage's (start, end) token span inside them."""
        marker = "\u2402PASSAGES\u2402"
        user = (f"Read the passages, then answer the question in a few words.\n\n{marker}\n\n"
                f"Question: {question}")
        text = self.tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                                  add_generation_prompt=True)
        head, tail = text.split(marker)
        ids = self.tokenizer.encode(head, add_special_tokens=False)
        spans = []
        for i, passage in enumerate(passages, start=1):
            ids += self.tokenizer.encode(f"[{i}] ", add_special_tokens=False)  # the label is not the passage's
            piece = self.tokenizer.encode(f"{passage.strip()}\n\n", add_special_tokens=False)
            spans.append((len(ids), len(ids) + len(piece)))
            ids += piece
        return ids + self.tokenizer.encode(tail, add_special_tokens=False), spans

    def score(self, question: str, passages: list[str]) -> np.ndarray:
        if not passages:
            raise InputError("no passages to post-rank; the earlier stages kept nothing")
        torch, _ = require_torch()
        ids, spans = self._segments(question, passages)
        _capture.rows = []
        try:
            with torch.inference_mode():
                self.model(input_ids=torch.tensor([ids]), use_cache=False, logits_to_keep=1)
            layers = torch.stack(_capture.rows)  # layers x heads x tokens
        finally:
            _capture.rows = None
        scores = np.zeros(len(passages))
        for p, (start, end) in enumerate(spans):
            k = min(self.rep_tokens, end - start)
            # Representative tokens per layer and head, then the mean over them, the heads and the layers.
            scores[p] = float(layers[:, :, start:end].topk(k, dim=-1).values.mean())
        return scores


def _files(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if not p.is_dir())


def _discard(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass  # whatever stays is found damaged again next time


def write_checked_dir(dest: Path, write: Callable[[Path], None]) -> None:
    """Create ``dest`` all at once: ``write`` fills a temporary sibling, ``checksums.json`` records the
    SHA-256 of every file in it, then a rename publishes it. On any error nothing is left behind."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
    try:
        write(tmp)
        sums = {name: sha256_of_file(tmp / name) for name in _files(tmp)}
        (tmp / CHECKSUMS).write_text(json.dumps(sums, indent=1) + "\n")
        try:
            tmp.rename(dest)
        except OSError:
            if verify_checked_dir(dest) is not None:
                raise
            _discard(tmp)  # another process published the same entry first
    except BaseException:
        _discard(tmp)
        raise


def verify_checked_dir(directory: Path) -> str | None:
    """None when ``directory`` holds exactly the files its ``checksums.json`` lists, each with the
    recorded SHA-256; otherwise what is wrong, for a log line."""
    try:
        sums = read_json_file(directory / CHECKSUMS, max_bytes=MAX_CHECKSUMS_BYTES, what=CHECKSUMS)
    except FileNotFoundError:
        return f"no {CHECKSUMS}: an interrupted write"
    except UnreadableFile as e:  # not a regular file, too big, not JSON, nested past reason
        return f"{CHECKSUMS} is unreadable ({e.problem})"
    if not isinstance(sums, dict) or not all(isinstance(v, str) for v in sums.values()):
        return f"{CHECKSUMS} is not a mapping of file names to SHA-256 digests"
    present = set(_files(directory)) - {CHECKSUMS}
    if missing := sorted(set(sums) - present):
        return f"{missing[0]} is missing"
    if extra := sorted(present - set(sums)):
        return f"{extra[0]} is not in {CHECKSUMS}"
    for name, digest in sums.items():
        if sha256_of_file(directory / name) != digest:
            return f"{name} does not match its SHA-256"
    return None


def load_post_ranker(spec: str, **kwargs) -> AttentionPostRanker:
    """``bundled:NAME`` or ``gguf:PATH`` (GGUF read by transformers), else a model directory or a Hugging Face
    name already in the local cache.

    A GGUF file is converted once and cached (``AttentionPostRanker.from_gguf``); Hugging Face
    checkpoints are already safetensors and load as they are.
    """
    scheme, sep, rest = spec.partition(":")
    if sep and scheme == "bundled":
        from ragfunnel.llm import bundled

        path = bundled.ensure(rest)  # raises on an unknown name before get() is asked
        return AttentionPostRanker.from_gguf(path, sha256=bundled.get(rest).sha256, **kwargs)
    if sep and scheme == "gguf":
        from ragfunnel.llm.gguf import check_gguf_file

        try:
            check_gguf_file(Path(rest))  # before the file is hashed or handed to transformers
        except ModelError as e:
            raise ModelError(f"post-ranker: {e.marked()}; or pass {POST_RANKERS}") from None
        return AttentionPostRanker.from_gguf(rest, **kwargs)
    return AttentionPostRanker(spec, **kwargs)
