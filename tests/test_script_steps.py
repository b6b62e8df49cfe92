"""Cutting a script's events into steps (analysis.script_steps): made-up event streams with known times."""

from __future__ import annotations

import json

import pytest

from pipeprof.script.event_steps import read_events, script_steps

SETTINGS = {"batch_size": 4, "num_workers": 0, "pin_memory": False, "prefetch_factor": None,
            "persistent_workers": False, "dataset": "TensorDataset"}


class Script:
    """Writes the events a training script would cause, on a made-up clock (seconds)."""

    def __init__(self) -> None:
        self.t = 100.0
        self.events: list[list] = []
        self.loaders = 0

    def loader(self, name: str) -> int:
        n = self.loaders
        self.loaders += 1
        self.events.append(["L", n, {**SETTINGS, "number": n, "name": name}])
        return n

    def iter(self, n: int, took: float = 0.0) -> None:
        self.events.append(["I", n, self.t, self.t + took])
        self.t += took

    def batch(self, n: int, wait: float, samples: int = 4, record: list | None = None) -> None:
        self.events.append(["N", n, self.t, self.t + wait, samples, record])
        self.t += wait

    def end(self, n: int, wait: float = 0.0) -> None:
        self.events.append(["E", n, self.t, self.t + wait])
        self.t += wait

    def copy(self, took: float) -> None:
        self.events.append(["C", self.t, self.t + took, 100, None])
        self.t += took

    def work(self, seconds: float) -> None:
        self.t += seconds

    def optimizer(self) -> None:
        self.events.append(["O", self.t])

    def mark(self) -> None:
        self.events.append(["M", self.t])

    def backward(self, took: float) -> None:
        self.events.append(["B", self.t, self.t + took])
        self.t += took


def train_epoch(s: Script, n: int, batches: int, *, wait: float, copy: float, compute: float, after: float = 0.0,
                record: bool = False) -> None:
    s.iter(n, took=0.01)
    for _ in range(batches):
        rec = [-1, 1, s.t, s.t + wait, wait / 2, wait / 4, wait / 4, 4] if record else None
        s.batch(n, wait, record=rec)
        s.copy(copy)
        s.work(compute)
        s.optimizer()
        s.work(after)
    s.end(n, wait=0.002)


def test_optimizer_steps_split_into_wait_copy_compute_and_other():
    s = Script()
    train = s.loader("train_loader")
    train_epoch(s, train, 10, wait=0.010, copy=0.002, compute=0.030, after=0.005)
    cut = script_steps(s.events, t0_s=100.0, warmup_steps=2)
    steps = cut.steps
    assert cut.step_source == "optimizer"
    assert len(steps) == 10
    assert steps["warmup"].tolist() == [True, True] + [False] * 8
    later = steps.iloc[1:]  # the first step begins at iter(): no "after" work before it
    assert later["data_wait_s"].to_numpy() == pytest.approx(0.010)
    assert later["h2d_s"].to_numpy() == pytest.approx(0.002)
    assert later["compute_s"].to_numpy() == pytest.approx(0.030)
    assert later["step_s"].to_numpy() == pytest.approx(0.047)  # 5 ms after the previous optimizer step: other
    assert (later["step_s"] - later["data_wait_s"] - later["h2d_s"] - later["compute_s"]).to_numpy() \
        == pytest.approx(0.005)
    first = steps.iloc[0]
    assert first["data_wait_s"] == pytest.approx(0.020)  # iter() (spawning workers) + the first next()
    assert first["t_start_s"] == pytest.approx(0.0)
    assert steps["samples"].tolist() == [4] * 10
    assert steps["loss"].isna().all()  # a script's loss is not ours to read


def test_validation_pass_is_kept_out_of_the_steps_and_reported_per_loader():
    s = Script()
    train, val = s.loader("train_loader"), s.loader("val_loader")
    for _epoch in range(2):
        train_epoch(s, train, 5, wait=0.010, copy=0.0, compute=0.020)
        s.iter(val)
        for _ in range(3):
            s.batch(val, wait=0.050)  # slow validation batches: not a training wait
            s.work(0.100)
        s.end(val)
    cut = script_steps(s.events, t0_s=100.0)
    steps = cut.steps
    assert len(steps) == 10
    assert steps["epoch"].tolist() == [0] * 5 + [1] * 5
    step5 = steps.iloc[5]  # the first step of epoch 1 holds the validation pass and the end of epoch 0
    assert step5["step_s"] == pytest.approx(0.002 + 0.010 + 0.010 + 0.020)  # E, iter(), next(), compute
    assert step5["data_wait_s"] == pytest.approx(0.022)
    roles = {d["name"]: d for d in cut.loaders}
    assert roles["train_loader"]["role"] == "train" and roles["val_loader"]["role"] == "eval"
    assert roles["val_loader"]["batches"] == 6 and roles["val_loader"]["passes"] == 2
    assert roles["val_loader"]["eval_s"] == pytest.approx(2 * 3 * 0.150)
    assert roles["train_loader"]["eval_s"] is None


