"""Models by name from where people keep them: a GGUF file on the Hugging Face hub, a model of a local Ollama.

``hf:OWNER/REPO/FILE.gguf[@REVISION]`` is downloaded once into ragfunnel's own model cache,
``cache_dir()/models/hf/OWNER/REPO/REVISION/FILE`` (a ``/`` of the revision written ``%2F``, so the revision is one
folder and no two specs share a path), with ``FILE.sha256.json`` beside it recording the spec and the SHA-256 of the
bytes that arrived. ``huggingface_hub`` says where the file is and how big (``hf_hub_url``,
``get_hf_file_metadata``, its HTTP session; ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` and the user's token honoured), and
ragfunnel streams the bytes itself, so a download is held to the size the hub announced (to
``DownloadLimits.max_bytes`` when it announces none) and stopped the moment more arrive; a connection that breaks
off is resumed where it stopped, and given up, as one line, after ``DownloadLimits.attempts`` failed requests.

Later uses read the cache and ask the network nothing; a cached file whose SHA-256 no longer matches its record is
refused. A download lands whole or not at all: it is written into a folder of its own under ``models/hf/.partial``
(named for the host and process that own it), checked (GGUF magic), and only then renamed into place; any failure
removes the folder, and every pull removes the folders of pulls that died (their process gone, or nothing written
in them for a day), never one a live pull is writing.

``ollama:NAME`` is a model a local Ollama server has pulled, asked through its OpenAI-compatible API.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tqdm.auto import tqdm

from ragfunnel.atomic import write_atomic
from ragfunnel.bounded import UnreadableFile, read_json_file
from ragfunnel.errors import BackendUnavailable, ConfigError, MissingExtra, ModelError, RagfunnelError
from ragfunnel.llm import fingerprint
from ragfunnel.llm.cache_paths import cache_dir
from ragfunnel.version import __version__

if TYPE_CHECKING:
    import httpx2

log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z0-9][\w.-]*")  # an owner or repository name, as the hub allows them
_REVISION = re.compile(r"[\w.-]+(/[\w.-]+)*")  # a branch, tag or commit (branches may hold slashes)
HF_FORM = "hf:OWNER/REPO/FILE.gguf (or hf:OWNER/REPO/FILE.gguf@REVISION)"
MAX_RECORD_BYTES = 64 << 10
MAX_SPEC_CHARS = 1000  # far beyond any spec of a real file, and short of any file system's longest path
MAX_NAME_BYTES = 200  # one folder or file name of a spec: with ".sha256.json" after it, under the usual 255
STALE_PARTIAL_SECONDS = 24 * 3600  # a download folder nothing was written to for this long is a dead pull's
_MAX_WAIT = 8.0  # seconds between two attempts, at most
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})  # the hub busy or down for a moment
_TRUE = frozenset({"1", "ON", "YES", "TRUE"})  # how huggingface_hub reads a flag of the environment


@dataclass(frozen=True)
class DownloadLimits:
    """How far one download may go before it is given up."""

    max_bytes: int = 64 << 30  # when the hub announces no size; an announced size is itself the limit
    attempts: int = 6  # requests that may fail in one pull (the metadata's and the bytes'); the last gives up
    backoff: float = 1.0  # seconds before the second attempt, doubled before each next one (8 at most)

    def __post_init__(self) -> None:
        if self.max_bytes < 1 or self.attempts < 1 or not 0 <= self.backoff <= _MAX_WAIT:
            raise ConfigError(f"bad download limits {self}: max_bytes and attempts must be at least 1, backoff "
                              f"between 0 and {_MAX_WAIT:g} seconds")


def _shown(text: str) -> str:
    """``text`` quoted for a one-line message, cut when it is long."""
    return repr(text if len(text) <= 80 else text[:60] + "...")


def _check_length(spec: str) -> None:
    if len(spec) > MAX_SPEC_CHARS:
        raise ConfigError(f"the model spec {_shown(spec)} is {len(spec)} characters long; a Hugging Face spec has at "
                          f"most {MAX_SPEC_CHARS}: check what was pasted, and write {HF_FORM}")


@dataclass(frozen=True)
class HubFile:
    """One GGUF file of a hub repository, at a revision (``main`` unless the spec names one)."""

    repo: str  # OWNER/REPO
    filename: str  # its path inside the repository
    revision: str = "main"

    def __post_init__(self) -> None:
        spec = self.spec
        _check_length(spec)
        if (bad := next((c for c in spec if ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF), None)):
            raise ConfigError(f"{_shown(spec)} holds the character {bad!r}, which no name on the hub has: check the "
                              "spec")
        for name in (*self.repo.split("/"), *self.filename.split("/"), self._revision_folder):
            if (size := len(name.encode("utf-8", "surrogatepass"))) > MAX_NAME_BYTES:
                raise ConfigError(f"{_shown(spec)} holds a name of {size} bytes ({_shown(name)}); a folder, file or "
                                  f"revision name of a spec has at most {MAX_NAME_BYTES}: check the spec")
        owner, _, name = self.repo.partition("/")
        if not (_NAME.fullmatch(owner) and _NAME.fullmatch(name)):
            raise ConfigError(f"bad Hugging Face repository {self.repo!r} in {spec!r}; write {HF_FORM}")
        parts = self.filename.split("/")
        if not self.filename.lower().endswith(".gguf") or any(p in ("", ".", "..") for p in parts):
            raise ConfigError(f"{spec!r} names no GGUF file of {self.repo}; write {HF_FORM}, the file as the "
                              "repository's Files tab lists it")
        # git refuses a ref part that starts with '.', and a '.' part would let two specs share a folder
        if (not _REVISION.fullmatch(self.revision) or ".." in self.revision
                or any(p.startswith(".") for p in self.revision.split("/"))):
            raise ConfigError(f"bad revision {self.revision!r} in {spec!r}; give a branch, tag or commit")

    @property
    def spec(self) -> str:
        return f"hf:{self.repo}/{self.filename}" + ("" if self.revision == "main" else f"@{self.revision}")

    @property
    def _revision_folder(self) -> str:
        return self.revision.replace("/", "%2F")  # no revision holds a '%', so this is undone unambiguously

    @property
    def path(self) -> Path:
        """Where the file is (or will be) kept. The revision is one folder (its ``/`` written ``%2F``), so a
        revision with a slash and a file in a subfolder never meet at one path."""
        return cache_dir() / "models" / "hf" / self.repo / self._revision_folder / self.filename

    @property
    def record(self) -> Path:
        """The SHA-256 (and where the file came from) recorded beside it."""
        return self.path.with_name(self.path.name + ".sha256.json")


def partial_dir() -> Path:
    """Where downloads are written until they are whole: a folder per pull, ``HOST-PID-XXXXXXXX.partial`` (HOST a
    digest of the host's name); no owner name starts with '.', so it is no repository's folder."""
    return cache_dir() / "models" / "hf" / ".partial"


def parse_hf(rest: str) -> HubFile:
    """The file an ``hf:`` spec names (``rest`` is what follows ``hf:``)."""
    _check_length(f"hf:{rest}")
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
        record = read_json_file(hub.record, max_bytes=MAX_RECORD_BYTES, what="hub file record")
    except (FileNotFoundError, UnreadableFile):
        return None  # never downloaded, or its record is unusable: download it again
    recorded = record.get("sha256") if isinstance(record, dict) else None
    # a record of another spec is no answer for this one (a cache of an older layout, a case-blind file system)
    if not isinstance(recorded, str) or record.get("spec") != hub.spec or not hub.path.is_file():
        return None
    actual = fingerprint.file_sha256(hub.path)
    if actual != recorded:
        raise ModelError(f"the cached {hub.spec} at {hub.path} changed since it was downloaded (SHA-256 "
                         f"{actual[:12]}..., recorded {recorded[:12]}...): delete it and run "
                         f"`ragfunnel models pull {hub.spec}` to download it again")
    return Pulled(hub.path, recorded, downloaded=False)


def pull(hub: HubFile, *, progress: bool | None = None, limits: DownloadLimits = DownloadLimits()) -> Pulled:
    """The file from the cache, or downloaded into it now (held to ``limits``, checked as GGUF, its SHA-256
    recorded). ``progress`` shows a bar (by default when stderr is a terminal)."""
    if (have := cached(hub)) is not None:
        return have
    try:
        import httpx2  # noqa: F401  (huggingface_hub's HTTP client, which the download streams with)
        import huggingface_hub  # noqa: F401
    except ImportError:
        raise MissingExtra("huggingface_hub", "hub") from None
    partials = partial_dir()
    try:
        partials.mkdir(parents=True, exist_ok=True)
        _remove_stale_partials(partials)
        staging = Path(tempfile.mkdtemp(prefix=f"{_host_tag()}-{os.getpid()}-", suffix=".partial", dir=partials))
    except OSError as e:
        raise _disk_error(hub, hub.path.parent, e) from None
    got = staging / "download.gguf"
    try:
        sha, commit = _download(hub, got, progress=sys.stderr.isatty() if progress is None else progress,
                                limits=limits)
        try:
            from ragfunnel.llm.gguf import check_gguf_file

            check_gguf_file(got)
        except ModelError:
            raise ModelError(f"{hub.spec} is not a GGUF file (it does not start with b'GGUF'); the download is "
                             f"removed: name a .gguf file of {hub.repo}") from None
        hub.path.parent.mkdir(parents=True, exist_ok=True)  # only now: a failed pull leaves no empty folders
        os.replace(got, hub.path)
        record = {"spec": hub.spec, "repo": hub.repo, "filename": hub.filename, "revision": hub.revision,
                  "commit": commit, "bytes": hub.path.stat().st_size, "sha256": sha}
        try:
            write_atomic(hub.record, json.dumps(record, indent=2) + "\n")
        except OSError:
            hub.path.unlink(missing_ok=True)  # a file without its record is no cache entry
            raise
    except OSError as e:  # ours: writing the download, the rename or the record
        raise _disk_error(hub, hub.path.parent, e) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    fingerprint.remember_sha256(hub.path, sha, fingerprint.file_stamp(hub.path))
    return Pulled(hub.path, sha, downloaded=True)


class _TooMuch(Exception):
    """More bytes arrived than the download may have."""


class _GaveUp(Exception):
    """The last failure a download may survive, described."""


class _Refused(Exception):
    """The hub answered the file's GET with an error status (its HEAD had answered)."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


class _Received:
    """The bytes of one download as they arrive: written to a file, hashed, counted, refused past ``limit``."""

    def __init__(self, path: Path, limit: int, *, total: int | None, progress: bool, desc: str):
        self.limit, self.size = limit, 0
        self._sha = hashlib.sha256()
        self._file = path.open("wb")
        self._bar = tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=not progress)

    def __enter__(self) -> _Received:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._bar.close()
        self._file.close()

    def write(self, chunk: bytes) -> None:
        if self.size + len(chunk) > self.limit:
            raise _TooMuch  # before the bytes reach the disk
        self._file.write(chunk)
        self._sha.update(chunk)
        self.size += len(chunk)
        self._bar.update(len(chunk))

    def restart(self) -> None:
        """Forget what arrived: the next bytes are the file's first."""
        self._file.seek(0)
        self._file.truncate()
        self._sha = hashlib.sha256()
        self.size = 0
        self._bar.reset()

    def sha256(self) -> str:
        """The digest of the whole file, once its bytes are on the disk."""
        self._file.flush()
        os.fsync(self._file.fileno())
        return self._sha.hexdigest()


