"""Attach to a running training process: py-spy's stacks window by window, psutil and NVML beside them.

``attach(pid, ...)`` never stops, signals or changes the job: py-spy reads
its memory without pausing it (``--nonblocking``), psutil reads /proc, NVML
the driver. It ends when ``seconds`` have passed, at Ctrl-C (the attach
ends; the job goes on), or when the job exits (what was sampled is kept: a
partial run, status ``interrupted`` with the reason). The Run it returns has
an empty steps table (steps cannot be cut from outside), the sampler's
tables, and ``stacks`` (``run_folder.STACK_COLUMNS``); run.json
``timing.method`` is ``"sampled"``.

Windows are ``window_s`` long (whole seconds: py-spy's ``--duration``); one
py-spy run per window gives each window its timestamps (the live view's
refresh, a report's timeline) at the cost of py-spy's start between windows
(a few tens of ms, not sampled: ``attach.sampled_s`` says how much was).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import psutil

from pipeprof.attach.stacks import (
    PERMISSION_WORDS,
    NoPySpy,
    StackLine,
    Unattachable,
    WindowRecorder,
    check_attachable,
    parse_raw,
    source_line,
)
from pipeprof.attach.stacks import stack_text as _stack_text
from pipeprof.errors import Terminated, UsageError, interrupt_reason
from pipeprof.measure import gpu as gpu_mod
from pipeprof.measure.clock import Clock, monotonic_clock
from pipeprof.measure.environment import usable_cores
from pipeprof.measure.gpu_set import GpuSet, on_gpu
from pipeprof.measure.pyspy import INSTALL_HINT
from pipeprof.measure.sampler import SystemSampler
from pipeprof.run_folder import STACK_COLUMNS, STEP_COLUMNS, Run, sample_tables
from pipeprof.version import __version__

DEFAULT_RATE_HZ = 50
STEP_LEVEL_ABSENT = ("attached from outside: steps cannot be cut without the hooks in the process, so step times, "
                     "samples/s and per-batch loading times are not measured; the shares are sampled stacks")


def unattachable_error(pid: int, reason: str, *, no_pyspy: bool = False) -> UsageError:
    """The one line for a process py-spy cannot read: what to do about ptrace, or why else (``no_pyspy``: no
    py-spy to read it with, which says nothing of the process)."""
    if no_pyspy:
        return UsageError(f"pipeprof attach {pid}: py-spy is not installed (attach reads the job's Python stacks "
                          f"with it, from outside): {INSTALL_HINT}")
    if any(w in reason.lower() for w in PERMISSION_WORDS):
        return UsageError(f"pipeprof attach {pid}: not permitted to read the process ({reason}); run pipeprof as "
                          f"the job's user with kernel.yama.ptrace_scope = 0 (sudo sysctl kernel.yama.ptrace_scope=0)"
                          f", or as root, or in the job's container started with --cap-add SYS_PTRACE")
    return UsageError(f"pipeprof attach {pid}: py-spy cannot read a Python interpreter in it ({reason}); "
                      f"give the pid of the Python training process or of its launcher (torchrun)")


@dataclass
class Attached:
    """What an attach recorded, before it becomes a Run."""

    pid: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    windows: int = 0
    sampled_s: float = 0.0
    unreadable_lines: int = 0
    status: str = "complete"
    error: str | None = None
    ended: str = "seconds"  # "seconds", "ctrl-c", "sigterm", "exited"


def stack_rows(stacks: list[StackLine], t_start_s: float, t_end_s: float,
               line_of: Callable[[Any], str] = source_line) -> list[dict[str, Any]]:
    """StackLines of one window as stacks.csv rows (the innermost line's text read now, while the files are here)."""
    return [{"t_start_s": t_start_s, "t_end_s": t_end_s, "pid": s.pid,
             "ppid": s.pids[-2] if len(s.pids) > 1 else None, "thread_id": s.thread_id,
             "thread_name": s.thread_name, "stack": _stack_text(s.frames),
             "innermost_line": line_of(s.frames[-1]) if s.frames else "", "samples": s.samples}
            for s in stacks]


def running(pid: int, grace_s: float = 3.0) -> bool:
    """The process is still running ``grace_s`` from now (one that is exiting, or a zombie, is not)."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.1)


def record_stacks(recorder: WindowRecorder, pid: int, seconds: float | None, window_s: int, *, clock: Clock,
                  t0_s: float, alive: Callable[[int], bool] = running,
                  on_window: Callable[[list[dict[str, Any]]], None] | None = None) -> Attached:
    """Windows of py-spy's stacks until ``seconds`` (None: until Ctrl-C or the process ends)."""
    out = Attached(pid)
    while True:
        left = None if seconds is None else seconds - (clock() - t0_s)
        if left is not None and left < 0.5:
            break
        # the last window takes what is left (a window under 1 s is not made: py-spy counts whole seconds)
        length = window_s if left is None or left >= window_s + 1 else max(1, math.floor(left + 0.5))
        start = clock() - t0_s
        try:
            text, error = recorder.record(length)
        except KeyboardInterrupt as e:  # Ctrl-C ends an attach as asked; SIGTERM (Terminated) interrupts it
            text, error = recorder.partial, None
            out.ended = "sigterm" if isinstance(e, Terminated) else "ctrl-c"
        end = clock() - t0_s
        stacks, unreadable = parse_raw(text)
        out.unreadable_lines += unreadable
        if stacks:
            rows = stack_rows(stacks, start, end)
            out.rows += rows
            out.windows += 1
            out.sampled_s += end - start
            if on_window is not None:
                on_window(rows)
        if out.ended == "sigterm":
            out.status, out.error = "interrupted", f"{interrupt_reason(Terminated())}; what was sampled until then is kept"
        if out.ended in ("ctrl-c", "sigterm"):
            break
        if error is not None or not psutil.pid_exists(pid):
            # py-spy fails while a job is exiting (its interpreter already gone): only a job still running later
            # means py-spy itself stopped
            if alive(pid):
                out.status, out.error, out.ended = "interrupted", f"py-spy stopped: {error}", "exited"
            else:
                out.status, out.ended = "interrupted", "exited"
                out.error = (f"the process exited {end:.1f} s into the attach; what was sampled until then "
                             f"is kept")
            break
    return out


def _tree_pids(pid: int) -> list[int]:
    try:
        root = psutil.Process(pid)
        return [pid, *(c.pid for c in root.children(recursive=True))]
    except psutil.Error:
        return [pid]


def _command(pid: int) -> list[str]:
    try:
        return list(psutil.Process(pid).cmdline())
    except psutil.Error:
        return []


def attach(pid: int, *, seconds: float | None = None, rate_hz: int = DEFAULT_RATE_HZ, window_s: int = 5,
           sample_hz: float = 2.0, name: str | None = None, clock: Clock = monotonic_clock,
           recorder: WindowRecorder | None = None,
           on_window: Callable[[list[dict[str, Any]], dict[str, Any] | None], None] | None = None) -> Run:
    """Sample the running process ``pid`` and its tree (see module docstring); raises UsageError (exit 2) when it
    does not exist or py-spy cannot read it."""
    if not psutil.pid_exists(pid):
        raise UsageError(f"pipeprof attach {pid}: no such process")
    recorder = recorder or WindowRecorder(pid, rate_hz)
    try:
        check_attachable(pid, recorder.pyspy)
    except Unattachable as e:
        raise unattachable_error(pid, str(e), no_pyspy=isinstance(e, NoPySpy)) from None
    command = _command(pid)
    absences: dict[str, str] = {"steps": STEP_LEVEL_ABSENT}
    inventory = gpu_mod.gpu_inventory()
    gpus = (gpu_mod.open_visible_gpus() if not isinstance(inventory, gpu_mod.Absent) and inventory
            else gpu_mod.Absent(inventory.reason if isinstance(inventory, gpu_mod.Absent) else "no GPU visible"))
    monitor = None if isinstance(gpus, gpu_mod.Absent) else GpuSet(gpus)
    if isinstance(gpus, gpu_mod.Absent):
        absences["gpu"] = gpus.reason
    t0_s = clock()
    started_utc = dt.datetime.now(dt.timezone.utc)
    started_unix_s = time.time()
    try:
        sampler = SystemSampler(pid, sample_hz, clock=clock, t0_s=t0_s, gpu=monitor)
        sampler.start()
    except psutil.NoSuchProcess:
        raise UsageError(f"pipeprof attach {pid}: the process ended before sampling began") from None
    try:
        attached = record_stacks(recorder, pid, seconds, window_s, clock=clock, t0_s=t0_s,
                                 on_window=None if on_window is None else
                                 lambda rows: on_window(rows, next(iter(sampler.recent_sample_rows(1)), None)))
    finally:
        sampler.stop()
    samples, processes = sample_tables(*sampler.frames(), monitor is not None)
    absences.update(sampler.absences)
    gpu_meta: dict[str, Any] = {"available": False, "reason": absences.get("gpu")}
    if monitor is not None:
        pids = _tree_pids(pid) or [pid]
        chosen = monitor.training_gpu(pids + [int(p) for p in processes["pid"].dropna().unique()], None)
        index = chosen if isinstance(chosen, int) else None
        monitor.select(index)
        gpu_meta = {"available": index is not None, **monitor.info()}
        if index is None:
            gpu_meta["reason"] = absences["gpu"] = str(getattr(chosen, "reason", "no GPU held by the process tree"))
        samples = on_gpu(samples, index)
        monitor.close()
    return Run(meta=_meta(pid, command, name, attached, absences, gpu_meta, started_utc, started_unix_s,
                          rate_hz, window_s, seconds, recorder),
               steps=pd.DataFrame(columns=STEP_COLUMNS), samples=samples, processes=processes,
               stacks=pd.DataFrame(attached.rows, columns=STACK_COLUMNS))


def _meta(pid: int, command: list[str], name: str | None, attached: Attached, absences: dict[str, str],
          gpu_meta: dict[str, Any], started_utc: dt.datetime, started_unix_s: float, rate_hz: int, window_s: int,
          seconds: float | None, recorder: WindowRecorder) -> dict[str, Any]:
    ended = {"seconds": f"after --seconds {seconds:g}" if seconds is not None else "",
             "ctrl-c": "at Ctrl-C (the job goes on)", "sigterm": "at SIGTERM to pipeprof (the job goes on)",
             "exited": "when the process exited"}[attached.ended]
    if not attached.rows:
        absences["stacks"] = "py-spy recorded no samples" + (f" ({attached.error})" if attached.error else "")
    notes = [f"Attached to pid {pid} from outside; ended {ended}. Sampled: every share of step time in this report "
             f"is a share of py-spy's samples of the training threads ({rate_hz} Hz), not of timed steps (their 95% "
             f"intervals: summary.json sampled, and the terminal's table); step times, throughput and per-batch "
             f"loading times are absent (steps cannot be cut from outside)."]
    return {
        "kind": "script", "device": "cuda" if gpu_meta.get("available") else "cpu",
        "status": attached.status, "error": attached.error, "absences": absences, "notes": notes,
        "created_utc": started_utc.strftime("%Y-%m-%dT%H:%M:%SZ"), "pipeprof_version": __version__,
        "scenario": {"name": name or f"attach-{pid}", "description": " ".join(command)[:200] or None,
                     "loader": {}},
        "script": {"command": command, "command_line": " ".join(command)},
        "timing": {"method": "sampled", "parts": dict.fromkeys(("data_wait", "h2d", "compute"), "sampled"),
                   "reason": STEP_LEVEL_ABSENT},
        "loaders": [],  # a DataLoader's settings are the hooks' to read: not visible from outside
        "gpu": gpu_meta,
        # the cores this attach may use, as the job's (it runs beside the job: its container, its cgroup)
        "environment": {"cpu_cores": usable_cores()},
        "attach": {"pid": pid, "rate_hz": rate_hz, "window_s": window_s, "seconds": seconds,
                   "windows": attached.windows, "sampled_s": attached.sampled_s, "ended": attached.ended,
                   "started_unix_s": started_unix_s, "ended_unix_s": time.time(),
                   "unreadable_lines": attached.unreadable_lines,
                   "pyspy": " ".join(recorder.command(window_s, "FILE")[1:]) if recorder.pyspy else None},
    }
