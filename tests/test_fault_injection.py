"""Fault injection: each command through signals, killed processes, unwritable and full disks, os._exit.

For each fault: the exit status, and what is kept (and where). The logic is
tested in-process (the interrupt state, the event log, exit statuses, the
traceback trimming); the faults themselves on a few small real runs of
``tests/fixtures/faulty_loop.py`` under ``pipeprof profile``, and one sweep.
``run``, ``sweep``, ``tune`` and ``diagnose`` go through a kill -9 of pipeprof
(what is kept, and no process left training), and ``tune`` and ``diagnose``
through two Ctrl-C to the group; ``run``'s recording is tested on hand-made
rows and fake clocks first. Signals go to the process group, as a terminal
sends Ctrl-C (``os.killpg``).
Cases covered elsewhere are not repeated: SIGTERM to run / sweep / profile,
tune and diagnose interrupted (test_interrupts.py), a worker or dataset
failing in a scenario run and a full disk under ``run`` (test_faults.py).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from test_interrupts import start, start_long_sweep, wait_for_descendants, wait_for_path, wait_until
from tiny import tiny_file

from pipeprof import errors
from pipeprof.cli.main import main
from pipeprof.errors import EXIT_INTERRUPTED, Interrupts, Terminated
from pipeprof.pipeline.script_run import exit_status
from pipeprof.script.session import rank_outcome

FIXTURES = Path(__file__).parent / "fixtures"
SCRIPT = str(FIXTURES / "faulty_loop.py")
RUNS = FIXTURES / "runs"


# --- the logic, in-process ----------------------------------------------------------------------------------

def test_only_the_first_interrupt_is_raised_and_later_ones_wait_for_the_save():
    state = Interrupts()
    with pytest.raises(KeyboardInterrupt) as first:
        state.handle(signal.SIGINT, None)
    assert not isinstance(first.value, Terminated)
    state.handle(signal.SIGINT, None)  # the terminal's and the sweep's copy of one Ctrl-C: held, not raised
    state.handle(signal.SIGTERM, None)
    assert state.hurried and state.received == 3 and state.terminated


def test_a_first_interrupt_during_the_save_is_raised_once_the_save_is_done():
    state = Interrupts()
    saved = []
    with pytest.raises(Terminated), state.held():
        state.handle(signal.SIGTERM, None)  # not raised here: the save goes on
        saved.append("run.json")
    assert saved == ["run.json"]
    with state.held():  # one already raised before the save: nothing more to raise after it
        state.handle(signal.SIGINT, None)


def test_the_event_log_writes_each_step_at_its_end_without_a_flush(tmp_path):
    from pipeprof.script.hooks import EventLog

    path = tmp_path / "events.jsonl"
    log = EventLog(str(path), clock=lambda: 0.0)
    log.open()
    log.add(("S", 0.0, {"pid": 1}), 0.0)
    log.add(("N", 0, 0.0, 0.1, 32, (None,) * 9, None), 0.0)  # before any step end: written as it comes
    log.add(("O", 0.2), 0.0)
    log.add(("N", 0, 0.2, 0.3, 32, (None,) * 9, None), 0.0)  # inside the second step: waits for its end
    assert [json.loads(line)[0] for line in path.read_text().splitlines()] == ["S", "N", "O"]
    log.add(("O", 0.4), 0.0)  # what os._exit cannot skip: nothing here waits for a flush or atexit
    assert [json.loads(line)[0] for line in path.read_text().splitlines()] == ["S", "N", "O", "N", "O"]
    plain = tmp_path / "no-optimizer.jsonl"  # steps cut at backward passes: each written as it comes
    log = EventLog(str(plain), clock=lambda: 0.0)
    log.add(("N", 0, 0.0, 0.1, 32, (None,) * 9, None), 0.0)
    log.add(("B", 0.1, 0.2), 0.0)
    assert [json.loads(line)[0] for line in plain.read_text().splitlines()] == ["N", "B"]


def test_a_full_disk_ends_the_events_with_one_warning_and_the_script_goes_on(tmp_path, monkeypatch, capsys):
    from pipeprof.script.hooks import EventLog

    log = EventLog(str(tmp_path / "events.jsonl"), clock=lambda: 0.0)
    log.open()

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("os.write", full)
    for t in (0.1, 0.2, 0.3):
        log.add(("O", t), 0.0)  # never raised into the training loop
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and str(tmp_path) in err[0]
    assert log.lost == "No space left on device"


@pytest.mark.parametrize("returncode, received, status", [
    (1, [signal.SIGINT], 130),  # torchrun exits 1 on Ctrl-C
    (1, [signal.SIGTERM], 143),  # ... and on SIGTERM
    (-signal.SIGKILL, [], 137),
    (0, [signal.SIGINT], 0),  # a script that caught Ctrl-C and finished well
    (3, [], 3),
])
def test_the_exit_status_after_a_signal_is_128_plus_it(returncode, received, status):
    assert exit_status(returncode, received) == status


def test_ranks_the_launcher_ended_when_the_job_was_interrupted_are_interrupted_not_failed():
    assert rank_outcome(None, "interrupted")[0] == "interrupted"
    assert rank_outcome(None, "failed")[0] == "failed"  # no end record in a job that was not interrupted
    assert rank_outcome({"how": "exit", "detail": 0}, "interrupted") == ("interrupted", None)


def test_the_hooks_frames_are_trimmed_wherever_they_are_in_a_traceback():
    from pipeprof.script import own_frames

    hooks_file = str(Path(own_frames.__file__).parent / "hooks.py")  # a frame that looks like the hooks' wrapper
    namespace: dict = {}
    exec(compile("def wrapper(f):\n    return f()\n", hooks_file, "exec"), namespace)

    def dataset_item():
        raise ValueError("corrupt record 3")

    def training_loop():
        return namespace["wrapper"](dataset_item)

    try:
        training_loop()
    except ValueError as e:
        tb = e.__traceback__
    names = []
    tb = own_frames.own_frames_trimmed(tb)
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert names == ["test_the_hooks_frames_are_trimmed_wherever_they_are_in_a_traceback", "training_loop",
                     "dataset_item"]


@pytest.mark.integration
def test_a_ctrl_c_while_the_hooks_load_shows_no_frame_of_pipeprofs(tmp_path):
    """A Ctrl-C in the script's first second (torch loading, the hooks not yet installed): the traceback printed
    is the one `python SCRIPT` would give, with no frame of pipeprof's, and the process ends."""
    env = dict(os.environ, PIPEPROF_EVENTS=str(tmp_path / "events.jsonl"), PIPEPROF_EVENTS_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "pipeprof.script.boot", SCRIPT, "--epochs", "1000"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    frames = [line for line in err.splitlines() if line.strip().startswith("File ")]
    assert not [f for f in frames if "pipeprof" in f or "runpy" in f], err[-3000:]


def test_the_scripts_process_loads_numpy_before_torch_so_a_ctrl_c_there_is_not_lost(tmp_path):
    """torch imports numpy from C and clears whatever that import raised, a Ctrl-C's KeyboardInterrupt included:
    on this machine 6 of 60 Ctrl-Cs sent while `import torch` ran were lost so (the script trained on, pipeprof
    waited on it). boot imports numpy first, in Python, where the interrupt is raised (0 of 60 lost)."""
    (tmp_path / "site").mkdir()  # the imports in the order they began (the "import" audit event), from the start
    (tmp_path / "site" / "sitecustomize.py").write_text(
        "import builtins, sys\nbuiltins.began = []\n"
        "sys.addaudithook(lambda event, args: event == 'import' and args[0] in ('numpy', 'torch') and "
        "args[0] not in began and began.append(args[0]))\n")
    (tmp_path / "order.py").write_text("print(*began)\n")
    env = dict(os.environ, PIPEPROF_EVENTS=str(tmp_path / "events.jsonl"), PYTHONPATH=str(tmp_path / "site"))
    done = subprocess.run([sys.executable, "-m", "pipeprof.script.boot", str(tmp_path / "order.py")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["numpy", "torch"], done.stderr[-2000:]


def test_torchs_half_built_iterator_is_not_printed_and_anything_else_is():
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    half = SimpleNamespace(exc_value=AttributeError("_workers_status"), object=_MultiProcessingDataLoaderIter.__del__)
    assert errors.half_built_iterator(half)
    assert not errors.half_built_iterator(SimpleNamespace(exc_value=ValueError("x"), object=half.object))
    assert not errors.half_built_iterator(SimpleNamespace(exc_value=AttributeError("x"), object=print))



def test_the_scripts_process_drops_only_torchs_half_built_iterator_report(monkeypatch):
    """boot's unraisable hook (installed in the profiled script's process): torch's "Exception ignored in
    _MultiProcessingDataLoaderIter.__del__ ... AttributeError" for an iterator a Ctrl-C cut short while it was
    being made (the what-if segments make one at every segment) is not printed; anything else still is."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    from pipeprof.script import boot

    printed = []
    monkeypatch.setattr(sys, "unraisablehook", printed.append)
    boot._quiet_half_built_iterators()
    half = SimpleNamespace(exc_value=AttributeError("_workers_status"), object=_MultiProcessingDataLoaderIter.__del__)
    other = SimpleNamespace(exc_value=ValueError("x"), object=_MultiProcessingDataLoaderIter.__del__)
    sys.unraisablehook(half)
    sys.unraisablehook(other)
    assert printed == [other]

# --- pipeprof run's recording: spooled rows, read back after a kill -------------------------------------------

def test_a_spool_that_cannot_write_keeps_whole_rows_on_disk_and_the_rest_in_memory(tmp_path, monkeypatch):
    from pipeprof.measure import spool as spool_mod

    spool = spool_mod.Spool(["step", "t_s"], tmp_path, "steps", chunk_rows=2)
    spool.extend([{"step": 0, "t_s": 0.5}, {"step": 1, "t_s": 1.5}])  # written
    real_writer = spool_mod.csv.writer

    class Full:  # a disk that fills up halfway through the chunk
        def __init__(self, f):
            self.f = f

        def writerows(self, rows):
            self.f.write("2,2.")
            self.f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spool_mod.csv, "writer", Full)
    spool.extend([{"step": 2, "t_s": 2.5}, {"step": 3, "t_s": 3.5}, {"step": 4, "t_s": 4.5}])
    monkeypatch.setattr(spool_mod.csv, "writer", real_writer)
    assert spool.lost == "No space left on device"
    assert spool.frame()["step"].tolist() == [0, 1, 2, 3, 4]  # nothing lost while the process lives
    assert spool_mod.spooled(tmp_path, "steps")["step"].tolist() == [0, 1]  # the file: its whole rows only


def test_a_recorded_runs_steps_reach_the_file_every_few_steps_between_steps(tmp_path):
    from pipeprof.measure.spool import Spool, spooled
    from pipeprof.measure.steps import StepTimer
    from pipeprof.pipeline.train import WritingAsItGoes
    from pipeprof.run_folder import STEP_COLUMNS

    now = [0.0]
    timer = StepTimer(lambda: now[0], 0.0, 1, spool=Spool(STEP_COLUMNS, tmp_path, "steps"))
    step_end = WritingAsItGoes(timer, None, every=4)
    for i in range(10):
        timer.begin()
        now[0] += 0.01
        timer.waited()
        timer.copied()
        now[0] += 0.02
        timer.computed(8, 0.5, 4)
        step_end(i + 1, 10)
        written = spooled(tmp_path, "steps")
        # written at steps 4 and 8: each time every step but the running one (its end is the next begin)
        assert (0 if written is None else len(written)) == {4: 3, 8: 7}.get(i + 1, 0 if i < 4 else 3 if i < 8 else 7)
    assert spooled(tmp_path, "steps")["step_s"].tolist() == pytest.approx([0.03] * 7)


def test_a_row_cut_mid_write_by_a_kill_is_left_out_when_read_back(tmp_path):
    from pipeprof.measure.spool import spooled

    (tmp_path / "steps.x1.csv").write_text("step,t_s\n0,0.5\n1,1.")
    assert spooled(tmp_path, "steps").to_dict("records") == [{"step": 0, "t_s": 0.5}]
    assert spooled(tmp_path, "loading") is None


def test_report_rebuilds_a_killed_runs_recording_from_its_spooled_rows(tmp_path, capsys):
    import pandas as pd

    golden = RUNS / "scenario-ram"
    folder = tmp_path / "20261204T000000Z-quick"
    recording = folder / "recording"
    recording.mkdir(parents=True)
    meta = json.loads((golden / "run.json").read_text())
    for key in ("status", "error", "compute_ceiling", "what_ifs"):  # not known when a run starts
        meta.pop(key, None)
    t0_s = 1000.0
    (recording / "recording.json").write_text(json.dumps({"kind": "scenario", "t0_s": t0_s, "meta": meta}))
    for name in ("steps", "samples", "processes"):
        shutil.copy(golden / f"{name}.csv", recording / f"{name}.a1b2.csv")
    loading = pd.read_csv(golden / "loading.csv")
    raw = loading.copy()
    raw[["t_start_s", "t_end_s"]] += t0_s  # the recorder spools raw clock readings
    raw.to_csv(recording / "loading.c3d4.csv", index=False)
    assert main(["report", "--quiet", str(folder)]) == 0
    assert "cut short" in capsys.readouterr().err
    rebuilt, summary = _saved(folder)
    assert rebuilt["status"] == "interrupted" and rebuilt["cut_short"] and rebuilt["scenario"] == meta["scenario"]
    assert summary["steps"] == json.loads((golden / "summary.json").read_text())["steps"]
    pd.testing.assert_frame_equal(pd.read_csv(folder / "loading.csv"), loading, check_dtype=False)
    assert len(pd.read_csv(folder / "samples.csv")) == len(pd.read_csv(golden / "samples.csv"))
    assert not recording.exists()


# --- an unwritable --out: refused before anything runs -------------------------------------------------------

def _read_only(monkeypatch):
    """A read-only --out as this process sees it (root writes through chmod 0o555: the write check fails so)."""
    real = __import__("tempfile").mkstemp

    def mkstemp(*args, **kwargs):
        if ".pipeprof-write-check." in str(kwargs.get("prefix", "")):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*args, **kwargs)

    monkeypatch.setattr("tempfile.mkstemp", mkstemp)


@pytest.mark.parametrize("command", ["profile", "run", "sweep", "tune", "diagnose"])
def test_a_read_only_out_is_one_line_and_exit_2_before_anything_runs(tmp_path, monkeypatch, capsys, command):
    scenario = tiny_file(tmp_path, steps=20)
    out = tmp_path / "reports"
    _read_only(monkeypatch)
    started = []
    monkeypatch.setattr("subprocess.Popen", lambda *a, **k: started.append(a))  # nothing may start
    from pipeprof.pipeline import scenario_run  # imported unpatched: its own name is patched, and undone

    monkeypatch.setattr(scenario_run, "build_workload", lambda *a, **k: started.append(a))
    argv = {"profile": ["profile", "--out", str(out), "--", "python", SCRIPT],
            "sweep": ["sweep", str(scenario), "--grid", "loader.num_workers=0,1", "--out", str(out)],
            }.get(command, [command, str(scenario), "--out", str(out), "--quiet"])
    status = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and not started
    assert len(err) == 1 and "Read-only file system" in err[0] and f"--out {out}" in err[0], err


def test_report_on_a_run_folder_it_cannot_write_in_is_one_line_and_exit_2_with_nothing_written(tmp_path, monkeypatch,
                                                                                               capsys):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "script-plain-loop", run)
    (run / "summary.json").unlink()  # what report would write first
    _read_only(monkeypatch)
    assert main(["report", "--quiet", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pipeprof: error: {run}: cannot write in the run folder (Read-only file system): report writes "
                   "summary.json and report.html into it; copy the folder to one you can write to"]
    assert not (run / "summary.json").exists()


def test_profile_on_a_disk_full_from_the_start_stops_the_script_and_leaves_no_folder(tmp_path, monkeypatch, capsys):
    """The write check passes (an empty file takes no block) but the recording's first file does not fit: the
    script, just started, is stopped (it would run unrecorded), exit 2, and no empty run folder is left."""
    out = tmp_path / "reports"
    script = tmp_path / "train.py"
    script.write_text(f"import time\ntime.sleep(60)\nopen({str(tmp_path / 'finished')!r}, 'w')\n")

    def full(recording, facts):
        raise OSError(errno.ENOSPC, "No space left on device", str(recording.path / "recording.json"))

    monkeypatch.setattr("pipeprof.pipeline.script_run.note_facts", full)
    started = time.monotonic()
    assert main(["profile", "--quiet", "--out", str(out), "--", "python", str(script)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pipeprof: error: --out {out}: cannot write in the folder (No space left on device); the script "
                   "was stopped as it started: make room or give another folder"]
    assert list(out.iterdir()) == [] and time.monotonic() - started < 30 and not (tmp_path / "finished").exists()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_really_read_only_mount_is_refused_before_the_script_runs(tmp_path):
    """The same on a real read-only file system, where this process may mount one (a mount namespace)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    shell = (f"mount -t tmpfs -o size=64k,ro tmpfs {mount} || exit 99; "
             f"exec {sys.executable} -m pipeprof profile --out {mount} -- python {SCRIPT}")  # it exists: no mkdir
    done = subprocess.run(["unshare", "-m", "sh", "-c", shell], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    if done.returncode == 99:
        pytest.skip(f"no mount here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "Read-only file system" in done.stderr
    assert "trained" not in done.stdout  # the script never ran


# --- export on a full disk -----------------------------------------------------------------------------------

def test_export_on_a_full_disk_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "script-plain-loop", run)

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("pipeprof.run_folder.write_text", full)
    status = main(["export", str(run), "--format", "chrome-trace"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "No space left on device" in err[0] and "trace.json" in err[0]


class _FullFile:
    """A file on a full disk: opening works, writing fails as write(2) does, with no file name in the error."""

    def __init__(self, fd: int, *args, **kwargs) -> None:
        os.close(fd)

    def __enter__(self) -> _FullFile:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_full_disk_under_report_or_compare_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch, capsys,
                                                                                   command):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "script-plain-loop", run)
    before = (run / "summary.json").read_bytes()
    monkeypatch.setattr("os.fdopen", _FullFile)  # every document and page goes through run_folder.write_text
    argv = {"report": ["report", "--quiet", str(run)],
            "compare": ["compare", str(run), str(RUNS / "script-plain-loop"), "-o", str(tmp_path / "c")]}[command]
    status = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and len(err) == 1 and "No space left on device" in err[0], err
    written = run if command == "report" else tmp_path / "c"
    assert str(written) in err[0], err  # where: the file that could not be written
    assert (run / "summary.json").read_bytes() == before and not list(tmp_path.rglob(".*.tmp"))


# --- real runs under pipeprof profile ------------------------------------------------------------------------

def _profile(out: Path, *args: str, workers: int = 0, light: str | None = None) -> subprocess.Popen:
    return start(["profile", "--out", str(out), "--quiet", *(["--light", light] if light else []), "--",
                  "python", SCRIPT, "--num-workers", str(workers),
                  "--epochs", "1000", "--compute-ms", "5", *args])


def _stepping(proc: subprocess.Popen, out: Path) -> None:
    """Until the script under ``proc`` has written an optimizer step into the run folder's recording."""
    def stepped() -> bool:
        return any('"O"' in p.read_text() for p in out.glob("*/recording/events.jsonl"))

    wait_until(proc, stepped, "optimizer step in the recording", 120)
    time.sleep(1.0)


def _finished(proc: subprocess.Popen) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # never leave it training after the test
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"pipeprof went on for 120 s after the fault: {err[-2000:]}")


def _run_folder(out: Path) -> Path:
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return folder


def _saved(folder: Path) -> tuple[dict, dict]:
    return (json.loads((folder / "run.json").read_text()), json.loads((folder / "summary.json").read_text()))


@pytest.mark.integration
def test_kill_9_of_profile_ends_the_script_and_report_rebuilds_what_was_recorded(tmp_path, capsys):
    out = tmp_path / "reports"
    proc = _profile(out)
    _stepping(proc, out)
    script = [c for c in psutil.Process(proc.pid).children(recursive=True)]
    proc.kill()  # kill -9 of pipeprof alone
    _finished(proc)
    gone, alive = psutil.wait_procs(script, timeout=30)
    assert not alive, "the script ran on, orphaned"
    folder = _run_folder(out)
    assert (folder / "recording" / "events.jsonl").stat().st_size > 0 and not (folder / "run.json").exists()
    assert main(["report", "--quiet", str(folder)]) == 0
    assert "cut short" in capsys.readouterr().err
    meta, summary = _saved(folder)
    assert meta["status"] == "interrupted" and meta["cut_short"] and "cut short" in meta["error"]
    assert summary["steps"] > 0 and "samples" in meta["absences"]
    assert not (folder / "recording").exists()  # the rebuilt run replaced it


@pytest.mark.integration
def test_a_live_light_folder_is_never_rewritten_and_after_kill_9_report_keeps_its_windows(tmp_path, capsys):
    """``report`` on a folder still being recorded: one line, exit 2, the folder as it was. After kill -9 of
    pipeprof, ``report`` rebuilds the light run from the windows written before the kill, every one of them."""
    out = tmp_path / "reports"
    proc = _profile(out, light="1")
    _stepping(proc, out)
    folder = _run_folder(out)
    windows = folder / "recording" / "light" / "windows.jsonl"
    wait_until(proc, lambda: windows.is_file() and windows.read_text().count("\n") >= 2, "two windows", 60)
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    assert main(["report", "--quiet", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "still being recorded by pipeprof" in err[0] and str(proc.pid) in err[0], err
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before  # read, never rewritten
    proc.kill()  # kill -9 of pipeprof alone: the script ends with it
    _finished(proc)
    lines = windows.read_text().splitlines()
    kept = [json.loads(line) for line in lines]
    assert main(["report", "--quiet", str(folder)]) == 0
    meta, summary = _saved(folder)
    assert meta["status"] == "interrupted" and meta["cut_short"] and meta["light"]["windows"] == len(kept) >= 2
    assert summary["light"]["windows"] == len(kept)
    assert summary["steps"] == sum(w["steps"] for w in kept) > 0  # every step of every window written
    assert (folder / "windows.jsonl").read_text().splitlines() == lines and not (folder / "recording").exists()


@pytest.mark.integration
def test_two_ctrl_c_a_second_apart_under_profile_save_the_run(tmp_path):
    out = tmp_path / "reports"
    proc = _profile(out)
    _stepping(proc, out)
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: pipeprof and the script
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)  # the habit: a second one, while pipeprof saves
    _, err = _finished(proc)
    assert proc.returncode == EXIT_INTERRUPTED, err
    meta, summary = _saved(_run_folder(out))
    assert meta["status"] == "interrupted" and summary["steps"] > 0
    assert "Traceback" not in err.split("KeyboardInterrupt")[-1]  # nothing of pipeprof's after the script's
    script_traceback = err.split("Traceback (most recent call last):")[-1].split("KeyboardInterrupt")[0]
    assert "faulty_loop.py" in script_traceback, err[-2000:]  # the script's, as `python faulty_loop.py` prints it:
    assert "pipeprof" not in script_traceback and "runpy" not in script_traceback, script_traceback  # no boot.py


@pytest.mark.integration
def test_os_exit_early_keeps_every_step_before_it(tmp_path):
    out = tmp_path / "reports"
    proc = start(["profile", "--out", str(out), "--quiet", "--", "python", SCRIPT, "--exit-after", "30"])
    _, err = _finished(proc)
    assert proc.returncode == 0, err
    meta, summary = _saved(_run_folder(out))
    assert meta["step_source"] is not None and "steps" not in meta["absences"], meta["absences"]
    assert summary["steps"] == 30 - 5  # all 30 batches' steps, less the 5 of warm-up


@pytest.mark.integration
@pytest.mark.parametrize("victim", ["script", "worker"])
def test_a_killed_script_or_worker_is_a_failed_run_with_its_steps(tmp_path, victim):
    out = tmp_path / "reports"
    proc = _profile(out, workers=1 if victim == "worker" else 0)
    _stepping(proc, out)
    if victim == "worker":
        wait_for_descendants(proc, 2)
    script = psutil.Process(proc.pid).children()[0]
    target = script.children()[0] if victim == "worker" else script
    target.kill()
    _, err = _finished(proc)
    meta, summary = _saved(_run_folder(out))
    assert meta["status"] == "failed" and summary["steps"] > 0
    if victim == "script":
        assert proc.returncode == 128 + signal.SIGKILL and "SIGKILL" in meta["error"]
    else:  # the script's own exception: torch's words for the worker's death, or, when the worker died while
        # handing a batch's shared memory over, the socket it left: reset (ConnectionResetError) or closed
        # (multiprocessing.reduction.recvfds' bare EOFError, recorded by its name alone); and no pipeprof frame
        assert proc.returncode == 1, meta["error"]
        torch_words = ("DataLoader worker", "ConnectionResetError", "EOFError")
        assert any(w in meta["error"] for w in torch_words) and not meta["error"].endswith(": "), meta["error"]
        assert "pipeprof" not in err.split("Traceback")[-1].split("pipeprof: report:")[0].split("pipeprof: failed")[0]


@pytest.mark.integration
@pytest.mark.parametrize("workers", [0, 1])
def test_an_exception_in_the_dataset_shows_no_pipeprof_frame(tmp_path, workers):
    """As `python faulty_loop.py` prints it: the script's traceback, and with a worker its "Original Traceback"
    (formatted in the worker, where the hooks wrap the fetch), neither with a frame of pipeprof's."""
    out = tmp_path / "reports"
    done = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--out", str(out), "--quiet", "--",
                           "python", SCRIPT, "--bad-index", "100", "--num-workers", str(workers)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    tracebacks = done.stderr.split("pipeprof: report:")[0].split("pipeprof: failed")[0]
    if workers:
        assert "Original Traceback (most recent call last):" in tracebacks, tracebacks[-3000:]
        assert "torch/utils/data/_utils/worker.py" in tracebacks  # the worker's own frames are kept
    for traceback in tracebacks.split("Traceback (most recent call last):")[1:]:
        assert "pipeprof" not in traceback and "runpy" not in traceback, traceback
    last = tracebacks.split("Traceback (most recent call last):")[-1]
    assert "ValueError: corrupt record 100" in last and "faulty_loop.py" in last


@pytest.mark.integration
def test_a_full_disk_at_the_save_keeps_the_raw_records_and_names_them(tmp_path, monkeypatch, capsys):
    out = tmp_path / "reports"

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("pipeprof.pipeline.script_run.save_run", full)
    status = main(["profile", "--out", str(out), "--quiet", "--no-what-ifs", "--steps", "20", "--", "python",
                   SCRIPT])
    err = capsys.readouterr().err.strip().splitlines()
    folder = _run_folder(out)
    assert status == 1 and len(err) == 1, err
    assert "No space left on device" in err[0] and str(folder / "recording") in err[0]
    monkeypatch.undo()  # room again: the run is rebuilt from what was kept
    assert main(["report", "--quiet", str(folder)]) == 0
    assert _saved(folder)[1]["steps"] == 20 - 5


@pytest.mark.integration
def test_ctrl_c_to_a_sweeps_process_group_keeps_the_running_point(tmp_path):
    proc, out = start_long_sweep(tmp_path)
    wait_for_descendants(proc, 2)  # the first point's child and its DataLoader worker: it is training
    time.sleep(3)
    os.killpg(proc.pid, signal.SIGINT)  # the child gets it twice: from the terminal and from the sweep
    _, err = _finished(proc)
    assert proc.returncode == EXIT_INTERRUPTED, err
    folder = _run_folder(out)
    doc = json.loads((folder / "sweep.json").read_text())
    assert [p["status"] for p in doc["points"]] == ["interrupted", "not run"]
    assert doc["points"][0]["folder"] is not None, err[-2000:]
    (run,) = list(folder.rglob("run.json"))
    assert json.loads(run.read_text())["status"] == "interrupted"


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_run_on_a_really_full_disk_names_the_folder_and_leaves_nothing_half_written(tmp_path):
    """A tmpfs filled to the last block, where this process may mount one: the run trains, its folder cannot
    be written, one line names it, exit 1, and nothing half-written is left."""
    scenario = tiny_file(tmp_path, steps=20)
    mount = tmp_path / "full"
    mount.mkdir()
    shell = (f"mount -t tmpfs -o size=256k tmpfs {mount} || exit 99; "
             f"dd if=/dev/zero of={mount}/fill bs=4k 2>/dev/null; "
             f"{sys.executable} -m pipeprof run {scenario} --out {mount}/reports --cache {tmp_path}/cache --quiet; "
             f"status=$?; ls -A {mount}/reports; exit $status")
    done = subprocess.run(["unshare", "-m", "sh", "-c", shell], capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    if done.returncode == 99:
        pytest.skip(f"no mount here: {done.stderr.strip()[-200:]}")
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 1, done.stderr
    assert "No space left on device" in err[0] and f"{mount}/reports/" in err[0]
    assert done.stdout.split() == []  # no folder, hidden or not, in --out


# --- pipeprof run: its raw records in the run folder from the start -------------------------------------------

def _recorded_steps(out: Path, folder: str = "*") -> int:
    """Rows of the steps spool written into the run folder's recording (header excluded)."""
    paths = list(out.glob(f"{folder}/recording/steps.*.csv"))
    return max(0, len(paths[0].read_text().splitlines()) - 1) if paths else 0


@pytest.mark.integration
def test_kill_9_of_run_keeps_its_raw_records_and_report_rebuilds_them(tmp_path, capsys):
    scenario = tiny_file(tmp_path, steps=200000, workers=1)
    out = tmp_path / "reports"
    proc = start(["run", str(scenario), "--out", str(out), "--cache", str(tmp_path / "cache"), "--quiet"])
    wait_until(proc, lambda: _recorded_steps(out) >= 40, "steps in the run folder's recording", 120)
    workers = psutil.Process(proc.pid).children(recursive=True)
    proc.kill()  # kill -9 of pipeprof: the training process itself
    _finished(proc)
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive, "a DataLoader worker ran on, orphaned"
    folder = _run_folder(out)
    recorded = _recorded_steps(out)
    assert not (folder / "run.json").exists() and (folder / "recording" / "recording.json").is_file()
    assert main(["report", "--quiet", str(folder)]) == 0
    assert "cut short" in capsys.readouterr().err
    meta, summary = _saved(folder)
    assert meta["status"] == "interrupted" and meta["cut_short"] and meta["scenario"]["name"] == "tiny"
    assert summary["steps"] == recorded - 5  # every step written, less the 5 of warm-up
    assert summary["samples_per_s"] > 0 and len(meta) > 10
    assert not (folder / "recording").exists()  # the rebuilt run replaced it


@pytest.mark.integration
def test_kill_9_of_sweep_stops_its_running_point_which_saves_its_steps(tmp_path):
    proc, out = start_long_sweep(tmp_path)
    wait_until(proc, lambda: any(p.stat().st_size > 2000 for p in out.glob("**/recording/steps.*.csv")),
               "the first point's steps in its recording", 180)
    point = [c for c in psutil.Process(proc.pid).children(recursive=True)]
    proc.kill()  # kill -9 of the sweep alone: its point gets SIGTERM (PR_SET_PDEATHSIG), never trains on
    _finished(proc)
    _, alive = psutil.wait_procs(point, timeout=60)
    assert not alive, "the sweep's point ran on, orphaned"
    (run,) = list(out.rglob("run.json"))  # the point saved what it measured; the second never started
    meta = json.loads(run.read_text())
    assert meta["status"] == "interrupted" and "SIGTERM" in meta["error"], meta["error"]
    assert json.loads((run.parent / "summary.json").read_text())["steps"] > 0
    (sweep,) = list(out.rglob("sweep.json"))  # killed in its first point, the sweep still says what it was
    assert json.loads(sweep.read_text())["status"] == "running"


@pytest.mark.integration
@pytest.mark.parametrize("command", ["tune", "diagnose"])
def test_kill_9_of_tune_or_diagnose_leaves_no_process_and_says_it_never_finished(tmp_path, command):
    scenario = tiny_file(tmp_path, steps=200000, workers=1)
    out = tmp_path / "reports"
    extra = ["--window", "600", "--max-evals", "3"] if command == "tune" else ["--steps", "20000"]
    proc = start([command, str(scenario), "--out", str(out), "--cache", str(tmp_path / "cache"), "--quiet", *extra])
    if command == "tune":
        wait_for_descendants(proc, 1)  # the first trial's DataLoader worker: it is training
        time.sleep(2)
    else:  # the compute run (0 workers) trains in the staged folder, its steps streaming into its recording
        wait_until(proc, lambda: _recorded_steps(out, ".staged.*/compute") >= 20, "the compute run's steps", 120)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.kill()
    _finished(proc)
    _, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, f"{command}'s processes ran on, orphaned"
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    if command == "tune":  # its document, as it stood: never finished
        assert json.loads((folder / "tune.json").read_text())["status"] == "running"
    else:  # the hidden staging folder, never renamed: nothing in --out looks like a finished diagnosis; the
        # run it was training is rebuilt from its recording
        assert folder.name.startswith(".staged.") and not (folder / "diagnosis.json").exists()
        assert main(["report", "--quiet", str(folder / "compute")]) == 0
        meta, summary = _saved(folder / "compute")
        assert meta["cut_short"] and meta["diagnose"]["role"] == "compute" and summary["steps"] > 0


@pytest.mark.integration
@pytest.mark.parametrize("command", ["tune", "diagnose"])
def test_two_ctrl_c_to_the_group_under_tune_or_diagnose_keep_what_they_measured(tmp_path, command):
    scenario = tiny_file(tmp_path, steps=200000, workers=1)
    out = tmp_path / "reports"
    extra = ["--window", "600", "--max-evals", "3"] if command == "tune" else ["--steps", "20000"]
    proc = start([command, str(scenario), "--out", str(out), "--cache", str(tmp_path / "cache"), "--quiet", *extra])
    if command == "tune":
        wait_for_descendants(proc, 1)
    else:  # the compute run recording (its folder staged comes seconds before on a loaded machine)
        wait_for_path(proc, out, ".staged.*/compute/recording")
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: every process of the group
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)  # the habit: a second one, while it saves
    _, err = _finished(proc)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err, err[-2000:]
    (folder,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]
    document = json.loads((folder / ("tune.json" if command == "tune" else "diagnosis.json")).read_text())
    assert document["status"] == "interrupted"
    if command == "diagnose":
        assert document["runs"]["compute"]["status"] == "interrupted"
        (run,) = list(folder.rglob("run.json"))
        assert json.loads(run.read_text())["status"] == "interrupted"


# --- a sweep's or tune's point killed (kill -9, the out-of-memory killer) ------------------------------------

@pytest.mark.parametrize("recorded", [True, False])
def test_a_point_killed_by_a_signal_is_failed_naming_the_signal_and_its_kept_records(tmp_path, recorded):
    """A stand-in child (no torch) that makes its run folder's recording, then dies by SIGKILL saying nothing."""
    from pipeprof.pipeline.fresh_process import run_child

    out = tmp_path / "points"
    folder = out / "20261205T000000Z-tiny"
    make = f"p = Path({str(folder / 'recording')!r}); p.mkdir(parents=True); (p / 'recording.json').write_text('{{}}'); "
    code = f"import os, signal; from pathlib import Path; {make if recorded else ''}os.kill(os.getpid(), signal.SIGKILL)"
    child = run_child(tmp_path / "s.toml", out, command=[sys.executable, "-c", code])
    assert child.status == "failed" and child.exit_code == -signal.SIGKILL and child.summary is None
    if recorded:
        assert child.folder == folder
        assert child.error == (f"killed by SIGKILL; the raw records it wrote are kept in {folder / 'recording'}: "
                               f"`pipeprof report {folder}` rebuilds the run, marked cut short")
    else:
        assert child.error == "killed by SIGKILL before it saved a run folder"
