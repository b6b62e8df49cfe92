"""What the hooks of ``pipeprof profile`` add to one training step, part by part, in microseconds.

Used by ``benchmarks/overhead.py --case script``. Each part is timed as the
hooked call minus the plain call, each the fastest of several repeats of
many calls (``timeit``: the fastest is the least disturbed by the machine;
hooked and plain repeats interleaved), in one process: the event log (a batch, two copies and an optimizer step
written through ``EventLog``, its flushes included), the fetch timing in
the process that makes the batch (wall and thread CPU clocks, the record
carried back) and, beside it, the two readings of the thread's run-queue wait
that tell waiting for a core from fetch (``measure.schedstat``), ``next()`` (the clocks, unwrapping the record, remembering
the batch's tensors), two ``.to()`` calls on the batch's tensors, the
optimizer post-hook and the backward-pass wrapper. End-to-end ratios on a shared machine move by ±10 %
from run to run; these parts say where the cost is, within a microsecond
or so.
"""

from __future__ import annotations

import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.data import default_collate
from torch.utils.data._utils import fetch as torch_fetch

from pipeprof.measure.schedstat import no_run_queue
from pipeprof.script import batches, hooks
from pipeprof.script.batches import Tagged, TimedCollate, _timed_fetch


def _extra_us(plain: Callable[[], object], hooked: Callable[[], object], number: int = 5000) -> float:
    """Fastest hooked minus fastest plain, in µs a call, their repeats interleaved (the machine's slow spells
    then fall on both)."""
    times: dict[Callable[[], object], list[float]] = {plain: [], hooked: []}
    for _ in range(25):
        for call in times:
            times[call].append(timeit.timeit(call, number=number))
    return (min(times[hooked]) - min(times[plain])) / number * 1e6


def hook_costs_us() -> dict[str, float]:
    """Per training step of one batch: microseconds each part of the hooks adds."""
    x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))
    with tempfile.TemporaryDirectory(prefix="pipeprof-hooks-") as folder:
        log = hooks.EventLog(str(Path(folder) / "events.jsonl"))
        probe = hooks.Hooks(log)
        now = [log._last_flush_s]
        record = [-1, 4242, 1.0, 1.001, 0.0004, 0.0005, 0.0001, 64, 0.00002]

        def step_events() -> None:  # one step's events, 1.5 ms apart: a flush every ~330 steps
            now[0] += 0.0015
            t = now[0]
            log.add(("N", 0, t, t + 0.0001, 64, record, 1.0), t)
            log.add(("C", t, t + 0.00001, 200704, None), t)
            log.add(("C", t, t + 0.00001, 512, None), t)
            log.add(("O", t + 0.001), t + 0.001)

        costs = {"event log (4 events)": _extra_us(lambda: None, step_events, 2000)}
        samples = [(x[0], y[0])]
        plain = torch_fetch._MapDatasetFetcher(samples, True, default_collate, False)
        timed = torch_fetch._MapDatasetFetcher(samples, True, TimedCollate(default_collate), False)
        original = torch_fetch._MapDatasetFetcher.fetch
        timed_fetch = _timed_fetch(original)
        reader = batches.run_queue

        def fetch_with(run_queue: Callable[[], float | None]) -> Callable[[], object]:
            def call() -> object:
                batches.run_queue = run_queue  # the same assignment in both: it cancels out
                return timed_fetch(timed, [0])
            return call

        try:  # the clocks alone, then the run-queue readings side by side with them
            costs["fetch timing"] = _extra_us(lambda: original(plain, [0]), fetch_with(no_run_queue))
            costs["waiting for a core (2 schedstat reads)"] = _extra_us(fetch_with(no_run_queue), fetch_with(reader))
        finally:
            batches.run_queue = reader

        class Iterator:
            _pipeprof_loader = 0
        iterator, batch = Iterator(), (x, y)
        probe.log = hooks.EventLog(str(Path(folder) / "next.jsonl"))
        costs["next()"] = _extra_us(lambda: batch, lambda: probe.on_next(iterator, lambda it: Tagged(batch, record)))
        probe._remember(batch)
        to, hooked_to = torch.Tensor.to, hooks._copy_method(torch.Tensor.to, probe)
        probe.live = True
        try:
            costs["2 x .to() of the batch"] = 2 * _extra_us(lambda: to(x, "cpu"), lambda: hooked_to(x, "cpu"))
            costs["optimizer post-hook"] = _extra_us(lambda: None, lambda: probe.on_optimizer_step(None, (), {}))
            # the backward wrapper around a stand-in for torch.autograd.backward: the wrapper's own cost
            probe.optimizer_steps = 1  # as in a script with an optimizer: a backward pass does not end a step
            costs["backward hook"] = _extra_us(lambda: None, hooks._backward_function(lambda: None, probe))
        finally:
            probe.live = False
    costs["total"] = sum(costs.values())
    return costs


if __name__ == "__main__":
    for part, us in hook_costs_us().items():
        print(f"{part:40s} {us:6.2f} us")
