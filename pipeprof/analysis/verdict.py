"""The verdict: what limits this run's training, in one class with a sentence, from its attribution.

Pure functions (no torch). ``pipeprof.analysis.attribution`` gathers the
direct evidence; ``verdict`` turns it into one class and a sentence in plain
words by the decision table below. Both land in summary.json
(``attribution``, ``verdict``), and so does the verdict's coarse form,
``bottleneck`` (``coarse``: every ``input:*`` class is ``input``), so the two
can never disagree.

Classes: ``compute``; ``input:fetch`` (storage: reading samples' bytes);
``input:prep`` (decoding and transforms on the CPU); ``input:main`` (the
training process: collate with ``num_workers = 0``, receiving batches from
workers, pinning, DataLoader bookkeeping); ``h2d`` (copy to the device);
``balanced`` (the loop waits for data, at least 5% of step time, with no
single cause); ``unknown`` (fewer counted steps than ``thresholds.MIN_COUNTED_STEPS``: too few to judge).

Decision table — the first row that matches wins. ``wait`` and ``h2d`` are
shares of counted step time; "ready share" is the share of the data wait
spent on steps that found at least one batch already waiting in the prefetch
queue (a batch was there, yet the loop waited: the time went into receiving
it, when the workers have slack — see R6), the rest of the wait being on
steps that found the queue empty.

====  ==========================================================  ==============================
rule  condition                                                   class
====  ==========================================================  ==============================
R0    fewer than MIN_COUNTED_STEPS (5) counted steps              unknown (too few to judge)
R1    h2d >= 0.20 and h2d >= wait                                 h2d
R2    wait < 0.05                                                 compute
      -- from here wait >= 0.05: "input-bound" from 0.20, "partly input-bound" below --
R3    0 workers, loading records: the mean wait per step split    input:main (the training
      (see below); input:main has the largest share and the       process's own overhead)
      training process's own work is most of it
R4    0 workers, loading records, otherwise                       the largest share of the wait:
                                                                  fetch -> input:fetch, prep ->
                                                                  input:prep, collate + own work
                                                                  -> input:main
R5    workers, ready_batches observed, ready share >= 0.6, the    input:main
      workers not saturated (see R6)
R6    workers, ready_batches observed, ready share <= 0.4 or      workers too slow: fetch vs
      the workers saturated: mean busy fraction >= 0.8 (loading   prep + collate in the workers
      records)                                                    -> input:fetch / input:prep
                                                                  (no loading records: R9)
R7    workers, ready_batches observed, in between                 balanced
R8    workers, no ready_batches (older runs), loading records:    input:main
      mean worker busy fraction <= 0.5
      ... busy >= 0.8                                             as R6
      ... in between                                              balanced
R9    no usable loading records or queue readings: disk reads     input:fetch, else input:main
      >= 1 MB/s                                                   (0 workers) / input:prep
                                                                  (workers); marked inferred
====  ==========================================================  ==============================

R3 and R4, the physics: with ``num_workers = 0`` nothing overlaps the wait.
The training process spends each step's wait making the batch, one part
after another — fetching (storage), decoding and transforming (CPU prep),
collating — and on its own work around them (the sampler, DataLoader
bookkeeping, pinning): the rest of the wait, mean wait minus ``batch_s``.
Collate and that own work are both the training process's (``input:main``);
the class is the one with the largest share of the wait. (``batch_s`` is
split by the measured fractions, so the DataLoader's few microseconds between
a batch's samples go to its parts, not to the own work: never towards
``input:main``.) An earlier R3 called the own work the cause only when it
exceeded all of the making put together (making < 50% of the wait), so a
loop whose own work and collate (15 ms a step) outweighed fetching (8 ms) and
decoding (7 ms) was called storage-bound, making the batch being 63% of the
wait (tests/test_ground_truth.py, the mixed case).

R5 and R6, the physics: a worker busy (making batches) 80% or more of its
span has no slack to get ahead, so the workers set the loop's pace, whatever
the queue showed at ``next()``. A batch counted as ready then need not be the
one the loop takes next: with several workers a later batch can arrive first
(the DataLoader hands batches over in order, so the loop still waits), and on
cores the workers keep busy, taking a batch from the queue itself waits for a
core. Workers that keep up fill the queue and idle (busy well below 0.8).
Before this, the ready share alone decided: on a loaded 2-core machine the
ground-truth input-bound case (two workers 99% busy, each batch 98 ms of
work for a 12 ms step) had 54% of its wait on steps with a batch "ready" and
was called balanced (R7).

Uncertain bands (issue 14, item 7). Every cut-off above has a band around it
(``thresholds``: ``H2D_BOUND_BAND``, ``COMPUTE_BOUND_BAND``, ``READY_WAIT_BAND``,
``WORKERS_BUSY_BAND``, ``WORKERS_IDLE_BUSY_BAND``; ``PART_MARGIN`` for the largest
part of making a batch). A number inside its band does not decide alone: the
other evidence does where it can — workers busy 0.7-0.9 are saturated when the
queue ran dry (R6), or when their work is CPU work and the cores are saturated
(``SATURATED_FRACTION``) — and otherwise the verdict is ``uncertain`` and names
its ``candidates``, its class being the candidate of the rule first in the table
(so it does not flip with the side of the cut-off a noisy number fell on).
Waiting for a core (``core_wait_fraction``) is contention, counted for no part;
where it outweighs the gap between two real parts, both are named. No sentence
says the workers "cannot keep up" unless the queue ran dry (found full on fewer
than ``QUEUE_MOSTLY_FULL`` of the steps, the wait mostly on steps that found it empty).

Besides the class, ``notes`` say when ``num_workers`` + torch threads exceed
the usable cores (oversubscription), when a cold page cache was not cold, and
when a script asked for ``pin_memory=True`` with no CUDA device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.attribution import Attribution, attribution
from pipeprof.analysis.evidence import PARTS, DataEvidence, DiskCeiling, DiskEvidence, LoadingEvidence
from pipeprof.analysis.thresholds import (
    COMPUTE_BOUND_BAND,
    COMPUTE_BOUND_FRACTION,
    DISK_READ_FLOOR_BYTES_PER_S,
    H2D_BOUND_BAND,
    H2D_BOUND_FRACTION,
    INPUT_BOUND_FRACTION,
    MIN_COUNTED_STEPS,
    PART_MARGIN,
    QUEUE_MOSTLY_FULL,
    READY_WAIT_BAND,
    READY_WAIT_MAIN,
    READY_WAIT_WORKERS,
    SATURATED_FRACTION,
    WORKERS_BUSY,
    WORKERS_BUSY_BAND,
    WORKERS_IDLE_BUSY,
    WORKERS_IDLE_BUSY_BAND,
)
from pipeprof.numbers import finite as _finite
from pipeprof.numbers import scaled as _scaled
from pipeprof.run_folder import Run, as_dict

CLASSES = ("compute", "input:fetch", "input:prep", "input:main", "h2d", "balanced", "unknown")
# summary.json's ``bottleneck``: the verdict's class without the input's cause.
COARSE_CLASSES = ("compute", "input", "h2d", "balanced", "unknown")


def coarse(klass: str) -> str:
    """The coarse form of a verdict class (``COARSE_CLASSES``): ``input:fetch`` -> ``input``, others as they are."""
    return "input" if klass.startswith("input:") else klass


def input_degree(data_wait_fraction: float) -> str:
    """How input-bound a loop that waits for data is: ``"input-bound"`` from ``INPUT_BOUND_FRACTION``
    of step time, ``"partly input-bound"`` below (from ``COMPUTE_BOUND_FRACTION``: under it, compute-bound)."""
    return "input-bound" if data_wait_fraction >= INPUT_BOUND_FRACTION else "partly input-bound"


def too_few_steps_sentence(counted: int | None) -> str:
    """R0's sentence: how many steps were counted and how many a verdict needs (``MIN_COUNTED_STEPS``)."""
    n = int(counted or 0)
    counted_words = "No step was counted" if n == 0 else f"Only {fmt.plural(n, 'step')} {'was' if n == 1 else 'were'} counted"
    return (f"{counted_words} (after warm-up); a verdict needs at least {fmt.plural(MIN_COUNTED_STEPS, 'counted step')}, "
            "so there is no bottleneck to name and nothing to recommend.")


