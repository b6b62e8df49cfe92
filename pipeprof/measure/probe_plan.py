"""One plan for the changed loops measured after a run: a scenario's trained probes (``measure.what_if``) and a
script's what-if segments (``script.segments``) run the same variants, in the same order, and stop alike.

The plan for a run with ``k`` workers at ``T`` torch threads on ``N`` usable cores:

1. ``train_as_run``: the run's own loop at its own settings (``k = 0`` with data not read cold: a measured
   prediction is read against it, ``analysis.prediction``);
2. ``train_workers`` at ``k + 1`` and ``k − 1`` (0 too, but for data read cold);
3. ``train_threads`` at ``k``: the other number of torch threads (1, or ``N`` from 1), for a job computing on
   the CPU (a script's: not known, so planned);
4. then ``train_workers`` at ``k + 2`` up to ``2 × N`` (``extra``) while the budget lasts.

When to stop: a variant that would overrun the probes' budget is not started (``measure.windows.probes_budget``:
in steps of the run, at most the larger of 3 s and 10 % of its training); the extras end at the first one absent.
Standard library only: the segments run inside the user's process.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """One variant of the run: its ``what_ifs`` entry (``key``, under ``num_workers`` but for
    ``train_as_run``), the loader's ``num_workers`` and torch's threads."""

    key: str
    num_workers: int
    threads: int
    extra: bool = False  # run while the budget lasts, not recorded where it does not


def probe_plan(k: int, threads: int, cores: int, *, cold: bool = False, cpu: bool = True) -> list[Variant]:
    """The variants after a run with ``k`` workers at ``threads`` torch threads on ``cores`` usable cores, in
    order (module docstring); ``cold``: the data is read cold; ``cpu``: the job computes on the CPU."""
    out = [Variant("train_as_run", 0, threads)] if k == 0 and not cold else []
    out.append(Variant("train_workers", k + 1, threads))
    if k >= 1 and (k - 1 >= 1 or not cold):
        out.append(Variant("train_workers", k - 1, threads))
    other = 1 if threads > 1 else cores
    if cpu and other != threads:
        out.append(Variant("train_threads", k, other))
    out += [Variant("train_workers", n, threads, extra=True) for n in range(k + 2, 2 * cores + 1)]
    return out
