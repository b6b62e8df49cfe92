"""Spawned workers' start-up (``loading.worker_start``): the marks a worker makes (``script.worker_start``), the
summary of hand-made marks (``analysis.worker_start``), and one real run of a script whose workers spawn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.verdict import Verdict
from pipeprof.analysis.worker_start import (
    NO_PARTS,
    pass_start_wait_share,
    passes,
    with_start_verdict,
    with_worker_start_note,
    worker_start_summary,
)
from pipeprof.render.verdict_text import verdict_notes, verdict_sentence
from pipeprof.script import worker_start

FIXTURES = Path(__file__).parent / "fixtures"


def _row(start: float, import_s: float = 1.0, unpickle_s: float = 0.5, loader: int = 0, worker: int = 0,
         interpreter_s: float = 0.2) -> dict:
    t0 = start + interpreter_s
    return {"loader": loader, "worker": worker, "pid": 100 + worker, "process_start_s": start,
            "prepare_t0_s": t0, "prepare_t1_s": t0 + import_s, "unpickled_s": t0 + import_s + unpickle_s}


def test_parts_medians_and_passes_of_hand_made_marks():
    # two passes of two workers each (the second worker of a pass starts 0.1 s after the first)
    rows = [_row(10.0, worker=0), _row(10.1, worker=1), _row(50.0, worker=0, import_s=3.0), _row(50.1, worker=1)]
    out = worker_start_summary(rows, wall_s=100.0)
    assert out is not None
    assert out.workers == 4 and out.passes == 2
    assert out.parts == pytest.approx({"interpreter_s": 0.2, "main_import_s": 1.0, "dataset_unpickle_s": 0.5})
    assert out.max_s == pytest.approx(3.7) and out.median_s == pytest.approx(1.7)
    assert passes(rows) == pytest.approx([1.8, 3.7])  # first start to last ready, per pass
    assert out.per_pass_s == pytest.approx((1.8 + 3.7) / 2)
    assert out.share_of_wall == pytest.approx(5.5 / 100.0)


def test_without_the_main_modules_import_the_parts_are_an_absence():
    rows = [{**_row(1.0), "prepare_t0_s": None, "prepare_t1_s": None}]
    out = worker_start_summary(rows, wall_s=None)
    assert out is not None and out.parts_absent == NO_PARTS and out.to_json()["parts"] == {"absent": NO_PARTS}
    assert out.median_s == pytest.approx(1.7) and out.share_of_wall is None
    assert worker_start_summary([], 10.0) is None  # forked workers: nothing to say


def test_an_unreadable_process_start_is_said():
    out = worker_start_summary([{**_row(1.0), "process_start_s": None}], wall_s=10.0)
    assert out is not None and out.median_s is None and out.absent is not None and "/proc/self/stat" in out.absent


def test_the_process_start_is_read_from_proc_onto_the_monotonic_clock(tmp_path):
    started = worker_start.process_start_s()
    assert started is not None and 0 <= time.perf_counter() - started < 24 * 3600
    stat = tmp_path / "stat"
    stat.write_text("1 (odd) name) S" + " 0" * 18 + " not-a-number")
    assert worker_start.process_start_s(stat_path=str(stat)) is None


def test_the_verdict_names_the_start_up_where_it_matters():
    judged = Verdict("compute", "R2", None, Reason.written("The run is compute-bound."))
    rows = [_row(10.0), _row(50.0, import_s=3.0)]
    costly = with_worker_start_note(judged, worker_start_summary(rows, wall_s=20.0))
    (reason,) = costly.notes
    assert (reason.kind, reason["passes"], reason["share_of_wall"]) == ("worker_start", 2, pytest.approx(5.4 / 20.0))
    (note,) = verdict_notes(costly)
    assert note.startswith("Starting the DataLoader workers (spawn / forkserver) took 27% of the script's wall time")
    assert "importing the script's main module again" in note and verdict_sentence(costly) == verdict_sentence(judged)
    assert costly.evidence["worker_start_share_of_wall"] == pytest.approx(5.4 / 20.0)
    cheap = worker_start_summary(rows, wall_s=1000.0)  # 0.5% of a long run: not worth a word
    assert with_worker_start_note(judged, cheap) is judged and with_worker_start_note(judged, None) is judged


def _epochs(first_wait_s: float, wait_s: float, epochs: int = 4, per_epoch: int = 10):
    import pandas as pd

    rows = [{"step": e * per_epoch + i, "epoch": e, "warmup": e * per_epoch + i < 3,
             "data_wait_s": first_wait_s if i == 0 else wait_s, "step_s": (first_wait_s if i == 0 else wait_s) + 0.01}
            for e in range(epochs) for i in range(per_epoch)]
    return pd.DataFrame(rows)


def test_a_loop_that_waits_mostly_for_workers_starting_is_told_so_not_by_what_they_then_make():
    """9 s a pass starting two spawned workers (importing a slow main module), 1 ms a batch once they run: the
    verdict's cause is the start-up, whatever the per-sample cost of what the workers then made."""
    judged = Verdict("input:prep", "R6", "input-bound", Reason.written("preprocessing, 4.16 µs per sample"),
                     evidence={"data_wait_fraction": 0.9})
    rows = [_row(10.0, import_s=8.0), _row(10.1, import_s=8.0, worker=1),
            _row(60.0, import_s=8.0), _row(60.1, import_s=8.0, worker=1)]
    started = worker_start_summary(rows, wall_s=120.0)
    steps = _epochs(first_wait_s=9.0, wait_s=0.001)
    assert pass_start_wait_share(steps) == pytest.approx(27.0 / (27.0 + 34 * 0.001))  # epochs 1-3: first steps
    told = with_start_verdict(judged, started, steps)
    assert (told.klass, told.rule, told.candidates) == ("input:start", "R10", ("input:start",))
    sentence = verdict_sentence(told)
    assert sentence.startswith("Input-bound (90% of step time waiting for data), by the DataLoader workers "
                               "starting: 100% of the wait falls on the first batch of a pass, while 2 spawned "
                               "workers start (8.80 s a pass"), sentence
    assert "importing the script's main module again" in sentence and "per sample" not in sentence
    # the wait spread over every batch (the workers cannot keep up), or no start-up timed: left as judged
    assert with_start_verdict(judged, started, _epochs(first_wait_s=0.05, wait_s=0.04)) is judged
    assert with_start_verdict(judged, None, steps) is judged
    compute = Verdict("compute", "R2", None, Reason.written("compute"))
    assert with_start_verdict(compute, started, steps) is compute


