"""What identifies a model's weights in cache keys: the SHA-256 of its file.

Hashing a 1 GB GGUF file takes seconds, so a digest is remembered beside a stamp of the file
(path, size, mtime, inode) in the user cache dir; any change to the file gives a new stamp and
a fresh hash, so cache entries made with the old weights are never served for the new ones.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ragfunnel.llm.bundled import cache_dir


def sha256_of_file(path: Path) -> str:
    """The SHA-256 of a file's bytes, hashed now."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _stamp(path: Path) -> dict[str, object]:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def _record(path: Path) -> Path:
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "sha256" / f"{path.name}.{key}.json"


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of ``path``, hashed once per version of the file."""
    path = Path(path)
    stamp, record = _stamp(path), _record(path)
    try:
        saved = json.loads(record.read_text())
        if isinstance(saved, dict) and saved.get("stamp") == stamp and isinstance(saved.get("sha256"), str):
            return saved["sha256"]
    except (OSError, ValueError):
        pass
    sha = sha256_of_file(path)
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"stamp": stamp, "sha256": sha}))
    except OSError:
        pass  # an unwritable cache dir only costs the hash again next time
    return sha
