"""The training loop is the unit: a loop fed by no DataLoader on its thread (a generator, a queue filled by a
thread, a third-party loader) has its steps and its wait; a DataLoader iterated on another thread is the
loader's busy time, never the loop's wait.

The pure rule (``script.loop_feed``) on hand-made times; the hooks in this process on a fake clock, the loop's
"sleeps" being clock advances, so every expected number is exact."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pipeprof.script import hooks
from pipeprof.script.event_file import read_events
from pipeprof.script.event_steps import BACKGROUND, TRAIN, script_steps
from pipeprof.script.loop_feed import COPY, FORWARD, MAX_PENDING, LoopFeed, Use

# --- the rule, on hand-made times ---------------------------------------------------------------------


def test_the_wait_runs_from_the_step_end_to_the_batchs_first_use():
    feed = LoopFeed()
    feed.want(10.0)
    fed = feed.resolve(10.25, samples=32)
    assert (fed.t0_s, fed.t1_s, fed.samples, fed.eval_span, fed.copies) == (10.0, 10.25, 32, None, ())
    assert not feed.awaiting


def test_a_copy_before_the_forward_is_the_first_use_and_the_batchs_copy():
    feed = LoopFeed()
    feed.want(1.0)
    feed.add(Use(COPY, 1.5, 1.6, 64, 1000))
    fed = feed.resolve(1.7, samples=999)
    assert (fed.t0_s, fed.t1_s, fed.samples) == (1.0, 1.5, 64)
    assert [c.nbytes for c in fed.copies] == [1000]


def test_one_call_without_gradients_is_part_of_the_step_a_frozen_backbone():
    feed = LoopFeed()
    feed.want(2.0)
    feed.add(Use(FORWARD, 2.4, 2.6, 16))
    fed = feed.resolve(2.6, samples=16)
    assert (fed.t0_s, fed.t1_s, fed.eval_span) == (2.0, 2.4, None)


def test_several_calls_without_gradients_are_an_evaluation_pass_taken_out_of_the_wait():
    feed = LoopFeed()
    feed.want(3.0)
    feed.add(Use(COPY, 3.1, 3.11, 8, 10))  # the evaluation batches' copies and calls
    for i in range(5):
        feed.add(Use(FORWARD, 3.2 + i * 0.1, 3.25 + i * 0.1, 8))
    feed.add(Use(COPY, 4.0, 4.01, 32, 20))  # the next training batch's copy
    fed = feed.resolve(4.02, samples=32)
    assert fed.eval_span == (3.0, pytest.approx(3.65))  # from the step's end: its first fetch is the pass's
    assert (fed.t0_s, fed.t1_s, fed.samples) == (pytest.approx(3.65), 4.0, 32)
    assert [c.nbytes for c in fed.copies] == [20]


def test_uses_kept_while_waiting_are_bounded_and_the_first_is_kept():
    feed = LoopFeed()
    for i in range(10_000):  # a data set moved tensor by tensor before the first step
        feed.add(Use(COPY, float(i), float(i) + 0.5, 1, 4))
    fed = feed.resolve(20_000.0, samples=8)
    assert fed.t1_s == 0.0 and len(fed.copies) == MAX_PENDING


def test_the_first_batchs_wait_is_not_seen():
    feed = LoopFeed()  # no step has ended: when the loop began to want its first batch is unknown
    fed = feed.resolve(5.0, samples=4)
    assert fed.t0_s == fed.t1_s == 5.0


# --- the hooks in this process, on a fake clock ---------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        return self.now_s

    def advance(self, s: float) -> None:
        with self.lock:
            self.now_s += s


@pytest.fixture
def session(tmp_path):
    clock = FakeClock()
    path = tmp_path / "events.jsonl"
    h = hooks.Hooks(hooks.EventLog(str(path), clock=clock), clock=clock)
    h.install()
    try:
        yield h, clock, path
    finally:
        h.uninstall()


def _train(batches: Iterator, clock: FakeClock, compute_s: float) -> int:
    """A plain loop in the documented PyTorch style; ``compute_s`` of the fake clock a step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    for x, y in batches:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        clock.advance(compute_s)
        optimizer.step()
        steps += 1
    return steps


def _generator(clock: FakeClock, n: int, load_s: float, size: int = 16) -> Iterator:
    for _ in range(n):
        clock.advance(load_s)
        yield torch.randn(size, 8), torch.randint(0, 2, (size,))


