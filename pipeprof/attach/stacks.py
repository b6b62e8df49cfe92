"""py-spy's raw stacks of a running process tree, one window at a time.

``record_window(pid, seconds, rate_hz)`` runs, as a child process in its own session::

    py-spy record --pid PID --subprocesses --idle --threads --nonblocking --full-filenames
                  --rate HZ --duration S --format raw --output FILE

``--format raw`` is one line per distinct stack with its sample count, which
stays small however long the window (a chrome trace of the same window is
~100 times larger); the window's start and end are its timestamps. ``--idle``
keeps the threads that wait (the training thread blocked on the DataLoader's
queue is the sample that matters most); ``--threads`` names each thread;
``--subprocesses`` follows the DataLoader workers and, under a torchrun agent,
every rank and its workers; ``--nonblocking`` never pauses the job.

Each line reads::

    process 10:"python train.py";process 11:"python train.py";thread (11): MainThread;f (/a/b.py:3);g (/a/c.py:9) 42

outermost first: the chain of processes from the attached one down, the OS
thread id and name, the frames from the thread's entry to the innermost one,
and the count. ``parse_raw`` turns it into ``StackLine`` records; nothing here
classifies (``attach.classify``).
"""

from __future__ import annotations

import linecache
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pipeprof.measure.pyspy import _output_reason, locate_pyspy

_PROCESS = re.compile(r'process (\d+):"')
_THREAD = re.compile(r"thread \((0x[0-9a-fA-F]+|\d+)\)(?:: ([^;]*))?;?")
_FRAME = re.compile(r"^(.*) \((.*):(\d+)\)$")


@dataclass(frozen=True)
class Frame:
    function: str  # py-spy's name: the qualified name on Python 3.11+ ("Compose.__call__")
    file: str
    line: int


@dataclass(frozen=True)
class StackLine:
    """One distinct stack of a window: ``samples`` of it, in thread ``thread_id`` of ``pids[-1]``."""

    pids: tuple[int, ...]  # the process chain, the attached process first
    thread_id: int
    thread_name: str
    frames: tuple[Frame, ...]  # outermost first
    samples: int

    @property
    def pid(self) -> int:
        return self.pids[-1]


def parse_raw(text: str) -> tuple[list[StackLine], int]:
    """py-spy's raw format as StackLines, and how many lines could not be read (set aside, counted)."""
    out: list[StackLine] = []
    unreadable = 0
    for line in text.splitlines():
        line = line.rstrip()
        if not line:
            continue
        parsed = _parse_line(line)
        if parsed is None:
            unreadable += 1
        else:
            out.append(parsed)
    return out, unreadable


def _parse_line(line: str) -> StackLine | None:
    body, _, count = line.rpartition(" ")
    if not count.isdigit() or not body:
        return None
    pids: list[int] = []
    pos = 0
    while True:
        m = _PROCESS.match(body, pos)
        if m is None:
            break
        pids.append(int(m.group(1)))
        # the command line is quoted and may hold anything: it ends at the next ';process ' or ';thread ('
        ends = [i for i in (body.find('";process ', m.end()), body.find('";thread (', m.end())) if i >= 0]
        if not ends:
            return None
        pos = min(ends) + 2
    t = _THREAD.match(body, pos)
    if not pids or t is None:
        return None
    tid_text = t.group(1)
    frames = []
    rest = body[t.end():]
    for part in rest.split(";") if rest else []:
        f = _FRAME.match(part)
        if f is None:
            return None
        frames.append(Frame(f.group(1), f.group(2), int(f.group(3))))
    return StackLine(tuple(pids), int(tid_text, 16) if tid_text.startswith("0x") else int(tid_text),
                     (t.group(2) or "").strip(), tuple(frames), int(count))


def stack_text(frames: tuple[Frame, ...]) -> str:
    """Frames as stacks.csv keeps them: py-spy's own ``function (file:line)`` joined by ";"."""
    return ";".join(f"{f.function} ({f.file}:{f.line})" for f in frames)


def parse_frames(text: str) -> tuple[Frame, ...]:
    """The inverse of ``stack_text``; a part that is not a frame is kept as a function without a file."""
    frames = []
    for part in text.split(";") if text else []:
        f = _FRAME.match(part)
        frames.append(Frame(f.group(1), f.group(2), int(f.group(3))) if f else Frame(part, "", 0))
    return tuple(frames)


