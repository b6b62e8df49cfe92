"""A distributed job's analysis: each rank's entry, the straggler, and advice that knows about ranks.

Pure functions over the ranks' runs (``Run.ranks``: each a whole run, ``meta["rank"]`` saying which) and what
each rank's own summary found (``RankResult``); ``summary.summary_record`` calls them for a run with ranks.

The model
=========

Data-parallel ranks go in lock-step: every step ends in collectives (DDP's gradient all-reduce) that wait for
all ranks, so each rank's step takes as long as the slowest rank's *own* work, and the faster ranks spend the
difference blocked in collectives (steps.csv's ``collective_wait_s``, already taken out of ``compute_s``).

* A rank's own time per step: ``own = mean over counted steps of (step_s − collective_wait_s)``, that is data
  wait + h2d + compute + the step's untimed rest.
* The straggler: the rank with the largest ``own`` (the lowest rank on a tie), compared with the median ``own``
  of the other ranks (ranks with fewer than ``MIN_COUNTED_STEPS`` counted steps are left out). Within
  ``STRAGGLER_MARGIN`` of it, no rank sets the pace: kind ``none``, rank null. Otherwise its ``kind`` is the
  phase whose mean seconds per step exceed the others' median the most: ``input`` (data wait), ``h2d``
  (copies to the device) or ``compute`` (compute and the step's untimed rest). The others' collective wait
  is in the evidence (``straggler_*`` and ``others_median_*`` fractions of step time, ``compute`` there also
  holding the step's untimed rest; ``*_excess_s`` per step): in lock-step it mirrors the gap (the others
  wait for the straggler), so it is no second condition; a job bound by its collectives' transfers has it
  large on every rank, the slowest included.
* The job's pace: every rank makes its samples at the straggler's step rate, so the job's samples/s is the
  sum over ranks (``world_size × per-rank`` for equal batches). A change predicted to bring the straggler's
  own pipeline to ``X'`` samples/s (its own summary's recommendation, ``recommend``'s model) takes the job to
  ``world_size × min(X', R_next)``, where ``R_next`` is the next-slowest rank's own pace (its samples per step
  over its ``own``): past that, that rank sets the pace. Not modelled: the collectives' own transfer time
  (inside ``collective_wait_s`` with the waiting), so ``R_next`` is an upper bound.
* No straggler (kind ``none``): the ranks are alike, and the median rank's recommendations, made on every
  rank, scale the job by their own speed-up.
* Oversubscription per node: the ranks on one node share its cores. Each rank wants ``num_workers`` of its
  training loader + its torch threads (``attribution.cpu``: ``num_workers``, ``torch_threads``); their sum over
  the node's ranks against the node's usable cores (``cpu.cores_usable``, the largest of its ranks': ranks of a
  node see the same machine unless pinned) is the classic oversubscription a single rank cannot see. Advice
  (from 2 ranks on a node): a fair share ``s = ⌊N / ranks⌋`` cores per rank, split between workers and torch
  threads in the proportion the rank wanted them (at least 1 each where it had any). Not predicted: each
  rank's model measured its compute under the others' contention, which this change removes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeprof.analysis.change_model import Change
from pipeprof.analysis.evidence import CpuEvidence, Evidence
from pipeprof.analysis.loading import LoadingSummary
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.recommend import Recommendation, script_change
from pipeprof.analysis.steps import PHASES, counted_steps, step_breakdown
from pipeprof.analysis.thresholds import MIN_COUNTED_STEPS, MIN_GAIN, STRAGGLER_CONSISTENCY, STRAGGLER_MARGIN
from pipeprof.analysis.verdict import Verdict
from pipeprof.numbers import finite
from pipeprof.run_folder import Run
from pipeprof.run_meta import JsonObject, LoaderInfo, RankInfo, as_int, as_object, as_str

STRAGGLER_KINDS = ("input", "compute", "h2d", "none")
# The phase whose excess names the straggler's kind; compute includes the step's untimed rest (its own work too).
_KIND_OF_PHASE = {"data_wait": "input", "h2d": "h2d", "compute": "compute"}


@dataclass(frozen=True)
class RankResult:
    """One rank's run and what its own summary found (``summary.summary_record`` of the rank's run)."""

    run: Run
    steps: int  # counted steps
    samples: int  # samples in counted steps
    samples_per_s: float | None
    fractions: dict[str, float]
    loading: LoadingSummary | None  # the rank summary's loading section
    verdict: Verdict
    cpu: CpuEvidence
    recommendations: tuple[Recommendation, ...]

    @property
    def rank(self) -> int | None:
        return _rank_of(self.run)

    @property
    def node(self) -> str | None:
        return _node_of(self.run)


@dataclass(frozen=True)
class RankEntry:
    """summary.json's ``ranks`` entry for one rank."""

    rank: int | None
    local_rank: int | None
    node: str | None
    pid: int | None
    steps: int
    samples_per_s: float | None
    fractions: dict[str, float]
    loading: LoadingSummary | None
    verdict: Verdict  # summary.json's with its words written at the edge (render.verdict_text)
    status: str | None

    def to_json(self) -> JsonObject:
        return {"rank": self.rank, "local_rank": self.local_rank, "node": self.node, "pid": self.pid,
                "steps": self.steps, "samples_per_s": self.samples_per_s, "fractions": dict(self.fractions),
                "loading": self.loading.to_json() if self.loading is not None else None,
                "verdict": self.verdict.to_json(), "status": self.status}

    @classmethod
    def from_json(cls, data: Any) -> RankEntry:
        d = as_object(data)
        return cls(rank=d.get("rank"), local_rank=d.get("local_rank"), node=d.get("node"), pid=d.get("pid"),
                   steps=int(d.get("steps") or 0), samples_per_s=finite(d.get("samples_per_s")),
                   fractions={k: _nan_if_none(finite(v)) for k, v in as_object(d.get("fractions")).items()},
                   loading=LoadingSummary.from_json(d.get("loading")), verdict=Verdict.from_json(d.get("verdict")),
                   status=d.get("status"))


