"""What the reader children (``pdf_child.py``, ``ocr_child.py``) share: the memory limit they read under, the exit
status that says it was reached, and the JSON line a message is. Standard library only: run by path, a child imports
this module by path too (the ragfunnel package stays unloaded, and starts in 0.05 s rather than 0.35 s)."""

from __future__ import annotations

import json
import resource
import sys

OUT_OF_MEMORY = 3  # a child's exit status when Python could not allocate
MB = 1024 * 1024


def limit_memory(memory_mb: float) -> None:
    """Bound the process's address space (a native library aborts when it cannot allocate: no core file is written
    of a bomb). Load the reader's libraries first: the limit bounds reading the file, not loading them."""
    limit = int(memory_mb * MB)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:  # a lower limit set on the whole service stays: it cannot be raised
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def say(**message) -> None:
    sys.stdout.write(json.dumps(message) + "\n")  # ASCII: any text, lone surrogates included, crosses the pipe
    sys.stdout.flush()  # each message goes as soon as it is made
