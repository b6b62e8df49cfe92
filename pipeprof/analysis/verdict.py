"""The verdict: what limits this run's training, in one class with its reason, from its attribution.

Pure functions (no torch). ``pipeprof.analysis.attribution`` gathers the
direct evidence; ``verdict`` turns it into one class and a reason (a kind plus
its numbers, which ``pipeprof.render.verdict_text`` puts in plain words) by the
decision table below. Both land in summary.json
(``attribution``, ``verdict``), and so does the verdict's coarse form,
``bottleneck`` (``coarse``: every ``input:*`` class is ``input``), so the two
can never disagree.

Classes: ``compute``; ``input:fetch`` (storage: reading samples' bytes);
``input:prep`` (decoding and transforms on the CPU); ``input:main`` (the
training process: collate with ``num_workers = 0``, receiving batches from
workers, pinning, DataLoader bookkeeping); ``input:start`` (spawned workers
starting at each pass: most of the wait on a pass's first batch, set after the
table by ``worker_start.with_start_verdict``); ``h2d`` (copy to the device);
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
R10   after the table: an input-bound class, spawned workers'     input:start
      start-up timed, and at least START_WAIT_SHARE (0.5) of the
      counted data wait on the first step of a pass
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
Waiting for a core (``core_wait_fraction``) is contention, counted in none of the parts;
where it outweighs the gap between two real parts, both are named. No sentence
says the workers "cannot keep up" unless the queue ran dry (found full on fewer
than ``QUEUE_MOSTLY_FULL`` of the steps, the wait mostly on steps that found it empty).

Besides the class, ``notes`` say when ``num_workers`` + torch threads exceed
the usable cores (oversubscription), when a cold page cache was not cold, and
when a script asked for ``pin_memory=True`` with no CUDA device.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pipeprof.analysis.attribution import Attribution, attribution
from pipeprof.analysis.causes import input_cause, side
from pipeprof.analysis.device_memory import DeviceMemory, device_memory
from pipeprof.analysis.evidence import OFF_CPU_SPLIT, DiskCeiling, DiskEvidence, Evidence
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.thresholds import (
    COMPUTE_BOUND_BAND,
    COMPUTE_BOUND_FRACTION,
    DISK_READ_FLOOR_BYTES_PER_S,
    H2D_BOUND_BAND,
    H2D_BOUND_FRACTION,
    INPUT_BOUND_FRACTION,
    MIN_COUNTED_STEPS,
)
from pipeprof.analysis.transform_advice import WAITED_NOTABLE, costliest
from pipeprof.analysis.transforms import LoaderTransforms, training_transforms
from pipeprof.run_folder import Run
from pipeprof.run_meta import JsonObject, as_object

CLASSES = ("compute", "input:fetch", "input:prep", "input:main", "input:start", "h2d", "balanced", "unknown")
# summary.json's ``bottleneck``: the verdict's class without the input's cause.
COARSE_CLASSES = ("compute", "input", "h2d", "balanced", "unknown")


def coarse(klass: str) -> str:
    """The coarse form of a verdict class (``COARSE_CLASSES``): ``input:fetch`` -> ``input``, others as they are."""
    return "input" if klass.startswith("input:") else klass


def input_degree(data_wait_fraction: float) -> str:
    """How input-bound a loop that waits for data is: ``"input-bound"`` from ``INPUT_BOUND_FRACTION``
    of step time, ``"partly input-bound"`` below (from ``COMPUTE_BOUND_FRACTION``: under it, compute-bound)."""
    return "input-bound" if data_wait_fraction >= INPUT_BOUND_FRACTION else "partly input-bound"


def too_few_steps(counted: int | None) -> Reason:
    """R0's reason: how many steps were counted and how many a verdict needs (``MIN_COUNTED_STEPS``)."""
    return Reason("too_few_steps", {"counted_steps": int(counted or 0), "min_counted_steps": MIN_COUNTED_STEPS})


