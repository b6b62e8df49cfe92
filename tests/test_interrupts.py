"""SIGTERM is handled like Ctrl-C: what was measured is saved, marked interrupted, and the exit status is 143.

Real signals to real child processes (`pipeprof run`, `sweep`, `profile`), and the handler's own logic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch
from tiny import script_stepping, tiny_file

from pipeprof.errors import EXIT_TERMINATED, Interrupts, Terminated, interrupt_reason

FIXTURES = Path(__file__).parent / "fixtures"


def start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeprof", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _is_python(proc: psutil.Process) -> bool:
    try:
        return "python" in proc.name().lower() or any("pipeprof" in part for part in proc.cmdline()[:3])
    except psutil.Error:
        return False


def start_long_sweep(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A sweep whose first point trains for long (200,000 fixed steps, one worker): its process and its --out."""
    scenario = tiny_file(tmp_path, workers=1)
    out = tmp_path / "reports"
    proc = start(["sweep", str(scenario), "--grid", "train.steps=200000,40", "--fixed-steps", "--out", str(out),
                  "--cache", str(tmp_path / "cache"), "--quiet"])
    return proc, out


def wait_for_descendants(proc: subprocess.Popen, count: int, timeout_s: float = 120.0) -> None:
    """Until ``proc`` has ``count`` Python descendants (a DataLoader worker, a child run) — training has begun.

    Only Python processes count: importing torch may run a short-lived ``ldconfig`` or ``gcc`` (ctypes'
    find_library), and a signal sent 3 s after one of those lands while pipeprof is still importing (a
    diagnose interrupted before its folder existed, once on a loaded machine).
    """
    def enough() -> bool:
        try:
            return len([c for c in psutil.Process(proc.pid).children(recursive=True) if _is_python(c)]) >= count
        except psutil.Error:
            return False

    wait_until(proc, enough, f"{count} descendant(s)", timeout_s)


def wait_for_path(proc: subprocess.Popen, folder: Path, pattern: str, timeout_s: float = 120.0) -> None:
    """Until something matching ``pattern`` exists in ``folder`` (``proc`` has got that far)."""
    wait_until(proc, lambda: folder.is_dir() and any(folder.glob(pattern)), f"{pattern} in {folder}", timeout_s)