def source_line(frame: Frame) -> str:
    """The text of a frame's line (stripped), read from its file on this machine; "" where it cannot be read."""
    return linecache.getline(frame.file, frame.line).strip()


class Unattachable(Exception):
    """py-spy cannot read the process (no ptrace permission, not a Python process, gone): ``str`` says why."""


class NoPySpy(Unattachable):
    """py-spy is not installed: nothing is wrong with the process."""


CHECK_TRIES = 3  # a non-blocking dump reads a running process's memory as it changes: one read may fail
PERMISSION_WORDS = ("permission", "operation not permitted", "ptrace")  # py-spy refused to trace: not transient


def check_attachable(pid: int, pyspy: str | None = None, timeout_s: float = 30.0, tries: int = CHECK_TRIES,
                     pause_s: float = 0.2) -> None:
    """``py-spy dump`` of ``pid``, up to ``tries`` times (a non-blocking read of a busy process can fail once
    and not again; a refusal to trace it fails at once): raises Unattachable with py-spy's own reason (its
    error output first) when no dump could read it."""
    exe = pyspy or locate_pyspy()
    if exe is None:
        raise NoPySpy("py-spy is not installed")
    reason = "no dump was tried"
    for attempt in range(max(tries, 1)):
        if attempt:
            time.sleep(pause_s)
        try:
            done = subprocess.run([exe, "dump", "--pid", str(pid), "--nonblocking"], stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout_s, errors="replace")
        except subprocess.TimeoutExpired:
            raise Unattachable(f"py-spy dump of pid {pid} did not answer within {timeout_s:g} s") from None
        if done.returncode == 0:
            return
        reason = _output_reason(done.stderr if done.stderr.strip() else done.stdout)  # its error, not its header
        if any(word in reason.lower() for word in PERMISSION_WORDS):
            break  # not transient: the user must change something
    raise Unattachable(reason)


@dataclass
class Window:
    """One window of py-spy's samples: ``t_start_s`` / ``t_end_s`` on the attach clock."""

    t_start_s: float
    t_end_s: float
    stacks: list[StackLine]
    unreadable_lines: int = 0
    error: str | None = None  # py-spy's own words when it ended badly (the process exited, ...)


class WindowRecorder:
    """Runs ``py-spy record`` for one window at a time (see module docstring)."""

    def __init__(self, pid: int, rate_hz: int, *, pyspy: str | None = None, stop_timeout_s: float = 10.0) -> None:
        self.pid = pid
        self.rate_hz = rate_hz
        self.pyspy = pyspy or locate_pyspy()
        self.stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen | None = None
        self.partial = ""  # what the window interrupted by Ctrl-C had recorded

    def command(self, seconds: int, output: Path | str) -> list[str]:
        assert self.pyspy is not None
        return [self.pyspy, "record", "--pid", str(self.pid), "--subprocesses", "--idle", "--threads",
                "--nonblocking", "--full-filenames", "--rate", str(self.rate_hz), "--duration", str(seconds),
                "--format", "raw", "--output", str(output)]

    def record(self, seconds: int) -> tuple[str, str | None]:
        """Sample for ``seconds`` (py-spy's --duration, whole seconds); the raw text and py-spy's error, if any.

        A KeyboardInterrupt stops py-spy with SIGINT (it writes what it has) and is re-raised after the text
        is read back by ``interrupted()``."""
        with tempfile.TemporaryDirectory(prefix="pipeprof-attach-") as folder:
            out, log_path = Path(folder) / "stacks.txt", Path(folder) / "py-spy.log"
            with open(log_path, "wb") as log:
                self._proc = subprocess.Popen(self.command(seconds, out), stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True)
            try:
                self._proc.wait()
            except KeyboardInterrupt:
                self._stop()
                self.partial = out.read_text(errors="replace") if out.is_file() else ""
                raise
            text = out.read_text(errors="replace") if out.is_file() else ""
            error = None if self._proc.returncode == 0 else _output_reason(log_path.read_text(errors="replace"))
            return text, error

    def _stop(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            proc.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