# ---- verdict ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What limits the run: one class (``CLASSES``) with its evidence and its reason.

    ``rule`` is the row of the decision table that decided; ``degree`` is
    ``"input-bound"`` (data wait >= 20%) or ``"partly input-bound"`` (5-20%) for
    ``input:*`` and ``balanced``, else None; ``reason`` is what the sentence says (worded by
    ``render.verdict_text``); ``evidence`` holds the numbers behind the
    decision (units in the names); ``notes`` are the reasons of notes about oversubscribed cores,
    a cold cache that was not cold and the like. ``uncertain``: a number the decision turned on
    fell inside its uncertain band (``thresholds``) and the other evidence did not settle
    it; ``candidates`` then names every class it could be (the class first), else it is
    the class alone. summary.json's ``verdict`` is ``to_json()`` with the ``sentence`` and ``notes`` that
    ``render.verdict_text`` writes at the edge.
    """

    klass: str  # "class" in summary.json
    rule: str
    degree: str | None
    reason: Reason  # worded by render.verdict_text: summary.json's "sentence"
    evidence: Evidence = field(default_factory=dict)
    notes: tuple[Reason, ...] = ()
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

    def to_json(self) -> JsonObject:
        """summary.json's ``verdict`` but its words (``sentence``, ``notes``: ``render.verdict_text``)."""
        return {"class": self.klass, "rule": self.rule, "degree": self.degree, "evidence": dict(self.evidence),
                "uncertain": self.uncertain, "candidates": list(self.candidates)}

    @classmethod
    def from_json(cls, data: Any) -> Verdict:
        """The inverse of ``to_json``, for a summary read back (an unknown class reads as ``unknown``); the
        sentence and notes are the words the summary kept (``Reason.written``)."""
        d = as_object(data)
        klass = str(d.get("class") or "unknown")
        return cls(klass=klass if klass in CLASSES else "unknown", rule=str(d.get("rule") or ""),
                   degree=d.get("degree"), reason=Reason.written(str(d.get("sentence") or "")),
                   evidence=dict(as_object(d.get("evidence"))),
                   notes=tuple(Reason.written(str(n)) for n in d.get("notes") or ()),
                   uncertain=bool(d.get("uncertain")),
                   candidates=tuple(str(c) for c in d.get("candidates") or ()))


def verdict(run: Run, probe: JsonObject | None = None) -> Verdict:
    """The verdict of ``run`` (see the module's decision table and ``Verdict``)."""
    attr = attribution(run, probe)
    judged = with_memory_note(verdict_from_attribution(attr), device_memory(run))
    return with_transforms(judged, training_transforms(run), fetch_off_cpu=attr.loading.split == OFF_CPU_SPLIT)


def with_transforms(judged: Verdict, transforms: LoaderTransforms | None, *, fetch_off_cpu: bool = False) -> Verdict:
    """``judged`` naming the costliest part of preparation where CPU preprocessing sets the pace
    (``input:prep``) and the training loader's transforms or decode calls were timed (issue 18): "...;
    RandomResizedCrop(size=224) takes 61% of preparation, 1.30 ms per sample." (decoding instead where it costs
    more than any transform), with the numbers in the evidence. Where fetching sets the pace and fetch is
    ``__getitem__``'s time off the CPU (``fetch_off_cpu``: a script's), the reason says how much of it was
    inside the transforms. Otherwise ``judged`` as it is."""
    if judged.klass == "input:fetch" and fetch_off_cpu:
        return _off_cpu_in_transforms(judged, transforms)
    part = costliest(transforms)
    if judged.klass != "input:prep" or part is None:
        return judged
    evidence = {**judged.evidence, "prep_costliest": part.name, "prep_costliest_per_sample_s": part.per_sample_s}
    if part.share_of_prep is not None:
        evidence["prep_costliest_fraction"] = part.share_of_prep
    cpu = part.cpu_per_sample_s
    reason = Reason("costliest_prep", {
        "name": part.name, "per_sample_s": part.per_sample_s, "cpu_per_sample_s": cpu,
        "share_of_prep": part.share_of_prep,
        # the rest waited: for a core (contention), I/O, a lock
        "cpu_said": cpu is not None and cpu == cpu and cpu < (1 - WAITED_NOTABLE) * part.per_sample_s},
        (judged.reason,))
    return dataclasses.replace(judged, reason=reason, evidence=evidence)


