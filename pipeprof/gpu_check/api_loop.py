"""A CUDA training loop profiled with the Python API: ``with pipeprof.profile() as prof:``.

``python -m pipeprof.gpu_check.api_loop --out DIR --steps N`` trains an MLP on CUDA for N steps inside
``pipeprof.profile(out=DIR)`` (pinned loader, one worker, non_blocking copies) and prints one JSON line:
``{"folder": the run folder}``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pipeprof


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=150)
    args = p.parse_args(argv)
    device = torch.device("cuda")
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16384, 784, generator=g), torch.randint(0, 10, (16384,), generator=g))
    loader = DataLoader(data, batch_size=256, shuffle=True, num_workers=1, pin_memory=True, drop_last=True)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    steps = 0
    with pipeprof.profile(name="gpu-check-api", out=args.out, warmup_steps=10, quiet=True) as prof:
        while steps < args.steps:
            for x, y in prof.wrap(loader):
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
                steps += 1
                if steps >= args.steps:
                    break
    print(json.dumps({"folder": str(prof.folder)}), flush=True)


if __name__ == "__main__":
    main()
