#!/usr/bin/env python3
"""Training scripts as users write them, each doing one thing a profiler must leave as it was (``make gpu-check``).

``pipeprof profile -- python truth_script.py MODE`` runs one of:

* ``last-device``: trains on the last visible GPU with ``.to(f"cuda:{n - 1}")`` and no ``set_device``
  (as PyTorch's DDP tutorial does): events and memory must follow it, no context made on GPU 0;
* ``sets-visible``: sets ``CUDA_VISIBLE_DEVICES`` to the last GPU itself, then trains: it must see one device;
* ``forks``: forks a child after the start that uses CUDA (as a script forking workers does);
* ``long``: 600 steps, counting every host synchronisation the CUDA API is asked for during them;
* ``side-stream``: a prefetcher copying the next batch on a side stream while the current one trains;
* ``peak``: reads its own ``max_memory_allocated()`` after a 256 MiB peak: pipeprof must not reset it.

Each prints one JSON line ``{"mode", ...facts}`` last; the check holds the facts and the run folder.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

STEPS = {"long": 600}


def _count_syncs(counts: dict[str, int]) -> None:
    """Every call that makes the host wait for the device, counted (class-level: pipeprof's objects too)."""
    import torch

    def counting(owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] = counts.get(name, 0) + 1
            return original(*args, **kwargs)
        setattr(owner, name, wrapper)

    counting(torch.cuda, "synchronize")
    counting(torch.cuda.Event, "synchronize")
    counting(torch.cuda.Stream, "synchronize")
    counting(torch.Tensor, "item")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("mode", choices=("last-device", "sets-visible", "forks", "long", "side-stream", "peak"))
    args = p.parse_args()
    facts: dict[str, Any] = {"mode": args.mode}
    if args.mode == "sets-visible":  # before torch touches CUDA, as a launcher script does
        import subprocess
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
        last = max(0, len([line for line in out.splitlines() if line.startswith("GPU ")]) - 1)
        os.environ["CUDA_VISIBLE_DEVICES"] = str(last)
        facts["gpus_on_machine"] = last + 1
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    if args.mode == "forks":
        pid = os.fork()
        if pid == 0:  # the child initialises CUDA itself: it can unless its parent poisoned the fork
            try:
                ok = not torch.cuda._is_in_bad_fork() and float(torch.ones(1, device="cuda").sum()) == 1.0
            except Exception:  # noqa: BLE001 - any failure is the child's answer
                ok = False
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        facts["child_ok"] = os.waitstatus_to_exitcode(status) == 0
    count = torch.cuda.device_count()
    facts["device_count"] = count
    device = torch.device("cuda", count - 1) if args.mode == "last-device" else torch.device("cuda", 0)
    facts["device"] = str(device)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8192, 784, generator=g), torch.randint(0, 10, (8192,), generator=g))
    loader = DataLoader(data, batch_size=128, shuffle=True, num_workers=1, pin_memory=True, drop_last=True)
    model = nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if args.mode == "peak":
        big = torch.empty(256 << 20, dtype=torch.uint8, device=device)
        del big
    counts: dict[str, int] = {}
    if args.mode == "long":
        _count_syncs(counts)
    steps, target = 0, STEPS.get(args.mode, 200)
    side = torch.cuda.Stream(device) if args.mode == "side-stream" else None
    while steps < target:
        batches = iter(loader)
        ahead = None
        for x, y in batches:
            if side is not None:  # the next batch copied beside the compute (NVIDIA's data_prefetcher)
                with torch.cuda.stream(side):
                    nxt = (x.to(device, non_blocking=True), y.to(device, non_blocking=True))
                if ahead is None:
                    ahead = nxt
                    continue
                torch.cuda.current_stream(device).wait_stream(side)
                (x, y), ahead = ahead, nxt
            else:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            steps += 1
            if steps >= target:
                break
    if args.mode == "long":
        facts["host_syncs_during_steps"] = dict(counts)
    torch.cuda.synchronize(device)
    facts["max_memory_allocated"] = int(torch.cuda.max_memory_allocated(device))
    facts["visible_devices"] = torch.cuda.device_count()
    facts["contexts"] = _contexts(os.getpid())
    print(json.dumps(facts), flush=True)


def _contexts(pid: int) -> list[int] | str:
    """The NVML indices of the GPUs this process holds a context on (their compute processes list it)."""
    try:
        import pynvml as nv
        nv.nvmlInit()
        try:
            held = []
            for i in range(nv.nvmlDeviceGetCount()):
                procs = nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(i))
                if any(p.pid == pid for p in procs):
                    held.append(i)
            return held
        finally:
            nv.nvmlShutdown()
    except Exception as e:  # noqa: BLE001 - said, not guessed
        return f"not read: {type(e).__name__}: {e}"


if __name__ == "__main__":
    main()
