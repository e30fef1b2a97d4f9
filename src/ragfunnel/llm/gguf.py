"""A GGUF file before its weights load: the file checked, its vocabulary, chat template and trained context.

Counting a prompt's tokens needs the tokenizer only. Reading it vocabulary-only takes about 0.3 s
for the bundled 1.5B model, where loading the weights and allocating a 32k-token context takes
about 2 s; so ``auto`` plans the first question from the vocabulary and the weights load when the
first model call needs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragfunnel.errors import MissingExtra, ModelError


def check_gguf_file(path: Path) -> None:
    """One clear ModelError for a path llama.cpp could not load anyway: missing, a directory, not GGUF.

    Cheap (reads four bytes), so the registry runs it when a ``gguf:`` spec is resolved, long before
    the first call imports llama.cpp.
    """
    if path.is_dir():
        raise ModelError(f"model file {path} is a directory; give the path of the .gguf file inside it")
    if path.exists() and not path.is_file():  # a pipe or a device would block or never end
        raise ModelError(f"model file {path} is not a regular file (a pipe, socket or device); give a .gguf file")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except FileNotFoundError:
        raise ModelError(f"model file {path} does not exist; check the path or run `ragfunnel models`") from None
    except OSError as e:
        raise ModelError(f"cannot read model file {path} ({e.strerror or e}); check its permissions") from None
    if magic != b"GGUF":
        raise ModelError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF'); give a .gguf model file "
                         "(convert other formats with llama.cpp's convert_hf_to_gguf.py)")


def chat_template(model: Any) -> Any:
    """The model's own chat template as a formatter (None when the file carries none).

    ``model`` is llama-cpp-python's ``LlamaModel``, vocabulary-only or fully loaded: both read
    the same metadata and special tokens.
    """
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = model.metadata().get("tokenizer.chat_template")
    if not template:
        return None
    eos, bos = model.token_eos(), model.token_bos()
    return Jinja2ChatFormatter(
        template=template,
        eos_token=model.token_get_text(eos) if eos != -1 else "",
        bos_token=model.token_get_text(bos) if bos != -1 else "",
    )


def token_count(model: Any, text: bytes, *, add_bos: bool = False, special: bool = False) -> int:
    """How many tokens ``text`` makes under ``model`` (llama-cpp-python's ``LlamaModel``, vocabulary-only or
    loaded), without writing them out.

    llama.cpp answers a buffer too small for the tokens with the negated count, so a buffer of none counts in one
    pass. ``LlamaModel.tokenize`` allocates a buffer of the trained context for every call and tokenises a text
    longer than that twice: counting a book's chunks, or the book, that way costs several times this.
    """
    import llama_cpp

    n = llama_cpp.llama_tokenize(model.vocab, text, len(text), None, 0, add_bos, special)
    if n == -(2**31):  # llama.cpp's INT32_MIN: more tokens than an int32 counts
        raise ModelError(f"a text of {len(text):,} bytes makes more tokens than llama.cpp can count; split it")
    return -n if n < 0 else n


class GGUFVocab:
    """A GGUF model's vocabulary and metadata, loaded without its weights.

    Tokenizes exactly as the loaded model does (the same vocabulary, read from the same file). It wraps
    llama-cpp-python's internal ``LlamaModel``, the one class of it that loads a model vocabulary-only:
    its public ``Llama`` always builds a context, which a vocabulary-only model cannot have.
    """

    def __init__(self, path: Path):
        check_gguf_file(path)
        try:
            import llama_cpp
            from llama_cpp._internals import LlamaModel
        except ImportError:
            raise MissingExtra("llama_cpp", "llamacpp") from None
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        try:
            self._model = LlamaModel(path_model=str(path), params=params, verbose=False)
        except (ValueError, RuntimeError) as e:
            raise ModelError(f"llama.cpp could not load {path} ({e}); the file is truncated or "
                             "not GGUF — replace it (for bundled models: `ragfunnel models --prepare`)") from None
        self.template = chat_template(self._model)
        meta = self._model.metadata()  # a vocabulary-only model has no hyperparameters: read the header
        self.trained_context = int(meta.get(f"{meta.get('general.architecture', '')}.context_length") or 0)

    def tokenize(self, text: bytes, *, add_bos: bool, special: bool) -> list[int]:
        return self._model.tokenize(text, add_bos=add_bos, special=special)

    def count_tokens(self, text: bytes) -> int:
        """How many tokens ``text`` makes (no BOS, special tokens as text), without writing them out."""
        return token_count(self._model, text)

    def close(self) -> None:
        self._model.close()
