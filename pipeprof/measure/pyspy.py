"""py-spy: samples the training process and its workers from outside, into a speedscope file.

``PySpy(rate_hz).start(pid)`` runs, as a child process::

    py-spy record --pid PID --subprocesses --rate HZ --nonblocking --format speedscope --output FILE

when profiling starts, before the first step (so warm-up and the workers'
start-up are in the file); ``stop()`` sends it SIGINT at the end of training,
which makes py-spy write the file, waits for it (``stop_timeout_s``) and kills
it if it does not stop. ``--nonblocking`` reads the processes' memory without
pausing them: measured on 2 cores, 100 Hz with pausing cost ~29% of
throughput, 20 Hz non-blocking nothing measurable (``benchmarks/codeprofile.py``).

py-spy runs in its own session, so a Ctrl-C at the terminal reaches pipeprof
and not py-spy, which is stopped (and writes its file) like after any run.
It writes into a private temporary folder; ``stop()`` returns the file's
bytes for the run folder (written atomically with the rest by ``save_run``).

py-spy not installed, refused (no ptrace permission: it prints an error and
exits non-zero), killed, or ending without a valid file: the reason is
recorded under ``absences["pyspy"]``, never raised.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from pipeprof.measure.codeprofile import Recorded

FILE = "pyspy.speedscope.json"
INSTALL_HINT = "pip install 'pipeprof[pyspy]'"


def locate_pyspy() -> str | None:
    """py-spy on PATH, else next to this Python (a virtual environment's bin folder), else None."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def _output_reason(text: str, limit: int = 300) -> str:
    """The first lines of py-spy's own output that say what went wrong (no banners, no backtrace)."""
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Stack backtrace"):
            break
        if line and not line.startswith("py-spy>"):
            lines.append(line)
    reason = " ".join(lines[:3]) or "no error message"
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"


def _cpu_seconds(pid: int) -> float | None:
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


class PySpy:
    """One ``py-spy record`` of a process tree (see module docstring)."""

    def __init__(self, rate_hz: int, *, stop_timeout_s: float = 10.0) -> None:
        self.rate_hz = rate_hz
        self.stop_timeout_s = stop_timeout_s
        self.command: list[str] = []
        self._absent: str | None = None
        self._proc: subprocess.Popen | None = None
        self._folder: Path | None = None
        self._started_s = 0.0

    def start(self, pid: int) -> PySpy:
        exe = locate_pyspy()
        if exe is None:
            self._absent = f"py-spy is not installed (not on PATH nor next to {sys.executable}): {INSTALL_HINT}"
            return self
        self._folder = Path(tempfile.mkdtemp(prefix="pipeprof-pyspy-"))
        self.command = [exe, "record", "--pid", str(pid), "--subprocesses", "--rate", str(self.rate_hz),
                        "--nonblocking", "--format", "speedscope", "--output", str(self._folder / FILE)]
        try:
            with open(self._folder / "py-spy.log", "wb") as log:
                self._proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True)
            self._started_s = time.monotonic()
        except OSError as e:
            self._absent = f"py-spy could not be started ({exe}): {' '.join(str(e).split())}"
        return self

    def stop(self) -> Recorded:
        """Stop py-spy and return its file, or the reason there is none (call once, after training)."""
        out = Recorded(meta={"rate_hz": self.rate_hz, "started": "from before the first step, warm-up included",
                             "command": shlex.join(self.command[:-1] + [FILE]) if self.command else None})
        try:
            reason = self._absent or self._stop(out)
        finally:
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
        if reason:
            out.absences["pyspy"] = reason
            out.meta["absent"] = reason
        return out

    def _stop(self, out: Recorded) -> str | None:
        proc = self._proc
        assert proc is not None and self._folder is not None
        exited_early = proc.poll() is not None
        killed = False
        if not exited_early:
            # Its own CPU time while sampling: what it took from the machine (it never pauses the processes).
            out.meta.update(cpu_s=_cpu_seconds(proc.pid), elapsed_s=time.monotonic() - self._started_s)
            proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                killed = True
        log = (self._folder / "py-spy.log").read_text(errors="replace")
        out.meta["returncode"] = proc.returncode
        if killed:
            return f"py-spy did not stop within {self.stop_timeout_s:g} s of SIGINT and was killed"
        if exited_early and proc.returncode != 0:
            return f"py-spy exited during training with status {proc.returncode}: {_output_reason(log)}"
        path = self._folder / FILE
        content = path.read_bytes() if path.is_file() else b""
        if not content and not exited_early and proc.returncode == -signal.SIGINT:
            # SIGINT's default action ended it: py-spy sets its own handler (the one that writes the file) only
            # once it has attached, so a run this short ended while it was still attaching.
            return (f"py-spy recorded no samples in {out.meta['elapsed_s']:.1f} s: the run ended while it was still "
                    f"attaching (SIGINT ended it before it had sampled)")
        if not content:
            return f"py-spy wrote no speedscope file (status {proc.returncode}: {_output_reason(log)})"
        try:
            profiles = json.loads(content).get("profiles") or []
        except (ValueError, AttributeError) as e:
            return f"py-spy's speedscope file is not valid JSON ({' '.join(str(e).split())[:200]})"
        samples = sum(len(p.get("samples") or []) for p in profiles if isinstance(p, dict))
        if not samples:  # an empty file is not a profile: say why instead of showing nothing
            elapsed = out.meta.get("elapsed_s")
            return (f"py-spy recorded no samples in {elapsed:.1f} s: the run ended before it attached and sampled"
                    if elapsed is not None else "py-spy recorded no samples")
        out.files[FILE] = content
        out.meta.update(file=FILE, bytes=len(content), profiles=len(profiles), samples=samples)
        return None

