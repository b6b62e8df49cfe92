"""The training step: forward, cross-entropy, backward, SGD update."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

StepFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def make_train_step(model: nn.Module, lr: float, momentum: float) -> StepFn:
    """A function ``step(x, y) -> (loss, correct)`` that trains ``model`` on one batch.

    ``loss`` and ``correct`` are returned as detached device tensors: reading
    them (``.item()``) would synchronize with the device every step, so the
    caller resolves them lazily.
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    loss_fn = nn.CrossEntropyLoss()
    model.train()

    def step(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            correct = (logits.argmax(dim=1) == y).sum()
        return loss.detach(), correct

    return step