def _off_cpu_in_transforms(judged: Verdict, lt: LoaderTransforms | None) -> Verdict:
    """A script's "fetch" is ``__getitem__``'s time off the CPU: where that time was spent mostly inside its
    transforms (waiting in them: a sleep, a lock, a GPU call, a file a transform opens) rather than outside
    them reading, the reason says so and names the transform that waited most."""
    if lt is None or lt.split is None or not lt.transforms:
        return judged
    waits = sorted(((c.per_sample_s - c.cpu_per_sample_s, c) for c in lt.transforms), key=lambda w: -w[0])
    in_transforms_s = sum(max(w, 0.0) for w, _ in waits)
    if in_transforms_s <= lt.split.fetch_s + lt.split.decode_s:
        return judged
    waited_s, top = waits[0]
    evidence = {**judged.evidence, "fetch_in_transforms_per_sample_s": in_transforms_s,
                "fetch_in_transforms_costliest": top.name}
    reason = Reason("off_cpu_in_transforms", {"name": top.name, "per_sample_s": top.per_sample_s,
                                              "off_cpu_per_sample_s": waited_s}, (judged.reason,))
    return dataclasses.replace(judged, reason=reason, evidence=evidence)


def with_memory_note(judged: Verdict, memory: DeviceMemory) -> Verdict:
    """``judged`` with a note when allocated device memory crept up across the counted steps
    (``device_memory.CREEP_RULE``); the class, rule and reason stay as they are."""
    creep = memory.creep
    if creep is None or not creep.growing:
        return judged
    note = Reason("memory_creep", {"growth_bytes": creep.growth_bytes, "per_step_bytes": creep.per_step_bytes})
    return dataclasses.replace(judged, notes=(*judged.notes, note))


def verdict_from_attribution(record: Attribution) -> Verdict:
    """The verdict from an ``attribution(...)`` result (what ``summary_record`` uses: computed once)."""
    step = record.step
    wait, h2d = step.data_wait_fraction, step.h2d_fraction
    evidence: Evidence = {"data_wait_fraction": wait, "h2d_fraction": h2d,
                          "compute_fraction": step.compute_fraction}
    notes = _notes(record)
    if (step.steps or 0) < MIN_COUNTED_STEPS or wait is None:
        evidence["counted_steps"] = int(step.steps or 0)
        evidence["min_counted_steps"] = MIN_COUNTED_STEPS
        return _result("unknown", "R0", None, too_few_steps(step.steps), evidence, notes)
    h2d = h2d or 0.0
    h2d_side = side(h2d, H2D_BOUND_FRACTION, H2D_BOUND_BAND)
    if h2d >= wait and h2d_side > 0:
        return _result("h2d", "R1", None, Reason("h2d", {"h2d_fraction": h2d, "data_wait_fraction": wait,
                                                         "compute_fraction": step.compute_fraction}), evidence, notes)
    rest = _after_h2d(record, dict(evidence), notes)
    if h2d >= wait and h2d_side == 0:
        return _either("h2d", "R1", None, rest, Reason("h2d_near", {
            "h2d_fraction": h2d, "cut_fraction": H2D_BOUND_FRACTION, "data_wait_fraction": wait}))
    return rest


def _after_h2d(record: Attribution, evidence: Evidence, notes: list[Reason]) -> Verdict:
    """R2-R9: the verdict of a run that R1 did not settle."""
    step = record.step
    wait = step.data_wait_fraction or 0.0
    wait_side = side(wait, COMPUTE_BOUND_FRACTION, COMPUTE_BOUND_BAND)
    compute = Reason("compute", {"data_wait_fraction": wait, "compute_fraction": step.compute_fraction})
    collective = step.collective_wait_fraction or 0.0
    if collective > (step.compute_fraction or 0.0):  # a rank of a job that waits for the others more than it works
        evidence["collective_wait_fraction"] = collective
        compute = Reason("collective_wait", {"collective_wait_fraction": collective,
                                             "compute_fraction": step.compute_fraction, "data_wait_fraction": wait})
    if wait_side < 0:
        return _result("compute", "R2", None, compute, evidence, notes)
    degree = input_degree(wait)
    cause = input_cause(record)
    evidence.update(cause.evidence)
    disk = (_disk(record.disk, evidence) if cause.klass == "input:fetch" or "input:fetch" in cause.candidates
            else None)
    reason = Reason("input", {"degree": degree, "data_wait_fraction": wait, "class": cause.klass,
                              "candidates": cause.candidates},
                    (cause.reason,) if disk is None else (cause.reason, disk))
    judged = Verdict(cause.klass, cause.rule, degree, reason, evidence, tuple(notes),
                     len(cause.candidates) > 1, cause.candidates)
    if wait_side == 0:
        return _either("compute", "R2", None, judged, Reason("compute_near", {
            "data_wait_fraction": wait, "cut_fraction": COMPUTE_BOUND_FRACTION}))
    return judged


