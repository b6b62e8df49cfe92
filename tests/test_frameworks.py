"""Hugging Face Trainer and accelerate (issue 14, item 12): batches and waits as the user's loop met them.

accelerate's ``DataLoaderShard`` takes one batch ahead from the DataLoader
the hooks time; the hooks time the shard's own ``next()`` instead
(``pipeprof.script.frameworks``). A step of several batches (gradient
accumulation) is judged by the emptiest prefetch queue before any of them.
Unit tests on hand-made event streams and in-process sessions with a fake
clock; whole-program runs of the fixtures ``hf_trainer.py`` and
``accelerate_loop.py`` (marked integration).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from torch.utils.data import TensorDataset

from pipeprof.pipeline.script_verify import report_lines
from pipeprof.script import frameworks, hooks
from pipeprof.script.event_steps import read_events, script_steps

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent


# ---- the queue reading of a step of several batches (hand-made events) ------------------------------

def _step_of_batches(events: list[list], loader: int, t: float, waits: list[float], readies: list[Any]) -> float:
    for wait, ready in zip(waits, readies):
        events.append(["N", loader, t, t + wait, 4, None, ready])
        t += wait
    t += 0.04  # forward and backward of the step's batches
    events.append(["O", t])
    return t


def _accumulating(readies_per_step: list[list[Any]], waits: list[float]) -> list[list]:
    events: list[list] = [["L", 0, {"number": 0, "name": "train", "batch_size": 4, "num_workers": 1}],
                          ["I", 0, 0.0, 0.01]]
    t = 0.01
    for readies in readies_per_step:
        t = _step_of_batches(events, 0, t, waits, readies)
    return events


def test_a_step_of_several_batches_reads_the_queue_at_its_emptiest():
    # Gradient accumulation: four batches asked for back to back; the queue is full for the first only.
    cut = script_steps(_accumulating([[2.0, 1.0, 0.0, 0.0], [2.0, 2.0, 1.0, None], [None] * 4],
                                     [0.002, 0.006, 0.022, 0.016]), t0_s=0.0)
    ready = cut.steps["ready_batches"].tolist()
    assert ready[:2] == [0.0, 1.0]  # the fewest before any batch of the step; a missing reading is skipped
    assert pd.isna(ready[2])  # no reading at all: not observed, never 0
    assert cut.steps["samples"].tolist() == [16, 16, 16]


def test_the_mean_wait_by_position_in_the_step_shows_the_burst():
    cut = script_steps(_accumulating([[2.0, 1.0, 0.0, 0.0]] * 3, [0.002, 0.006, 0.022, 0.016]), t0_s=0.0)
    (train,) = cut.loaders
    assert train["wait_by_position_s"] == pytest.approx([0.002, 0.006, 0.022, 0.016])


def test_steps_of_one_batch_have_no_burst_and_their_one_reading():
    cut = script_steps(_accumulating([[2.0], [0.0], [1.0]], [0.01]), t0_s=0.0)
    assert cut.steps["ready_batches"].tolist() == [2.0, 0.0, 1.0]
    assert cut.loaders[0]["wait_by_position_s"] is None


def test_the_burst_leaves_out_the_warmup_steps():
    events = _accumulating([], [])
    t = _step_of_batches(events, 0, 0.01, [0.5, 0.03], [0.0, 0.0])  # the first batch waits for the workers
    for _ in range(3):
        t = _step_of_batches(events, 0, t, [0.01, 0.03], [0.0, 0.0])
    assert script_steps(events, t0_s=0.0).loaders[0]["wait_by_position_s"][0] > 0.1
    cut = script_steps(events, t0_s=0.0, warmup_steps=1)
    assert cut.loaders[0]["wait_by_position_s"] == pytest.approx([0.01, 0.03])
    assert script_steps(events, t0_s=0.0, warmup_steps=9).loaders[0]["wait_by_position_s"][0] > 0.1  # all warm-up


def test_the_usual_step_sets_the_positions_and_the_eval_loader_has_none():
    events = _accumulating([[1.0, 0.0]] * 3, [0.01, 0.03])
    events.insert(0, ["L", 1, {"number": 1, "name": "val", "batch_size": 8, "num_workers": 0}])
    t = events[-1][1]
    events += [["I", 1, t + 0.01, t + 0.02], ["N", 1, t + 0.02, t + 0.03, 8, None, None], ["E", 1, t + 0.03, t + 0.031]]
    _step_of_batches(events, 0, t + 0.05, [0.01, 0.03, 0.05], [1.0, 0.0, 0.0])  # one step of three batches
    cut = script_steps(events, t0_s=0.0)
    by_name = {loader["name"]: loader for loader in cut.loaders}
    assert by_name["train"]["wait_by_position_s"] == pytest.approx([0.01, 0.03])  # three steps of two
    assert by_name["val"]["role"] == "eval" and by_name["val"]["wait_by_position_s"] is None


# ---- which batch a look-ahead loader's next() yielded ---------------------------------------------------

def test_the_yielded_batch_is_the_one_before_the_batch_held_ahead():
    state = frameworks.OuterPass()
    state.taken(4, "r0", 2.0)
    state.taken(4, "r1", 1.0)  # the first next(): two batches taken, the first yielded
    assert state.yielded() == (4, "r0") and state.ready == 1.0
    state.begin(1.0)
    state.taken(2, "r2", None)
    assert state.yielded() == (4, "r1") and state.ready is None
    state.begin(2.0)
    state.ended = True  # the last next(): nothing taken, the batch held ahead is yielded
    assert state.yielded() == (2, "r2")
    assert state.yielded() is None


def test_batches_skipped_by_the_loader_are_never_credited():
    state = frameworks.OuterPass()
    for record in ("r0", "r1", "r2"):  # skip_batches=1: r0 taken and dropped, r1 yielded, r2 held ahead
        state.taken(4, record, None)
    assert state.yielded() == (4, "r1")


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class CostlyData(TensorDataset):
    """Each sample advances the fake clock by its cost (s): the loader's wait is known exactly."""

    def __init__(self, costs: list[float], clock: FakeClock) -> None:
        super().__init__(torch.arange(float(len(costs))))
        self.costs, self.clock = costs, clock

    def __getitem__(self, i: int) -> Any:
        self.clock.t += self.costs[i]
        return super().__getitem__(i)


