"""How many worker processes and threads this machine can start, and how much data it can hold: the upper
ends of ``loader.num_workers``, ``train.threads``, ``--loader num_workers``, ``--threads`` and ``data.samples``.

Derived from the machine, never from the one it was written on: the cores
this process may use (affinity and cgroup quota), the kernel's and the
user's limits on tasks (``RLIMIT_NPROC``, ``kernel.threads-max``,
``kernel.pid_max``, each counting threads on Linux) and physical memory.
Past ``PER_CORE`` workers or threads a core, nothing is gained: a worker that
waits on slow storage frees its core, and even an object store's latency is
covered by that many requests in flight a core, while each worker costs a
process with its own copy of the dataset's Python objects.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

from pipeprof.measure.environment import usable_cores

PER_CORE = 16  # workers (or threads) a core at most: see the module's docstring


@dataclass(frozen=True)
class MachineLimits:
    """The machine's side of a setting's allowed range (``current()``; tests build their own)."""

    cores: int  # usable by this process
    tasks: int | None  # processes and threads this user may still start; None: no limit could be read
    memory_bytes: int | None  # physical memory; None: unknown

    def most_workers(self) -> int:
        """The most DataLoader worker processes (or torch threads) worth starting here, >= 1."""
        most = PER_CORE * self.cores
        return max(1, min(most, self.tasks) if self.tasks is not None else most)

    def where(self) -> str:
        """The machine's figures behind ``most_workers``, for the error line."""
        tasks = f", {self.tasks} more tasks allowed" if self.tasks is not None and self.tasks < PER_CORE * self.cores \
            else ""
        return f"{PER_CORE} a core x {self.cores} usable cores{tasks}"


def current(proc: Path = Path("/proc")) -> MachineLimits:
    """This machine's limits, now."""
    return MachineLimits(cores=usable_cores(), tasks=_tasks_left(proc), memory_bytes=_memory_bytes())


def _tasks_left(proc: Path) -> int | None:
    limits = []
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
        if soft != resource.RLIM_INFINITY:
            limits.append(int(soft))
    except (ValueError, OSError, AttributeError):
        pass
    for name in ("threads-max", "pid_max"):
        try:
            limits.append(int((proc / "sys" / "kernel" / name).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    if not limits:
        return None
    running = _tasks_running(proc)
    return max(0, min(limits) - running)


def _tasks_running(proc: Path) -> int:
    """Threads of every process now (what the limits count); 0 where /proc cannot be read."""
    try:
        return int((proc / "loadavg").read_text().split()[3].split("/")[1])  # "running/total" tasks
    except (OSError, ValueError, IndexError):
        return 0


def _memory_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None
