"""Injected faults: a DataLoader worker killed, a dataset that raises, a full disk — recorded, never a traceback."""

from __future__ import annotations

import csv
import errno
import json
import os
import re
import signal
from types import SimpleNamespace

import pandas as pd
import pytest
from tiny import tiny_file

from pipeprof.cli.main import main
from pipeprof.errors import one_line
from pipeprof.pipeline.derive import summarize
from pipeprof.pipeline.train import profile_scenario
from pipeprof.render.html import render_html
from pipeprof.scenario import load_scenario
from pipeprof.storage.ram import RamDataset

pytestmark = pytest.mark.integration


def faulty_fetch(fault: str, after: int):
    """RamDataset.fetch that, in the process making batches, misbehaves after ``after`` samples."""
    original = RamDataset.fetch
    seen = {"n": 0, "pid": None}

    def fetch(self, index):
        if seen["pid"] != os.getpid():  # a forked worker starts its own count
            seen.update(n=0, pid=os.getpid())
        seen["n"] += 1
        if seen["n"] > after:
            if fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ValueError(f"sample {index} is corrupt")
        return original(self, index)

    return fetch


@pytest.mark.parametrize("workers, fault, words", [
    # A killed worker reaches the training process as torch's "DataLoader worker (pid N) is killed by signal",
    # or, when it died while handing over a batch (a connection reset, a shared-memory file gone), as that symptom
    # after the worker's own exit status (pipeline.train.dead_workers).
    (1, "kill", ("DataLoader worker (pid",)),
    (1, "raise", ("ValueError: sample",)),
    (0, "raise", ("ValueError: sample",)),
])
def test_a_failing_loader_is_a_failed_run_with_the_steps_before_it(tmp_path, monkeypatch, workers, fault, words):
    scenario = load_scenario(tiny_file(tmp_path, steps=200, workers=workers))
    monkeypatch.setattr(RamDataset, "fetch", faulty_fetch(fault, after=600))  # 12 batches of 50
    run = profile_scenario(scenario, cache_root=tmp_path / "cache")
    assert run.meta["status"] == "failed"
    error = run.meta["error"]
    assert any(w in error for w in words) and "\n" not in error and "Traceback" not in error
    assert 4 <= len(run.steps) <= 12  # the steps before the fault (workers run ahead by their prefetch)
    html = render_html(run, summarize(run), folder_name="x")
    assert "Run status: failed" in html


def test_one_line_keeps_a_worker_exceptions_first_and_last_lines():
    wrapped = ValueError("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent call "
                         "last):\n  File \"x.py\", line 3, in f\n    raise ValueError('bad')\nValueError: bad\n")
    assert one_line(wrapped) == "ValueError: Caught ValueError in DataLoader worker process 0. ... ValueError: bad"
    assert one_line(OSError(errno.ENOSPC, "No space left on device")) == \
        "OSError: [Errno 28] No space left on device"


def test_a_full_disk_while_writing_is_one_line_and_exit_1_and_the_raw_records_are_kept(tmp_path, monkeypatch, capsys):
    scenario = tiny_file(tmp_path, steps=20)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "reports" / "steps.csv"))

    monkeypatch.setattr("pandas.DataFrame.to_csv", full)
    status = main(["run", str(scenario), "--out", str(tmp_path / "reports"), "--cache", str(tmp_path / "cache"),
                   "--quiet", "--set", "profile.what_ifs=false"])  # the save is the subject, not the probes
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1
    assert len(err) == 1 and "No space left on device" in err[0] and err[0].startswith("pipeprof: error:")
    assert not [p for p in (tmp_path / "reports").iterdir() if p.name.startswith(".")]  # no half-written folder
    (folder,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir()]
    assert f"kept in {folder / 'recording'}" in err[0] and not (folder / "run.json").exists()  # where they are
    monkeypatch.undo()  # room again: report rebuilds the run from the raw records kept, marked cut short
    assert main(["report", "--quiet", str(folder)]) == 0
    assert json.loads((folder / "summary.json").read_text())["steps"] == 20 - 5
    assert json.loads((folder / "run.json").read_text())["cut_short"]