@dataclass(frozen=True)
class JobSection:
    """summary.json ``job`` (a distributed job; None for one process): its id, world size, nodes and launcher
    (run.json's), the median rank whose records give the job's keys, and how many of its processes were not
    traced."""

    id: str | None
    world_size: int
    nodes: tuple[str, ...]
    launcher: str | None
    median_rank: int | None
    untraced: int

    def to_json(self) -> JsonObject:
        return {"id": self.id, "world_size": self.world_size, "nodes": list(self.nodes), "launcher": self.launcher,
                "median_rank": self.median_rank, "untraced": self.untraced}

    @classmethod
    def from_json(cls, data: Any) -> JobSection | None:
        if not isinstance(data, dict):
            return None
        nodes = data.get("nodes")
        return cls(id=as_str(data.get("id")), world_size=as_int(data.get("world_size")) or 0,
                   nodes=tuple(n for n in nodes if isinstance(n, str)) if isinstance(nodes, list) else (),
                   launcher=as_str(data.get("launcher")), median_rank=as_int(data.get("median_rank")),
                   untraced=as_int(data.get("untraced")) or 0)


@dataclass(frozen=True)
class Straggler:
    """summary.json's ``straggler``: which rank sets the job's pace, and why (module docstring). ``why`` is
    worded by ``render.straggler_text`` (summary.json's ``sentence``, written at the edge); read back, the words
    as written (``Reason.written``)."""

    rank: int | None
    node: str | None
    kind: str  # one of STRAGGLER_KINDS
    evidence: Evidence  # the numbers that decided it, units in their names
    why: Reason

    def __post_init__(self) -> None:
        if self.kind not in STRAGGLER_KINDS:
            raise ValueError(f"not a straggler kind: {self.kind!r}")

    @property
    def ranks_compared(self) -> float | None:
        """How many ranks the straggler was looked for among (None: not said)."""
        return finite(self.evidence.get("ranks_compared"))

    def to_json(self) -> JsonObject:
        """summary.json's ``straggler`` but its ``sentence`` (written at the edge)."""
        return {"rank": self.rank, "node": self.node, "kind": self.kind, "evidence": dict(self.evidence)}

    @classmethod
    def from_json(cls, data: Any) -> Straggler | None:
        d = as_object(data)
        if d.get("kind") not in STRAGGLER_KINDS:
            return None
        return cls(rank=d.get("rank"), node=d.get("node"), kind=str(d["kind"]),
                   evidence=dict(as_object(d.get("evidence"))), why=Reason.written(str(d.get("sentence") or "")))


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