def wait_until(proc: subprocess.Popen, done: Callable[[], bool], what: str, timeout_s: float) -> None:
    """Poll ``done`` every 0.2 s while ``proc`` runs; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if done():
            return
        time.sleep(0.2)
    raise AssertionError(f"no {what} of {proc.pid} within {timeout_s} s")


@pytest.mark.integration
def test_sigterm_to_run_saves_the_steps_and_exits_143(tmp_path):
    scenario = tiny_file(tmp_path, steps=200000, workers=1)
    out = tmp_path / "reports"
    proc = start(["run", str(scenario), "--out", str(out), "--cache", str(tmp_path / "cache"), "--quiet"])
    wait_for_descendants(proc, 1)  # the DataLoader worker: training has begun
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)  # to pipeprof alone, as `kill` or a job scheduler would
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_TERMINATED, err
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    meta = json.loads((folder / "run.json").read_text())
    assert meta["status"] == "interrupted" and meta["error"] == "terminated (SIGTERM)"
    assert json.loads((folder / "summary.json").read_text())["steps"] > 0
    assert (folder / "report.html").is_file() and "Traceback" not in err


@pytest.mark.integration
def test_sigterm_to_sweep_reaches_the_point_running_and_keeps_the_sweep(tmp_path):
    proc, out = start_long_sweep(tmp_path)
    wait_for_descendants(proc, 2)  # the first point's child and its DataLoader worker: it is training
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_TERMINATED, err
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    doc = json.loads((folder / "sweep.json").read_text())
    assert doc["status"] == "interrupted"
    assert [p["status"] for p in doc["points"]] == ["interrupted", "not run"]
    runs = list(folder.rglob("run.json"))
    assert len(runs) == 1, (doc["points"], err[-2000:])  # the point's child saved its run
    assert json.loads(runs[0].read_text())["error"] == "terminated (SIGTERM)"
    assert (folder / "sweep.html").is_file()


@pytest.mark.integration
def test_sigterm_to_profile_is_passed_to_the_script(tmp_path):
    out = tmp_path / "reports"
    proc = start(["profile", "--out", str(out), "--quiet", "--", "python", str(FIXTURES / "plain_loop.py"),
                  "--epochs", "100", "--compute-ms", "5", "--threads", "1"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not script_stepping(proc):
        time.sleep(0.3)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_TERMINATED, err  # the script died by SIGTERM: 128 + 15
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    meta = json.loads((folder / "run.json").read_text())
    assert meta["status"] == "interrupted" and meta["error"] == "terminated (SIGTERM)"
    # the signal left the hooks no time to write how it ended: pipeprof profile says what it saw
    assert meta["script"]["ended"] == {"how": "signal", "detail": "terminated (SIGTERM)",
                                       "recorded_by": "pipeprof profile"}
    assert json.loads((folder / "summary.json").read_text())["steps"] > 0


def test_first_sigterm_raises_terminated_and_the_second_waits_for_the_save():
    state = Interrupts()
    with pytest.raises(Terminated) as caught:
        state.handle(signal.SIGTERM, None)
    assert isinstance(caught.value, KeyboardInterrupt)  # saved on every path that saves on Ctrl-C
    assert interrupt_reason(caught.value) == "terminated (SIGTERM)"
    assert interrupt_reason(KeyboardInterrupt()) == "interrupted by the user (Ctrl-C)"
    state.handle(signal.SIGTERM, None)  # held: what was measured is being saved (it used to exit at once)
    assert state.received == 2 and state.hurried


@pytest.mark.integration
@pytest.mark.parametrize("command, sig, status", [
    ("tune", signal.SIGTERM, EXIT_TERMINATED),
    ("diagnose", signal.SIGINT, 130),
])
def test_tune_and_diagnose_keep_what_they_measured(tmp_path, command, sig, status):
    scenario = tiny_file(tmp_path, steps=200000, workers=1)
    out = tmp_path / "reports"
    # diagnose: sub-runs long enough that the interrupt lands in one (at its default 200 steps the whole
    # diagnosis could end within the 3 s below)
    extra = ["--window", "600", "--max-evals", "3"] if command == "tune" else ["--steps", "20000"]
    proc = start([command, str(scenario), "--out", str(out), "--cache", str(tmp_path / "cache"), "--quiet", *extra])
    if command == "tune":
        wait_for_descendants(proc, 1)  # the first trial's (run's) DataLoader worker: it is training
    else:  # its first run (compute: on the device, 0 workers) has no worker to wait for: its folder, staged
        wait_for_path(proc, out, ".staged.*")
    time.sleep(3)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole process group
    else:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:  # never leave it training (and loading the machine) after the test
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"{command} went on for 180 s after {signal.Signals(sig).name}: {err[-2000:]}")
    assert proc.returncode == status, err
    assert "Traceback" not in err
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    document = json.loads((folder / f"{command}.json" if command == "tune" else folder / "diagnosis.json").read_text())
    assert document["status"] == "interrupted"
    assert (folder / ("tune.html" if command == "tune" else "diagnosis.html")).is_file()
    if command == "diagnose":  # the run interrupted is recorded so; the ones after it never started
        assert {role: run["status"] for role, run in document["runs"].items()} == {
            "compute": "interrupted", "prep": "skipped", "real": "skipped"}


def test_an_interrupt_python_swallowed_is_sent_again(monkeypatch):
    """Raised in a __del__ or an at-fork callback, an interrupt is only printed ("Exception ignored") and the run
    would go on: the hook sends the same signal again, to be raised where it can propagate."""
    from types import SimpleNamespace

    from pipeprof import errors

    seen = []
    monkeypatch.setattr("sys.unraisablehook", seen.append)
    state, previous = errors.on_sigterm()
    try:
        state.signals = [signal.SIGTERM]  # the SIGTERM that was swallowed
        with pytest.raises(Terminated):  # not inside the hook (it would be swallowed again): a moment later
            sys.unraisablehook(SimpleNamespace(exc_value=Terminated()))
            time.sleep(2)
        assert state.received == 1  # the same one again, not a second (which would exit at once)
        with pytest.raises(KeyboardInterrupt):
            sys.unraisablehook(SimpleNamespace(exc_value=KeyboardInterrupt()))
            time.sleep(2)
        other = SimpleNamespace(exc_value=ValueError("x"))
        sys.unraisablehook(other)
        assert seen == [other]  # anything else goes to the hook that was there before
    finally:
        errors.restore(previous)
    assert sys.unraisablehook == seen.append


def test_a_second_ctrl_c_while_a_swallowed_one_is_sent_again_does_not_lose_both(monkeypatch):
    """Two Ctrl-C 50 ms apart: the first raised inside a __del__ (swallowed), the second arriving while the hook
    starts the thread that sends the first again. The second must not be raised inside the hook (swallowed
    too) nor hold the first: the interrupt is raised a moment later, where it propagates."""
    import threading

    from pipeprof import errors

    state, previous = errors.on_sigterm()
    start = threading.Timer.start

    def second_ctrl_c_meanwhile(timer):
        state.handle(signal.SIGINT, None)  # what pipeprof's handler does when the second arrives here
        start(timer)

    monkeypatch.setattr(threading.Timer, "start", second_ctrl_c_meanwhile)
    try:
        state.signals = [signal.SIGINT]  # the first, swallowed
        with pytest.raises(KeyboardInterrupt):
            sys.unraisablehook(SimpleNamespace(exc_value=KeyboardInterrupt()))  # nothing escapes the hook
            time.sleep(2)
        assert state.received == 2 and state.hurried  # both counted: the save is not waited on for long
    finally:
        errors.restore(previous)


@pytest.mark.integration
def test_a_second_ctrl_c_waits_for_the_save_and_no_longer(tmp_path):
    scenario = tiny_file(tmp_path, steps=200000, workers=1)
    proc = start(["run", str(scenario), "--out", str(tmp_path / "reports"), "--cache", str(tmp_path / "cache"),
                  "--quiet"])
    wait_for_descendants(proc, 1)
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.05)  # the first is being handled: pipeprof is saving the run
    os.killpg(proc.pid, signal.SIGINT)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - sent < 20  # the save, then out
    (folder,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir()]
    assert json.loads((folder / "summary.json").read_text())["steps"] > 0  # the second did not abort the save


def test_a_sigterm_lost_where_it_was_raised_ends_the_training_loop_at_its_next_step():
    """Caught by something it was raised inside (not where the unraisable hook sees it), a SIGTERM would leave the
    run training until whoever sent it kills it, keeping nothing: the loop raises it again before its next step."""
    from types import SimpleNamespace

    from pipeprof import errors
    from pipeprof.pipeline.train import train_loop

    steps = []
    data = SimpleNamespace(batches=[(torch.zeros(2, 3), torch.zeros(2))] * 4, steps_per_epoch=lambda: 4)
    work = SimpleNamespace(device="cpu", non_blocking=False, data=data,
                           step_fn=lambda x, y: steps.append(len(y)) or (0.0, 0))
    timer = SimpleNamespace(begin=lambda *_: None, waited=lambda: None, copied=lambda: None,
                            computed=lambda *_: None, finish=lambda: None, pause=lambda: None, resume=lambda: None)
    state, previous = errors.on_sigterm()
    try:
        train_loop(work, 2, timer)  # no SIGTERM: it trains
        assert steps == [2, 2]
        state.signals = [signal.SIGTERM]  # one came, and whatever it was raised in swallowed it
        with pytest.raises(Terminated):
            train_loop(work, 2, timer)
        assert steps == [2, 2]
    finally:
        errors.restore(previous)


def test_a_late_ctrl_c_while_pipeprof_exits_keeps_the_decided_status(monkeypatch):
    """`pipeprof` in its own process (argv None): after the command decided its status, a second Ctrl-C (a
    second after the first, the run saved) is ignored; Python's default handler would kill it by SIGINT."""
    from pipeprof.cli import main as cli_main

    monkeypatch.setattr(cli_main, "_exit_fast", lambda: None)
    monkeypatch.setattr(sys, "argv", ["pipeprof", "--no-such-option"])
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        assert cli_main.main() == 2  # the status decided (a usage error here)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN == signal.getsignal(signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # arrives while the process exits: nothing raised
        time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
    assert cli_main.main(["--no-such-option"]) == 2 and signal.getsignal(signal.SIGINT) == before[0]  # in-process