def test_a_generator_fed_loop_has_its_steps_and_its_wait(session):
    h, clock, path = session
    assert _train(_generator(clock, 12, load_s=0.005), clock, compute_s=0.003) == 12
    h.uninstall()
    cut = script_steps(read_events(path), 0.0, warmup_steps=0)
    assert cut.step_source == "optimizer"
    assert len(cut.steps) == 12
    (train,) = [loader for loader in cut.loaders if loader["role"] == TRAIN]
    assert train["feed"] == "loop" and train["batches"] == 12 and train["samples"] == 12 * 16
    later = cut.steps.iloc[1:]  # the first batch's wait is not seen: nothing marks when the loop began
    assert later["data_wait_s"].tolist() == pytest.approx([0.005] * 11)
    assert later["compute_s"].tolist() == pytest.approx([0.003] * 11)
    assert (cut.steps["samples"] == 16).all()


def test_an_evaluation_pass_between_steps_is_not_the_next_steps_wait(session):
    h, clock, path = session
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _epoch in range(2):
        for x, y in _generator(clock, 4, load_s=0.005):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            clock.advance(0.002)
            optimizer.step()
            optimizer.zero_grad()
        with torch.no_grad():
            for x, _ in _generator(clock, 3, load_s=0.05):  # an evaluation pass: 0.15 s
                model(x)
    h.uninstall()
    cut = script_steps(read_events(path), 0.0, warmup_steps=0)
    assert len(cut.steps) == 8
    assert cut.steps["data_wait_s"].iloc[1:].tolist() == pytest.approx([0.005] * 7)  # none holds the pass
    assert cut.steps["step_s"].iloc[1:].tolist() == pytest.approx([0.007] * 7)
    (evaluation,) = [loader for loader in cut.loaders if loader["role"] == "eval"]
    assert evaluation["feed"] == "loop evaluation" and evaluation["passes"] == 1  # the second: after the last step


def test_a_queue_filled_by_a_thread_is_waited_for_in_get(session):
    h, clock, path = session
    ready: queue.Queue = queue.Queue(maxsize=2)

    def produce() -> None:
        for x, y in _generator(clock, 10, load_s=0.0):
            ready.put((x, y))
        ready.put(None)

    def batches() -> Iterator:
        while (item := ready.get()) is not None:
            clock.advance(0.004)  # the loop's own time in get(), on the fake clock
            yield item

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    assert _train(batches(), clock, compute_s=0.006) == 10
    producer.join()
    h.uninstall()
    cut = script_steps(read_events(path), 0.0, warmup_steps=0)
    assert len(cut.steps) == 10
    assert cut.steps["data_wait_s"].iloc[1:].tolist() == pytest.approx([0.004] * 9)


def test_a_dataloader_on_another_thread_is_the_loaders_busy_time_not_the_loops_wait(session):
    h, clock, path = session
    dataset = TensorDataset(torch.randn(160, 8), torch.randint(0, 2, (160,)))

    def slow(batch):  # the loader's own work: 0.01 s of the fake clock a batch, on the prefetch thread
        clock.advance(0.01)
        return torch.utils.data.default_collate(batch)

    loader = DataLoader(dataset, batch_size=16, collate_fn=slow)
    handed: queue.Queue = queue.Queue()

    def prefetch() -> None:
        for batch in loader:
            handed.put(batch)
        handed.put(None)

    thread = threading.Thread(target=prefetch)
    thread.start()
    thread.join()  # every batch made before the loop asks: the loop never waits for the loader

    def batches() -> Iterator:
        while (item := handed.get()) is not None:
            clock.advance(0.0001)  # the loop's get() of a batch made long before
            yield item

    assert _train(batches(), clock, compute_s=0.003) == 10
    h.uninstall()
    cut = script_steps(read_events(path), 0.0, warmup_steps=0)
    assert len(cut.steps) == 10
    assert cut.steps["data_wait_s"].iloc[1:].tolist() == pytest.approx([0.0001] * 9)
    by_role = {loader["role"]: loader for loader in cut.loaders}
    assert by_role[TRAIN]["feed"] == "loop"
    background = by_role[BACKGROUND]
    assert background["name"] == "loader" and background["batches"] == 10
    assert background["busy_s"] == pytest.approx(0.1)  # its next() on its own thread: 10 x 0.01 s


def test_a_dataloader_on_the_loops_thread_is_timed_at_its_next_as_before(session):
    h, clock, path = session
    dataset = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))

    def collate(batch):
        clock.advance(0.001)
        return torch.utils.data.default_collate(batch)

    assert _train(iter(DataLoader(dataset, batch_size=16, collate_fn=collate)), clock, compute_s=0.002) == 4
    h.uninstall()
    cut = script_steps(read_events(path), 0.0, warmup_steps=0)
    assert [(loader.get("feed"), loader["role"], loader["batches"]) for loader in cut.loaders] == [(None, TRAIN, 4)]
    assert len(cut.steps) == 4 and cut.steps["data_wait_s"].tolist() == pytest.approx([0.001] * 4)
