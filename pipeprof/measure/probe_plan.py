"""One plan for the changed loops measured after a run: a scenario's trained probes (``measure.what_if``) and a
script's what-if segments (``script.segments``) run the same variants, in the same order, and stop alike.

The plan for a run with ``k`` workers at ``T`` torch threads on ``N`` usable cores:

1. ``train_as_run``: the run's own loop at its own settings (``k = 0`` with data not read cold: a measured
   prediction is read against it, ``analysis.prediction``);
2. ``train_workers`` at ``k + 1`` and ``k − 1`` (0 too, but for data read cold), then at the number of
   workers the run's own step says would feed its compute (``workers_wanted``), at most the usable cores: the
   top candidate an estimate would name, measured rather than estimated wherever the budget reaches it;
3. ``train_threads`` at ``k``: the other number of torch threads (1, or ``N`` from 1), for a job computing on
   the CPU (a script's: not known, so planned);
4. then ``train_workers`` beyond ``k + 1`` (``extra``) while the budget lasts: first the number of workers the
   run's own step says would feed its compute where that is more than the cores, then a ladder from ``k + 2`` to ``2 × N``
   that grows by half each rung (every number on a few cores; 6, 9, 14, 21, 32, 48... on 64), so a budget of a few
   variants reaches the numbers a many-core machine may need.

When to stop: a variant that would overrun the probes' budget is not started (``measure.windows.probes_budget``:
in steps of the run, at most the larger of 3 s and 10 % of its training); the extras end at the first one absent.
Standard library only: the segments run inside the user's process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """One variant of the run: its ``what_ifs`` entry (``key``, under ``num_workers`` but for
    ``train_as_run``), the loader's ``num_workers`` and torch's threads."""

    key: str
    num_workers: int
    threads: int
    extra: bool = False  # run while the budget lasts, not recorded where it does not


def workers_wanted(k: int, step_s: float | None, wait_s: float | None) -> int | None:
    """The number of workers that would hand a batch over at the loop's compute pace, from the run's own median
    step ``step_s`` and data wait ``wait_s`` (every term measured; no constant): the loop's own work is
    ``c = step_s − wait_s``. With ``k ≥ 1`` workers the loop took a batch each step, so a worker took ``k ×
    step_s`` a batch, and ``n`` workers keep up with ``c`` when ``n ≥ k × step_s / c``; with none, the wait was
    the batch's loading in the loop's own process: ``n ≥ wait_s / c``. None: not measured, or no compute left."""
    if step_s is None or wait_s is None or not step_s > 0 or wait_s < 0:
        return None
    compute_s = step_s - wait_s
    if not compute_s > 0:
        return None
    return max(1, math.ceil((k * step_s if k else wait_s) / compute_s - 1e-9))


def ladder(first: int, top: int) -> list[int]:
    """From ``first`` up to ``top``, each rung half again the last (at least one more), ``top`` the last rung."""
    out: list[int] = []
    n = first
    while n < top:
        out.append(n)
        n = max(n + 1, math.ceil(n * 1.5))
    return out + [top] if first <= top else out


def probe_plan(k: int, threads: int, cores: int, *, cold: bool = False, cpu: bool = True,
               wanted: int | None = None) -> list[Variant]:
    """The variants after a run with ``k`` workers at ``threads`` torch threads on ``cores`` usable cores, in
    order (module docstring); ``cold``: the data is read cold; ``cpu``: the job computes on the CPU;
    ``wanted``: the workers the run's step says would feed its compute (``workers_wanted``), probed first of
    the extras."""
    out = [Variant("train_as_run", 0, threads)] if k == 0 and not cold else []
    out.append(Variant("train_workers", k + 1, threads))
    if k >= 1 and (k - 1 >= 1 or not cold):
        out.append(Variant("train_workers", k - 1, threads))
    top = min(wanted, cores) if wanted is not None else None
    if top is not None and top > k + 1:  # the top candidate the run's step names, on the cores there are
        out.append(Variant("train_workers", top, threads))
    other = 1 if threads > 1 else cores
    if cpu and other != threads:
        out.append(Variant("train_threads", k, other))
    more = [n for n in ladder(k + 2, 2 * cores) if n != top]
    if wanted is not None and k + 2 <= wanted <= 2 * cores and wanted != top:
        more = [wanted] + [n for n in more if n != wanted]
    out += [Variant("train_workers", n, threads, extra=True) for n in more]
    return out
