"""System sampler: a background thread that watches the training process tree.

Each tick records one sample row (machine CPU, the tree's CPU, memory, disk
reads, optionally GPU) and one row per live process (see ``pipeprof.run_folder``
for the columns). It is a thread, not a process, because a sampler process
would compete for the same few cores as the DataLoader workers it measures.

Costs measured on a 2-core machine decided the shape:

* ``Process.children(recursive=True)`` scans all of /proc (~2 ms); doing it
  every tick at 50 Hz cost 20% of training throughput. The tree is refreshed
  every ``tree_refresh_s`` and the ``psutil.Process`` objects are reused in
  between, which costs ~1-3% even at 100 Hz. A process started in between is
  still found at the next tick: each tick reads the list of children the
  kernel keeps for each known process's main thread (Linux's
  ``/proc/PID/task/PID/children``, one small read a process) and refreshes the
  tree when it names a new one. A DataLoader's workers (forked or spawned by
  the loop's thread) live for a pass, which on a fast machine can end between
  two refreshes: they would be missing from the run, as if the loader had none.
* USS (``memory_full_info``) walks page tables, tens of ms per process, so it
  is read only every ``uss_interval_s`` and at ``stop()``.

CPU percentages are computed here from ``cpu_times()`` deltas over clock
deltas rather than with ``cpu_percent()``, so that the first reading of a
process is NaN (unknown) instead of psutil's silent 0.0, and so that tests can
drive the arithmetic with a fake clock. The training process's own CPU
includes this sampler thread.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from pipeprof.measure.clock import Clock, monotonic_clock
from pipeprof.measure.gpu import PROC_MEM, PROC_UTIL
from pipeprof.measure.spool import CHUNK_ROWS, Spool
from pipeprof.run_folder import GPU_PROCESS_COLUMNS, PROCESS_COLUMNS

NAN = float("nan")
MAIN = "main"
_MIN_RATE_FRACTION = 0.5  # of the period: shorter intervals give NaN rates
WORKER = "worker"


class SystemSampler:
    """Samples the process tree rooted at ``root_pid`` at ``sample_hz`` ticks per second.

    ``t_s`` in every row is ``clock() - t0_s`` (seconds); pass the step timer's
    t0 so steps and samples share one time axis. ``tick()`` is public so tests
    can drive the sampler with a fake clock and no thread. Every descendant of
    the root counts as a worker. A ``root_pid`` that does not exist raises
    ``psutil.NoSuchProcess`` here, at construction.
    """

    def __init__(
        self,
        root_pid: int,
        sample_hz: float = 10.0,
        *,
        clock: Clock = monotonic_clock,
        t0_s: float | None = None,
        psutil_module: Any = psutil,
        gpu: Any = None,
        tree_refresh_s: float = 1.0,
        uss_interval_s: float = 5.0,
        spool_dir: Path | None = None,
        spool_rows: int = CHUNK_ROWS,
        children_of: Callable[[int], list[int] | None] | None = None,
    ) -> None:
        if not sample_hz > 0:
            raise ValueError(f"sample_hz must be > 0, got {sample_hz}")
        if tree_refresh_s < 0:
            raise ValueError(f"tree_refresh_s must be >= 0, got {tree_refresh_s}")
        if not uss_interval_s > 0:
            raise ValueError(f"uss_interval_s must be > 0, got {uss_interval_s}")
        self.root_pid = root_pid
        self.period_s = 1.0 / sample_hz
        self._clock = clock
        self._t0_s = clock() if t0_s is None else float(t0_s)
        self._ps = psutil_module
        # A process that exited, became a zombie, or hides itself is normal
        # (workers end with each epoch); anything else is a bug and propagates.
        self._gone = (psutil_module.NoSuchProcess, psutil_module.ZombieProcess, psutil_module.AccessDenied)
        self._gpu = gpu
        self._tree_refresh_s = tree_refresh_s
        # The pids a process's main thread started (None: not known); the kernel's list is of real pids only.
        self._children_of = children_of or (main_thread_children if psutil_module is psutil else _not_known)
        self._uss_interval_s = uss_interval_s

        self._root = psutil_module.Process(root_pid)
        self._procs: dict[int, Any] = {}  # the current tree, reused between refreshes
        self._seen: dict[int, dict[str, Any]] = {}  # every descendant seen: pid -> ppid, command line, first t_s
        self._next_tree_s: float | None = None  # None: refresh at the next tick
        self._next_uss_s: float | None = None
        # Baselines from the previous tick: pid -> (Process, cpu_s, read_bytes).
        # The Process is kept so a reused pid (a new object) never inherits them.
        self._prev: dict[int, tuple[Any, float, float]] = {}
        self._prev_now_s: float | None = None
        self._prev_cores: list[tuple[float, float]] | None = None  # (busy_s, total_s) per core

        # Rows stream to files in spool_dir (a long run stays small); without one they stay in memory.
        # spool_rows: ticks held before a write (a recorded run writes every few ticks: a kill -9 loses few).
        self._samples = Spool(None, spool_dir, "samples", spool_rows)
        self._process_rows = Spool(PROCESS_COLUMNS + (GPU_PROCESS_COLUMNS if gpu is not None else []),
                                   spool_dir, "processes", spool_rows)
        self._absences: dict[str, str] = {}
        # NVML listed processes on the GPU, and whether one was of this tree: pids from another PID namespace
        # (a container) never match, and the tree's zero would be no reading at all.
        self._gpu_listed_others = self._gpu_listed_tree = False

        self._lock = threading.Lock()  # tick() may be called by hand while the thread runs
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_error: BaseException | None = None
        self._stopped = False

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Take the first tick now (baselines), then tick on a daemon thread."""
        if self._thread is not None or self._stopped:
            raise RuntimeError("a SystemSampler can be started once")
        self.tick()
        self._thread = threading.Thread(target=self._run, name="pipeprof-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread, then take a final tick with a fresh tree and USS. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._stop_event.set()
        if self._thread is not None:
            self._thread.join()
        if self._thread_error is not None:
            raise RuntimeError("the system sampler thread failed; later samples are missing") from self._thread_error
        self._tick(final=True)

    def __enter__(self) -> SystemSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        period = self.period_s
        assert self._prev_now_s is not None  # start() took the first tick
        # A fixed grid (deadline += period) does not drift the way sleep(period)
        # after each tick does.
        deadline = self._prev_now_s + period
        try:
            while True:
                now = self._clock()
                deadline = _next_deadline_s(deadline, now, period)
                if self._stop_event.wait(deadline - now):
                    return
                self.tick()
                deadline += period
        except BaseException as e:
            self._thread_error = e  # re-raised by stop(), so a sampler bug is not silent
            raise

    # -- records -------------------------------------------------------------

    def sample_rows(self) -> list[dict[str, Any]]:
        """One dict per tick: SAMPLE_COLUMNS, cpu_core<N>_pct per core, GPU_SAMPLE_COLUMNS if a GPU is sampled."""
        return self._samples.rows()

    def recent_sample_rows(self, n: int) -> list[dict[str, Any]]:
        """The last ``n`` ticks' rows at most (those still in memory): what a live view or a light window reads
        every few seconds without copying the whole run."""
        with self._lock:
            return self._samples.recent(n)

    def process_rows(self) -> list[dict[str, Any]]:
        """One dict per tick per live process: PROCESS_COLUMNS."""
        return self._process_rows.rows()

    def flush(self) -> None:
        """Write the ticks held in memory to the spool files (after ``stop()``: the run's last ticks)."""
        with self._lock:
            self._samples.flush()
            self._process_rows.flush()

    def frames(self) -> tuple[Any, Any]:
        """``(samples, processes)`` as DataFrames (after ``stop()``; read back from the spool files).

        When NVML listed processes on the GPU but never one of the tree (its pids are another PID
        namespace's: a container's host), the per-process GPU columns are NaN, never the 0 an
        unmatched pid would read: the readings are unknown (``absences`` says why).
        """
        samples, processes = self._samples.frame(), self._process_rows.frame()
        if self.gpu_pids_unmatched:
            for frame, columns in ((samples, ("gpu_proc_util_pct", "gpu_proc_mem_bytes")),
                                   (processes, GPU_PROCESS_COLUMNS)):
                for column in columns:
                    if column in frame:
                        frame[column] = NAN
        return samples, processes

    @property
    def gpu_pids_unmatched(self) -> bool:
        """NVML listed processes on the GPU, never one of this tree."""
        return self._gpu_listed_others and not self._gpu_listed_tree

    @property
    def absences(self) -> dict[str, str]:
        """Capability name -> why it was missing: ``io_counters``, ``uss``, plus the GPU monitor's."""
        merged = dict(getattr(self._gpu, "absences", None) or {})
        merged.update(self._absences)
        if self.gpu_pids_unmatched:
            merged.setdefault(PROC_MEM, "NVML listed processes on the GPU but never one of the training process "
                                        "tree (their pids are from another PID namespace, e.g. a container's "
                                        "host): per-process GPU readings are unknown")
            merged.setdefault(PROC_UTIL, merged[PROC_MEM])
        return merged

    # -- one tick ------------------------------------------------------------

    def tick(self) -> None:
        """Take one sample now (rows appended to sample_rows() and process_rows())."""
        self._tick(final=False)

    def _tick(self, final: bool) -> None:
        with self._lock:
            now = self._clock()
            if final or self._next_tree_s is None or now >= self._next_tree_s or self._new_child():
                self._refresh_tree()
                self._next_tree_s = now + self._tree_refresh_s
            if self._next_uss_s is None:  # first tick: the first snapshot is one interval away
                self._next_uss_s = now + self._uss_interval_s
                take_uss = final
            else:
                take_uss = final or now >= self._next_uss_s
                if now >= self._next_uss_s:
                    self._next_uss_s = now + self._uss_interval_s
            dt_s = None if self._prev_now_s is None else now - self._prev_now_s
            # The kernel's CPU counters advance in 10 ms ticks, so a rate over an
            # interval much shorter than the period (the final tick just after a
            # regular one) is mostly quantization: 4 ms can read 278% on 2 cores.
            rates_known = dt_s is not None and dt_s >= _MIN_RATE_FRACTION * self.period_s
            self._prev_now_s = now
            self._record(now - self._t0_s, dt_s if rates_known else None, take_uss)

    def _record(self, t_s: float, dt_s: float | None, take_uss: bool) -> None:
        main_cpu_pct, main_rss = NAN, NAN
        worker_cpu_pcts: list[float] = []
        workers = workers_rss = 0
        read_delta_bytes, read_known = 0.0, 0
        prev, self._prev = self._prev, {}
        # Read before the processes, whose rows carry their share; one NVML reading per tick.
        on_gpu = self._gpu.process_sample(tree_pids=self._procs.keys()) if self._gpu is not None else None
        tree_gpu_util: list[float] = []
        tree_gpu_mem: list[float] = []
        for pid, proc in list(self._procs.items()):
            try:
                times = proc.cpu_times()
                rss = proc.memory_info().rss
                read = self._read_bytes(proc)
                uss = self._uss_bytes(proc) if take_uss else NAN
            except self._gone:
                del self._procs[pid]  # exited since the last tree refresh: normal
                continue
            cpu_s = times.user + times.system
            base = prev.get(pid)
            cpu_pct = NAN
            if base is not None and base[0] is proc and dt_s is not None:  # the same process as last tick
                cpu_pct = 100.0 * (cpu_s - base[1]) / dt_s
                if not (math.isnan(read) or math.isnan(base[2])):
                    # Counters only grow; max() guards against a counter reset.
                    read_delta_bytes += max(0, read - base[2])
                    read_known += 1
            self._prev[pid] = (proc, cpu_s, read)

            role = MAIN if pid == self.root_pid else WORKER
            process_row = {"t_s": t_s, "pid": pid, "role": role, "cpu_pct": cpu_pct,
                           "rss_bytes": rss, "read_bytes": read, "uss_bytes": uss}
            if on_gpu is not None:
                process_row["gpu_util_pct"] = util = on_gpu.util_of(pid)
                process_row["gpu_mem_bytes"] = mem = on_gpu.mem_of(pid)
                tree_gpu_util.append(util)
                tree_gpu_mem.append(mem)
            self._process_rows.append(process_row)
            if role == MAIN:
                main_cpu_pct, main_rss = cpu_pct, rss
            else:
                workers += 1
                workers_rss += rss
                if not math.isnan(cpu_pct):
                    worker_cpu_pcts.append(cpu_pct)

        if workers == 0:
            workers_cpu_pct = 0.0  # a true zero: there is no worker to use CPU
        else:
            workers_cpu_pct = math.fsum(worker_cpu_pcts) if worker_cpu_pcts else NAN
        core_pcts = self._core_pcts()
        known_cores = [p for p in core_pcts if not math.isnan(p)]
        row: dict[str, Any] = {
            "t_s": t_s,
            "cpu_util_pct": math.fsum(known_cores) / len(known_cores) if known_cores else NAN,
            "main_cpu_pct": main_cpu_pct,
            "workers_cpu_pct": workers_cpu_pct,
            "main_rss_bytes": main_rss,
            "workers_rss_bytes": workers_rss,
            "tree_rss_bytes": (0 if math.isnan(main_rss) else main_rss) + workers_rss,
            "workers": workers,
            "read_bytes_per_s": read_delta_bytes / dt_s if dt_s is not None and read_known else NAN,
        }
        for i, pct in enumerate(core_pcts):
            row[f"cpu_core{i}_pct"] = pct
        if self._gpu is not None:
            row.update(self._gpu.sample())
            row["gpu_proc_util_pct"] = _tree_total(tree_gpu_util)
            row["gpu_proc_mem_bytes"] = _tree_total(tree_gpu_mem)
            # Any pid NVML names (memory lists, or utilization samples where no memory list answers) says
            # whether its pids are this tree's namespace's.
            listed = set(on_gpu.mem_bytes or ()) | set(on_gpu.util_pct or ()) if on_gpu is not None else set()
            if listed:
                listed_tree = any(pid in listed for pid in self._procs)
                self._gpu_listed_tree |= listed_tree
                self._gpu_listed_others |= not listed_tree
        self._samples.append(row)

    def _refresh_tree(self) -> None:
        try:
            children = self._root.children(recursive=True)
        except self._gone:
            return  # the root is gone or unreadable: keep sampling what is known
        current = {self.root_pid: self._root}
        for child in children:
            known = self._procs.get(child.pid)
            # psutil's Process equality includes the creation time, so a
            # reused pid yields a new object (and fresh baselines).
            current[child.pid] = known if known is not None and known == child else child
            if child.pid not in self._seen:
                self._seen[child.pid] = self._describe(child)
        self._procs = current

    def _new_child(self) -> bool:
        """A process of the tree started one the tree does not hold yet (a DataLoader's new workers)."""
        for pid in list(self._procs):
            kids = self._children_of(pid)
            if kids and any(kid not in self._procs for kid in kids):
                return True
        return False

    def _describe(self, proc: Any) -> dict[str, Any]:
        """A descendant as first seen (once per pid: two /proc reads): parent, command line, when."""
        try:
            ppid, cmdline = proc.ppid(), proc.cmdline()
        except self._gone:
            ppid, cmdline = None, []
        return {"pid": proc.pid, "ppid": ppid, "cmdline": list(cmdline),
                "first_t_s": self._clock() - self._t0_s}

    def descendants(self) -> list[dict[str, Any]]:
        """Every descendant of the root seen while sampling, in the order seen (``pid``, ``ppid``, ``cmdline``,
        ``first_t_s``): what the script started, DataLoader workers and any other process."""
        return list(self._seen.values())

    def _read_bytes(self, proc: Any) -> float:
        """Cumulative bytes this process read from storage (page-cache hits excluded on Linux), or NaN."""
        return self._optional("io_counters", "io_counters()", lambda: proc.io_counters().read_bytes)

    def _uss_bytes(self, proc: Any) -> float:
        """Memory unique to this process, bytes, or NaN."""
        return self._optional("uss", "memory_full_info().uss", lambda: proc.memory_full_info().uss)

    def _optional(self, name: str, what: str, read: Any) -> float:
        """``read()``, or NaN with the absence recorded once when psutil cannot give it here."""
        try:
            return read()
        except self._ps.AccessDenied as e:
            self._absences.setdefault(name, f"psutil.AccessDenied: {e}")
        except AttributeError:
            self._absences.setdefault(name, f"psutil has no {what} on this platform")
        return NAN

    def _core_pcts(self) -> list[float]:
        """Busy % of each core since the previous tick; NaN where unknown."""
        cores = [_busy_total_s(t) for t in self._ps.cpu_times(percpu=True)]
        prev, self._prev_cores = self._prev_cores, cores
        if prev is None or len(prev) != len(cores):  # first tick, or a core went on/offline
            return [NAN] * len(cores)
        pcts = []
        for (busy0, total0), (busy1, total1) in zip(prev, cores):
            total = total1 - total0
            # Counters tick in 10 ms jiffies, so a short interval can show no
            # time at all (unknown, not idle). Clamp because Linux's iowait
            # counter can step backwards.
            pcts.append(min(100.0, max(0.0, 100.0 * (busy1 - busy0) / total)) if total > 0 else NAN)
        return pcts


def main_thread_children(pid: int) -> list[int] | None:
    """The pids the main thread of ``pid`` started and that still run, from Linux's
    ``/proc/PID/task/PID/children``; None where the kernel does not say (another OS, a kernel without it, a
    process gone): the tree refresh every ``tree_refresh_s`` still finds them."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
            return [int(word) for word in f.read().split()]
    except (OSError, ValueError):
        return None


def _not_known(pid: int) -> list[int] | None:
    return None


def _tree_total(values: list[float]) -> float:
    """The tree's sum of a per-process GPU reading; NaN when the tick had no reading (NaN for every process)."""
    known = [v for v in values if not math.isnan(v)]
    return math.fsum(known) if known else NAN


def _next_deadline_s(deadline_s: float, now_s: float, period_s: float) -> float:
    """The first grid point (deadline_s + k * period_s, k >= 0) after now_s.

    Deadlines missed by a slow tick or a descheduled thread are skipped rather
    than caught up in a burst of back-to-back ticks.
    """
    if now_s < deadline_s:
        return deadline_s
    return deadline_s + (math.floor((now_s - deadline_s) / period_s) + 1) * period_s


def _busy_total_s(times: Any) -> tuple[float, float]:
    """(busy, total) CPU seconds of one core; busy = total - idle - iowait.

    On Linux guest time is already counted in user/nice, so it is taken out of
    the total (as psutil.cpu_percent does).
    """
    total = math.fsum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total
