"""The calling thread's run-queue wait: time it was runnable but not running, waiting for a core.

Linux reports it per thread in ``/proc/<pid>/task/<tid>/schedstat``: three
numbers, the thread's time on a CPU (ns), its time waiting on a run queue (ns)
and its timeslices. ``/proc/thread-self/schedstat`` is the calling thread's
own file; each thread opens it once and ``os.pread``s it at offset 0 (about a
microsecond a reading: the kernel formats the line anew each time).

Off-CPU time of ``__getitem__`` (wall minus thread CPU time) is storage, sleep
or locks *and* waiting for a core on a saturated machine; the difference of
two readings tells the second apart. Where the file is missing (not Linux, no
permission) a reading is ``None``; where both readings of an interval are 0
on a kernel that does not account run-queue waits (``accounting_on``) the split
is unknown too (``core_wait_s``), never 0. Where it does, zeros are a thread
that never waited (a just-forked worker waking on an idle core), which used to
read as unknown and lose that batch's split.

Standard library only: the script hooks import this module in a user's
process and in every DataLoader worker.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

PATH = "/proc/thread-self/schedstat"
RunQueueClock = Callable[[], float | None]  # cumulative run-queue wait of the calling thread, s; None: unknown


class _ThreadFile:
    """One thread's open schedstat file (closed when the thread ends and its local storage goes)."""

    __slots__ = ("fd",)

    def __init__(self, path: str) -> None:
        try:
            self.fd: int | None = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:  # not Linux, no procfs, no permission: unknown
            self.fd = None

    def __del__(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass


class RunQueueWait:
    """Callable: the calling thread's cumulative run-queue wait in seconds, or ``None`` when unknown.

    One file per thread (``/proc/thread-self`` names the thread that opens it), reopened in a forked
    child, whose threads are new ones.
    """

    def __init__(self, path: str = PATH) -> None:
        self.path = path
        self._local = threading.local()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget)

    def __reduce__(self) -> tuple:  # a spawned worker opens its own files (a thread-local does not pickle)
        return RunQueueWait, (self.path,)

    def _forget(self) -> None:
        self._local = threading.local()  # the parent's thread's file is not this child's

    def __call__(self) -> float | None:
        try:
            fd = self._local.file.fd
        except AttributeError:
            file = self._local.file = _ThreadFile(self.path)
            fd = file.fd
        if fd is None:
            return None
        try:
            fields = os.pread(fd, 96, 0).split()
            wait_ns = int(fields[1])
        except (OSError, IndexError, ValueError):  # a line of another shape: unknown
            return None
        return wait_ns / 1e9  # 0 may be schedstats disabled, or a new thread that never waited: core_wait_s decides


def blocked_s(wall_s: float, cpu_s: float, before: float | None, after: float | None) -> float:
    """Of ``wall_s`` seconds of a call, the seconds it was blocked: off the CPU (wall less the thread's CPU time)
    and not waiting for a core (run-queue readings ``before`` / ``after``; all of the off-CPU time when they are
    unknown). A backward pass under a process group blocks so in the gradient all-reduce (collective wait)."""
    off_cpu_s = max(0.0, wall_s - cpu_s)
    return off_cpu_s - (core_wait_s(off_cpu_s, before, after) or 0.0)


_ACCOUNTING: list[bool] = []  # the answer of accounting_on(), once per process (a fork inherits it)


def accounting_on(path: str = "/proc/1/schedstat") -> bool:
    """Whether the kernel accounts run-queue waits: the first process (long-running, it has waited) reads a
    positive one. Asked once, on the first pair of zero readings."""
    if not _ACCOUNTING:
        try:
            with open(path, "rb") as f:
                _ACCOUNTING.append(int(f.read(96).split()[1]) > 0)
        except (OSError, IndexError, ValueError):  # no procfs, another shape: zeros stay unknown
            _ACCOUNTING.append(False)
    return _ACCOUNTING[0]


def no_run_queue() -> float | None:
    """A reader for where the run-queue wait cannot be known (every reading unknown)."""
    return None


def core_wait_s(off_cpu_s: float, before: float | None, after: float | None) -> float | None:
    """Of ``off_cpu_s`` seconds off the CPU between two readings, the seconds spent waiting for a core.

    The run-queue delta, capped to ``[0, off_cpu_s]`` (the readings and the clocks are not read at the same
    instant); ``None`` when either reading is unknown, or both are 0 on a kernel that does not account run-queue
    waits (``accounting_on``: every thread reads 0 forever there). Where it does, 0 and 0 is a thread that never
    waited: a just-forked worker that sleeps wakes on an idle core at once (3 of 20 such workers read 0.0 after
    8 sleeps of 2 ms here).
    """
    if before is None or after is None or (before == 0.0 and after == 0.0 and not accounting_on()):
        return None
    return min(max(after - before, 0.0), max(off_cpu_s, 0.0))


run_queue_wait = RunQueueWait()  # the process's reader (one file per thread that reads it)