class _Tries:
    """The failures one pull may survive: each waits before the next request (doubling, at most 8 s), and the
    last one allowed gives up."""

    def __init__(self, limits: DownloadLimits):
        self.limits, self.failed = limits, 0

    def again(self, why: str) -> bool:
        self.failed += 1
        if self.failed >= self.limits.attempts:
            return False
        wait = min(self.limits.backoff * 2 ** (self.failed - 1), _MAX_WAIT)
        log.debug("hub request failed (%s); try %d of %d in %.1f s", why, self.failed + 1, self.limits.attempts, wait)
        time.sleep(wait)
        return True


def _said(e: BaseException) -> str:
    first = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(parts.scheme)


def _download(hub: HubFile, out: Path, *, progress: bool, limits: DownloadLimits) -> tuple[str, str | None]:
    """Stream the file into ``out``; ``(the SHA-256 of its bytes, the commit the hub resolved)``. A failure of the
    hub or the network is one line; an OSError of writing ``out`` is the caller's to explain."""
    import httpx2
    from huggingface_hub import errors, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    endpoint = os.environ.get("HF_ENDPOINT", "").rstrip("/") or None  # read now, not when the hub was imported
    where = endpoint or "https://huggingface.co"
    again = f"run `ragfunnel models pull {hub.spec}` again"

    def unreachable(why: str) -> BackendUnavailable:
        return BackendUnavailable(f"cannot reach the Hugging Face hub at {where} to download {hub.spec} ({why}); "
                                  f"connect to the network (or set HF_ENDPOINT to a mirror) and run "
                                  f"`ragfunnel models pull {hub.spec}`")

    if os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE:
        raise unreachable("HF_HUB_OFFLINE is set: unset it")
    tries = _Tries(limits)
    try:
        url = hf_hub_url(hub.repo, hub.filename, revision=hub.revision, endpoint=endpoint)
        while True:
            try:  # the library's own retries are off: they log a warning each, and these are bounded by `limits`
                meta = get_hf_file_metadata(url, endpoint=endpoint, library_name="ragfunnel",
                                            library_version=__version__, retry_on_errors=False)
                break
            except (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError) as e:
                if not tries.again(_said(e)):
                    raise unreachable(_said(e)) from None
            except errors.HfHubHTTPError as e:
                status = e.response.status_code if e.response is not None else None
                if status not in _RETRY_STATUS or not tries.again(f"HTTP {status}"):
                    raise
        headers = build_hf_headers(library_name="ragfunnel", library_version=__version__)
        headers["Accept-Encoding"] = "identity"  # the bytes as stored, so that their count is the file's size
        if _origin(meta.location) != _origin(url):
            headers.pop("authorization", None)  # a signed address off the hub: the token stays with the hub
        announced = meta.size if meta.size is not None and meta.size >= 0 else None
        desc = f"download {hub.filename.rpartition('/')[2]}"
        with _Received(out, announced if announced is not None else limits.max_bytes, total=announced,
                       progress=progress, desc=desc) as received:
            try:
                return _stream(meta.location, headers, received, announced=announced, tries=tries), meta.commit_hash
            except _TooMuch:
                told = (f"announced {announced} bytes for {hub.spec} but sent more" if announced is not None else
                        f"announced no size for {hub.spec} and sent more than {limits.max_bytes} bytes, the most a "
                        "download of unknown size may have")
                raise ModelError(f"the hub at {where} {told}; the download is stopped and removed: check that "
                                 f"HF_ENDPOINT names a Hugging Face hub, and {again}") from None
            except _GaveUp as e:
                raise BackendUnavailable(f"the download of {hub.spec} from {where} failed {tries.failed} times "
                                         f"(the last: {e}); the partial file is removed: check the connection (or "
                                         f"HF_ENDPOINT) and {again}") from None
    except errors.OfflineModeIsEnabled:
        raise unreachable("offline mode is set: unset HF_HUB_OFFLINE") from None
    except errors.HFValidationError as e:
        raise ConfigError(f"the hub refuses the name {hub.spec} ({_said(e)}); write {HF_FORM}") from None
    except errors.GatedRepoError:
        raise ModelError(f"{hub.repo} is gated on the hub: accept its terms on its page, log in with "
                         f"`hf auth login` (or set HF_TOKEN), and {again}") from None
    except errors.RepositoryNotFoundError:
        raise ModelError(f"no repository {hub.repo} on the hub at {where} (or it is private: log in with "
                         "`hf auth login` or set HF_TOKEN); check the spelling of " + hub.spec) from None
    except errors.RevisionNotFoundError:
        raise ModelError(f"{hub.repo} has no revision {hub.revision!r}; name a branch, tag or commit it has") from None
    except errors.RemoteEntryNotFoundError:
        raise ModelError(f"{hub.repo} has no file {hub.filename} at {hub.revision}; name a .gguf file its Files "
                         "tab lists") from None
    except (errors.HfHubHTTPError, _Refused) as e:
        status = (e.status if isinstance(e, _Refused) else e.response.status_code if e.response is not None else "?")
        fix = ("log in with `hf auth login` or set HF_TOKEN" if status in (401, 403) else
               f"check the spelling of {hub.spec}" if status == 404 else again)
        raise ModelError(f"the hub at {where} refused {hub.spec} (HTTP {status}); {fix}") from None
    except httpx2.HTTPError as e:  # what no retry helps: a proxy refusing, too many redirects, a bad URL
        raise unreachable(_said(e)) from None