def test_gradient_accumulation_two_batches_per_step():
    s = Script()
    n = s.loader("loader")
    s.iter(n)
    for _ in range(4):
        s.batch(n, wait=0.010)
        s.work(0.020)
        s.batch(n, wait=0.010)
        s.work(0.020)
        s.optimizer()
    cut = script_steps(s.events, t0_s=100.0)
    assert len(cut.steps) == 4
    assert cut.steps["samples"].tolist() == [8] * 4
    assert cut.steps["data_wait_s"].to_numpy() == pytest.approx(0.020)
    assert cut.steps["compute_s"].to_numpy() == pytest.approx(0.040)


def test_two_optimizers_stepping_on_one_batch_make_one_step():
    s = Script()
    n = s.loader("loader")
    s.iter(n)
    for _ in range(3):
        s.batch(n, wait=0.010)
        s.work(0.010)
        s.optimizer()  # e.g. a GAN's discriminator
        s.work(0.010)
        s.optimizer()  # and its generator
    cut = script_steps(s.events, t0_s=100.0)
    assert len(cut.steps) == 3
    assert cut.steps["step_s"].to_numpy() == pytest.approx(0.030)


def test_manual_marks_win_over_optimizer_steps():
    s = Script()
    n = s.loader("loader")
    s.iter(n)
    for i in range(6):
        s.batch(n, wait=0.001)
        s.work(0.010)
        s.optimizer()
        if i % 2:
            s.mark()
    cut = script_steps(s.events, t0_s=100.0)
    assert cut.step_source == "prof.step"
    assert len(cut.steps) == 3
    assert cut.steps["samples"].tolist() == [8, 8, 8]


def test_no_optimizer_steps_are_the_batches_of_the_busiest_loader():
    s = Script()
    feature, other = s.loader("loader"), s.loader("small")
    s.iter(other)
    s.batch(other, wait=0.5)
    s.end(other)
    s.iter(feature)
    for _ in range(5):
        s.batch(feature, wait=0.010)
        s.work(0.030)
    s.end(feature, wait=0.001)
    cut = script_steps(s.events, t0_s=100.0)
    assert cut.step_source == "loader batches"
    assert len(cut.steps) == 5  # the pass's end closes the last step
    assert cut.steps["data_wait_s"].iloc[1:].to_numpy() == pytest.approx(0.010)
    assert cut.steps["compute_s"].iloc[1:].to_numpy() == pytest.approx(0.030)
    assert {d["name"]: d["role"] for d in cut.loaders} == {"loader": "train", "small": "eval"}


def test_without_an_optimizer_steps_end_at_backward_passes_and_their_loader_trains():
    # d2l's hand-written SGD is no torch.optim optimizer: the loader whose batches feed backward passes trains,
    # even where another loader (validation) has more batches.
    s = Script()
    train, val = s.loader("train_loader"), s.loader("val_loader")
    for _epoch in range(2):
        s.iter(train)
        for _ in range(4):
            s.batch(train, wait=0.010)
            s.work(0.020)
            s.backward(0.015)
            s.work(0.005)  # the hand-written update, after the backward pass: the next step's "other"
        s.end(train)
        s.iter(val)
        for _ in range(6):
            s.batch(val, wait=0.004)
            s.work(0.010)
        s.end(val)
    cut = script_steps(s.events, t0_s=100.0)
    assert cut.step_source == "backward"
    assert {d["name"]: d["role"] for d in cut.loaders} == {"train_loader": "train", "val_loader": "eval"}
    assert len(cut.steps) == 8
    assert cut.steps["samples"].tolist() == [4] * 8
    within = cut.steps.iloc[[1, 2, 3, 5, 6, 7]]  # steps inside an epoch
    assert within["data_wait_s"].to_numpy() == pytest.approx(0.010)
    assert within["compute_s"].to_numpy() == pytest.approx(0.035)
    assert within["step_s"].to_numpy() == pytest.approx(0.050)
    assert cut.steps["step_s"].iloc[4] == pytest.approx(0.005 + 0.010 + 0.035)  # the validation pass left out


