"""The fixed MLPs pipeprof trains: 784 -> hidden widths -> 10, ReLU between layers."""

from __future__ import annotations

import torch
from torch import nn

from pipeprof.storage.synthetic import CLASSES, FEATURES


def build_mlp(hidden: tuple[int, ...], seed: int = 0) -> nn.Sequential:
    """An MLP with deterministic initial weights for ``seed``."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        widths = [FEATURES, *hidden, CLASSES]
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
            layers.append(nn.Linear(n_in, n_out))
            if i < len(widths) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)
    finally:
        torch.random.set_rng_state(generator_state)
