"""The service's indexes as a client sees them, and the watched folders behind some of them (``serve --watch``).

A watched folder's index lives in the cache (``cache_dir()/watched/NAME-<hash of the folder's path>``, so the
same folder under the same name finds its index again at the next start and reads only what changed). Its
:class:`~ragfunnel.corpus.watch.WatchedFolder` runs on a thread of its own from the app's start to its stop;
after each update that rewrote the index, the new index is opened there and handed to the service
(:meth:`ServiceState.replace_index`), which serves it from the next job on.

:func:`index_views` describes every index, fixed (``--index``) or watched, in one shape: ``GET /v1/indexes``
and MCP's ``list_indexes`` return it.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragfunnel.corpus.index_manifest import Manifest, read_manifest
from ragfunnel.corpus.watch import WatchedFolder, WatchStatus, require_watchfiles
from ragfunnel.errors import ConfigError, RagfunnelError, option
from ragfunnel.llm.cache_paths import cache_dir
from ragfunnel.serve.answering import NotFound, ServiceState
from ragfunnel.serve.options import echoed
from ragfunnel.serve.settings import Settings

log = logging.getLogger("ragfunnel.serve")

WATCHED = "watched"  # the cache's folder of watched folders' indexes
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def watched_index_dir(name: str, folder: str | Path) -> Path:
    """Where the index of ``folder`` watched as ``name`` lives: in the cache, named by both."""
    digest = hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:12]
    return cache_dir() / WATCHED / f"{name}-{digest}"


def checked_watches(settings: Settings) -> dict[str, Path]:
    """The folders ``settings.watch`` names, checked: each name a plain word no fixed index takes, each folder
    a folder; watchfiles installed. A ConfigError names the first that is not."""
    if not settings.watch:
        return {}
    require_watchfiles()
    folders = {}
    for name, folder in settings.watch.items():
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{option('watch')} {name}={folder}: name it with letters, digits, '.', '_' and '-' "
                              "(at most 64), e.g. notes=~/notes")
        if name in settings.indexes:
            raise ConfigError(f"{option('watch')} {name}={folder}: {name} names an {option('indexes')} index "
                              "already; give the watched folder another name")
        if not Path(folder).is_dir():
            raise ConfigError(f"{option('watch')} {name}={folder}: {folder} is not a folder; name a folder of "
                              "documents")
        folders[name] = Path(folder).resolve()
    return folders


def start_watching(state: ServiceState) -> None:
    """Watch every folder of ``state.settings.watch`` on a thread of its own, its index (when the cache holds one
    from an earlier run) served at once and replaced after each update."""
    from ragfunnel.corpus.index import CorpusIndex

    settings = state.settings
    for name, folder in checked_watches(settings).items():
        where = watched_index_dir(name, folder)

        def reopen(status: WatchStatus, name: str = name, where: Path = where) -> None:
            if status.last_update is None or not status.last_update.rewritten or status.error:
                return
            state.replace_index(name, CorpusIndex(where, remote_embedder=settings.remote_embedder))
            log.info("index %s updated: %s", name, status.last_update.describe())

        watched = WatchedFolder(folder, where, limits=settings.read_limits, on_update=reopen)
        if watched.status().ready:
            try:
                state.replace_index(name, CorpusIndex(where, remote_embedder=settings.remote_embedder))
            except RagfunnelError as e:  # damaged: the first update says so, or rewrites it
                log.warning("index %s: the one kept in %s cannot be opened (%s); reading the folder again", name,
                            where, e)
        state.watched[name] = watched
        watched.start()
        log.info("watching %s as index %s (kept in %s)", folder, name, where)


def stop_watching(state: ServiceState, *, wait: float = 2.0) -> None:
    """Stop every watch; an update under way is left to end with the process (its index swapped in whole, or not)."""
    for watched in state.watched.values():
        watched.stop(wait=wait)


def index_views(fixed: Mapping[str, Path | Manifest], watched: Mapping[str, WatchedFolder]) -> list[dict[str, Any]]:
    """Every index by name: ``fixed`` ones (an index folder, or its manifest), then the ``watched`` ones."""
    return [index_view(name, fixed, watched) for name in [*sorted(fixed), *sorted(set(watched) - set(fixed))]]


def index_view(name: str, fixed: Mapping[str, Path | Manifest], watched: Mapping[str, WatchedFolder]
               ) -> dict[str, Any]:
    """One index as a client sees it: whether it is ``ready``, its documents and, for a watched folder, its files
    by name with their documents, the files pending, the last update, the files that failed (with why) or were
    skipped, and the update under way. NotFound naming the indexes there are."""
    if name in watched:
        status = watched[name].status().to_dict()
        for private in ("index", "version"):
            del status[private]
        return {"name": name, "kind": "watched", **status}
    if name not in fixed:
        have = ", ".join(sorted({*fixed, *watched})) or "none"
        raise NotFound(f"no index {echoed(name)}; this server has: {have}")
    manifest, error = fixed[name], None
    if isinstance(manifest, Path):
        try:
            manifest = read_manifest(manifest)
        except RagfunnelError as e:
            manifest, error = None, str(e)
    return {"name": name, "kind": "fixed", "folder": None, "ready": manifest is not None,
            "documents": manifest.documents if manifest else 0, "files": None, "pending": [], "last_update": None,
            "failed": [], "skipped": [], "progress": None, "error": error, "updates": 0}


def service_indexes(state: ServiceState) -> tuple[dict[str, Manifest], dict[str, WatchedFolder]]:
    """The service's fixed indexes (by their manifests) and its watched folders, as :func:`index_views` takes them."""
    fixed = {name: index.manifest for name, index in state.indexes.items() if name not in state.watched}
    return fixed, state.watched
