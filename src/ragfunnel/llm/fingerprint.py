"""What identifies a model's weights in cache keys and run configs: the SHA-256 of its file.

Hashing a 1 GB GGUF file takes seconds, so a digest is remembered beside a stamp of the file
(path, size, mtime, inode, ctime) in the user cache dir; any change to the file gives a new stamp and
a fresh hash, so cache entries made with the old weights are never served for the new ones. The ctime
matters: a tool can write bytes in place and set size and mtime back (``os.utime``), but the kernel
moves ctime on every change and nobody can set it back. Corruption of the medium itself changes no
metadata at all; only a forced re-hash (``recheck=True``) sees that.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from tqdm.auto import tqdm

from ragfunnel.atomic import write_atomic
from ragfunnel.bounded import UnreadableFile, read_json_file

log = logging.getLogger(__name__)

_BLOCK = 1 << 22
MAX_RECORD_BYTES = 64 << 10  # a record is a stamp and a digest: a few hundred bytes


def sha256_of_file(path: Path, *, progress: bool = False) -> str:
    """The SHA-256 of a file's bytes, hashed now (with a progress bar for big model files)."""
    digest = hashlib.sha256()
    with path.open("rb") as f, tqdm(total=path.stat().st_size, unit="B", unit_scale=True,
                                    desc=f"verify {path.name}", disable=not progress, leave=False) as bar:
        while block := f.read(_BLOCK):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


def file_stamp(path: Path) -> dict[str, object]:
    """What changes whenever the file's bytes may have changed."""
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino,
            "ctime_ns": st.st_ctime_ns}


def _record(path: Path) -> Path:
    from ragfunnel.llm.cache_paths import cache_dir

    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "sha256" / f"{path.name}.{key}.json"


def recorded_sha256(path: str | Path) -> str | None:
    """The digest remembered for this version of the file, without hashing; None if there is none.

    A damaged record is removed with one warning: the file is hashed again when its digest is next needed."""
    path = Path(path)
    record = _record(path)
    try:
        saved = read_json_file(record, max_bytes=MAX_RECORD_BYTES, what="SHA-256 record")
        digest = saved["sha256"]
        if not isinstance(digest, str):
            raise TypeError(f"the digest is a {type(digest).__name__}")
        return digest if saved.get("stamp") == file_stamp(path) else None
    except UnreadableFile as e:  # not a regular file, too big, not JSON, nested past reason
        _drop(record, e.problem)
    except (TypeError, KeyError, AttributeError) as e:  # JSON, but not a record
        _drop(record, f"not a record of a digest: {e}")
    except OSError:
        pass  # never hashed (no record), or the file itself is gone
    return None


def _drop(record: Path, problem: str) -> None:
    """Warn about a damaged record and remove it, so the warning is not repeated on every look-up."""
    log.warning("the SHA-256 record %s is unusable (%s); removing it: the file is hashed again when next "
                "needed", record, problem)
    try:
        record.unlink()
    except OSError:
        pass  # a folder in its place stays, and costs a re-hash each time


def remember_sha256(path: Path, sha256: str, stamp: dict[str, object]) -> None:
    """Record ``sha256`` for the version of ``path`` that ``stamp`` (taken before hashing) describes."""
    record = _record(path)
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(record, json.dumps({"stamp": stamp, "sha256": sha256}))  # a reader never sees half a record
    except OSError:
        pass  # an unwritable cache dir only costs the hash again next time


def file_sha256(path: str | Path, *, progress: bool = False, recheck: bool = False) -> str:
    """The SHA-256 of ``path``, hashed once per version of the file (every time with ``recheck``)."""
    path = Path(path)
    if not recheck and (sha := recorded_sha256(path)) is not None:
        return sha
    stamp = file_stamp(path)  # before hashing: a change while we read gives the next call a new stamp
    sha = sha256_of_file(path, progress=progress)
    remember_sha256(path, sha, stamp)
    return sha