def _profiled_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, costs: list[float],
                    **shard: Any) -> tuple[list[tuple[float, float, int]], Any]:
    """A pass over accelerate's DataLoaderShard in a session on a fake clock: the loop's own (t0, t1, samples)
    of each next(), and the events."""
    from accelerate.data_loader import DataLoaderShard

    clock = FakeClock()
    monkeypatch.setattr(hooks, "clock", clock)
    loader = DataLoaderShard(CostlyData(costs, clock), batch_size=4, **shard)
    session = hooks.Hooks(hooks.EventLog(str(tmp_path / "events.jsonl")))
    session.install()
    seen = []
    try:
        batches = iter(loader)
        while True:
            t0 = clock()
            try:
                (x,) = next(batches)
            except StopIteration:
                break
            seen.append((t0, clock(), len(x)))
            clock.t += 0.05  # the training step
    finally:
        session.uninstall()
    return seen, read_events(tmp_path / "events.jsonl")


def test_a_shard_pass_is_timed_at_the_loops_own_next(tmp_path, monkeypatch):
    costs = [0.01] * 4 + [0.02] * 4 + [0.03] * 2  # batches of 4, 4 and 2 samples
    seen, events = _profiled_shard(tmp_path, monkeypatch, costs)
    nexts = events.tables["N"]
    assert nexts["samples"].tolist() == [4, 4, 2]  # not 8, 2, 0: each batch with the next() that yielded it
    assert [n for *_, n in seen] == [4, 4, 2]
    (iters,) = events.tables["I"].itertuples()
    # The first next() spawns the pass (I) and waits for the first two batches: together, the loop's wait.
    assert iters.t0_s == pytest.approx(seen[0][0]) and nexts["t0_s"].iloc[0] == pytest.approx(iters.t1_s)
    assert nexts["t1_s"].tolist() == pytest.approx([t1 for _, t1, _ in seen])
    assert nexts["t0_s"].tolist()[1:] == pytest.approx([t0 for t0, _, _ in seen[1:]])
    # What each next() waited for: batch k+1's loading (batch 0 and 1 in the first); the last waits for none.
    waits = (nexts["t1_s"] - nexts["t0_s"]).tolist()
    assert waits[0] == pytest.approx(4 * 0.01 + 4 * 0.02 - (iters.t1_s - iters.t0_s), abs=1e-9)
    assert waits[1] == pytest.approx(2 * 0.03, abs=1e-9)
    assert waits[2] == pytest.approx(0.0, abs=1e-9)
    (ends,) = events.tables["E"].itertuples()  # the pass's end, once, at the loop's next() that raised
    assert ends.t0_s > seen[-1][1]


