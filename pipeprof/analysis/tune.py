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
   nothing or ``max_evals`` measurements are spent. With ``confirm_gains``
   the would-be incumbent is measured a second time (``remeasure``) and
   replaces the incumbent only when that measurement gains too, at the rate
   of that second measurement; the walk then goes on along the same setting
   from the new incumbent;
4. with ``finalists`` > 0, a final round (successive halving): the
   ``finalists`` fastest settings of steps 1-3 are measured again with
   ``remeasure`` (longer windows), one after the other and interleaved, in
   up to ``rounds`` rounds, each round's order rotated so a slow spell of a
   shared machine falls on all of them; after each round the settings whose
   mean is below the leader's by more than the noise margin are dropped. The
   broad round's own measurements are left out of these means: the setting
   that came first there is, among equals, the one whose measurement was
   luckiest (the winner's curse). The winner is the highest mean, except that
   the scenario as given, when still in the running, is kept unless a change
   beats it beyond the margin: a change is chosen only when it is measurably
   faster. The margin between two means of ``n_a`` and ``n_b`` measurements is
   ``max(min_gain, 2 * noise * sqrt(1/n_a + 1/n_b))``, ``noise`` the relative
   standard deviation of one measurement: pooled from the final round's
   repeats once there are any, the ``noise`` argument before.

Settings already measured are not measured again in steps 1-3; settings the
scenario refuses together are skipped (status ``skipped``: no time spent, not
counted against ``max_evals``); a failed measurement counts. ``max_evals``
bounds all measurements: with a final round, steps 1-3 leave ``finalists *
rounds`` of them to it (steps 1-3 get at least one).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pipeprof.analysis.thresholds import TUNE_MIN_GAIN
from pipeprof.loader_rules import prefetch_factor, without_worker_only
from pipeprof.run_meta import JsonObject

SettingValue = bool | int | float | str | None
Settings = dict[str, SettingValue]  # "section.key" -> its value (as a scenario's --set, or a script's DataLoader argument)
# (settings, why it is tried) -> (samples/s or None, status: "complete", "failed" or "skipped")
Evaluate = Callable[[Settings, str], "tuple[float | None, str]"]

PREFETCH_FACTORS = (2, 4, 8)
# Both tuners' (``pipeline/tune.py``, a scenario's; ``pipeline/script_tune.py``, a script's):
SEEDS = 2  # the first trial's recommendations tried before the walk, at most
FINALISTS = 2  # the best settings measured again at the end (the final round; a script's longer runs)
TUNE_PRIOR_NOISE = 0.10  # one short window's relative noise on a shared machine, before repeats measure it


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
            s["loader.prefetch_factor"] = prefetch_factor(workers, _factor(s.get("loader.prefetch_factor")))
        return s

    def neighbours(self, dim: str, current: Settings) -> list[Any]:
        """Values of ``dim`` to try from ``current`` (which always holds every dimension's value)."""
        value = current.get(dim)
        workers = int(current.get("loader.num_workers") or 0)
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
            return [] if workers == 0 else [v for v in PREFETCH_FACTORS if v != prefetch_factor(workers, _factor(value))]
        if dim == "loader.persistent_workers":
            return [] if workers == 0 else [not bool(value)]
        if dim == "loader.pin_memory":
            return [not bool(value)]
        if dim == "data.storage":
            return [p for p in self.placements if p != value]
        if dim == "loader.batch_size":
            return [b for b in self.batch_sizes if b != value]
        raise KeyError(dim)


@dataclass(frozen=True)
class Trial:
    """One measurement of the search (or its best): the settings, why they were tried, the samples/s (None: not
    measured) and the status ("complete", "failed", "skipped"); the final round's winner keeps its rates."""

    settings: Settings
    why: str = ""
    samples_per_s: float | None = None
    status: str = "complete"
    samples_per_s_per_window: tuple[float, ...] | None = None  # the final round's measurements of the best


@dataclass
class Finalist:
    """One of the final round's settings, updated round by round: its last measurement before the final round
    (``broad_samples_per_s``: the confirmation where one was made, not the window that looked fast enough to need
    one), its final-round measurements and their mean, and the round after which it was dropped (None: in the
    running to the end)."""

    settings: Settings
    broad_samples_per_s: float
    samples_per_s_per_window: list[float] = field(default_factory=list)
    samples_per_s: float | None = None
    dropped_after_round: int | None = None

    def to_json(self) -> JsonObject:
        """tune.json's ``final_round.finalists`` entry."""
        return {"settings": dict(self.settings), "broad_samples_per_s": self.broad_samples_per_s,
                "samples_per_s_per_window": list(self.samples_per_s_per_window), "samples_per_s": self.samples_per_s,
                "dropped_after_round": self.dropped_after_round}


@dataclass
class Search:
    """The measurements made, in order, and the incumbent; the final round's finalists and noise when it ran."""

    trials: list[Trial] = field(default_factory=list)
    best: Trial | None = None
    finalists: list[Finalist] = field(default_factory=list)
    noise: float | None = None  # relative standard deviation of one measurement used for the margins


def search(start: Settings, space: Space, evaluate: Evaluate, seeds: Callable[[], Iterable[Settings]] = tuple, *,
           max_evals: int = 16, min_gain: float = TUNE_MIN_GAIN, confirm_gains: bool = False, finalists: int = 0,
           rounds: int = 2, remeasure: Evaluate | None = None, noise: float = TUNE_PRIOR_NOISE) -> Search:
    """Coordinate search from ``start`` (every dimension's current value), then the final round.

    ``seeds()`` is called after the first measurement (the recommendations of
    that run) and returns changes to try next. With ``confirm_gains`` a
    setting that would replace the incumbent is measured again (``remeasure``)
    and replaces it only when that second measurement also gains more than
    ``min_gain``; the incumbent's rate is then the second measurement, so one
    lucky window neither moves the walk nor bars the settings that follow,
    and a setting that gained is walked on from the new incumbent (workers
    1, 2, 3, ... while each gains) before the next setting.
    ``finalists=0`` (the default) skips the final round: the best is the
    fastest single measurement. ``remeasure`` measures the confirmations and
    the final round (default ``evaluate``). The defaults are the plain search.
    """
    result = Search()
    seen: dict[tuple, float | None] = {}
    again = remeasure or evaluate
    walk_evals = max(1, max_evals - finalists * rounds) if finalists > 0 else max_evals

    def measure(settings: Settings, why: str) -> float | None:
        settings = space.normalize(settings)
        key = _key(settings)
        if key in seen:
            return seen[key]
        if _spent(result) >= walk_evals:
            return None
        rate, status = evaluate(dict(settings), why)
        seen[key] = rate
        result.trials.append(Trial(dict(settings), why, rate, status))
        if rate is not None and (result.best is None or result.best.samples_per_s is None
                                 or rate > result.best.samples_per_s):
            result.best = result.trials[-1]
        return rate

    def gain(candidate: Settings, rate: float | None, best: float | None, needed: float) -> float | None:
        """The candidate's rate when it beats ``best`` by more than ``needed`` (confirmed if asked), else None."""
        if rate is None or (best is not None and rate <= best * (1 + needed)):
            return None
        if not confirm_gains or best is None:
            return rate
        if _spent(result) >= walk_evals:
            return None
        second, status = again(dict(candidate), "confirming a gain")
        result.trials.append(Trial(dict(candidate), "confirming a gain", second, status))
        if second is None or status != "complete" or (best is not None and second <= best * (1 + needed)):
            return None
        return second

    incumbent = space.normalize(start)
    best_rate = measure(incumbent, "the scenario as given")
    for seed in seeds():
        candidate = space.normalize({**incumbent, **seed})
        rate = gain(candidate, measure(candidate, "predicted by the recommendations"), best_rate, 0.0)
        if rate is not None:
            incumbent, best_rate = candidate, rate
    improved = True
    while improved and _spent(result) < walk_evals:
        improved = False
        for dim in space.dimensions():
            values = space.neighbours(dim, incumbent)
            while values:
                candidate = space.normalize({**incumbent, dim: values.pop(0)})
                if _key(candidate) in seen:
                    continue  # measured before: it did not win then
                rate = gain(candidate, measure(candidate, f"coordinate search: {dim}"), best_rate, min_gain)
                if rate is not None:
                    incumbent, best_rate, improved = candidate, rate, True
                    if confirm_gains:  # walk on along the setting that gained, from the new incumbent
                        values = space.neighbours(dim, incumbent)
            if _spent(result) >= walk_evals:
                break
    if confirm_gains and best_rate is not None:  # the walk's incumbent, at its confirmed rate
        result.best = Trial(dict(incumbent), "the search's incumbent", best_rate, "complete")
    if finalists > 0 and result.best is not None:
        final_round(result, space.normalize(start), again, finalists=finalists, rounds=rounds,
                    min_gain=min_gain, noise=noise, max_evals=max_evals)
    return result


def final_round(result: Search, start: Settings, measure: Evaluate, *, finalists: int, rounds: int,
                min_gain: float, noise: float, max_evals: int | None = None) -> None:
    """Step 4 of the module docstring, on ``result`` in place: its finalists, noise and best."""
    by_setting: dict[tuple, list[tuple[Settings, float]]] = {}
    for t in result.trials:
        if t.status == "complete" and t.samples_per_s is not None:
            by_setting.setdefault(_key(t.settings), []).append((t.settings, t.samples_per_s))
    ranked = [Finalist(settings=dict(ts[0][0]), broad_samples_per_s=ts[-1][1]) for ts in by_setting.values()]
    ranked = sorted(ranked, key=lambda f: -f.broad_samples_per_s)[:finalists]
    result.finalists = ranked
    alive = list(ranked)
    sd = noise
    for r in range(rounds):
        if len(alive) < 2 and r > 0:
            break
        shift = r % len(alive)
        for f in alive[shift:] + alive[:shift]:
            if max_evals is not None and _spent(result) >= max_evals:
                break
            rate, status = measure(dict(f.settings), f"final round {r + 1} of {rounds}")
            result.trials.append(Trial(dict(f.settings), f"final round {r + 1} of {rounds}", rate, status))
            if rate is not None and status == "complete":
                f.samples_per_s_per_window.append(rate)
        for f in ranked:
            rates = f.samples_per_s_per_window
            f.samples_per_s = sum(rates) / len(rates) if rates else None
        pooled = pooled_noise([f.samples_per_s_per_window for f in ranked])
        sd = noise if pooled is None else pooled
        measured = [f for f in alive if f.samples_per_s is not None]
        if not measured:
            break
        leader = max(measured, key=_mean)
        for f in alive:
            if f is not leader and (f.samples_per_s is None or not within(f, leader, sd, min_gain)):
                f.dropped_after_round = r + 1
        alive = [f for f in alive if f.dropped_after_round is None]
    result.noise = sd
    contenders = [f for f in alive if f.samples_per_s is not None]
    if not contenders:
        return  # every final measurement failed: the broad round's best stands
    winner = max(contenders, key=_mean)
    given = next((f for f in contenders if _key(f.settings) == _key(start)), None)
    why = f"the final round's fastest (mean of {len(winner.samples_per_s_per_window)})"
    if given is not None and given is not winner and within(given, winner, sd, min_gain):
        winner, why = given, "the scenario as given: no change beat it beyond the noise in the final round"
    result.best = Trial(dict(winner.settings), why, winner.samples_per_s, "complete",
                        samples_per_s_per_window=tuple(winner.samples_per_s_per_window))


def _mean(f: Finalist) -> float:
    """A measured finalist's mean samples/s (its key among the measured ones)."""
    return f.samples_per_s if f.samples_per_s is not None else -math.inf


def margin(n_a: int, n_b: int, noise: float, min_gain: float) -> float:
    """The relative difference two means of ``n_a`` and ``n_b`` measurements must exceed to differ."""
    return max(min_gain, 2 * noise * math.sqrt(1 / max(n_a, 1) + 1 / max(n_b, 1)))


def within(f: Finalist, leader: Finalist, noise: float, min_gain: float) -> bool:
    """Whether finalist ``f``'s mean is within the noise margin below ``leader``'s (both measured)."""
    m = margin(len(f.samples_per_s_per_window), len(leader.samples_per_s_per_window), noise, min_gain)
    return _mean(f) >= _mean(leader) * (1 - m)


def pooled_noise(groups: Iterable[list[float]]) -> float | None:
    """Relative standard deviation of one measurement, pooled over repeated measurements of each setting
    (the spread of log rates: a ratio's noise); None without a repeat."""
    squares, dof = 0.0, 0
    for rates in groups:
        logs = [math.log(r) for r in rates if r > 0]
        if len(logs) >= 2:
            mean = sum(logs) / len(logs)
            squares += sum((v - mean) ** 2 for v in logs)
            dof += len(logs) - 1
    return math.sqrt(squares / dof) if dof else None


def _spent(result: Search) -> int:
    """Measurements made (complete or failed); skipped settings cost nothing."""
    return sum(t.status != "skipped" for t in result.trials)


def _key(settings: Settings) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in settings.items()))


def _factor(value: SettingValue) -> int | None:
    """A prefetch factor setting as ``loader_rules.prefetch_factor`` takes it (unset: None)."""
    return int(value) if value else None


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
