"""The training step: forward, cross-entropy, backward, SGD update.

``module`` models train with ``torch.optim.SGD``; ``scratch`` models with
``ScratchSGD``, a hand-written SGD with momentum that applies the same update
rule. With ``spec.compile`` the forward runs through ``torch.compile``
(inductor): the first step(s) compile it, so they are much slower than the
rest (a warm-up), and a new batch size (an epoch's last, partial batch) compiles again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from pipeprof.scenario import ModelSpec
from pipeprof.workload.model import Model, ScratchMLP

StepFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
Forward = Callable[[torch.Tensor], torch.Tensor]
Backward = Callable[[torch.Tensor], None]


class ScratchSGD:
    """SGD with momentum by hand, the update of ``torch.optim.SGD`` with dampening 0,
    no Nesterov and no weight decay::

        buf = momentum * buf + grad      (buf starts at zero, so step 1 gives buf = grad)
        param -= lr * buf

    In-place, under ``torch.no_grad()``; ``zero_grad`` sets grads to None, as
    ``optimizer.zero_grad()`` does by default.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float, momentum: float) -> None:
        self.params = list(params)
        self.lr = lr
        self.momentum = momentum
        self.buffers = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p, buf in zip(self.params, self.buffers):
            if p.grad is None:
                continue
            buf.mul_(self.momentum).add_(p.grad)
            p.add_(buf, alpha=-self.lr)


def compiled_forward(model: Model) -> Forward:
    """``model``'s forward through ``torch.compile`` as one graph (``fullgraph``: no
    silent fallback to eager code at a graph break).

    Compilation itself happens at the first call (and again for a new batch
    size). Raises RuntimeError, with the reason, when this Python/platform
    cannot run torch.compile at all.
    """
    if not torch._dynamo.is_dynamo_supported():
        raise RuntimeError("model.compile = true: torch.compile is not supported with this Python "
                           "or platform; set model.compile = false to train eagerly")
    return torch.compile(model.forward if isinstance(model, ScratchMLP) else model, fullgraph=True)


def _reporting_compile_failures(step: StepFn) -> StepFn:
    """``step``, with a compiler failure (forward or backward graph) turned into one RuntimeError line.

    E.g. no working C++ compiler on the CPU, no triton on CUDA: the run fails
    with the reason instead of timing eager code as "compiled".
    """
    def checked(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            return step(x, y)
        except torch._dynamo.exc.BackendCompilerFailed as e:
            text = str(e).strip()
            reason = text.splitlines()[0] if text else type(e).__name__
            raise RuntimeError(f"model.compile = true: torch.compile could not compile the model: "
                               f"{reason}") from e

    return checked


def make_train_step(model: Model, spec: ModelSpec, *, forward: Forward | None = None,
                    backward: Backward | None = None) -> StepFn:
    """A function ``step(x, y) -> (loss, correct)`` that trains ``model`` on one batch.

    ``model`` comes from ``build_model(spec, device)``; ``spec`` gives lr,
    momentum and compile. ``loss`` (mean cross-entropy) and ``correct`` (the
    number of right predictions) are returned as detached device tensors:
    reading them (``.item()``) would synchronize with the device every step,
    so the caller resolves them lazily.

    ``forward`` replaces the model's forward (a ``DistributedDataParallel``
    wrapping ``model``), ``backward`` runs ``loss.backward()`` (one that times
    it: ``workload.distributed.CollectiveWait.backward``).
    """
    is_scratch = isinstance(model, ScratchMLP)
    if is_scratch != (spec.implementation == "scratch"):
        raise ValueError(f"model.implementation = {spec.implementation!r} but the model is a "
                         f"{type(model).__name__}: build it with build_model(spec, device)")
    if is_scratch:
        optimizer: ScratchSGD | torch.optim.SGD = ScratchSGD(model.parameters(), spec.lr, spec.momentum)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum)
    loss_fn = F.cross_entropy if is_scratch else nn.CrossEntropyLoss()
    run_forward: Forward = forward if forward is not None else (compiled_forward(model) if spec.compile else model)
    run_backward: Backward = backward if backward is not None else torch.Tensor.backward
    model.train()

    def step(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        optimizer.zero_grad()
        logits = run_forward(x)
        loss = loss_fn(logits, y)
        run_backward(loss)
        optimizer.step()
        with torch.no_grad():
            correct = (logits.argmax(dim=1) == y).sum()
        return loss.detach(), correct

    return _reporting_compile_failures(step) if spec.compile else step
