"""The simulated device's loops (``pipeprof.gpu_check.sim_device.CASES``) on a real GPU, under ``pipeprof.profile()``.

``python -m pipeprof.gpu_check.sim_loops --out DIR`` runs, for each case, the loop the simulation runs: a
Dataset whose ``__getitem__`` sleeps ``load_s`` (num_workers=0, no collation), its batch copied with
``.to("cuda", non_blocking=case.pinned)`` from pinned or pageable memory and sized so the copy takes
``copy_s`` (the bandwidth measured with CUDA events first), ``launch_s`` of host work to queue the step, then
``torch.cuda._sleep`` calibrated with CUDA events to ``compute_s`` of device time, ``torch.cuda.synchronize()``
when the case synchronises every step, and an optimizer step (where pipeprof cuts steps). One JSON line per
case: ``{"case", "folder", "simulated": sim_device.simulated_fractions(case), "calibration"}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import pipeprof
from pipeprof.gpu_check import sim_device

STEPS = 100  # more than the simulation's 40: the real device's fractions settle over more steps
PROBE_BYTES = 64 << 20


def _elapsed_s(work: Any, repeats: int = 5) -> float:
    """Median device seconds of ``work()`` between two CUDA events (one untimed call first)."""
    work()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def sleep_cycles_per_s() -> float:
    """Cycles of ``torch.cuda._sleep`` per device second, measured with events."""
    cycles = 2_000_000
    return cycles / _elapsed_s(lambda: torch.cuda._sleep(cycles))


def copy_bytes_per_s(pinned: bool) -> float:
    """Host-to-device bytes/s of one copy from pinned (non_blocking) or pageable memory, with events."""
    src = torch.empty(PROBE_BYTES, dtype=torch.uint8, pin_memory=pinned)
    return PROBE_BYTES / _elapsed_s(lambda: src.to("cuda", non_blocking=pinned))


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Batches(Dataset):
    """``steps`` batches, each ``load_s`` of host time (a sleep: the read and decode) to make."""

    def __init__(self, steps: int, load_s: float, nbytes: int, pinned: bool) -> None:
        self.steps, self.load_s = steps, load_s
        self.buffers = [torch.ones(nbytes, dtype=torch.uint8, pin_memory=pinned) for _ in range(2)]

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.load_s)
        return self.buffers[i % 2]


def run_case(case: sim_device.LoopCase, out: Path, cycles_per_s: float, bandwidth: dict[bool, float]) -> dict[str, Any]:
    nbytes = max(1, int(case.copy_s * bandwidth[case.pinned]))
    cycles = max(1, int(case.compute_s * cycles_per_s))
    loader = DataLoader(Batches(STEPS, case.load_s, nbytes, case.pinned), batch_size=None, num_workers=0)
    weight = torch.nn.Parameter(torch.zeros(1, device="cuda"))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    with pipeprof.profile(name=f"sim-{case.name}", out=out, warmup_steps=case.warmup_steps, quiet=True) as prof:
        for x in prof.wrap(loader):
            x.to("cuda", non_blocking=case.pinned)
            _spin(case.launch_s)
            torch.cuda._sleep(cycles)
            if case.sync_every_step:
                torch.cuda.synchronize()
            weight.grad = torch.ones_like(weight)
            optimizer.step()
    torch.cuda.synchronize()
    simulated = sim_device.simulated_fractions(case)
    return {"case": case.name, "folder": str(prof.folder),
            "simulated": {k: simulated[k] for k in sim_device.PARTS},
            "calibration": f"{nbytes} byte {'pinned' if case.pinned else 'pageable'} copies, "
                           f"{cycles} sleep cycles ({cycles_per_s / 1e9:.3f} G/s), {STEPS} steps"}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    args = p.parse_args(argv)
    torch.cuda.init()
    cycles_per_s = sleep_cycles_per_s()
    bandwidth = {True: copy_bytes_per_s(True), False: copy_bytes_per_s(False)}
    for case in sim_device.CASES:
        if args.case and case.name not in args.case:
            continue
        print(json.dumps(run_case(case, args.out / case.name, cycles_per_s, bandwidth)), flush=True)


if __name__ == "__main__":
    main()
