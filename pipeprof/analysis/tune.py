"""The tuner's search: a coordinate search over DataLoader and placement settings, seeded by predictions.

Pure logic over an ``evaluate(settings) -> samples/s or None`` callback, so
it is tested with made-up throughput functions; ``pipeprof tune`` supplies
the real measurement.

The space (``Space``): ``loader.num_workers`` (0 … ``max_workers``),
``train.threads`` (1 … cores), ``loader.prefetch_factor`` (2, 4, 8; with
workers), ``loader.persistent_workers`` (with workers), ``loader.pin_memory``
(on CUDA), the placement ``data.storage`` (the decoded samples cached in
``ram``, or held on the ``device``, where they fit), and ``loader.batch_size``
only when asked for.

The search:

1. measure the scenario as given;
2. measure the settings the recommendations predict to be best (the
   diagnosis' model seeds the search: at most ``seeds`` of them); the best
   so far is the incumbent;
3. coordinate search: for each setting in turn, measure the incumbent's
   neighbours in that setting (num_workers ``k-1, k+1, 2k``; threads ``t-1,
   t+1, 1, cores``; each other setting's other values); a neighbour replaces
   the incumbent only when it beats it by more than ``min_gain`` (3%: less
   is within the noise of a short window); repeat passes until one changes
   nothing or ``max_evals`` measurements are spent.

Settings already measured are not measured again; settings the scenario
refuses together are skipped (status ``skipped``: no time spent, not
counted against ``max_evals``); a failed measurement counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pipeprof.analysis.thresholds import TUNE_MIN_GAIN
from pipeprof.loader_rules import prefetch_factor, without_worker_only

Settings = dict[str, Any]
# (settings, why it is tried) -> (samples/s or None, status: "complete", "failed" or "skipped")
Evaluate = Callable[[Settings, str], "tuple[float | None, str]"]

PREFETCH_FACTORS = (2, 4, 8)


@dataclass(frozen=True)
class Space:
    """What may change, and the limits: cores, CUDA, placements that fit, batch sizes when asked."""

    cores: int
    max_workers: int
    cuda: bool = False
    placements: tuple[str, ...] = ()  # e.g. ("ram", "device")
    batch_sizes: tuple[int, ...] = ()

    def dimensions(self) -> list[str]:
        dims = ["loader.num_workers", "train.threads", "loader.prefetch_factor", "loader.persistent_workers"]
        if self.cuda:
            dims.append("loader.pin_memory")
        if self.placements:
            dims.append("data.storage")
        if self.batch_sizes:
            dims.append("loader.batch_size")
        return dims

    def normalize(self, settings: Settings) -> Settings:
        """The same setting written one way: no worker-only keys without workers, no loader keys on the device."""
        s = dict(settings)
        if s.get("data.storage") == "device":
            s["loader.num_workers"] = 0
            s.pop("loader.pin_memory", None)
        workers = int(s.get("loader.num_workers") or 0)
        if not workers:
            s.update({f"loader.{key}": value for key, value in without_worker_only({}).items()})
        else:  # the factor the DataLoader uses, PyTorch's default written out, so it can be compared
            s["loader.prefetch_factor"] = prefetch_factor(workers, s.get("loader.prefetch_factor"))
        return s

    def neighbours(self, dim: str, current: Settings) -> list[Any]:
        """Values of ``dim`` to try from ``current`` (which always holds every dimension's value)."""
        value = current.get(dim)
        workers = current.get("loader.num_workers") or 0
        if current.get("data.storage") == "device" and dim != "data.storage" and dim != "train.threads" \
                and dim != "loader.batch_size":
            return []  # batches by index on the device: no DataLoader settings apply
        if dim == "loader.num_workers":
            k = int(value or 0)
            out = [k - 1, k + 1, 2 * k]
            return _unique(v for v in out if 0 <= v <= self.max_workers and v != k)
        if dim == "train.threads":
            t = int(value or self.cores)
            return _unique(v for v in (t - 1, t + 1, 1, self.cores) if 1 <= v <= self.cores and v != t)
        if dim == "loader.prefetch_factor":
            return [] if workers == 0 else [v for v in PREFETCH_FACTORS if v != prefetch_factor(workers, value)]
        if dim == "loader.persistent_workers":
            return [] if workers == 0 else [not bool(value)]
        if dim == "loader.pin_memory":
            return [not bool(value)]
        if dim == "data.storage":
            return [p for p in self.placements if p != value]
        if dim == "loader.batch_size":
            return [b for b in self.batch_sizes if b != value]
        raise KeyError(dim)


@dataclass
class Search:
    """The measurements made, in order, and the incumbent."""

    trials: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None


def search(start: Settings, space: Space, evaluate: Evaluate, seeds: Callable[[], Iterable[Settings]] = tuple, *,
           max_evals: int = 16, min_gain: float = TUNE_MIN_GAIN) -> Search:
    """Coordinate search from ``start`` (every dimension's current value).

    ``seeds()`` is called after the first measurement (the recommendations of
    that run) and returns changes to try next.
    """
    result = Search()
    seen: dict[tuple, float | None] = {}

    def measure(settings: Settings, why: str) -> float | None:
        settings = space.normalize(settings)
        key = _key(settings)
        if key in seen:
            return seen[key]
        if _spent(result) >= max_evals:
            return None
        rate, status = evaluate(dict(settings), why)
        seen[key] = rate
        result.trials.append({"settings": dict(settings), "why": why, "samples_per_s": rate, "status": status})
        if rate is not None and (result.best is None or rate > result.best["samples_per_s"]):
            result.best = result.trials[-1]
        return rate

    incumbent = space.normalize(start)
    best_rate = measure(incumbent, "the scenario as given")
    for seed in seeds():
        candidate = space.normalize({**incumbent, **seed})
        rate = measure(candidate, "predicted by the recommendations")
        if rate is not None and (best_rate is None or rate > best_rate):
            incumbent, best_rate = candidate, rate
    improved = True
    while improved and _spent(result) < max_evals:
        improved = False
        for dim in space.dimensions():
            for value in space.neighbours(dim, incumbent):
                candidate = space.normalize({**incumbent, dim: value})
                rate = measure(candidate, f"coordinate search: {dim}")
                if rate is not None and (best_rate is None or rate > best_rate * (1 + min_gain)):
                    incumbent, best_rate, improved = candidate, rate, True
            if _spent(result) >= max_evals:
                break
    return result


def _spent(result: Search) -> int:
    """Measurements made (complete or failed); skipped settings cost nothing."""
    return sum(t["status"] != "skipped" for t in result.trials)


def _key(settings: Settings) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in settings.items()))


def _unique(values: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def ceiling_words(best: float | None, ceiling: float | None) -> str:
    """How far the best setting is from the compute ceiling, in words."""
    if best is None or ceiling is None or not math.isfinite(ceiling) or ceiling <= 0:
        return "compute ceiling not measured"
    share = best / ceiling
    return (f"The best setting reaches {100 * share:.0f}% of the compute ceiling ({ceiling:,.0f} samples/s with the "
            f"data on the device and no loading at all)"
            + ("." if share < 0.95 else ": the input pipeline is no longer the bottleneck."))