def test_optimizer_steps_win_over_backward_passes():
    s = Script()
    n = s.loader("loader")
    s.iter(n)
    for _ in range(3):  # gradient accumulation: two backward passes an optimizer step
        for _ in range(2):
            s.batch(n, wait=0.01)
            s.backward(0.01)
        s.optimizer()
    cut = script_steps(s.events, t0_s=100.0)
    assert cut.step_source == "optimizer"
    assert cut.steps["samples"].tolist() == [8, 8, 8]


def test_a_loader_feeding_backward_passes_trains_beside_the_optimizers_loader():
    s = Script()
    main, extra = s.loader("main"), s.loader("extra")
    s.iter(main)
    s.iter(extra)
    for _ in range(3):
        s.batch(extra, wait=0.01)
        s.backward(0.01)  # e.g. a penalty term's loader: its batches feed a backward pass
        s.batch(main, wait=0.01)
        s.backward(0.01)
        s.optimizer()
    cut = script_steps(s.events, t0_s=100.0)
    assert {d["name"]: d["role"] for d in cut.loaders} == {"main": "train", "extra": "train"}


def test_threads_read_while_training_are_kept_in_order():
    s = Script()
    n = s.loader("loader")
    s.events.append(["T", 100.5, {"at": "first step", "torch_threads": 1}])
    s.iter(n)
    s.batch(n, wait=0.01)
    s.optimizer()
    s.events.append(["T", 101.0, {"at": "end", "torch_threads": 3}])
    cut = script_steps(s.events, t0_s=100.0)
    assert [(t["at"], t["torch_threads"]) for t in cut.threads] == [("first step", 1), ("end", 3)]


def test_wrapped_loader_is_the_training_loader_even_without_optimizer_credit():
    s = Script()
    s.loader("a")
    b = s.loader("b")
    s.events.append(["W", b])
    s.iter(b)
    for _ in range(3):
        s.batch(b, wait=0.01)
        s.mark()
    cut = script_steps(s.events, t0_s=100.0)
    assert {d["name"]: d["role"] for d in cut.loaders} == {"a": "eval", "b": "train"}
    assert len(cut.steps) == 3


def test_loading_records_join_the_step_that_consumed_the_batch():
    s = Script()
    n = s.loader("loader")
    train_epoch(s, n, 4, wait=0.008, copy=0.0, compute=0.01, record=True)
    cut = script_steps(s.events, t0_s=100.0)
    assert cut.loading["step"].tolist() == [0, 1, 2, 3]
    assert cut.loading["fetch_s"].to_numpy() == pytest.approx(0.004)
    assert cut.loading["worker"].tolist() == [-1] * 4
    assert cut.loading["t_start_s"].iloc[0] == pytest.approx(0.01)  # after the 10 ms iter()
    loader = cut.loaders[0]
    assert loader["fetch_per_sample_s"] == pytest.approx(0.001)
    assert loader["prep_per_sample_s"] == pytest.approx(0.0005)


def test_no_dataloader_no_steps_and_no_source():
    cut = script_steps([["S", 1.0, {"pid": 5}], ["O", 2.0], ["X", 3.0, "exit", 0]], t0_s=0.0)
    assert cut.steps.empty and cut.step_source is None and cut.loaders == []
    assert cut.start == {"pid": 5} and cut.end == {"how": "exit", "detail": 0}


def test_read_events_skips_a_line_cut_short(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(["O", 1.0]) + "\n" + json.dumps(["O", 2.0]) + "\n" + '["N", 0, 1.')
    events = read_events(path)
    assert events.tables["O"]["t_s"].tolist() == [1.0, 2.0] and events.unreadable == 1
    missing = read_events(tmp_path / "missing.jsonl")
    assert missing.unreadable == 0 and all(table.empty for table in missing.tables.values())