def test_a_cut_handover_in_a_worker_prints_nothing_and_other_errors_still_do(monkeypatch, capsys):
    """quiet_handover_errors (the workers' init): what resource_sharer's thread reports is dropped, only that."""
    import sys

    from pipeprof.workload.data import quiet_handover_errors

    printed = []
    monkeypatch.setattr(sys, "excepthook", lambda *e: printed.append(e[0]))
    quiet_handover_errors(0)
    code = compile("def _serve():\n    raise ConnectionResetError('cut')\n", "/x/multiprocessing/resource_sharer.py",
                   "exec")
    namespace: dict = {}
    exec(code, namespace)
    for fn in (namespace["_serve"], lambda: 1 / 0):
        try:
            fn()
        except Exception:
            sys.excepthook(*sys.exc_info())
    assert printed == [ZeroDivisionError]


class _Worker:
    def __init__(self, pid, codes):
        self.pid, self._codes = pid, list(codes)

    @property
    def exitcode(self):  # None while alive, then its exit status, as multiprocessing.Process reports it
        return self._codes.pop(0) if len(self._codes) > 1 else self._codes[0]


class _Iterator:
    def __init__(self, *workers):
        self._workers = list(workers)


def test_dead_workers_says_which_worker_died_and_how():
    from pipeprof.pipeline.train import dead_workers
    assert dead_workers(_Iterator(_Worker(11, [None]), _Worker(12, [0]))) is None
    assert dead_workers(None) is None
    assert dead_workers(_Iterator(_Worker(11, [None]), _Worker(12, [-signal.SIGKILL]))) == \
        "DataLoader worker (pid 12) is killed by signal: Killed"
    assert dead_workers(_Iterator(_Worker(13, [3]))) == "DataLoader worker (pid 13) exited with status 3"
    # A reset connection can arrive before the dying worker's exit is reported: it is waited for, briefly.
    late = _Iterator(_Worker(14, [None, None, None, -signal.SIGSEGV]))
    assert dead_workers(late, wait_s=5.0, poll_s=0.0) == "DataLoader worker (pid 14) is killed by signal: " \
        + signal.strsignal(signal.SIGSEGV)
    assert dead_workers(_Iterator(_Worker(15, [None, None, -9])), wait_s=0.0) is None  # not waited for unless asked


def test_a_disk_that_fills_while_the_run_trains_says_how_many_steps_its_raw_records_keep(tmp_path, monkeypatch,
                                                                                         capsys):
    scenario = tiny_file(tmp_path, steps=60)
    real_writer, step_writes = csv.writer, []

    def filling(f, *args, **kwargs):  # the disk fills after the steps' second write: every write fails since
        writer = real_writer(f, *args, **kwargs)
        if "steps." in str(getattr(f, "name", "")):
            step_writes.append(f.name)
        if len(step_writes) <= 2:
            return writer
        full = OSError(errno.ENOSPC, "No space left on device")
        return SimpleNamespace(writerow=lambda row: (_ for _ in ()).throw(full),
                               writerows=lambda rows: (_ for _ in ()).throw(full))

    monkeypatch.setattr(csv, "writer", filling)
    monkeypatch.setattr("pandas.DataFrame.to_csv", lambda *a, **k: (_ for _ in ()).throw(
        OSError(errno.ENOSPC, "No space left on device")))
    status = main(["run", str(scenario), "--out", str(tmp_path / "reports"), "--cache", str(tmp_path / "cache"),
                   "--quiet", "--set", "profile.what_ifs=false"])
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert status == 1
    kept, steps = (int(n) for n in re.search(r"hold ([\d,]+) of its ([\d,]+) steps", err).groups())
    assert steps == 60 and 0 < kept < steps and "the disk filled while the run went on" in err
    monkeypatch.undo()
    (folder,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir()]
    assert main(["report", "--quiet", str(folder)]) == 0  # the rebuild keeps exactly the steps the line said
    assert len(pd.read_csv(folder / "steps.csv")) == kept
