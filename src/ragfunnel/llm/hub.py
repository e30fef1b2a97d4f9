"""Models by name from where people keep them: a GGUF file on the Hugging Face hub, a model of a local Ollama.

``hf:OWNER/REPO/FILE.gguf[@REVISION]`` is downloaded once with ``huggingface_hub.hf_hub_download`` (which
honours ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` and the user's token) into ragfunnel's own model cache,
``cache_dir()/models/hf/OWNER/REPO/REVISION/FILE``, with ``FILE.sha256.json`` beside it recording the SHA-256 of
the bytes that arrived. Later uses read the cache and ask the network nothing; a cached file whose SHA-256 no
longer matches its record is refused. A download lands whole or not at all: it is written into a fresh folder
beside the cache, checked (GGUF magic), hashed, and only then renamed into place; any failure removes the folder.

``ollama:NAME`` is a model a local Ollama server has pulled, asked through its OpenAI-compatible API.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragfunnel.atomic import write_atomic
from ragfunnel.bounded import UnreadableFile, read_json_file
from ragfunnel.errors import BackendUnavailable, ConfigError, MissingExtra, ModelError, RagfunnelError
from ragfunnel.llm import fingerprint
from ragfunnel.llm.cache_paths import cache_dir

_NAME = re.compile(r"[A-Za-z0-9][\w.-]*")  # an owner or repository name, as the hub allows them
_REVISION = re.compile(r"[\w.-]+(/[\w.-]+)*")  # a branch, tag or commit (branches may hold slashes)
HF_FORM = "hf:OWNER/REPO/FILE.gguf (or hf:OWNER/REPO/FILE.gguf@REVISION)"
MAX_RECORD_BYTES = 64 << 10


@dataclass(frozen=True)
class HubFile:
    """One GGUF file of a hub repository, at a revision (``main`` unless the spec names one)."""

    repo: str  # OWNER/REPO
    filename: str  # its path inside the repository
    revision: str = "main"

    def __post_init__(self) -> None:
        owner, _, name = self.repo.partition("/")
        if not (_NAME.fullmatch(owner) and _NAME.fullmatch(name)):
            raise ConfigError(f"bad Hugging Face repository {self.repo!r} in {self.spec!r}; write {HF_FORM}")
        parts = self.filename.split("/")
        if not self.filename.lower().endswith(".gguf") or any(p in ("", ".", "..") for p in parts):
            raise ConfigError(f"{self.spec!r} names no GGUF file of {self.repo}; write {HF_FORM}, the file as the "
                              "repository's Files tab lists it")
        if not _REVISION.fullmatch(self.revision) or ".." in self.revision:
            raise ConfigError(f"bad revision {self.revision!r} in {self.spec!r}; give a branch, tag or commit")

    @property
    def spec(self) -> str:
        return f"hf:{self.repo}/{self.filename}" + ("" if self.revision == "main" else f"@{self.revision}")

    @property
    def path(self) -> Path:
        """Where the file is (or will be) kept."""
        return cache_dir() / "models" / "hf" / self.repo / self.revision / self.filename

    @property
    def record(self) -> Path:
        """The SHA-256 (and where the file came from) recorded beside it."""
        return self.path.with_name(self.path.name + ".sha256.json")


def parse_hf(rest: str) -> HubFile:
    """The file an ``hf:`` spec names (``rest`` is what follows ``hf:``)."""
    body, sep, revision = rest.rpartition("@") if "@" in rest else (rest, "", "")
    if sep and not revision:
        raise ConfigError(f"'hf:{rest}' ends with '@' but names no revision; write {HF_FORM}")
    parts = body.split("/")
    if len(parts) < 3:
        raise ConfigError(f"unknown model spec 'hf:{rest}': a Hugging Face spec names one GGUF file, {HF_FORM}; or "
                          "give a file you have as gguf:PATH, or serve the model and use openai:URL#MODEL")
    return HubFile("/".join(parts[:2]), "/".join(parts[2:]), revision or "main")


@dataclass(frozen=True)
class Pulled:
    """A hub file in the cache: where it is, its SHA-256, and whether this call downloaded it."""

    path: Path
    sha256: str
    downloaded: bool


def cached(hub: HubFile) -> Pulled | None:
    """The file if it is in the cache with its record, verified against it (hashed again only when the file's
    stamp changed); None if it is not there. A file that changed since it was recorded is a ModelError."""
    try:
        recorded = read_json_file(hub.record, max_bytes=MAX_RECORD_BYTES, what="hub file record")["sha256"]
    except (FileNotFoundError, UnreadableFile, TypeError, KeyError):
        return None  # never downloaded, or its record is unusable: download it again
    if not hub.path.is_file() or not isinstance(recorded, str):
        return None
    actual = fingerprint.file_sha256(hub.path)
    if actual != recorded:
        raise ModelError(f"the cached {hub.spec} at {hub.path} changed since it was downloaded (SHA-256 "
                         f"{actual[:12]}..., recorded {recorded[:12]}...): delete it and run "
                         f"`ragfunnel models pull {hub.spec}` to download it again")
    return Pulled(hub.path, recorded, downloaded=False)


def pull(hub: HubFile, *, progress: bool | None = None) -> Pulled:
    """The file from the cache, or downloaded into it now (checked as GGUF, its SHA-256 recorded)."""
    if (have := cached(hub)) is not None:
        return have
    try:
        import huggingface_hub
    except ImportError:
        raise MissingExtra("huggingface_hub", "hub") from None
    root = hub.path.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{hub.path.name}.", suffix=".partial", dir=root))
    except OSError as e:
        raise ConfigError(f"cannot write to the model cache {root} ({e.strerror or e}); point RAGFUNNEL_CACHE at "
                          "a writable directory") from None
    try:
        got = Path(_download(huggingface_hub, hub, staging, progress))
        try:
            from ragfunnel.llm.gguf import check_gguf_file

            check_gguf_file(got)
        except ModelError:
            raise ModelError(f"{hub.spec} is not a GGUF file (it does not start with b'GGUF'); the download is "
                             f"removed: name a .gguf file of {hub.repo}") from None
        sha = fingerprint.sha256_of_file(got)
        os.replace(got, hub.path)
        record = {"spec": hub.spec, "repo": hub.repo, "filename": hub.filename, "revision": hub.revision,
                  "bytes": hub.path.stat().st_size, "sha256": sha}
        write_atomic(hub.record, json.dumps(record, indent=2) + "\n")
    except OSError as e:  # ours, after the download: the rename or the record
        hub.path.unlink(missing_ok=True)
        raise _disk_error(hub, root, e) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    fingerprint.remember_sha256(hub.path, sha, fingerprint.file_stamp(hub.path))
    return Pulled(hub.path, sha, downloaded=True)


def _download(huggingface_hub: Any, hub: HubFile, staging: Path, progress: bool | None) -> str:
    """``hf_hub_download`` into ``staging``, its errors made one line each (the caller removes ``staging``)."""
    from huggingface_hub import errors

    endpoint = os.environ.get("HF_ENDPOINT", "").rstrip("/") or None  # read now, not when the hub was imported
    where = endpoint or "https://huggingface.co"
    again = f"run `ragfunnel models pull {hub.spec}` again"
    try:
        return huggingface_hub.hf_hub_download(hub.repo, hub.filename, revision=hub.revision, local_dir=staging,
                                               endpoint=endpoint, library_name="ragfunnel")
    except errors.LocalEntryNotFoundError:  # no answer from the hub (offline, HF_HUB_OFFLINE, DNS, firewall)
        offline = " (HF_HUB_OFFLINE is set: unset it)" if os.environ.get("HF_HUB_OFFLINE") else ""
        raise BackendUnavailable(f"cannot reach the Hugging Face hub at {where} to download {hub.spec}{offline}; "
                                 "connect to the network (or set HF_ENDPOINT to a mirror) and run "
                                 f"`ragfunnel models pull {hub.spec}`") from None
    except errors.GatedRepoError:
        raise ModelError(f"{hub.repo} is gated on the hub: accept its terms on its page, log in with "
                         f"`hf auth login` (or set HF_TOKEN), and {again}") from None
    except errors.RepositoryNotFoundError:
        raise ModelError(f"no repository {hub.repo} on the hub at {where} (or it is private: log in with "
                         "`hf auth login` or set HF_TOKEN); check the spelling of " + hub.spec) from None
    except errors.RevisionNotFoundError:
        raise ModelError(f"{hub.repo} has no revision {hub.revision!r}; name a branch, tag or commit it has") from None
    except errors.EntryNotFoundError:
        raise ModelError(f"{hub.repo} has no file {hub.filename} at {hub.revision}; name a .gguf file its Files "
                         "tab lists") from None
    except errors.HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        fix = ("log in with `hf auth login` or set HF_TOKEN" if status in (401, 403) else
               f"check the spelling of {hub.spec}" if status == 404 else again)
        raise ModelError(f"the hub at {where} refused {hub.spec} (HTTP {status}); {fix}") from None
    except OSError as e:
        raise _disk_error(hub, staging.parent, e) from None
    except Exception as e:  # the connection cut mid-file, after huggingface_hub's own retries
        raise BackendUnavailable(f"the download of {hub.spec} from {where} broke off ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0] if str(e) else 'no detail'}); the partial file is "
                                 f"removed: {again}") from None


def _disk_error(hub: HubFile, directory: Path, e: OSError) -> RagfunnelError:
    if e.errno == errno.ENOSPC:
        return ConfigError(f"the disk holding {directory} is full; the partial download of {hub.spec} is removed: "
                           "free some space, or point RAGFUNNEL_CACHE at a bigger disk, and run "
                           f"`ragfunnel models pull {hub.spec}` again")
    if e.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
        return ConfigError(f"cannot write to the model cache {directory} ({e.strerror}); point RAGFUNNEL_CACHE at a "
                           "writable directory")
    detail = str(e).splitlines()[0] if str(e) else type(e).__name__
    return BackendUnavailable(f"the download of {hub.spec} failed ({detail}); the partial file is removed: run "
                              f"`ragfunnel models pull {hub.spec}` again")


# -- Ollama ---------------------------------------------------------------------------------------------------


def ollama_url() -> str:
    """The local Ollama server: $OLLAMA_HOST (``host:port``, or a URL), else http://127.0.0.1:11434."""
    host = os.environ.get("OLLAMA_HOST", "").strip().rstrip("/") or "127.0.0.1:11434"
    if not host.startswith(("http://", "https://")):
        host = "http://" + host
    if host.startswith("http://") and not re.search(r":\d+$", host.split("//", 1)[1]):
        host += ":11434"  # Ollama's port; an https URL without one means 443, as Ollama reads it
    return host.replace("//0.0.0.0", "//127.0.0.1")  # the address the server listens on, not one to call


