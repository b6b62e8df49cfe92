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
from pipeprof.analysis.worker_start import NO_PARTS, passes, with_worker_start_note, worker_start_summary
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