def _rank_of(run: Run) -> int | None:
    rank = run.info.rank
    return rank.rank if rank is not None else None


def _node_of(run: Run) -> str | None:
    rank = run.info.rank
    return None if rank is None or rank.node is None else str(rank.node)


def _numbers(ranks: Sequence[Run]) -> list[int]:
    """Each rank's number (``meta["rank"]["rank"]``), its place in the list where it has none."""
    return [n if (n := _rank_of(r)) is not None else i for i, r in enumerate(ranks)]


def _median_step_s(run: Run) -> float:
    step_s = counted_steps(run.steps)["step_s"].astype(float)
    return float(step_s.median()) if len(step_s) else math.nan


def median_rank(ranks: Sequence[Run]) -> int | None:
    """The job's median rank (``meta["job"]["median_rank"]``): the rank whose counted median step time is the
    median of the ranks' (the lower middle for an even count; ranks without counted steps left out, ties by
    rank number). The first rank when none has counted steps; None for no ranks."""
    if not ranks:
        return None
    numbers = _numbers(ranks)
    timed = sorted((t, n) for n, r in zip(numbers, ranks, strict=True) if math.isfinite(t := _median_step_s(r)))
    return timed[(len(timed) - 1) // 2][1] if timed else numbers[0]


def median_index(ranks: Sequence[Run], recorded: int | None) -> int:
    """Index in ``ranks`` (not empty) of the job's median rank: ``recorded`` (run.json's ``job.median_rank``)
    when among the ranks, else ``median_rank`` computed."""
    numbers = _numbers(ranks)
    chosen = recorded if recorded is not None and recorded in numbers else median_rank(ranks)
    return numbers.index(chosen) if chosen in numbers else 0


def rank_entry(result: RankResult) -> RankEntry:
    """summary.json's ``ranks`` entry for one rank."""
    meta = result.run.info
    rank = meta.rank or RankInfo()
    return RankEntry(rank=result.rank, local_rank=rank.local_rank, node=result.node, pid=rank.pid, steps=result.steps,
                     samples_per_s=result.samples_per_s, fractions=dict(result.fractions), loading=result.loading,
                     verdict=result.verdict, status=rank.status or meta.status)


@dataclass(frozen=True)
class _Pace:
    """One rank's mean seconds per counted step, by phase, and its own time (without collective wait)."""

    rank: int
    node: str | None
    steps: int
    samples_per_step: float
    phase_s: dict[str, float]  # data_wait, h2d, compute (with the untimed rest), collective_wait
    step_s: float
    own_by_step_s: np.ndarray  # each counted step's own time, in order

    @property
    def own_s(self) -> float:
        return self.step_s - self.phase_s["collective_wait"]

    def fraction(self, phase: str) -> float:
        return self.phase_s[phase] / self.step_s if self.step_s > 0 else math.nan


def _pace(run: Run, index: int) -> _Pace | None:
    df = step_breakdown(run.steps)
    if len(df) < MIN_COUNTED_STEPS:
        return None
    mean = {p: float(df[f"{p}_s"].astype(float).mean()) for p in PHASES}
    mean["compute"] += float(df["other_s"].astype(float).mean())
    rank = _rank_of(run)
    return _Pace(rank=rank if rank is not None else index, node=_node_of(run), steps=len(df),
                 samples_per_step=float(df["samples"].astype(float).mean()), phase_s=mean,
                 step_s=float(df["step_s"].astype(float).mean()),
                 own_by_step_s=(df["step_s"].astype(float) - df["collective_wait_s"].astype(float)).to_numpy())


def _slower_share(slow: _Pace, others: list[_Pace]) -> float | None:
    """The share of the steps (aligned by step, over the steps every rank has) in which ``slow``'s own time
    exceeds the median of the others' own times of that step; None without a step in common."""
    n = min(len(p.own_by_step_s) for p in (slow, *others))
    if n == 0:
        return None
    others_s = np.median(np.vstack([p.own_by_step_s[:n] for p in others]), axis=0)
    return float(np.mean(slow.own_by_step_s[:n] > others_s))


def straggler(ranks: Sequence[Run]) -> Straggler:
    """Which rank sets the job's pace and why (module docstring): kind ``input``, ``compute``, ``h2d`` or
    ``none`` (ranks within ``STRAGGLER_MARGIN`` of each other, the slowest not slower in ``STRAGGLER_CONSISTENCY``
    of the steps, or fewer than two to compare)."""
    paces = [p for i, r in enumerate(ranks) if (p := _pace(r, i)) is not None]
    by_rank = {str(p.rank): p.own_s for p in paces}
    if len(paces) < 2:
        return Straggler(None, None, "none", {"ranks_compared": len(paces), "own_step_s_by_rank": by_rank},
                         Reason("straggler_too_few", {"ranks": len(paces), "min_steps": MIN_COUNTED_STEPS}))
    slow = max(paces, key=lambda p: (p.own_s, -p.rank))
    others = [p for p in paces if p is not slow]

    def others_median(values: list[float]) -> float:
        return float(np.median(values))

    median_own = others_median([p.own_s for p in others])
    excess = slow.own_s / median_own - 1 if median_own > 0 else math.inf
    phases = ("data_wait", "h2d", "compute", "collective_wait")
    slower = _slower_share(slow, others)
    others_fraction = {p: others_median([r.fraction(p) for r in others]) for p in phases}
    excess_s = {p: slow.phase_s[p] - others_median([r.phase_s[p] for r in others]) for p in _KIND_OF_PHASE}
    evidence: Evidence = {
        "ranks_compared": len(paces), "own_step_s_by_rank": by_rank, "margin_fraction": STRAGGLER_MARGIN,
        "slowest_rank": slow.rank, "straggler_own_step_s": slow.own_s, "others_median_own_step_s": median_own,
        "own_step_excess_fraction": excess if math.isfinite(excess) else None,
        "slower_step_fraction": slower, "consistency_fraction": STRAGGLER_CONSISTENCY,
        **{f"straggler_{p}_fraction": slow.fraction(p) for p in phases},
        **{f"others_median_{p}_fraction": others_fraction[p] for p in phases},
        **{f"{p}_excess_s": excess_s[p] for p in _KIND_OF_PHASE},
    }
    if excess > STRAGGLER_MARGIN and slower is not None and slower < STRAGGLER_CONSISTENCY:
        return Straggler(None, None, "none", evidence,
                         Reason("straggler_noise", {"rank": slow.rank, "excess": excess, "slower": slower,
                                                    "consistency": STRAGGLER_CONSISTENCY}))
    if excess <= STRAGGLER_MARGIN:
        return Straggler(None, None, "none", evidence,
                         Reason("straggler_within", {"margin": STRAGGLER_MARGIN, "rank": slow.rank,
                                                     "own_s": slow.own_s, "median_own_s": median_own}))
    phase = max(_KIND_OF_PHASE, key=lambda p: excess_s[p])
    kind = _KIND_OF_PHASE[phase]
    return Straggler(slow.rank, slow.node, kind, evidence, Reason("straggler_named", {
        "rank": slow.rank, "node": slow.node, "kind": kind, "own_s": slow.own_s, "median_own_s": median_own,
        "phase_s": slow.phase_s[phase], "others_phase_s": slow.phase_s[phase] - excess_s[phase],
        "others_collective_wait": others_fraction["collective_wait"]}))


def job_recommendations(results: Sequence[RankResult], median: int, straggler_: Straggler,
                        job_samples_per_s: float | None) -> list[Recommendation]:
    """The job's advice: oversubscribed nodes first, then the straggler's own recommendations with the job's
    predicted samples/s (or, with no straggler, the median rank's, made on every rank); module docstring."""
    recs = oversubscription(results)
    if straggler_.rank is None:
        own = [_scaled(r, job_samples_per_s, len(results)) for r in results[median].recommendations]
        return recs + own
    # the straggler sets the job's pace: its own fixes first (the gain they predict is the job's)
    own = _straggler_advice(results, straggler_, job_samples_per_s)
    gains = [r for r in own if r.change or r.code_change is not None]
    return gains + recs + [r for r in own if r not in gains]


def _scaled(rec: Recommendation, job_samples_per_s: float | None, world_size: int) -> Recommendation:
    predicted = (job_samples_per_s * rec.predicted_speedup
                 if job_samples_per_s is not None and rec.predicted_speedup is not None else None)
    why = Reason("on_every_rank", {"reason": rec.reason}) if world_size > 1 else rec.reason
    return dataclasses.replace(rec, predicted_samples_per_s=predicted, reason=why)


def _straggler_advice(results: Sequence[RankResult], straggler_: Straggler,
                      job_samples_per_s: float | None) -> list[Recommendation]:
    paces = {p.rank: p for i, r in enumerate(results) if (p := _pace(r.run, i)) is not None}
    slow = next(r for r in results if r.rank == straggler_.rank)
    others = [p for rank, p in paces.items() if rank != straggler_.rank]
    next_slowest = max(others, key=lambda p: p.own_s)
    bound = next_slowest.samples_per_step / next_slowest.own_s if next_slowest.own_s > 0 else math.inf
    world = len(results)
    label = {"rank": slow.rank, "node": slow.node}
    out = []
    for rec in slow.recommendations:
        if not rec.change and rec.code_change is None:  # its honest negative: nothing to gain for the job either
            out.append(dataclasses.replace(rec, predicted_samples_per_s=job_samples_per_s, predicted_speedup=1.0,
                                           reason=Reason("straggler", {**label, "reason": rec.reason})))
            continue
        if rec.predicted_samples_per_s is None or not job_samples_per_s:
            continue
        pace = min(rec.predicted_samples_per_s, bound)
        predicted = world * pace
        speedup = predicted / job_samples_per_s
        if speedup < MIN_GAIN:
            continue
        out.append(dataclasses.replace(
            rec, predicted_samples_per_s=predicted, predicted_speedup=speedup,
            reason=Reason("straggler_pace", {
                **label, "reason": rec.reason, "world": world, "pace": pace, "next_rank": next_slowest.rank,
                "bound": bound if bound < rec.predicted_samples_per_s else None, "predicted": predicted,
                "job": job_samples_per_s}),
            model=Reason("job_pace", {"model": rec.model})))
    if not out:
        out.append(Recommendation({}, job_samples_per_s, 1.0,
                                  Reason("straggler_no_gain", {**label, "min_gain": MIN_GAIN - 1, "bound": bound,
                                                               "next_rank": next_slowest.rank}),
                                  Reason("job_pace", {"model": None}), tier="measured"))
    return out


def oversubscription(results: Sequence[RankResult]) -> list[Recommendation]:
    """Per node with 2 or more ranks: their workers + torch threads against the node's usable cores, and the
    fair share per rank when they want more (module docstring). Ranks whose counts are unknown are left out."""
    nodes: dict[str, list[RankResult]] = {}
    for r in results:
        nodes.setdefault(r.node or "", []).append(r)
    out = []
    for node, ranks in nodes.items():
        known = [r for r in ranks if r.cpu.num_workers is not None and r.cpu.torch_threads is not None]
        cores = max((int(r.cpu.cores_usable) for r in known if r.cpu.cores_usable), default=0)
        if len(known) < 2 or not cores:
            continue
        wanted = [(int(r.cpu.num_workers or 0), int(r.cpu.torch_threads or 0)) for r in known]
        busy = sum(w + t for w, t in wanted)
        if busy <= cores:
            continue
        share = max(1, cores // len(known))
        workers, threads = max(w for w, _ in wanted), max(t for _, t in wanted)
        new_workers = min(workers, max(1, round(share * workers / (workers + threads)))) if workers else 0
        new_threads = max(1, min(threads, share - new_workers))
        change: Change = {}
        if new_workers != workers:
            change["loader.num_workers"] = new_workers
        if new_threads != threads:
            change["train.threads"] = new_threads
        if not change:  # already at one worker and one thread a rank, or fewer: nothing to lower
            continue
        why = Reason("oversubscribed_node", {
            "ranks": tuple((r.rank, w, t) for r, (w, t) in zip(known, wanted, strict=True)),
            "alike": len(set(wanted)) == 1, "busy": busy, "cores": cores, "node": node, "share": share,
            "new_workers": new_workers, "new_threads": new_threads})
        loader = next((LoaderInfo.parse(d) for d in known[0].run.info.loaders if d.get("role") == "train"), None)
        out.append(Recommendation(change, None, None, why, Reason("node_cores"), tier="not_predicted",
                                  script_text=script_change(change, loader) if loader is not None and change else None))
    return out