def _stream(url: str, headers: dict[str, str], received: _Received, *, announced: int | None, tries: _Tries) -> str:
    """The file at ``url`` into ``received``, resumed where a broken request stopped; its SHA-256. Raises
    ``_TooMuch`` past ``received.limit`` and ``_GaveUp`` once ``tries`` are spent."""
    import httpx2
    from huggingface_hub import constants

    while True:
        try:
            why = _get(url, headers, received, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT)
        except (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError) as e:
            why = _said(e)  # cut mid-file, or no answer: resumed from what arrived
        if why is None:
            if announced is None or received.size == announced:
                return received.sha256()
            why = f"it ended after {received.size} of the {announced} bytes announced"
        if not tries.again(why):
            raise _GaveUp(why)


def _get(url: str, headers: dict[str, str], received: _Received, *, timeout: float) -> str | None:
    """One GET of the file, from where ``received`` stands; None once the response ended, else why to ask again."""
    from huggingface_hub.utils import get_session

    asked = dict(headers)
    if received.size:
        asked["Range"] = f"bytes={received.size}-"
    with get_session().stream("GET", url, headers=asked, timeout=timeout, follow_redirects=True) as response:
        if response.status_code in _RETRY_STATUS:
            return f"HTTP {response.status_code}"
        if response.status_code >= 400:
            raise _Refused(response.status_code)  # its body unread: an error page may be endless too
        start = _range_start(response)
        if start is None and received.size:
            received.restart()  # the range was ignored: the whole file follows
        elif start is not None and start != received.size:
            why = f"the server sent bytes from {start}, not from {received.size}"
            received.restart()  # the next request asks for the whole file
            return why
        length = response.headers.get("Content-Length", "")
        identity = response.headers.get("Content-Encoding", "identity").lower() == "identity"
        if identity and length.isdigit() and received.size + int(length) > received.limit:
            raise _TooMuch  # announced here already: not one byte of it is taken
        for chunk in response.iter_bytes():
            received.write(chunk)
    return None