def test_a_shard_that_skips_batches_credits_the_ones_it_yields(tmp_path, monkeypatch):
    seen, events = _profiled_shard(tmp_path, monkeypatch, [0.01] * 10, skip_batches=1)
    assert [n for *_, n in seen] == [4, 2]
    assert events.tables["N"]["samples"].tolist() == [4, 2]


def test_steps_of_a_profiled_shard_match_the_optimizer_steps(tmp_path, monkeypatch):
    from accelerate.data_loader import DataLoaderShard

    data = TensorDataset(torch.randn(36, 3), torch.randn(36))
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    session = hooks.Hooks(hooks.EventLog(str(tmp_path / "events.jsonl")))
    session.install()
    try:
        for _epoch in range(2):
            for x, y in DataLoaderShard(data, batch_size=8):  # 8, 8, 8, 8, 4
                torch.nn.functional.mse_loss(model(x).squeeze(1), y).backward()
                optimizer.step()
    finally:
        session.uninstall()
    cut = script_steps(read_events(tmp_path / "events.jsonl"), t0_s=0.0)
    assert cut.steps["samples"].tolist() == [8, 8, 8, 8, 4] * 2


def _run(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_accelerate_is_patched_when_the_script_imports_it_and_restored_after():
    result = _run("""
        import json, sys, tempfile
        from pipeprof.script import hooks
        session = hooks.Hooks(hooks.EventLog(tempfile.mktemp()))
        session.install()
        before = "accelerate" in sys.modules
        from accelerate.data_loader import DataLoaderDispatcher, DataLoaderShard, SkipDataLoader
        wrapped = [cls.__iter__.__wrapped__.__qualname__ for cls in (DataLoaderShard, DataLoaderDispatcher)
                   if hasattr(cls.__iter__, "__wrapped__")]
        source = bool(__import__("inspect").getsource(DataLoaderShard))
        session.uninstall()
        print(json.dumps({"before": before, "wrapped": wrapped, "skip": hasattr(SkipDataLoader.__iter__, "__wrapped__"),
                          "source": source, "after": [hasattr(c.__iter__, "__wrapped__")
                                                      for c in (DataLoaderShard, DataLoaderDispatcher)],
                          "finders": [type(f).__name__ for f in sys.meta_path]}))
    """)
    assert result["before"] is False  # installing imports no accelerate
    assert result["wrapped"] == ["DataLoaderShard.__iter__", "DataLoaderDispatcher.__iter__"]
    assert result["skip"] is False  # no look-ahead there: its DataLoader's own next() is the loop's
    assert result["source"]  # the module keeps its own loader
    assert result["after"] == [False, False] and "PostImport" not in result["finders"]


def test_accelerate_imported_before_the_session_is_patched_at_once():
    result = _run("""
        import json, tempfile
        from accelerate.data_loader import DataLoaderShard
        from pipeprof.script import hooks
        original = DataLoaderShard.__iter__
        session = hooks.Hooks(hooks.EventLog(tempfile.mktemp()))
        session.install()
        during = DataLoaderShard.__iter__ is not original
        session.uninstall()
        print(json.dumps({"during": during, "after": DataLoaderShard.__iter__ is original}))
    """)
    assert result == {"during": True, "after": True}


def test_a_dispatcher_pass_is_timed_at_the_loops_own_next():
    # DataLoaderDispatcher (dispatch_batches=True) fetches ahead too; in a fresh process (accelerate's state is
    # one per process).
    result = _run("""
        import json, tempfile, time, torch
        from torch.utils.data import DataLoader, TensorDataset
        from accelerate import Accelerator
        from accelerate.utils import DataLoaderConfiguration
        from pipeprof.script import hooks
        from pipeprof.script.event_steps import read_events
        accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=True))
        loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(10.0)), batch_size=4))
        path = tempfile.mktemp()
        session = hooks.Hooks(hooks.EventLog(path))
        session.install()
        seen, batches = [], iter(loader)
        while True:
            t0 = time.perf_counter()
            try:
                (x,) = next(batches)
            except StopIteration:
                break
            seen.append([t0, time.perf_counter(), len(x)])
        session.uninstall()
        nexts = read_events(path).tables["N"]
        print(json.dumps({"kind": type(loader).__name__, "seen": seen,
                          "events": nexts[["t0_s", "t1_s", "samples"]].values.tolist()}))
    """)
    assert result["kind"] == "DataLoaderDispatcher"
    assert [n for *_, n in result["seen"]] == [4, 4, 2]
    assert len(result["events"]) == 3
    for (t0, t1, n), (e0, e1, samples) in zip(result["seen"], result["events"]):
        assert t0 <= e0 <= e1 <= t1 and samples == n  # each batch inside the loop's own next() that got it


# ---- whole programs ------------------------------------------------------------------------------------

def _profile(tmp_path: Path, script: str, *args: str) -> tuple[subprocess.CompletedProcess, dict, pd.DataFrame]:
    out = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--out", str(out), "--quiet", "--",
                           "python", str(FIXTURES / script), *args], capture_output=True, text=True, timeout=240,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    folder = Path(report_lines(proc.stdout, proc.stderr)[-1]).parent
    return proc, json.loads((folder / "summary.json").read_text()), pd.read_csv(folder / "steps.csv")


