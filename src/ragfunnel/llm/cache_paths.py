"""Where ragfunnel keeps what it caches (models, call results, hashes, speeds, document states): one
directory, resolved here by every cache."""

from __future__ import annotations

import os
from pathlib import Path

from ragfunnel.errors import ConfigError


def cache_dir() -> Path:
    """The user cache dir: $RAGFUNNEL_CACHE, else $XDG_CACHE_HOME/ragfunnel, else ~/.cache/ragfunnel.

    Every cache resolves its place here, so a setting that names a file fails here, in one line.
    """
    if os.environ.get("RAGFUNNEL_CACHE"):
        path = Path(os.environ["RAGFUNNEL_CACHE"])
        if path.exists() and not path.is_dir():
            raise ConfigError(f"RAGFUNNEL_CACHE={path} is a file, not a directory; point it at a directory or unset it")
        return path
    path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ragfunnel"
    if path.exists() and not path.is_dir():
        raise ConfigError(f"the cache dir {path} is a file, not a directory; move it away or set RAGFUNNEL_CACHE "
                          "to a directory")
    return path