# ---- verdict ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What limits the run: one class (``CLASSES``) with its evidence and a sentence.

    ``rule`` is the row of the decision table that decided; ``degree`` is
    ``"input-bound"`` (data wait >= 20%) or ``"partly input-bound"`` (5-20%) for
    ``input:*`` and ``balanced``, else None; ``evidence`` holds the numbers behind the
    decision (units in the names); ``notes`` are sentences about oversubscribed cores
    and a cold cache that was not cold. ``uncertain``: a number the decision turned on
    fell inside its uncertain band (``thresholds``) and the other evidence did not settle
    it; ``candidates`` then names every class it could be (the class first), else it is
    the class alone. summary.json's ``verdict`` is ``to_json()``.
    """

    klass: str  # "class" in summary.json
    rule: str
    degree: str | None
    sentence: str
    evidence: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    uncertain: bool = False
    candidates: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.klass not in CLASSES:
            raise ValueError(f"not a verdict class: {self.klass!r}")
        if not self.candidates:
            object.__setattr__(self, "candidates", (self.klass,))

    @property
    def coarse(self) -> str:
        """summary.json's ``bottleneck``: the class without the input's cause."""
        return coarse(self.klass)

    def to_json(self) -> dict[str, Any]:
        return {"class": self.klass, "rule": self.rule, "degree": self.degree, "sentence": self.sentence,
                "evidence": dict(self.evidence), "notes": list(self.notes), "uncertain": self.uncertain,
                "candidates": list(self.candidates)}


def verdict(run: Run, probe: dict | None = None) -> Verdict:
    """The verdict of ``run`` (see the module's decision table and ``Verdict``)."""
    return verdict_from_attribution(attribution(run, probe))


def verdict_from_attribution(record: Attribution) -> Verdict:
    """The verdict from an ``attribution(...)`` result (what ``summarize`` uses: computed once)."""
    step = record.step
    wait, h2d = step.data_wait_fraction, step.h2d_fraction
    evidence: dict[str, Any] = {"data_wait_fraction": wait, "h2d_fraction": h2d,
                                "compute_fraction": step.compute_fraction}
    notes = _notes(record)
    if (step.steps or 0) < MIN_COUNTED_STEPS or wait is None:
        evidence["counted_steps"] = int(step.steps or 0)
        evidence["min_counted_steps"] = MIN_COUNTED_STEPS
        return _result("unknown", "R0", None, too_few_steps_sentence(step.steps), evidence, notes)
    h2d = h2d or 0.0
    h2d_side = _side(h2d, H2D_BOUND_FRACTION, H2D_BOUND_BAND)
    if h2d >= wait and h2d_side > 0:
        return _result("h2d", "R1", None,
                       f"Bound by the copy to the device: {_pct(h2d)} of step time moves batches host → device "
                       f"(data wait {_pct(wait)}, compute {_pct(step.compute_fraction)}).", evidence, notes)
    rest = _after_h2d(record, dict(evidence), notes)
    if h2d >= wait and h2d_side == 0:
        return _either("h2d", "R1", None, rest,
                       f"Uncertain: the copy to the device takes {_pct(h2d)} of step time, close to the "
                       f"{_pct(H2D_BOUND_FRACTION)} from which it is the bound (data wait {_pct(wait)}); "
                       "if it is not, ")
    return rest


def _after_h2d(record: Attribution, evidence: dict[str, Any], notes: list[str]) -> Verdict:
    """R2-R9: the verdict of a run that R1 did not settle."""
    step = record.step
    wait = step.data_wait_fraction or 0.0
    wait_side = _side(wait, COMPUTE_BOUND_FRACTION, COMPUTE_BOUND_BAND)
    compute_words = (f"Compute-bound: only {_pct(wait)} of step time waits for data; forward, backward and the "
                     f"optimizer step take {_pct(step.compute_fraction)}.")
    if wait_side < 0:
        return _result("compute", "R2", None, compute_words, evidence, notes)
    degree = input_degree(wait)
    cause = _input_cause(record)
    evidence.update(cause.evidence)
    head = f"{degree.capitalize()} ({_pct(wait)} of step time waiting for data)"
    why = cause.why
    if cause.klass == "input:fetch" or "input:fetch" in cause.candidates:
        why += _disk_words(record.disk, evidence)
    if len(cause.candidates) > 1:
        sentence = (f"{head}, uncertain between {' and '.join(_CLASS_WORDS[c] for c in cause.candidates)}: "
                    f"{why}.")
    elif cause.klass == "balanced":
        sentence = f"{head}, with no single cause: {why}."
    else:
        sentence = f"{head}, {_CAUSE_WORDS[cause.klass]}: {why}."
    judged = Verdict(cause.klass, cause.rule, degree, sentence, evidence, tuple(notes),
                     len(cause.candidates) > 1, cause.candidates)
    if wait_side == 0:
        return _either("compute", "R2", None, judged,
                       f"Uncertain: {_pct(wait)} of step time waits for data, close to the "
                       f"{_pct(COMPUTE_BOUND_FRACTION)} under which the run is compute-bound; if it is not, ")
    return judged


def _either(klass: str, rule: str, degree: str | None, other: Verdict, words: str) -> Verdict:
    """An uncertain verdict between ``klass`` (an earlier rule, near its cut-off) and ``other``'s candidates."""
    rest = other.sentence[0].lower() + other.sentence[1:]
    candidates = (klass, *(c for c in other.candidates if c != klass))
    return Verdict(klass, rule, degree, words + rest, other.evidence, other.notes, True, candidates)


_CAUSE_WORDS = {
    "input:fetch": "by storage (reading samples)",
    "input:prep": "by preprocessing on the CPU (decoding and transforms)",
    "input:main": "in the training process itself",
}
_CLASS_WORDS = {
    "input:fetch": "storage (reading samples)",
    "input:prep": "preprocessing on the CPU (decoding and transforms)",
    "input:main": "the training process itself",
    "balanced": "no single cause (bursty supply)",
    "compute": "compute",
    "h2d": "the copy to the device",
}


@dataclass(frozen=True)
class _Cause:
    """What R3-R9 found: the class, its rule, the reason in words, evidence, and every candidate (the class
    first; more than one: uncertain)."""

    klass: str
    rule: str
    why: str
    evidence: dict[str, Any]
    candidates: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.candidates:
            object.__setattr__(self, "candidates", (self.klass,))


def _side(value: float, cut: float, band: float) -> int:
    """1 at or above ``cut + band``, -1 below ``cut - band``, 0 inside the uncertain band."""
    if value >= cut + band:
        return 1
    if value < cut - band:
        return -1
    return 0


def _join(*candidates: tuple[str, ...]) -> tuple[str, ...]:
    """Candidates in order, each once."""
    out: list[str] = []
    for group in candidates:
        out.extend(c for c in group if c not in out)
    return tuple(out)


def _input_cause(attr: Attribution) -> _Cause:
    """The cause of a run that waits for data (R3-R9)."""
    loading, prefetch = attr.loading, attr.prefetch
    workers = attr.cpu.num_workers
    storage = _storage_words(attr.data)
    has_loading = loading.absent is None
    if workers == 0 and has_loading:
        return _serial_cause(attr, storage)
    share = prefetch.ready_wait_fraction if prefetch.absent is None else None
    if workers != 0 and share is not None:
        return _queue_cause(attr, share, storage)
    busy = loading.worker_busy_mean_fraction if has_loading else None
    if workers != 0 and busy is not None:
        ev: dict[str, Any] = {"worker_busy_mean_fraction": busy}
        busy_side = _side(busy, WORKERS_BUSY, WORKERS_BUSY_BAND)
        unseen = "(the queue itself was not observed in this run)"
        if busy <= WORKERS_IDLE_BUSY - WORKERS_IDLE_BUSY_BAND:
            return _Cause("input:main", "R8", (
                f"the workers were busy only {_pct(busy)} of the time, so batches were ready; the time goes into "
                f"moving them into the training process {unseen}"), ev)
        if busy <= WORKERS_IDLE_BUSY + WORKERS_IDLE_BUSY_BAND:
            return _Cause("input:main", "R8", (
                f"the workers were busy {_pct(busy)} of the time, close to the {_pct(WORKERS_IDLE_BUSY)} at or "
                f"below which they have slack {unseen}: the time goes into moving batches into the training "
                "process, or supply is bursty"), ev, ("input:main", "balanced"))
        if busy_side > 0:
            split = _workers_split(loading, storage, ev)
            return _Cause(split.klass, "R8", f"the workers were busy {_pct(busy)} of the time; {split.why}", ev,
                          split.candidates)
        if busy_side == 0:
            split = _workers_split(loading, storage, ev)
            return _Cause(split.klass, "R8", (
                f"the workers were busy {_pct(busy)} of the time, close to the {_pct(WORKERS_BUSY)} at which they "
                f"set the pace {unseen}; if they do, {split.why}"), ev, _join(split.candidates, ("balanced",)))
        return _Cause("balanced", "R8", (f"the workers were busy {_pct(busy)} of the time, neither idle nor "
                                         f"saturated {unseen}"), ev)
    return _inferred(attr)


def _queue_cause(attr: Attribution, share: float, storage: str | None) -> _Cause:
    """R5-R7: workers and the prefetch queue observed; ``share`` of the wait fell on steps with a batch ready."""
    loading, prefetch = attr.loading, attr.prefetch
    has_loading = loading.absent is None
    ev: dict[str, Any] = {"capacity_batches": prefetch.capacity_batches,
                          "mean_ready_batches": prefetch.mean_ready_batches,
                          "empty_step_fraction": prefetch.empty_step_fraction,
                          "full_step_fraction": prefetch.full_step_fraction, "ready_wait_fraction": share}
    # No step found the queue empty (or ready): there is no such mean, and "not measured" would mislead.
    if prefetch.wait_when_ready_mean_s is not None:
        ev["wait_when_ready_mean_s"] = prefetch.wait_when_ready_mean_s
    if prefetch.wait_when_empty_mean_s is not None:
        ev["wait_when_empty_mean_s"] = prefetch.wait_when_empty_mean_s
    busy = loading.worker_busy_mean_fraction if has_loading else None
    busy_side = _side(busy, WORKERS_BUSY, WORKERS_BUSY_BAND) if busy is not None else -1
    if busy is not None and busy_side >= 0:
        ev["worker_busy_mean_fraction"] = busy
    capacity = prefetch.capacity_batches
    full = prefetch.full_step_fraction or 0.0
    queue = (f"{_pct(prefetch.full_step_fraction)} of steps found the prefetch queue full "
             f"({capacity} of {capacity}), " if capacity else "")
    queue += f"{_pct(prefetch.empty_step_fraction)} found it empty"
    # The queue was run dry only if it was not mostly full and the wait fell mostly on steps that found it empty.
    ran_dry = full < QUEUE_MOSTLY_FULL and share <= READY_WAIT_WORKERS + READY_WAIT_BAND
    main_words = ("the time goes into moving batches into the training process (unpickling, shared "
                  f"memory{', the pin-memory thread' if attr.data.pin_memory else ''})")
    if busy is not None and busy_side > 0:
        split = _workers_split(loading, storage, ev)
        lead = (f"the workers cannot keep up — busy {_pct(busy)} of the time, they set the pace" if ran_dry else
                f"the workers set the pace — busy {_pct(busy)} of the time, they have no slack to get ahead of "
                "the loop, though the queue held batches when asked")
        return _Cause(split.klass, "R6", (f"{lead} ({queue}; {_pct(share)} of the wait fell on steps that had a "
                                          f"batch in the queue, not necessarily the next one); {split.why}"),
                      ev, split.candidates)
    ready_main = _side(share, READY_WAIT_MAIN, READY_WAIT_BAND)
    ready_workers = -_side(share, READY_WAIT_WORKERS, READY_WAIT_BAND)  # 1: clearly little wait on ready steps
    if share <= READY_WAIT_WORKERS - READY_WAIT_BAND:
        ready_workers = 1
    if busy is not None and busy_side == 0:
        split = _workers_split(loading, storage, ev)
        if ready_workers >= 0 and share <= READY_WAIT_WORKERS + READY_WAIT_BAND:  # the queue agrees: it ran dry
            return _Cause(split.klass, "R6", (
                f"the workers cannot keep up — busy {_pct(busy)} of the time, {queue}, and {_pct(1 - share)} "
                f"of the wait fell on steps that found it empty; {split.why}"), ev, split.candidates)
        saturated = attr.cpu.busy_over_usable_fraction
        if split.klass == "input:prep" and len(split.candidates) == 1 and saturated is not None \
                and saturated >= SATURATED_FRACTION:
            ev["busy_over_usable_fraction"] = saturated
            return _Cause("input:prep", "R6", (
                f"the workers were busy {_pct(busy)} of the time on CPU work while the training process and "
                f"workers kept {_pct(saturated)} of the usable cores busy: a batch was often ready ({queue}), "
                f"but making the next ones takes the cores the training needs; {split.why}"), ev)
        other = "input:main" if share >= READY_WAIT_MAIN - READY_WAIT_BAND else "balanced"
        return _Cause(split.klass, "R6", (
            f"the workers were busy {_pct(busy)} of the time, close to the {_pct(WORKERS_BUSY)} at which they "
            f"set the pace, while {queue} and {_pct(share)} of the wait fell on steps that had a batch ready; "
            f"if the workers set the pace, {split.why}; if not, "
            + (main_words if other == "input:main" else "supply is bursty")), ev, _join(split.candidates, (other,)))
    if ready_main > 0:
        return _Cause("input:main", "R5", (
            f"{queue}, and {_pct(share)} of the wait fell on steps that had a batch ready — the workers "
            f"keep up, and {main_words}"), ev)
    if ready_main == 0:
        return _Cause("input:main", "R5", (
            f"{queue}, and {_pct(share)} of the wait fell on steps that had a batch ready, close to the "
            f"{_pct(READY_WAIT_MAIN)} from which the workers keep up: either {main_words}, or supply is "
            "bursty"), ev, ("input:main", "balanced"))
    if share <= READY_WAIT_WORKERS + READY_WAIT_BAND:
        near = share > READY_WAIT_WORKERS - READY_WAIT_BAND
        lead = "the workers cannot keep up" if ran_dry else "the workers fall behind at times"
        if has_loading:
            split = _workers_split(loading, storage, ev)
            klass, why, cands = split.klass, split.why, split.candidates
        else:
            inferred = _inferred(attr)
            ev.update(inferred.evidence)
            klass, why, cands = inferred.klass, inferred.why, inferred.candidates
            lead += f" ({queue})"
        words = (f"{lead} — {queue}, and {_pct(1 - share)} of the wait fell on steps that found it empty; {why}"
                 if has_loading else f"{lead}; {why}")
        if near:
            words += "; close to the cut-off, supply may instead be bursty"
            cands = _join(cands, ("balanced",))
        return _Cause(klass, "R6" if has_loading else "R9", words, ev, cands)
    return _Cause("balanced", "R7", (
        f"{queue}; {_pct(share)} of the wait fell on steps that had a batch ready and the rest on steps that "
        "had none — supply is bursty (a larger prefetch_factor may smooth it)"), ev)


def _serial_cause(attr: Attribution, storage: str | None) -> _Cause:
    """R3-R4: with 0 workers, the largest share of the mean wait (fetch, prep, the training process's own)."""
    loading = attr.loading
    ev: dict[str, Any] = {"fetch_fraction": loading.fetch_fraction, "prep_fraction": loading.prep_fraction,
                          "collate_fraction": loading.collate_fraction, "batch_s": loading.batch_s,
                          "production_over_wait_fraction": loading.production_over_wait_fraction,
                          "data_wait_mean_s": attr.step.data_wait_mean_s}
    core = _core_wait_fraction(loading)
    if core is not None:
        ev["core_wait_fraction"] = core
    wait_s = _serial_wait_s(loading, attr.step.data_wait_mean_s)
    if wait_s is None:  # no wait or making time to split: the largest part of making a batch
        by_class = {"fetch": loading.fetch_fraction or 0.0, "prep": loading.prep_fraction or 0.0,
                    "collate": loading.collate_fraction or 0.0}
    else:  # waiting for a core is contention, no part's own cost: it counts for none of them
        by_class = {"fetch": wait_s["fetch"], "prep": wait_s["prep"], "collate": wait_s["collate"] + wait_s["own"]}
    order = sorted(PARTS, key=lambda p: -by_class[p])
    part, second = order[0], order[1]
    total = sum(by_class.values())
    # As for the workers' split: a core wait larger than the gap between two real shares could belong to either.
    core_s = (core or 0.0) * (_finite(loading.batch_s) or 0.0) if wait_s is not None else (core or 0.0)
    contended = total > 0 and by_class[second] / total >= PART_MARGIN and core_s >= by_class[part] - by_class[second]
    close = total > 0 and ((by_class[part] - by_class[second]) / total < PART_MARGIN or contended)
    candidates = tuple(_PART_CLASS[p] for p in PARTS if p in (part, second)) if close else ()
    if close:  # the class does not flip with which of the two came out ahead: the table's order decides
        part = next(p for p in PARTS if p in (part, second))
    if wait_s is not None and part == "collate" and wait_s["own"] >= wait_s["collate"]:
        return _Cause("input:main", "R3", (
            f"making a batch takes {_time(loading.batch_s)} but the loop waited "
            f"{_time(attr.step.data_wait_mean_s)} per step; the other {_time(wait_s['own'])} is the training "
            "process's own work outside fetch, prep and collate (DataLoader bookkeeping, pinning) — with "
            f"collating {_pct(by_class['collate'] / total)} of the wait, against fetching's "
            f"{_pct(by_class['fetch'] / total)} and decoding's {_pct(by_class['prep'] / total)}"), ev, candidates)
    if close:
        shares = {p: by_class[p] / total for p in PARTS}
        other = second if part == order[0] else order[0]
        why = (f"the training process makes every batch (num_workers = 0) and two parts of the wait are too close "
               f"to tell apart: {_share_words(part, shares[part], loading, storage)} against "
               f"{_share_words(other, shares[other], loading, storage)}{_core_words(core)}")
        return _Cause(_PART_CLASS[part], "R4", why, ev, candidates)
    return _Cause(_PART_CLASS[part], "R4", (
        f"the training process makes every batch (num_workers = 0) and {_pct(loading.part_fraction(part))} "
        f"of that time is {_part_words(part, loading, storage)}{_core_words(core)}"), ev)


def _share_words(part: str, share: float, loading: LoadingEvidence, storage: str | None) -> str:
    if part == "collate":
        return f"{_pct(share)} collating and the training process's own work"
    return f"{_pct(share)} {_part_words(part, loading, storage)}"


_PART_CLASS = {"fetch": "input:fetch", "prep": "input:prep", "collate": "input:main"}


def _core_wait_fraction(loading: LoadingEvidence) -> float | None:
    """The share of production time spent runnable but waiting for a core (None: unknown or not recorded).

    Read defensively: the field arrives with the run-queue split of fetch (issue 14, item 6)."""
    return _finite(getattr(loading, "core_wait_fraction", None))


def _serial_wait_s(loading: LoadingEvidence, wait_mean_s: float | None) -> dict[str, float] | None:
    """With 0 workers, the mean wait per step in seconds as ``fetch``, ``prep``, ``collate`` (``batch_s`` split
    by their measured fractions; waiting for a core, the rest of ``batch_s``, is in none) and ``own``: the
    training process's work outside them (R3, R4)."""
    batch_s = _finite(loading.batch_s)
    if not wait_mean_s or batch_s is None:
        return None
    parts = {p: (loading.part_fraction(p) or 0.0) * batch_s for p in PARTS}
    return {**parts, "own": max(wait_mean_s - batch_s, 0.0)}


def _workers_split(loading: LoadingEvidence, storage: str | None, ev: dict[str, Any]) -> _Cause:
    """input:fetch or input:prep by where the workers' time goes (collate counts as CPU work with prep; waiting
    for a core is contention, never storage, and counts for neither); both when too close to tell
    (``PART_MARGIN``)."""
    fetch = loading.fetch_fraction or 0.0
    core = _core_wait_fraction(loading)
    cpu = (loading.prep_fraction or 0.0) + (loading.collate_fraction or 0.0)
    ev.update({"fetch_fraction": loading.fetch_fraction, "prep_fraction": loading.prep_fraction,
               "collate_fraction": loading.collate_fraction, "fetch_per_sample_s": loading.fetch_per_sample_s,
               "prep_per_sample_s": loading.prep_per_sample_s})
    if core is not None:
        ev["core_wait_fraction"] = core
    fetch_words = f"{_pct(fetch)} of their batch-making time is {_part_words('fetch', loading, storage)}"
    cpu_words = (f"{_pct(cpu)} of their batch-making time is CPU work: {_part_words('prep', loading, storage)} "
                 "and collating")
    total = fetch + cpu
    # A wait for a core follows a read as well as it interrupts CPU work: where it outweighs the gap between
    # the two (and each is a real share), the split cannot say which limits.
    contended = core is not None and min(fetch, cpu) >= PART_MARGIN and core >= abs(fetch - cpu)
    if total > 0 and (abs(fetch - cpu) / total < PART_MARGIN or contended):
        return _Cause("input:fetch", "", f"{fetch_words}, against {cpu_words} — too close to tell which limits"
                      + _core_words(core), {}, ("input:fetch", "input:prep"))
    if fetch >= cpu:
        return _Cause("input:fetch", "", fetch_words + _core_words(core), {})
    return _Cause("input:prep", "", cpu_words + _core_words(core), {})


def _core_words(core: float | None) -> str:
    """The share of batch-making spent waiting for a core, said apart from the parts (it is none of them)."""
    if not core:
        return ""
    return f"; {_pct(core)} more was waiting for a core (CPU contention, counted for no part)"


def _inferred(attr: Attribution) -> _Cause:
    """R9: no loading split or queue readings to go by; disk reads decide, marked as inferred."""
    mean_bps = attr.disk.mean_read_bytes_per_s
    ev: dict[str, Any] = {"mean_read_bytes_per_s": mean_bps, "cause_measured": False}
    if mean_bps is not None and mean_bps >= DISK_READ_FLOOR_BYTES_PER_S:
        return _Cause("input:fetch", "R9", (f"inferred, not measured (no loading records): the process tree read "
                                            f"{_rate(mean_bps)} from disk while it waited"), ev)
    if attr.cpu.num_workers:
        return _Cause("input:prep", "R9", ("inferred, not measured (no loading records): the workers read next to "
                                           "nothing from disk, so their time is CPU work"), ev)
    return _Cause("input:main", "R9", ("inferred, not measured (no loading records): the training process makes "
                                       "every batch and reads next to nothing from disk"), ev)


def _disk_words(disk: DiskEvidence, evidence: dict[str, Any]) -> str:
    """The disk's read rate against the probed ceiling, for a storage verdict (and its evidence)."""
    if disk.absent is not None:
        return ""
    ceiling = disk.ceiling or DiskCeiling()
    evidence["mean_read_bytes_per_s"] = disk.mean_read_bytes_per_s
    evidence["peak_read_bytes_per_s"] = disk.peak_read_bytes_per_s
    peak_bps = disk.peak_read_bytes_per_s or 0.0
    if peak_bps < DISK_READ_FLOOR_BYTES_PER_S:
        return "; the disk read next to nothing (the bytes came from memory or the page cache)"
    words = f"; the disk read {_rate(disk.mean_read_bytes_per_s)} on average (peak {_rate(peak_bps)})"
    if ceiling.absent is not None:
        evidence["disk_ceiling"] = ceiling.absent
        return words + " — no ceiling to compare with (" + ceiling.absent + ")"
    evidence.update({"sequential_cold_bytes_per_s": ceiling.sequential_cold_bytes_per_s,
                     "peak_over_sequential_fraction": ceiling.peak_over_sequential_fraction,
                     "random_4k_cold_bytes_per_s": ceiling.random_4k_cold_bytes_per_s,
                     "peak_over_random_4k_fraction": ceiling.peak_over_random_4k_fraction})
    parts = []
    if ceiling.peak_over_sequential_fraction is not None:
        parts.append(f"{_pct(ceiling.peak_over_sequential_fraction)} of the probed cold sequential ceiling "
                     f"({_rate(ceiling.sequential_cold_bytes_per_s)})")
    if ceiling.peak_over_random_4k_fraction is not None:
        parts.append(f"{_pct(ceiling.peak_over_random_4k_fraction)} of the cold random 4 KiB ceiling "
                     f"({_rate(ceiling.random_4k_cold_bytes_per_s)})")
    return words + (", at peak " + " and ".join(parts) if parts else "")


def _notes(attr: Attribution) -> list[str]:
    cpu, notes = attr.cpu, []
    if cpu.oversubscribed:
        busy = (f"; the training process and workers kept {cpu.busy_cores:.1f} of them busy on average"
                if cpu.busy_cores is not None else "")
        notes.append(f"{fmt.plural(cpu.num_workers, 'worker')} + {fmt.plural(cpu.torch_threads, 'torch thread')} on "
                     f"{cpu.cores_usable} usable cores: more threads than cores, so they compete for CPU "
                     f"whenever all are busy{busy}.")
    settings = attr.settings
    # A scenario run notes this when it builds its loader (run.json's notes); a script's loader is its own.
    if settings is not None and settings.kind == "script" and settings.loader.pin_memory and not attr.data.pin_memory:
        notes.append(f"pin_memory=True has no effect here: the batches went to the {settings.device}, and pinning "
                     "only speeds up copies to a CUDA device.")
    cache = attr.cache
    if cache.cache == "cold" and cache.verified is False:
        notes.append("The cold page cache was not cold, so the cost of reading from disk is understated. "
                     f"{cache.reason or ''}".strip())
    return notes


def _result(klass: str, rule: str, degree: str | None, sentence: str, evidence: dict, notes: list[str]) -> Verdict:
    return Verdict(klass, rule, degree, sentence, evidence, tuple(notes))


# ---- helpers ----------------------------------------------------------------------------


def _storage_words(data: DataEvidence) -> str | None:
    storage, throttle = data.storage, data.throttle
    if storage and throttle:
        spec = as_dict(throttle)
        label = spec.get("preset") or (throttle if isinstance(throttle, str) else None)
        if label:
            return f"{storage}, throttled to emulate {label} storage"
        return (f"{storage}, throttled to {fmt.duration(_scaled(spec.get('latency_ms'), 1e-3))} + "
                f"{fmt.byte_rate(_scaled(spec.get('bandwidth_mb_s'), 1e6))} per read (emulated)")
    return storage


def _part_words(part: str, loading: LoadingEvidence, storage: str | None) -> str:
    where = f", storage: {storage}" if storage else ""
    if loading.split == "thread-cpu-time" and part in ("fetch", "prep"):  # a script's __getitem__
        if part == "fetch":
            what = ("reading storage, the network or sleeping" if _core_wait_fraction(loading) is not None else
                    "reading storage, the network, sleeping or waiting for a core (not told apart in this run)")
            return f"time in __getitem__ off the CPU — {what} ({_time(loading.fetch_per_sample_s)} per sample)"
        return (f"CPU work in __getitem__ — decoding and transforms "
                f"({_time(loading.prep_per_sample_s)} per sample)")
    if part == "fetch":
        return f"fetching samples ({_time(loading.fetch_per_sample_s)} per sample{where})"
    if part == "prep":
        return f"decoding and transforming ({_time(loading.prep_per_sample_s)} per sample)"
    return f"collating samples into batches ({_time(loading.collate_per_batch_s)} per batch)"


# Sentences format through pipeprof.format; these name the words for a value that is missing.
def _pct(fraction: Any) -> str:
    return fmt.pct(fraction, missing="an unknown share")


def _time(seconds: Any) -> str:
    return fmt.duration(seconds, missing="an unknown time")


def _rate(bytes_per_s: Any) -> str:
    return fmt.byte_rate(bytes_per_s, missing="an unknown rate")