def _either(klass: str, rule: str, degree: str | None, other: Verdict, near: Reason) -> Verdict:
    """An uncertain verdict between ``klass`` (an earlier rule, near its cut-off: ``near``) and ``other``'s
    candidates; its reason is ``near``'s, then ``other``'s."""
    candidates = (klass, *(c for c in other.candidates if c != klass))
    reason = Reason(near.kind, near.values, (other.reason,))
    return Verdict(klass, rule, degree, reason, other.evidence, other.notes, True, candidates)


def _disk(disk: DiskEvidence, evidence: Evidence) -> Reason | None:
    """The disk's read rate against the probed ceiling, for a storage verdict (and its evidence); None where
    the disk was not sampled."""
    if disk.absent is not None:
        return None
    ceiling = disk.ceiling or DiskCeiling()
    evidence["mean_read_bytes_per_s"] = disk.mean_read_bytes_per_s
    evidence["peak_read_bytes_per_s"] = disk.peak_read_bytes_per_s
    peak_bps = disk.peak_read_bytes_per_s or 0.0
    if peak_bps < DISK_READ_FLOOR_BYTES_PER_S:
        return Reason("disk_idle")
    read = {"mean_read_bytes_per_s": disk.mean_read_bytes_per_s, "peak_read_bytes_per_s": peak_bps,
            "ceiling_absent": ceiling.absent}
    if ceiling.absent is not None:
        evidence["disk_ceiling"] = ceiling.absent
        return Reason("disk_read", read)
    evidence.update({"sequential_cold_bytes_per_s": ceiling.sequential_cold_bytes_per_s,
                     "peak_over_sequential_fraction": ceiling.peak_over_sequential_fraction,
                     "random_4k_cold_bytes_per_s": ceiling.random_4k_cold_bytes_per_s,
                     "peak_over_random_4k_fraction": ceiling.peak_over_random_4k_fraction})
    return Reason("disk_read", {**read, "sequential_cold_bytes_per_s": ceiling.sequential_cold_bytes_per_s,
                                "peak_over_sequential_fraction": ceiling.peak_over_sequential_fraction,
                                "random_4k_cold_bytes_per_s": ceiling.random_4k_cold_bytes_per_s,
                                "peak_over_random_4k_fraction": ceiling.peak_over_random_4k_fraction})


def _notes(attr: Attribution) -> list[Reason]:
    cpu, notes = attr.cpu, []
    if cpu.oversubscribed:
        notes.append(Reason("oversubscribed", {"num_workers": cpu.num_workers, "torch_threads": cpu.torch_threads,
                                               "cores_usable": cpu.cores_usable, "busy_cores": cpu.busy_cores}))
    settings = attr.settings
    # A scenario run notes this when it builds its loader (run.json's notes); a script's loader is its own.
    if settings is not None and settings.kind == "script" and settings.loader.pin_memory and not attr.data.pin_memory:
        notes.append(Reason("pin_memory_without_cuda", {"device": settings.device}))
    cache = attr.cache
    if cache.cache == "cold" and cache.verified is False:
        notes.append(Reason("cache_not_cold_note", {}, (cache.reason,) if cache.reason is not None else ()))
    return notes


def _result(klass: str, rule: str, degree: str | None, reason: Reason, evidence: Evidence,
            notes: list[Reason]) -> Verdict:
    return Verdict(klass, rule, degree, reason, evidence, tuple(notes))