def test_a_spawned_child_is_told_by_its_command_line():
    assert worker_start.is_spawned_child(["python", "-c", "from multiprocessing.spawn import spawn_main; "
                                                          "spawn_main(tracker_fd=5, pipe_handle=7)",
                                          "--multiprocessing-fork"])
    assert worker_start.is_spawned_child(["python", "-c", "from multiprocessing.forkserver import main; main(8)"])
    assert not worker_start.is_spawned_child(["python", "train.py"])


@pytest.mark.integration
def test_a_script_whose_workers_spawn_has_their_start_up_in_parts(tmp_path):
    out = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--quiet", "--out", str(out), "--",
                           sys.executable, str(FIXTURES / "spawned_workers.py"), "--unpickle-s", "0.3"],
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "SPAWNED_WORKERS_IMPORT_S": "0.4"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    (folder,) = [p for p in out.iterdir() if (p / "run.json").is_file() and not p.is_symlink()]
    summary = json.loads((folder / "summary.json").read_text())
    started = summary["loading"]["worker_start"]
    assert set(started) == {"workers", "median_s", "max_s", "parts", "passes", "per_pass_s", "share_of_wall"}
    assert started["workers"] == 2 and started["passes"] == 2  # one worker, started anew each of 2 epochs
    parts = started["parts"]
    assert parts["main_import_s"] >= 0.4  # the script's import again, its slow top level included
    assert 0.3 <= parts["dataset_unpickle_s"] < parts["main_import_s"]
    assert parts["interpreter_s"] > 0
    assert started["median_s"] == pytest.approx(sum(parts.values()), rel=0.05)
    assert 0 < started["share_of_wall"] < 1
    assert any(note.startswith("Starting the DataLoader workers") for note in summary["verdict"]["notes"])
    # the loop waits mostly at each pass's first batch, for its worker to start: that is the cause named
    assert summary["verdict"]["class"] == "input:start", summary["verdict"]["sentence"]
    assert "while 1 spawned worker starts" in summary["verdict"]["sentence"]
