"""What both trainer callbacks share: one ``pipeprof.profile()`` block opened when fit begins and closed when it
ends, and the step split to hand to the trainer's own logger.

The block is ``pipeprof.api.Profile`` itself: the same hooks as ``pipeprof
profile``, installed at the start and taken back at the end, and the same
run folder written. A training that never reaches its end hook (an
exception a framework does not report to callbacks) is closed at the
process's exit, saved as failed, so nothing measured is lost.
"""

from __future__ import annotations

import atexit
from pathlib import Path
from typing import Any

from pipeprof.api import Profile
from pipeprof.numbers import finite
from pipeprof.run_meta import JsonObject, as_object

PREFIX = "pipeprof/"
SHARES = ("data_wait", "h2d", "compute", "other")


class UnfinishedFit(RuntimeError):
    """The process ended while a fit was still being profiled (its end hook never ran)."""


def step_split(summary: JsonObject) -> dict[str, float]:
    """The summary's split of step time as tracker metrics: ``pipeprof/<phase>_share`` (0..1) for data wait,
    host → device, compute and other, ``pipeprof/samples_per_s`` and ``pipeprof/steps``; a value the run could
    not measure is left out, never sent as 0."""
    fractions = as_object(summary.get("fractions"))
    values = {f"{PREFIX}{p}_share": finite(fractions.get(p)) for p in SHARES}
    values[f"{PREFIX}samples_per_s"] = finite(summary.get("samples_per_s"))
    values[f"{PREFIX}steps"] = finite(summary.get("steps"))
    return {k: float(v) for k, v in values.items() if v is not None}


class FitProfile:
    """One profiled fit: ``start()`` when it begins, ``finish(exc)`` when it ends (once; later calls do nothing).

    After ``finish``: ``run``, ``summary``, ``folder`` as ``pipeprof.profile()`` leaves them, and ``split``
    (``step_split``)."""

    def __init__(self, name: str, out: str | Path, options: dict[str, Any]) -> None:
        self.name, self.out, self.options = name, out, options
        self.profile: Profile | None = None
        self.split: dict[str, float] = {}

    @property
    def active(self) -> bool:
        return self.profile is not None and self.profile.run is None

    def start(self) -> None:
        if self.active:
            return  # a second fit hook of the same fit (e.g. a resumed HF train() calling it again)
        self.profile = Profile(self.name, out=self.out, **self.options)
        self.profile.__enter__()
        atexit.register(self._at_exit)

    def finish(self, exc: BaseException | None = None) -> bool:
        """Take the hooks back and write the run folder; True when this call did it."""
        if not self.active:
            return False
        assert self.profile is not None
        atexit.unregister(self._at_exit)
        self.profile.__exit__(None if exc is None else type(exc), exc, None)
        self.split = step_split(self.profile.summary or {})
        return True

    def _at_exit(self) -> None:
        self.finish(UnfinishedFit("the process ended before the trainer's end-of-training hook"))

    @property
    def summary(self) -> dict[str, Any] | None:
        return None if self.profile is None else self.profile.summary

    @property
    def folder(self) -> Path | None:
        return None if self.profile is None else self.profile.folder


class FitResults:
    """What a callback shows after its fit (``self.fit``, a ``FitProfile``): the summary, the run folder and the
    step split sent to the trainer's logger (None, None and {} before the fit ends)."""

    fit: FitProfile

    @property
    def summary(self) -> dict[str, Any] | None:
        return self.fit.summary

    @property
    def folder(self) -> Path | None:
        return self.fit.folder

    @property
    def split(self) -> dict[str, float]:
        return self.fit.split
