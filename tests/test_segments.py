"""The what-if segments after --steps (pipeprof.script.segments): the plan, the variant loader, the windows on a
fake clock, the script's time away from its loop, the budget, and whole runs of fixture scripts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from pipeprof.measure.clock import FakeClock
from pipeprof.measure.windows import Windows
from pipeprof.script.event_steps import ScriptSteps
from pipeprof.script.protocol import WHAT_IFS_ENV
from pipeprof.script.segments import Endless, Segment, WhatIfSegments, plan, run_pace, variant_loader
from pipeprof.script.session import CUT, NO_STEPS, RAN_TO_END, script_what_ifs

FIXTURES = Path(__file__).parent / "fixtures"


def test_the_plan_measures_the_run_itself_one_worker_either_side_the_other_threads_then_more_workers():
    assert plan(0, 1, 2) == [Segment("train_as_run", 0, 1), Segment("train_workers", 1, 1),
                             Segment("train_threads", 0, 2), *(Segment("train_workers", n, 1, extra=True)
                                                               for n in (2, 3, 4))]
    assert plan(1, 2, 2) == [Segment("train_workers", 2, 2), Segment("train_workers", 0, 2),
                             Segment("train_threads", 1, 1), *(Segment("train_workers", n, 2, extra=True)
                                                               for n in (3, 4))]
    # one core and one thread: no other number of threads
    assert plan(2, 1, 1) == [Segment("train_workers", 3, 1), Segment("train_workers", 1, 1)]


def test_endless_goes_round_and_an_empty_sampler_ends():
    taken = []
    for i, item in enumerate(Endless([1, 2, 3])):
        taken.append(item)
        if i == 7:
            break
    assert taken == [1, 2, 3, 1, 2, 3, 1, 2]
    assert list(Endless([])) == []


def _dataset(n: int = 40) -> TensorDataset:
    return TensorDataset(torch.arange(n, dtype=torch.float32).reshape(n, 1), torch.zeros(n, dtype=torch.long))


def test_a_variant_keeps_the_loader_but_its_workers_and_never_ends_its_epoch():
    def collate(batch: list) -> Any:
        return torch.utils.data.default_collate(batch)

    loader = DataLoader(_dataset(), batch_size=8, shuffle=True, collate_fn=collate, drop_last=True)
    variant = variant_loader(loader, 0)
    assert variant.dataset is loader.dataset and variant.collate_fn is collate and variant.num_workers == 0
    assert variant.prefetch_factor is None and variant.pin_memory == loader.pin_memory
    batches = iter(variant)
    seen = [next(batches)[0].flatten().tolist() for _ in range(12)]  # 12 batches from an epoch of 5
    assert all(len(b) == 8 for b in seen)
    assert sorted(sum(seen[:5], [])) == sorted(sum(seen[5:10], []))  # each round the same sampler's epoch
    more = variant_loader(loader, 2)
    assert more.num_workers == 2 and more.prefetch_factor == 2  # torch's default where the run had none
    with_prefetch = variant_loader(DataLoader(_dataset(), batch_size=8, num_workers=1, prefetch_factor=5), 2)
    assert with_prefetch.prefetch_factor == 5


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(10, dtype=torch.float32))


def test_an_iterable_datasets_variant_is_batched_as_the_loader_was():
    variant = variant_loader(DataLoader(Stream(), batch_size=4), 0)
    assert [len(b) for b in variant] == [4, 4, 2]


class Log:
    def __init__(self) -> None:
        self.muted = False
        self.events: list[tuple] = []

    def add(self, event: tuple, now_s: float) -> None:
        if not self.muted:
            self.events.append(event)


# seconds a step takes in the fake loop, per (num_workers, torch threads) of the segment running
STEP_S = {(0, 1): 0.004, (1, 1): 0.002, (0, 2): 0.003, (2, 1): 0.0015, (3, 1): 0.0015, (4, 1): 0.0016}


def _loop(segments: WhatIfSegments, clock: FakeClock, iterator: Any, steps: int = 10_000,
          away: dict[int, float] | None = None, slower: float = 1.0) -> int:
    """The script's loop after the stop: next() on its training iterator, then a step whose length depends on
    the segment running (``slower`` times STEP_S); ``away``: at step i, seconds in another loader's pass first.
    Returns the steps run."""
    for i in range(steps):
        if away and i in away:
            assert segments.serves(1, object()) is False  # a validation loader's next()
            clock.advance(away[i])
        try:
            assert segments.serves(0, iterator)
            segments.next_batch()
        except SystemExit as e:
            assert e.code == 0
            return i
        running = segments.running
        assert running is not None
        clock.advance(slower * STEP_S[(running.segment.num_workers, torch.get_num_threads())])
    return steps


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _segments(clock: FakeClock, log: Log, **kwargs: Any) -> WhatIfSegments:
    # every variant has 0 workers here (the fake clock times the steps): the plan and the bookkeeping are tested
    return WhatIfSegments(log, clock, cores=2, make_loader=lambda loader, k: variant_loader(loader, 0), **kwargs)


def test_each_segment_measures_its_own_loop_and_the_results_are_one_event_written_at_the_end(one_thread):
    clock, log = FakeClock(), Log()
    loader = DataLoader(_dataset(), batch_size=8)
    segments = _segments(clock, log)
    iterator = object()
    segments.begin(loader, 0, iterator)
    assert log.muted
    _loop(segments, clock, iterator)
    assert not log.muted and torch.get_num_threads() == 1  # the threads restored
    (event,) = log.events
    assert event[0] == "A"
    found = event[2]
    assert found["train_as_run"]["samples_per_s"] == pytest.approx(8 / 0.004)
    assert found["train_workers"]["1"]["samples_per_s"] == pytest.approx(8 / 0.002)
    assert found["train_threads"]["0"]["samples_per_s"] == pytest.approx(8 / 0.003)
    assert found["train_threads"]["0"]["threads"] == 2 and found["train_workers"]["1"]["threads"] == 1
    # then more workers while the budget lasts
    assert found["train_workers"]["2"]["samples_per_s"] == pytest.approx(8 / 0.0015)
    assert found["train_workers"]["4"]["samples_per_s"] == pytest.approx(8 / 0.0016)
    assert found["train_workers"]["1"]["num_workers"] == 1
    assert found["train_as_run"]["startup_s"] == pytest.approx(0.004)  # the first step's, with the workers' start
    assert len(found["train_as_run"]["samples_per_s_per_window"]) == 3
    assert found["took_s"] == pytest.approx(clock() - 0.0)


def test_the_steps_away_from_the_loop_are_not_measured_and_a_new_pass_is_followed(one_thread):
    clock, log = FakeClock(), Log()
    segments = _segments(clock, log)
    iterator = object()
    segments.begin(DataLoader(_dataset(), batch_size=8), 0, iterator)
    _loop(segments, clock, iterator, away={10: 0.5, 40: 0.5})  # two validation passes of half a second
    found = log.events[0][2]
    assert found["train_as_run"]["samples_per_s_per_window"] == pytest.approx([8 / 0.004] * 3)
    assert found["train_workers"]["1"]["samples_per_s"] == pytest.approx(8 / 0.002)
    # a new iterator of the training loader (an epoch counted by its length) is the loop's from then on
    clock2, log2 = FakeClock(), Log()
    segments2 = _segments(clock2, log2)
    first, second = object(), object()
    segments2.begin(DataLoader(_dataset(), batch_size=8), 0, first)
    assert segments2.serves(0, first)
    segments2.next_batch()
    clock2.advance(0.004)
    assert segments2.serves(0, second) and segments2.iterator is second


def test_a_segment_that_would_overrun_the_budget_is_not_started(one_thread):
    clock, log = FakeClock(), Log()
    segments = _segments(clock, log, total_budget_s=0.8)
    iterator = object()
    segments.begin(DataLoader(_dataset(), batch_size=8), 0, iterator)
    _loop(segments, clock, iterator)
    found = log.events[0][2]
    assert found["train_as_run"]["samples_per_s"] == pytest.approx(8 / 0.004)
    assert "samples_per_s" in found["train_workers"]["1"]
    assert found["train_threads"]["0"]["absent"].startswith("not started: the segments after a run take at most")
    assert set(found["train_workers"]) == {"1"}  # the extra ones the budget left out are not recorded


def test_the_budget_follows_the_runs_own_pace_so_a_slow_gpu_step_gets_windows_that_hold_steps(one_thread):
    # a GPU job: 400 ms steps for 100 s (its as-run loop is STEP_S[(0, 1)] × 100); the budget is 10 % of its
    # training, and each window holds 3 of its steps, where fixed 0.1 s windows would read single steps
    clock, log = FakeClock(), Log()
    segments = _segments(clock, log)
    iterator = object()
    segments.begin(DataLoader(_dataset(), batch_size=8), 0, iterator, step_ends_s=[0.4 * i for i in range(250)])
    _loop(segments, clock, iterator, slower=100)
    found = log.events[0][2]
    assert found["budget"]["total_budget_s"] == pytest.approx(10.0)
    assert found["budget"]["window_s"] == pytest.approx(1.2)
    as_run = found["train_as_run"]
    assert len(as_run["samples_per_s_per_window"]) == 3 and min(as_run["steps_per_window"]) >= 3
    assert as_run["samples_per_s"] == pytest.approx(8 / 0.4)
    assert found["train_workers"]["1"]["samples_per_s"] == pytest.approx(8 / 0.2)
    assert found["took_s"] <= 10.0 + 1.2 + 0.4  # within the budget (a window may end on the step after it)
    # a 1 ms CPU step for 7 s: no more than the 3 s floor, windows of 0.1 s; no pace known: the same defaults
    for ends in ([0.001 * i for i in range(7000)], []):
        quick = _segments(FakeClock(), Log())
        quick.begin(DataLoader(_dataset(), batch_size=8), 0, object(), step_ends_s=ends)
        assert quick.results["budget"]["total_budget_s"] == pytest.approx(3.0)
        assert quick.results["budget"]["window_s"] == pytest.approx(0.1)


def test_the_run_s_own_waits_say_which_number_of_workers_is_measured_first(one_thread):
    # no workers, 30 ms of each 40 ms step waiting for the batch: 3 workers would feed its 10 ms of compute
    segments = WhatIfSegments(Log(), FakeClock(), cores=8, make_loader=lambda loader, k: variant_loader(loader, 0))
    segments.begin(DataLoader(_dataset(), batch_size=8), 0, object(), step_ends_s=[0.04 * i for i in range(50)],
                   waits_s=[0.5] * 5 + [0.03] * 45)  # the warm-up's slow first batches are not read
    assert segments.results["workers_wanted"] == 3
    trained = [s.num_workers for s in segments.plan if s.key == "train_workers"]
    assert trained[:2] == [1, 3] and not [s for s in segments.plan if s.num_workers == 3 and s.extra]


def test_run_pace_reads_the_steps_after_the_warm_up():
    ends = [0.0, 1.0, 1.5] + [1.5 + 0.2 * i for i in range(1, 11)]  # two slow warm-up steps, then 0.2 s steps
    training_s, step_s = run_pace(ends)
    assert step_s == pytest.approx(0.2) and training_s == pytest.approx(ends[-1] + 0.2)
    assert run_pace([1.0]) == (None, None)
    assert run_pace([0.0, 0.5])[1] == pytest.approx(0.5)  # fewer steps than the warm-up: all of them


class Broken(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> Any:
        raise OSError("the disk went away")


def test_a_variant_that_fails_is_said_and_the_script_goes_on_with_the_next(one_thread):
    clock, log = FakeClock(), Log()
    loader = DataLoader(_dataset(), batch_size=8)

    def make(run_loader: DataLoader, k: int) -> DataLoader:
        if k == 1:
            raise ValueError("no such context")
        return variant_loader(DataLoader(Broken(), batch_size=8) if run_loader.num_workers == 0 and
                              torch.get_num_threads() == 2 else run_loader, 0)

    segments = WhatIfSegments(log, clock, cores=2, make_loader=make)
    iterator = object()
    segments.begin(loader, 0, iterator)
    _loop(segments, clock, iterator)
    found = log.events[0][2]
    assert found["train_as_run"]["samples_per_s"] == pytest.approx(8 / 0.004)
    assert found["train_workers"]["1"]["absent"] == "the variant could not be made: ValueError: no such context"
    assert found["train_threads"]["0"]["absent"] == "the variant failed: OSError: the disk went away"
    assert torch.get_num_threads() == 1


def test_another_loader_first_after_the_stop_runs_no_segment():
    clock, log = FakeClock(), Log()
    segments = _segments(clock, log)
    segments.begin(DataLoader(_dataset(), batch_size=8), None, object())
    with pytest.raises(SystemExit):
        segments.serves(1, object())
    (event,) = log.events
    assert "another loader" in event[2]["absent"] and not log.muted


def test_a_script_that_ends_during_a_segment_keeps_what_was_measured(one_thread):
    clock, log = FakeClock(), Log()
    segments = _segments(clock, log)
    iterator = object()
    segments.begin(DataLoader(_dataset(), batch_size=8), 0, iterator)
    ran = _loop(segments, clock, iterator, steps=100)  # the script's own steps end in the second segment
    assert ran == 100
    segments.finish("the script ended during the what-if segments")
    segments.finish("twice")  # written once
    (event,) = log.events
    found = event[2]
    assert found["train_as_run"]["samples_per_s"] == pytest.approx(8 / 0.004)
    assert found["train_workers"]["1"]["cut"] == "the script ended during the what-if segments"
    assert found["train_threads"]["0"] == {"absent": "the script ended during the what-if segments"}
    assert torch.get_num_threads() == 1


def test_a_span_away_from_the_loop_is_neither_the_windows_time_nor_the_budgets():
    clock = FakeClock()
    win = Windows(clock, window_s=0.095, windows=2, warmup=1, budget_s=0.5)
    clock.advance(0.01)
    win.step_done(10)  # the warm-up
    for _ in range(5):
        clock.advance(0.01)
        win.step_done(10)  # half the first window
    clock.advance(5.0)  # a step spanning a validation pass: not counted
    win.skip(5.0)
    done = False
    while not done:
        clock.advance(0.01)
        done = win.step_done(10)
    assert win.rates == pytest.approx([1000.0, 1000.0]) and win.steps_per_window == [10, 10]


def test_why_a_script_run_has_no_what_ifs():
    def cut(how: str | None) -> ScriptSteps:
        steps = ScriptSteps(*(None,) * 4)  # type: ignore[arg-type]
        steps.end = {"how": how} if how else None
        return steps

    assert script_what_ifs(cut("stopped"), None) == {"absent": CUT}
    assert script_what_ifs(cut("exit"), None) == {"absent": RAN_TO_END}
    assert script_what_ifs(cut("exit"), NO_STEPS) == {"absent": NO_STEPS}
    measured = cut("stopped")
    measured.what_ifs = {"train_workers": {}}
    assert script_what_ifs(measured, None) == {"train_workers": {}}


# these short runs' own budget is the 3 s floor: room asked for (as a user would) for every planned segment
ROOM = ("--what-ifs-seconds", "6")


def _profile(tmp_path: Path, script: str, *args: str, steps: int = 30, flags: tuple[str, ...] = ()) -> Path:
    out = tmp_path / script
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--quiet", "--steps", str(steps), *flags,
                           "--out", str(out), "--", sys.executable, str(FIXTURES / f"{script}.py"), *args],
                          capture_output=True, text=True, env={**os.environ, WHAT_IFS_ENV: "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (folder,) = [p for p in out.iterdir() if (p / "run.json").is_file() and not p.is_symlink()]
    return folder


@pytest.mark.integration
def test_a_scripts_loop_goes_on_after_steps_and_its_predictions_read_the_segments(tmp_path):
    # room for the segments: the script's epochs end where its own would (len(loader)), and 3 may end them
    folder = _profile(tmp_path, "plain_loop", "--epochs", "40", "--samples", "2048", "--collate-ms", "1",
                      flags=("--threads", "1", *ROOM))
    meta = json.loads((folder / "run.json").read_text())
    found = meta["what_ifs"]
    assert meta["script"]["ended"]["how"] == "stopped"
    assert found["budget"]["total_budget_s"] == 6.0 and found["took_s"] < 6.0 + 3  # the budget asked for
    assert found["train_as_run"]["samples_per_s"] > 0 and found["train_as_run"]["num_workers"] == 0
    assert found["train_workers"]["1"]["samples_per_s"] > 0 and found["train_workers"]["1"]["startup_s"] > 0
    assert found["train_threads"]["0"]["threads"] == 2 and found["train_threads"]["0"]["samples_per_s"] > 0
    steps = (folder / "steps.csv").read_text().strip().splitlines()
    assert len(steps) == 1 + 30  # the segments' steps are not the run's
    assert meta["script"]["torch_threads"]["end"] == 1  # restored after the 2-thread segment

    from pipeprof.analysis.recommend import predict_change
    from pipeprof.analysis.summary import summary_record
    from pipeprof.render.prediction_text import model_text
    from pipeprof.run_folder import load_run

    run = load_run(folder)
    record = summary_record(run)
    rec = predict_change(run, record.attribution, record.verdict, {"loader.num_workers": 1})
    assert rec is not None and rec.tier == "measured"  # the segment ran the change: X_run · probe / probe(as run)
    assert "beside the run's own loop (what_ifs.train_as_run)" in model_text(rec.model)


@pytest.mark.integration
@pytest.mark.parametrize("script, args", [
    # the segments serve only the batches the script's own epochs still hold: leave it epochs to spare
    ("accelerate_loop", ("--epochs", "30")),  # a look-ahead loader: the segment batch is taken one next() early
    ("trainer_class", ("--epochs", "20", "--samples", "2048", "--num-workers", "1", "--no-tqdm")),
])
def test_segments_in_framework_and_trainer_class_loops(tmp_path, script, args):
    folder = _profile(tmp_path, script, *args, steps=25, flags=ROOM)
    meta = json.loads((folder / "run.json").read_text())
    found = meta["what_ifs"]
    assert meta["status"] == "complete"
    assert found["train_workers"]["2"]["samples_per_s"] > 0 and found["train_workers"]["0"]["samples_per_s"] > 0
    assert len((folder / "steps.csv").read_text().strip().splitlines()) == 1 + 25


@pytest.mark.integration
def test_timms_train_loop_under_steps_sees_its_own_epochs_and_nothing_in_its_streams(tmp_path):
    # timm's train.py under --steps printed "Train: 1 [25/25 (104%)]" and divided by zero: the segments gave an
    # epoch more batches than len(loader). The fixture asserts batch_idx <= len(loader) - 1 at every batch, and
    # its PrefetchLoader holds one batch ahead with a persistent worker (create_loader's).
    out = tmp_path / "timm_train"
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--quiet", "--steps", "12", "--out", str(out),
                           "--", sys.executable, str(FIXTURES / "timm_train.py"), "--data", str(tmp_path / "images"),
                           "--epochs", "40"],
                          capture_output=True, text=True, env={**os.environ, WHAT_IFS_ENV: "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (folder,) = [p for p in out.iterdir() if (p / "run.json").is_file() and not p.is_symlink()]
    meta = json.loads((folder / "run.json").read_text())
    assert meta["script"]["ended"] == {"how": "stopped", "detail": 12}
    assert any(entry.get("samples_per_s", 0) > 0 for entry in meta["what_ifs"]["train_workers"].values())
    epochs = [line for line in proc.stdout.splitlines() if line.startswith("Train: ")]
    assert len(epochs) > 2 * 3  # the segments went on past the counted steps' epoch: 3 lines an epoch
    assert all(float(line.split("(")[1].split("%")[0]) <= 100 for line in epochs), epochs  # no batch past the end
    # nothing of pipeprof's in the script's streams: no torch warning about a variant's workers
    assert "This DataLoader will create" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.integration
def test_no_what_ifs_ends_the_script_at_steps(tmp_path):
    folder = _profile(tmp_path, "plain_loop", "--epochs", "2", "--samples", "1024", steps=10,
                      flags=("--no-what-ifs",))
    meta = json.loads((folder / "run.json").read_text())
    assert meta["what_ifs"]["absent"].startswith("not measured: turned off")
    rec = json.loads((folder / "summary.json").read_text())["recommendations"][0]
    assert "predicted_samples_per_s" in rec


@pytest.mark.integration
@pytest.mark.serial  # its windows must close within the budget: a loaded machine cuts them short
def test_lightning_ends_each_epoch_by_its_own_count_and_validates_between_yet_every_window_is_whole(tmp_path):
    # 24 batches an epoch (limit_train_batches) and a validation pass after each: a 0.1 s window holds more
    # 400 epochs: room for the segments on a fast machine
    folder = _profile(tmp_path, "lightning_mlp", "--epochs", "400", steps=30, flags=ROOM)
    found = json.loads((folder / "run.json").read_text())["what_ifs"]
    for entry in (found["train_as_run"], found["train_workers"]["1"], found["train_threads"]["0"]):
        assert len(entry["samples_per_s_per_window"]) == 3 and entry["cut_short"] is False
        assert sum(entry["steps_per_window"]) > 24  # the windows span an epoch's end (and its validation)


def test_the_scripts_pass_ends_where_its_own_would_have_and_the_next_goes_on(one_thread):
    # timm's train.py divides by len(loader) - 1 - i at the last batch; a loop may assert i < len(loader)
    clock, log = FakeClock(), Log()
    loader = DataLoader(_dataset(40), batch_size=8)  # 5 batches a pass
    segments = _segments(clock, log)
    first = iter(loader)
    next(first), next(first)  # the run's own steps: --steps stopped it after two
    segments.begin(loader, 0, first)
    handed = 0
    with pytest.raises(StopIteration):
        while True:
            assert segments.serves(0, first)
            segments.next_batch()
            handed += 1
            clock.advance(0.004)
    assert handed == 3  # 2 + 3 = len(loader)
    clock.advance(1.0)  # the script's validation pass, away from its loop
    second = iter(loader)
    passes = [0]
    for _ in range(10_000):
        try:
            assert segments.serves(0, second)
            segments.next_batch()
        except StopIteration:
            passes.append(0)
            second = iter(loader)
            continue
        except SystemExit:
            break
        passes[-1] += 1
        clock.advance(0.004)
    assert len(passes) > 2 and set(passes[:-1]) == {5}  # every pass len(loader) batches, the last cut
    found = log.events[0][2]
    assert found["train_as_run"]["samples_per_s"] == pytest.approx(8 / 0.004)  # the time away not counted


def test_torchs_warning_about_a_variants_workers_does_not_reach_the_script(one_thread, recwarn, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)  # one core: 2 workers warn
    clock, log = FakeClock(), Log()
    loader = DataLoader(_dataset(), batch_size=8)
    segments = WhatIfSegments(log, clock, cores=1, make_loader=lambda run_loader, k: variant_loader(run_loader, 2))
    iterator = object()
    segments.begin(loader, 0, iterator)
    assert segments.serves(0, iterator)
    segments.next_batch()
    segments.finish("done")
    assert not [w for w in recwarn if "worker" in str(w.message)]
    with pytest.warns(UserWarning, match="worker"):  # what torch says of such a loader where the script makes it
        iter(variant_loader(loader, 2))._shutdown_workers()


class _Pass:
    """A DataLoader iterator as the segments see it: how many batches it yielded itself."""

    def __init__(self) -> None:
        self._num_yielded = 0


def test_a_persistent_workers_pass_handed_back_reset_is_counted_anew(one_thread):
    # DataLoader(persistent_workers=True) (timm's create_loader) returns the same iterator each epoch, reset
    clock, log = FakeClock(), Log()
    loader = DataLoader(_dataset(40), batch_size=8)  # 5 batches a pass
    segments = _segments(clock, log)
    same = _Pass()
    same._num_yielded = 4  # the run's own steps stopped in the epoch's last batch
    segments.begin(loader, 0, same)
    per_pass = []
    for _epoch in range(3):
        handed = 0
        try:
            while True:
                assert segments.serves(0, same)
                segments.next_batch()
                handed += 1
                clock.advance(0.004)
        except StopIteration:
            per_pass.append(handed)
        same._num_yielded = 0  # iter(loader): the same iterator, reset
        segments.new_pass(0, same)
    assert per_pass == [1, 5, 5]
