"""Embedding an index's passages or documents on a Ray cluster (``ragfunnel index --flat --ray``).

Ray Data runs the embedder as a pool of actors, each loading the model once (:class:`EmbedBatch`).
Rows carry their position, since Ray Data does not keep the order; the blocks stream back to this
process, which alone writes the index: each block becomes a shard file in the build directory, and
the shards are then merged in row order into the same ``.npy`` a one-process build writes (through a
memory map, one shard in memory at a time) and deleted. Workers need no shared filesystem, only the
embedder: the same model directory or Hugging Face cache on every node, or a server all can reach.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ragfunnel.errors import BackendUnavailable, ModelError, RagfunnelError
from ragfunnel.ray_cluster import RayOptions, connected, pool_size

# Rows per input block, and so per actor call and per shard (~1.5 MB of 384-d vectors): many blocks keep every
# actor busy. Ray Data bundles input blocks until a call has BATCH_ROWS rows, so a block holds at least that many.
BLOCK_ROWS = 1024
BATCH_ROWS = 256  # texts per embedder call, as a one-process build encodes them


class EmbedBatch:
    """Ray Data's callable class: each actor resolves the embedder once, with ``threads`` CPU threads."""

    def __init__(self, spec: str, threads: int, identity: str | None):
        from ragfunnel.retrieve.embedders import resolve_embedder

        self._embedder = resolve_embedder(spec, threads=threads)
        if identity is not None and self._embedder.identity != identity:  # another snapshot on this node
            raise ModelError(f"the embedder {spec} on a Ray node is not the one this process has "
                             f"({self._embedder.identity} vs {identity}); install the same files on every node")

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"row": batch["row"], "vector": self._embedder.encode([str(t) for t in batch["text"]])}


def embed_on_ray(jobs: list[tuple[list[str], Path, str]], *, spec: str, options: RayOptions,
                 identity: str | None = None) -> None:
    """For every ``(texts, path, what)`` of ``jobs``, embed the texts with the embedder ``spec`` on Ray actors into
    ``path`` (float32, row i for text i), joining the cluster once for all of them. A progress bar counts
    the texts whose vectors came back; Ray Data's own progress lines are turned off for the while. Every
    worker's embedder must have ``identity`` (the driver's), when given."""
    with connected(options.address) as ray:
        context, ray_log = ray.data.DataContext.get_current(), logging.getLogger("ray.data")
        ray_bars, context.enable_progress_bars = context.enable_progress_bars, False
        ray_level = ray_log.level
        ray_log.setLevel(logging.ERROR)  # after Ray Data configured its logging
        try:
            actors = pool_size(ray, options)
            for texts, path, what in jobs:
                shards = path.with_name(path.name + ".shards")
                shards.mkdir()
                with tqdm(total=len(texts), desc=what, unit="text", disable=None) as bar:
                    _write_shards(ray, texts, shards, spec=spec, identity=identity, options=options, actors=actors,
                                  bar=bar)
                merge_shards(shards, path, rows=len(texts))
                shutil.rmtree(shards)
        finally:
            context.enable_progress_bars = ray_bars
            ray_log.setLevel(ray_level)


def _write_shards(ray: Any, texts: list[str], shards: Path, *, spec: str, identity: str | None,
                  options: RayOptions, actors: int, bar: tqdm) -> None:
    """Embed ``texts`` on at most ``actors`` actors, saving every block that comes back as a shard: its
    vectors and their row numbers, named by its first row."""
    import pyarrow as pa

    blocks = [pa.table({"row": np.arange(start, min(start + BLOCK_ROWS, len(texts))),
                        "text": texts[start:start + BLOCK_ROWS]}) for start in range(0, len(texts), BLOCK_ROWS)]
    vectors = ray.data.from_arrow(blocks).map_batches(
        EmbedBatch, fn_constructor_args=(spec, options.cpus, identity), batch_size=BATCH_ROWS, batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=min(actors, len(blocks))), num_cpus=options.cpus,
        num_gpus=options.gpus)
    vectors.context.raise_original_map_exception = True  # this dataset's only: a worker's error, not a wrapper
    try:
        for block in vectors.iter_batches(batch_size=None, batch_format="numpy"):
            first = int(block["row"][0])
            np.save(shards / f"part-{first:010d}.rows.npy", block["row"])
            np.save(shards / f"part-{first:010d}.npy", block["vector"])
            bar.update(len(block["row"]))
    except Exception as e:
        raise _ragfunnel_cause(e) or e from None


def merge_shards(shards: Path, path: Path, *, rows: int) -> None:
    """Write every shard's vectors at their rows of one ``.npy`` at ``path``; a row missing or written
    twice (a block lost or repeated) is refused rather than left as zeros."""
    written = np.zeros(rows, dtype=bool)
    out = None
    for rows_file in sorted(shards.glob("part-*.rows.npy")):
        ids = np.load(rows_file)
        vectors = np.load(rows_file.with_name(rows_file.name.replace(".rows", "")))
        if out is None:
            out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, vectors.shape[1]))
        if written[ids].any() or vectors.shape != (len(ids), out.shape[1]):
            raise BackendUnavailable(f"Ray Data returned rows {ids[0]}..{ids[-1]} twice or malformed; build again")
        out[ids] = vectors
        written[ids] = True
    if not written.all():
        raise BackendUnavailable(f"Ray Data returned {int(written.sum())} of {rows} embeddings; build again")
    out.flush()
    del out


def _ragfunnel_cause(error: BaseException) -> RagfunnelError | None:
    """The ragfunnel error a worker raised (a model it could not load, a server it could not reach), found
    in the chain Ray wraps it in and cut back to its own one line (Ray Data appends its retry advice), so
    it reaches the user as it is. Ray's wrappers may subclass the error they carry, so only an error of
    ragfunnel's own classes counts."""
    seen: set[int] = set()
    current: Any = error
    while current is not None and id(current) not in seen:
        if isinstance(current, RagfunnelError) and type(current).__module__.startswith("ragfunnel."):
            current.args = (str(current).splitlines()[0],)
            return current
        seen.add(id(current))
        current = getattr(current, "cause", None) or current.__cause__
    return None