def _own(proc: subprocess.CompletedProcess) -> dict:
    return json.loads(next(line for line in reversed(proc.stdout.splitlines()) if line.startswith("{")))


@pytest.mark.integration
def test_accelerate_loop_steps_samples_and_wait(tmp_path):
    proc, s, steps = _profile(tmp_path, "accelerate_loop.py", "--samples", "608", "--getitem-ms", "1",
                              "--compute-ms", "5")
    own = _own(proc)
    assert own["steps"] == 38 and len(steps) == 38  # 2 epochs of 608 / 32 = 19 batches
    assert steps["samples"].tolist() == [32] * 38  # no double first step, no merged last one
    by_role = {d["role"]: d for d in s["loaders"]}
    assert by_role["train"]["batches"] == 38 and by_role["eval"]["passes"] == 2
    assert (by_role["train"]["name"], by_role["eval"]["name"]) == ("train_dataloader", "eval_dataloader")
    assert by_role["train"]["framework"] == "accelerate" and by_role["train"]["batch_size"] == 32
    assert s["fractions"]["data_wait"] == pytest.approx(own["data_wait_share"], abs=0.05)
    assert s["attribution"]["cpu"]["torch_threads"] == own["torch_threads"]  # what the training thread used


@pytest.mark.integration
def test_hf_trainer_one_row_per_optimizer_step_across_a_pass_end(tmp_path):
    # 124 samples, batches of 8: 16 batches a pass, the last of 4; 20 steps run into the second pass.
    proc, s, steps = _profile(tmp_path, "hf_trainer.py", "--max-steps", "20", "--samples", "124",
                              "--getitem-ms", "1")
    own = _own(proc)
    assert own["steps"] == 20 and len(steps) == 20
    assert steps["samples"].tolist() == [8] * 15 + [4] + [8] * 4
    (train,) = s["loaders"]
    assert train["role"] == "train" and train["batches"] == 20 and train["wait_by_position_s"] is None
    assert (train["name"], train["framework"], train["batch_size"]) == ("Trainer train loader", "transformers", 8)
    assert s["fractions"]["data_wait"] == pytest.approx(own["data_wait_share"], abs=0.05)
    assert s["attribution"]["cpu"]["torch_threads"] == own["torch_threads"]  # what the training thread used


@pytest.mark.integration
def test_hf_trainer_gradient_accumulation_burst_runs_the_queue_dry(tmp_path):
    # One worker, four batches asked for back to back each step: the queue (2 batches) cannot hold the burst.
    proc, s, steps = _profile(tmp_path, "hf_trainer.py", "--max-steps", "12", "--samples", "192",
                              "--accumulation", "4", "--eval-steps", "6", "--getitem-ms", "1.5")
    own = _own(proc)
    assert own["steps"] == 12 and len(steps) == 12 and own["evaluations"] == 2
    assert steps["samples"].tolist() == [32] * 12  # 4 batches of 8 a step
    (train,) = (d for d in s["loaders"] if d["role"] == "train")
    assert train["batches"] == 48
    assert sum(d["passes"] for d in s["loaders"] if d["role"] == "eval") == 2  # a new eval loader per evaluate()
    burst = train["wait_by_position_s"]
    assert len(burst) == 4 and min(burst[2:]) > burst[1]  # the queue holds the 2nd batch, not the 3rd and 4th
    counted = steps[~steps["warmup"]]
    assert (counted["ready_batches"] == 0).mean() >= 0.8  # the queue ran dry within most steps
    assert s["fractions"]["data_wait"] == pytest.approx(own["data_wait_share"], abs=0.05)
    assert s["attribution"]["cpu"]["torch_threads"] == own["torch_threads"]  # what the training thread used
