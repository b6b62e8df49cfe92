"""The training loader's settings as an attach's stacks show them, and the evidence its advice rests on.

Nothing is asked of the process: the settings are read from what py-spy's
stacks of every thread already hold (pure functions over ``stacks.csv`` rows).

* ``num_workers``: the DataLoader workers sampled under each training process
  (``--idle`` samples a worker waiting for an index too, so every live worker
  is seen); the most under one process where the ranks differ.
* ``pin_memory``: True where a training process runs the loader's pin-memory
  thread (``_pin_memory_loop``) or was sampled pinning a batch itself
  (``pin_memory.py`` with no workers); False where it has workers and no such
  thread (the thread lives as long as the pass); not known with no workers and
  no sample inside a pin.
* ``prefetch_factor``: not readable: it is an attribute of the loader's
  iterator, and a stack shows functions and lines, not objects.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from pipeprof.analysis.prediction import Cores
from pipeprof.analysis.sampled_advice import SampledEvidence, SampledLoader
from pipeprof.attach.shares import SampledShares
from pipeprof.run_meta import RunMeta

PIN_LOOP, PIN_FILE = "_pin_memory_loop", "torch/utils/data/_utils/pin_memory.py"
PREFETCH_UNREADABLE = ("not visible from outside: prefetch_factor is an attribute of the loader's iterator, and "
                       "py-spy's stacks show functions and lines, not objects")


def read_loader(stacks: pd.DataFrame, shares: SampledShares) -> SampledLoader:
    """The loader's settings the stacks show (module docstring)."""
    absent = {"prefetch_factor": PREFETCH_UNREADABLE}
    training = set(shares.training_pids)
    if not shares.training_samples:
        why = "no training thread was sampled"
        return SampledLoader(absent={"num_workers": why, "pin_memory": why, **absent})
    per_parent = Counter(w.parent_pid for w in shares.workers if w.parent_pid in training)
    workers = max(per_parent.values(), default=0)
    pinned = _pins(stacks, training)
    if pinned is None and workers:
        pinned = False
    if pinned is None:
        absent["pin_memory"] = ("not seen: with num_workers = 0 batches are pinned inside next(), and no sample fell "
                                "in a pin")
    return SampledLoader(num_workers=workers, pin_memory=pinned, absent=absent)


def _pins(stacks: pd.DataFrame, training: set[int]) -> bool | None:
    """True where a training process was seen pinning (its pin-memory thread, or a pin in next()); else None."""
    if stacks.empty:
        return None
    rows = stacks[pd.to_numeric(stacks["pid"], errors="coerce").isin(training)]
    for text in rows["stack"].astype(str):
        if PIN_LOOP in text or PIN_FILE in text.replace("\\", "/"):
            return True
    return None


def decode_evidence(shares: SampledShares) -> tuple[float | None, tuple[str, ...]]:
    """The decode calls' share of the workers' busy samples (None: no worker busy) and their names, most sampled
    first."""
    busy = sum(w.busy.samples for w in shares.workers)
    if not busy:
        return None, ()
    decode = sum(w.parts["decode"].samples for w in shares.workers)
    names = sorted(((n, k) for n, k in shares.names.items() if n.startswith("decode:")), key=lambda nk: -nk[1])
    return decode / busy, tuple(n.split(":", 1)[1] for n, _ in names)


def sampled_cores(samples: pd.DataFrame, cores: Any, ranks: int) -> tuple[Cores | None, str | None]:
    """The cores a rank had and kept busy over the attach (``prediction.Cores``; the sampler's means over the
    whole attach: every sample is of the job as it runs), or None and why."""
    if not isinstance(cores, (int, float)) or cores <= 0:
        return None, "the cores usable were not recorded"
    if samples is None or samples.empty or "main_cpu_pct" not in samples:
        return None, "no CPU samples of the process tree"
    main = _mean(samples.get("main_cpu_pct"))
    if main is None:
        return None, "no CPU samples of the process tree"
    workers = _mean(samples.get("workers_cpu_pct")) or 0.0
    machine = _mean(samples.get("cpu_util_pct"))
    ranks = max(ranks, 1)
    tree = (main + workers) / 100  # the attached process and everything under it (a torchrun agent's ranks too)
    other = max((machine / 100 * cores) - tree, 0.0) if machine is not None else 0.0
    main_rank, workers_rank = main / 100 / ranks, workers / 100 / ranks
    return Cores(float(cores), other, main_rank, workers_rank, tree / ranks, ranks), None


def _mean(series: pd.Series | None) -> float | None:
    if series is None:
        return None
    values = pd.to_numeric(series, errors="coerce").dropna()
    return float(values.mean()) if len(values) else None


def sampled_evidence(stacks: pd.DataFrame, shares: SampledShares, samples: pd.DataFrame, info: RunMeta,
                     ended_early: str | None) -> SampledEvidence:
    """The evidence beside the attribution that ``analysis.sampled_advice.recommend_sampled`` reads."""
    cores, cores_absent = sampled_cores(samples, info.environment.cpu_cores, len(shares.training_pids))
    decode, names = decode_evidence(shares)
    return SampledEvidence(loader=read_loader(stacks, shares), device=info.device or "cpu",
                           decode_fraction=decode, decode_names=names, cores=cores, cores_absent=cores_absent,
                           ended_early=ended_early)
