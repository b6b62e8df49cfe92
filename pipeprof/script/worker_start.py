"""How long a spawned or forkserver DataLoader worker took to start, in three parts, carried back with its
first batch.

A worker started with ``spawn`` or ``forkserver`` is a new interpreter: it starts, imports the script's main
module again (``multiprocessing.spawn.prepare``, as ``__mp_main__``: the script's own imports with it), and
unpickles its arguments (the dataset first, then the loader's collate function, whose unpickling,
``batches.TimedCollate.__setstate__``, is the first code of the hooks the worker runs). The marks, on the
clock of the script and pipeprof (``time.perf_counter``, CLOCK_MONOTONIC on Linux):

* ``process_start_s``: when the kernel started the process (``/proc/self/stat``, in clock ticks since boot,
  moved onto the monotonic clock; None where there is no /proc);
* ``prepare_t0_s`` / ``prepare_t1_s``: the main module's import, where the process was armed at its start
  (``pipeprof profile`` arms every Python process it starts: ``rank_boot.arm`` calls ``watch_prepare``);
* ``unpickled_s``: the collate function unpickled (the dataset before it).

``take()`` hands them over once, for the worker's first batch (``batches.Tagged.start``). Standard library
only: this runs at the start of every process ``pipeprof profile`` starts.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

clock = time.perf_counter
MARKS: dict[str, float | None] = {}
_PENDING: list[bool] = []  # [True] once the marks are complete and not yet taken


def is_spawned_child(argv: list[str] | None = None) -> bool:
    """Whether this process is a multiprocessing ``spawn`` child or the ``forkserver`` (whose children, forked from
    it, inherit what it patched): its command line says so."""
    args = argv if argv is not None else list(getattr(sys, "orig_argv", []))
    return "--multiprocessing-fork" in args or any("spawn_main" in a or "multiprocessing.forkserver" in a
                                                   for a in args)


def watch_prepare() -> None:
    """Time ``multiprocessing.spawn.prepare`` (the main module's import) in this process, once."""
    import multiprocessing.spawn as spawn

    original = spawn.prepare
    if getattr(original, "_pipeprof", False):
        return

    def prepare(data: Any) -> None:
        MARKS["prepare_t0_s"] = clock()
        try:
            original(data)
        finally:
            MARKS["prepare_t1_s"] = clock()
    prepare._pipeprof = True  # type: ignore[attr-defined]
    spawn.prepare = prepare


def process_start_s(now_s: Callable[[], float] = clock, stat_path: str = "/proc/self/stat") -> float | None:
    """When this process started, on ``now_s``'s time axis (None: no /proc, or an unreadable line)."""
    try:
        with open(stat_path, encoding="ascii") as f:
            stat = f.read()
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])  # field 22, after the command's parentheses
        age_s = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return now_s() - max(age_s, 0.0)


def unpickled() -> None:
    """The worker's collate function is unpickled: the marks are complete (once per process)."""
    if "unpickled_s" in MARKS:
        return
    MARKS["unpickled_s"] = clock()
    MARKS["process_start_s"] = process_start_s()
    _PENDING.append(True)


def take() -> dict[str, float | None] | None:
    """The marks, once (None after, or where none were made)."""
    if not _PENDING:
        return None
    _PENDING.clear()
    return dict(MARKS)