def test_a_ctrl_c_as_profile_hands_the_signals_back_waits_for_the_save(monkeypatch):
    """The script had the first Ctrl-C; a second arriving just as `_Signals` gives the command's handler back
    is a later one (held for the save), not a first one raised before the run is saved."""
    from pipeprof.errors import on_sigterm, restore
    from pipeprof.pipeline import script_run

    state, previous = on_sigterm()
    real_signal = signal.signal

    def signal_arriving_as_handed_back(sig, handler):
        old = real_signal(sig, handler)
        if sig == signal.SIGINT and handler == state.handle:
            handler(signal.SIGINT, None)  # the second Ctrl-C, the moment the command's handler is back
        return old

    try:
        signals = script_run._Signals(subprocess.Popen([sys.executable, "-c", "pass"]))
        with signals:
            signals._handle(signal.SIGINT, None)  # the first: the script's
            monkeypatch.setattr(signal, "signal", signal_arriving_as_handed_back)
    finally:
        monkeypatch.undo()
        restore(previous)
        signals.process.wait()
    assert state.signals == [signal.SIGINT, signal.SIGINT] and state.hurried


def test_a_ctrl_c_while_the_commands_modules_load_is_one_line_and_exit_130(monkeypatch, capsys):
    """The `pipeprof` entry point: a Ctrl-C while pipeprof.cli.main and what it imports load (before the command
    has its handler) ends with one line and 130, not a traceback of the import it cut short."""
    from pipeprof.cli import entry

    class CtrlC:  # the import of the command's module meets the Ctrl-C
        def find_spec(self, name, path=None, target=None):
            if name == "pipeprof.cli.main":
                raise KeyboardInterrupt
            return None

    monkeypatch.delitem(sys.modules, "pipeprof.cli.main", raising=False)
    monkeypatch.setattr(sys, "meta_path", [CtrlC(), *sys.meta_path])
    assert entry.main() == 130
    assert capsys.readouterr().err.splitlines() == [f"pipeprof: {interrupt_reason(KeyboardInterrupt())}"]
