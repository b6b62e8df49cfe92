"""How many batches were ready when the training loop asked: the prefetch queue's occupancy.

A multi-process DataLoader keeps up to ``num_workers * prefetch_factor``
batches in flight. Read just before each ``next()``, the number already
produced and waiting tells bursty supply (the queue is often full, then
empty: raise ``prefetch_factor``) from too little throughput (the queue is
always empty: more workers, or cheaper loading).

PyTorch exposes no public API for this, so it is read from the iterator's
internals (``_data_queue``, ``_task_info``); where they are missing (a single
process loader, another PyTorch version) the reading is NaN, never 0.
"""

from __future__ import annotations

import math
from typing import Any

NAN = math.nan


def ready_batches(iterator: Any) -> float:
    """Batches produced and not yet consumed, or NaN where the loader does not show it."""
    queue = getattr(iterator, "_data_queue", None)
    if queue is None:
        return NAN
    try:
        ready = queue.qsize()
    except (NotImplementedError, OSError):  # qsize() is unimplemented on macOS
        return NAN
    # Batches that arrived out of order wait in _task_info as (worker_id, data).
    received = getattr(iterator, "_rcvd_idx", 0)
    task_info = getattr(iterator, "_task_info", None) or {}
    ready += sum(1 for index, info in list(task_info.items()) if index >= received and len(info) == 2)
    return float(ready)
