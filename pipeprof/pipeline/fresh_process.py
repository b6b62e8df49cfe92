"""Run a scenario file in a fresh Python process and read back what it wrote.

A fresh process inherits nothing from the one before: no page cache it
opened, no torch thread setting, no DataLoader workers, no allocator state.
``run --verify`` (and sweeps) use it so a re-run compares like with like.
The child is ``python -m pipeprof run FILE --out DIR --quiet``; its exit
status, its run folder (the one new folder under ``DIR``), its summary.json
and its last error line come back in a ``ChildRun``.

Ctrl-C while a child runs: the child (in the same process group) gets the
signal from the terminal and saves its steps so far; ``run_child`` passes it
on (for a signal sent to this process alone; a child that has it from the
terminal too holds the second until its run is saved: ``errors.Interrupts``),
waits for the child to finish saving, and returns with ``interrupted = True``
instead of raising, so the caller can record what happened before it exits.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated

STOP_WAIT_S = 60.0  # how long a child gets to save its run after Ctrl-C


@dataclass(frozen=True)
class ChildRun:
    """What a child ``pipeprof run`` left: exit status, run folder, summary and its last error line."""

    exit_code: int
    folder: Path | None
    summary: dict[str, Any] | None
    error: str | None
    interrupted: bool = False

    @property
    def status(self) -> str:
        """``complete``, ``failed``, ``interrupted`` or ``invalid`` (bad input: exit status 2)."""
        if self.interrupted or self.exit_code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
            return "interrupted"
        if self.exit_code == 0 and self.summary is not None:
            return "complete"
        return "invalid" if self.exit_code == 2 else "failed"


def run_command(scenario_file: Path, out: Path, cache: Path | None = None,
                extra: Sequence[str] = ()) -> list[str]:
    """The child's command line."""
    cmd = [sys.executable, "-m", "pipeprof", "run", str(scenario_file), "--out", str(out), "--quiet", *extra]
    if cache is not None:
        cmd += ["--cache", str(cache)]
    return cmd


def run_child(scenario_file: Path, out: Path, *, cache: Path | None = None, extra: Sequence[str] = (),
              command: Sequence[str] | None = None) -> ChildRun:
    """Run ``scenario_file`` in a fresh process writing its run folder under ``out`` (created if needed).

    ``command`` replaces the whole command line (tests use it to run a
    stand-in child).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in out.iterdir()}
    cmd = list(command) if command is not None else run_command(scenario_file, out, cache, extra)
    # a point never trains on, orphaned, after a kill -9 of its sweep or tune: it gets SIGTERM and saves its steps
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,  # noqa: PLW1509
                            preexec_fn=die_with_parent())
    interrupted = False
    try:
        stdout, stderr = proc.communicate()
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM to us (errors.Terminated): the child gets the same
        interrupted = True
        stdout, stderr = stop_process(proc, signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
    folder = _new_folder(out, before)
    summary = _read_summary(folder)
    error = _error_line(stderr, proc.returncode) or _killed(proc.returncode, folder)
    return ChildRun(proc.returncode, folder, summary, error, interrupted)


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGINT, wait_s: float = STOP_WAIT_S) -> tuple[str, str]:
    """Let the child save what it has after Ctrl-C or SIGTERM: pass the signal on (if it is still running),
    wait up to ``wait_s``, then kill; its (stdout, stderr) where they were piped."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.communicate(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()
    except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
        proc.kill()
        return proc.communicate()


def die_with_parent() -> Callable[[], None] | None:
    """The child's last act before it runs the command (Linux): SIGTERM when pipeprof ends, kill -9
    included, so that a profiled script or a sweep's or tune's point never runs on orphaned and unwatched
    (``prctl(PR_SET_PDEATHSIG)``; a launcher passes the SIGTERM on to its ranks). None where there is no prctl."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # pipeprof ended before the call: it would never come
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


_PR_SET_PDEATHSIG = 1


def _new_folder(out: Path, before: set[str]) -> Path | None:
    new = sorted(p for p in out.iterdir() if p.name not in before and p.is_dir() and not p.name.startswith("."))
    return new[-1] if new else None


def _read_summary(folder: Path | None) -> dict[str, Any] | None:
    if folder is None:
        return None
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def _killed(exit_code: int, folder: Path | None) -> str | None:
    """Why a child that said nothing ended: the signal that killed it (kill -9, the out-of-memory killer), and
    where the raw records it wrote are, if its run folder holds them (``pipeline.recording``)."""
    if exit_code >= 0:
        return None
    from pipeprof.pipeline.recording import RECORDING, is_recording  # pandas: only for a killed child

    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = f"signal {-exit_code}"
    if folder is None or not is_recording(folder):
        return f"killed by {name} before it saved a run folder"
    return (f"killed by {name}; the raw records it wrote are kept in {folder / RECORDING}: "
            f"`pipeprof report {folder}` rebuilds the run, marked cut short")


def _error_line(stderr: str, exit_code: int) -> str | None:
    """The child's ``pipeprof: error:`` line, else its last stderr line when it failed."""
    lines = [line.strip() for line in (stderr or "").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("pipeprof: error:")]
    if errors:
        return errors[-1].removeprefix("pipeprof: error:").strip()
    if exit_code != 0 and lines:
        return lines[-1]
    return None