def ollama_server(name: str, *, timeout: float = 5.0) -> tuple[str, str]:
    """``(base URL of its OpenAI-compatible API, model name)`` for a model the local Ollama server has; a
    one-line error saying what to run if the server does not answer or lacks the model."""
    try:
        import httpx
    except ImportError:
        raise MissingExtra("httpx", "openai") from None
    url = ollama_url()
    try:
        response = httpx.get(f"{url}/api/tags", timeout=timeout)
        response.raise_for_status()
        have = [m["name"] for m in response.json()["models"]]
    except httpx.HTTPError as e:
        raise BackendUnavailable(f"no Ollama server answers at {url} ({type(e).__name__}); start it with "
                                 f"`ollama serve` (or set OLLAMA_HOST), then `ollama pull {name}`") from None
    except (ValueError, KeyError, TypeError):
        raise BackendUnavailable(f"{url}/api/tags did not answer as Ollama does; is OLLAMA_HOST an Ollama "
                                 "server?") from None
    for candidate in (name, f"{name}:latest"):
        if candidate in have:
            return f"{url}/v1", candidate
    listed = ", ".join(f"ollama:{m}" for m in have) or "none"
    raise ModelError(f"the Ollama server at {url} has no model {name!r}; run `ollama pull {name}` "
                     f"(it has: {listed})")