def _range_start(response: httpx2.Response) -> int | None:
    """Where a 206 answer's bytes start (``Content-Range: bytes START-END/SIZE``, -1 when unreadable); None for any
    other answer."""
    if response.status_code != 206:
        return None
    found = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", response.headers.get("Content-Range", "").strip())
    return int(found.group(1)) if found else -1


# -- download folders of dead pulls -----------------------------------------------------------------------------


def _host_tag() -> str:
    """This host, in the name of a download folder: the cache may be shared with other hosts (an NFS home), whose
    process ids say nothing here."""
    return hashlib.sha256(socket.gethostname().encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _alive(pid: int) -> bool:
    if os.name != "posix":
        return True  # no cheap check here: the age of the folder alone decides
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, as another user's process
    return True


def _remove_stale_partials(folder: Path) -> None:
    """Remove the download folders in ``folder`` of pulls that died: on this host, those whose process is gone;
    on any host, those nothing was written to for ``STALE_PARTIAL_SECONDS``. A live pull's folder, of this
    process or another, stays."""
    now, removed = time.time(), 0
    for entry in folder.glob("*.partial"):
        host, _, rest = entry.name.partition("-")
        pid = rest.partition("-")[0]
        try:
            last_write = max([entry.stat().st_mtime, *(p.stat().st_mtime for p in entry.iterdir())])
        except OSError:
            continue  # removed meanwhile, by its pull or another cleaner
        gone = host == _host_tag() and pid.isdigit() and int(pid) > 0 and not _alive(int(pid))
        if gone or now - last_write > STALE_PARTIAL_SECONDS:
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    if removed:
        log.info("removed %d download folder(s) of pulls that died, in %s", removed, folder)


def _disk_error(hub: HubFile, directory: Path, e: OSError) -> RagfunnelError:
    if e.errno == errno.ENOSPC:
        return ConfigError(f"the disk holding {directory} is full; the partial download of {hub.spec} is removed: "
                           "free some space, or point RAGFUNNEL_CACHE at a bigger disk, and run "
                           f"`ragfunnel models pull {hub.spec}` again")
    if e.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
        return ConfigError(f"cannot write to the model cache {directory} ({e.strerror}); point RAGFUNNEL_CACHE at a "
                           "writable directory")
    if e.errno == errno.ENAMETOOLONG:
        return ConfigError(f"the path of {hub.spec} in the model cache is too long for its file system "
                           f"({e.strerror}); point RAGFUNNEL_CACHE at a directory with a shorter path")
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
