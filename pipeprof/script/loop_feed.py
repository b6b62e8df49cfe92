"""The training loop's own batches, whatever feeds them: a generator, a queue, a third-party loader.

A loop fed by a torch DataLoader on its own thread is timed at that loader's
``next()`` (``Hooks.on_next``). Anything else — a plain generator, a
``queue.Queue`` filled by a thread, fastai's or spdl's loader — has no call
pipeprof can time by name, so the loop is watched from the side where every
training script looks the same: from a step's end (an optimizer step, a
backward pass where no optimizer step is expected, ``prof.step()``) the loop
wants its next batch, and it has it when it first *uses* it: copies a tensor
(``Tensor.to`` / ``.cuda``) or calls a module with gradients on. The time in
between is the loop's data wait: the iterable's ``next()``, and whatever small
bookkeeping the loop does before touching the batch (``zero_grad``).

Calls made without gradients while the loop waits are either part of the
step (a frozen backbone run under ``torch.no_grad()``: one call) or an
evaluation pass between two training steps (two calls or more): the pass,
from its first use to the end of its last no-grad call, is then taken out of
the wait, as an evaluation loader's passes are (from the step's end: its first
batch's fetch is the pass's).

Pure: the hooks feed it times and sample counts and write what ``resolve``
returns. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

COPY, FORWARD = "copy", "forward"
# uses kept while the loop waits: its batch's first use and copies (a script that copies a data set tensor by
# tensor before its first step would otherwise keep every copy)
MAX_PENDING = 64


class Use(NamedTuple):
    """One thing the loop did with data while it waited: a tensor copy or a no-grad module call (host seconds)."""

    kind: str
    t0_s: float
    t1_s: float
    samples: int
    nbytes: int = 0


@dataclass(frozen=True)
class Fed:
    """How the loop got one batch: its wait ``t0_s``..``t1_s`` (``t1_s`` the batch's first use), its samples,
    the evaluation pass that ran while it waited (None if none), and the batch's copies."""

    t0_s: float
    t1_s: float
    samples: int
    eval_span: tuple[float, float] | None
    copies: tuple[Use, ...]


@dataclass
class LoopFeed:
    """The state between a step's end and the first use of the loop's next batch."""

    awaiting: bool = True  # the loop wants a batch it has not yet used
    since_s: float | None = None  # when it began to want it (None: before the first step, unknown)
    depth: int = 0  # inside a no-grad module call made while waiting (its submodules are part of it)
    _pending: list[Use] = field(default_factory=list)  # uses so far (until an evaluation pass shows itself)
    _eval_start_s: float | None = None  # an evaluation pass's first use, once two no-grad calls were seen
    _eval_end_s: float = 0.0  # the end of its last no-grad call

    def want(self, t_s: float) -> None:
        """A step ended at ``t_s``: the loop wants its next batch from now."""
        self.awaiting, self.since_s, self.depth = True, t_s, 0
        self._pending.clear()
        self._eval_start_s = None

    def fed(self) -> None:
        """A loader pipeprof times by name handed the loop its batch: nothing left to resolve."""
        self.awaiting = False
        self._pending.clear()
        self._eval_start_s = None

    def add(self, use: Use) -> None:
        """A copy or a no-grad module call while waiting."""
        if use.kind == FORWARD:
            calls = sum(u.kind == FORWARD for u in self._pending)
            if self._eval_start_s is not None or calls >= 1:  # two no-grad calls: an evaluation pass
                if self._eval_start_s is None:
                    self._eval_start_s = self._pending[0].t0_s
                self._eval_end_s = use.t1_s
                self._pending.clear()  # the uses after the pass's last call are the training batch's
                return
        if len(self._pending) < MAX_PENDING:
            self._pending.append(use)

    def resolve(self, now_s: float, samples: int) -> Fed:
        """The loop used its batch (a module call with gradients at ``now_s``, on ``samples`` samples)."""
        first = self._pending[0] if self._pending else None
        use_s = first.t0_s if first is not None else now_s
        eval_span = None
        if self._eval_start_s is not None:  # from the step's end: the pass's first fetch is the pass's
            eval_span = (min(self._eval_start_s, self.since_s if self.since_s is not None else self._eval_start_s),
                         self._eval_end_s)
        t0_s = use_s if self.since_s is None else self.since_s  # the first batch's wait is not seen
        if eval_span is not None:
            t0_s = max(t0_s, eval_span[1])
        fed = Fed(min(t0_s, use_s), use_s, first.samples if first is not None else samples, eval_span,
                  tuple(u for u in self._pending if u.kind == COPY))
        self.fed()
        return fed