def test_prefetch_queue_reading_of_the_steps_first_batch():
    s = Script()
    n = s.loader("loader")
    s.iter(n)
    for ready in (None, 2.0, 0.0):
        s.batch(n, wait=0.01)
        s.events[-1].append(ready)  # what next() found waiting in the queue before it was called
        s.work(0.01)
        s.optimizer()
    steps = script_steps(s.events, t0_s=100.0).steps
    assert steps["ready_batches"].isna().tolist() == [True, False, False]
    assert steps["ready_batches"].tolist()[1:] == [2.0, 0.0]


def test_each_loader_says_its_core_wait_per_sample_only_when_every_batch_had_it():
    s = Script()
    train, val = s.loader("train_loader"), s.loader("val_loader")
    s.iter(train)
    for _ in range(4):  # 8 ms of waiting for a core in each batch of 4 samples
        s.batch(train, 0.01, record=[0, 7, s.t, s.t + 0.01, 0.002, 0.004, 0.001, 4, 0.008])
        s.work(0.02)
        s.optimizer()
    s.end(train)
    s.iter(val)
    s.batch(val, 0.01, record=[0, 7, s.t, s.t + 0.01, 0.002, 0.004, 0.001, 4, 0.008])
    s.batch(val, 0.01, record=[0, 7, s.t, s.t + 0.01, 0.002, 0.004, 0.001, 4, None])  # no readings: unknown
    s.end(val)
    loaders = {d["name"]: d for d in script_steps(s.events, t0_s=100.0).loaders}
    assert loaders["train_loader"]["core_wait_per_sample_s"] == pytest.approx(0.002)
    assert loaders["val_loader"]["core_wait_per_sample_s"] is None


def _fit(s: Script, loader: int, epochs: int, batches: int, *, by_hand: bool) -> None:
    """One fit: ``by_hand`` updates the weights as d2l's from-scratch SGD does (no torch.optim step)."""
    for _epoch in range(epochs):
        s.iter(loader, took=0.01)
        for _ in range(batches):
            s.batch(loader, wait=0.010)
            s.work(0.020)
            s.backward(0.015)
            if not by_hand:
                s.optimizer()
            s.work(0.005)
        s.end(loader, wait=0.002)


@pytest.mark.parametrize("same_loader", [False, True])
def test_a_fit_by_hand_beside_a_fit_with_torch_optim_has_every_step_counted(same_loader):
    # d2l's MLP (torch.optim.SGD) then MLPScratch (param -= lr * param.grad): the second fit has no optimizer
    # step, and its batches fell through (94 of 188 counted, no word said).
    s = Script()
    concise = s.loader("train_loader")
    scratch = concise if same_loader else s.loader("scratch_loader")
    _fit(s, concise, epochs=2, batches=4, by_hand=False)
    _fit(s, scratch, epochs=2, batches=4, by_hand=True)
    cut = script_steps(s.events, t0_s=100.0)
    assert cut.step_source == "optimizer and backward"
    assert len(cut.steps) == 16
    assert cut.steps["samples"].tolist() == [4] * 16
    assert cut.uncounted is None
    assert {d["role"] for d in cut.loaders} == {"train"}
    assert cut.steps["data_wait_s"].iloc[9:12].to_numpy() == pytest.approx(0.010)  # inside the fit by hand
    assert cut.steps["step_s"].iloc[9:12].to_numpy() == pytest.approx(0.050)


def test_gradient_accumulation_in_a_later_pass_keeps_its_optimizer_steps():
    # Backward passes between optimizer steps in a pass that has optimizer steps are accumulation, not steps.
    s = Script()
    n = s.loader("loader")
    for _epoch in range(2):
        s.iter(n)
        for _ in range(3):
            for _ in range(2):
                s.batch(n, wait=0.01)
                s.backward(0.01)
            s.optimizer()
        s.end(n)
    cut = script_steps(s.events, t0_s=100.0)
    assert cut.step_source == "optimizer"
    assert cut.steps["samples"].tolist() == [8] * 6


def test_training_batches_in_no_step_are_counted_and_placed():
    # prof.step() marks that stop before the loop does: the batches after the last one are in no step.
    s = Script()
    n = s.loader("loader")
    s.iter(n)
    for i in range(6):
        s.batch(n, wait=0.01)
        s.work(0.02)
        if i < 4:
            s.mark()
    cut = script_steps(s.events, t0_s=100.0)
    assert len(cut.steps) == 4
    assert cut.uncounted is not None
    assert (cut.uncounted.batches, cut.uncounted.of_batches, cut.uncounted.where) == (2, 6, ("after",))
