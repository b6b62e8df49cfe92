"""The causes of a run that waits for data: rules R3-R9 of the verdict's decision table (``verdict``).

Pure functions over an ``Attribution`` (no torch). ``input_cause`` returns a
``Cause``: the class, its rule, the reason in words, the evidence behind it,
and every candidate class (more than one: the verdict is uncertain). The
decision table, the physics behind each rule and the uncertain bands are in
``pipeprof.analysis.verdict``'s docstring; the cut-offs and bands in ``thresholds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.attribution import Attribution
from pipeprof.analysis.evidence import OFF_CPU_SPLIT, PARTS, DataEvidence, LoadingEvidence
from pipeprof.analysis.thresholds import (
    CORE_WAIT_WORTH_SAYING,
    DISK_READ_FLOOR_BYTES_PER_S,
    PART_MARGIN,
    QUEUE_MOSTLY_FULL,
    READY_UNDELIVERED,
    READY_UNDELIVERED_BAND,
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
from pipeprof.run_folder import as_dict


@dataclass(frozen=True)
class Cause:
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


def side(value: float, cut: float, band: float) -> int:
    """1 at or above ``cut + band``, -1 below ``cut - band``, 0 inside the uncertain band."""
    if value >= cut + band:
        return 1
    if value < cut - band:
        return -1
    return 0


def join_candidates(*candidates: tuple[str, ...]) -> tuple[str, ...]:
    """Candidates in order, each once."""
    out: list[str] = []
    for group in candidates:
        out.extend(c for c in group if c not in out)
    return tuple(out)


def input_cause(attr: Attribution) -> Cause:
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
        busy_side = side(busy, WORKERS_BUSY, WORKERS_BUSY_BAND)
        unseen = "(the queue itself was not observed in this run)"
        if busy <= WORKERS_IDLE_BUSY - WORKERS_IDLE_BUSY_BAND:
            return Cause("input:main", "R8", (
                f"the workers were busy only {share_text(busy)} of the time, so batches were ready; the time goes into "
                f"moving them into the training process {unseen}"), ev)
        if busy <= WORKERS_IDLE_BUSY + WORKERS_IDLE_BUSY_BAND:
            return Cause("input:main", "R8", (
                f"the workers were busy {share_text(busy)} of the time, close to the {share_text(WORKERS_IDLE_BUSY)} at or "
                f"below which they have slack {unseen}: the time goes into moving batches into the training "
                "process, or supply is bursty"), ev, ("input:main", "balanced"))
        if busy_side > 0:
            split = _workers_split(loading, storage, ev)
            return Cause(split.klass, "R8", f"the workers were busy {share_text(busy)} of the time; {split.why}", ev,
                          split.candidates)
        if busy_side == 0:
            split = _workers_split(loading, storage, ev)
            return Cause(split.klass, "R8", (
                f"the workers were busy {share_text(busy)} of the time, close to the {share_text(WORKERS_BUSY)} at which they "
                f"set the pace {unseen}; if they do, {split.why}"), ev, join_candidates(split.candidates, ("balanced",)))
        return Cause("balanced", "R8", (f"the workers were busy {share_text(busy)} of the time, neither idle nor "
                                         f"saturated {unseen}"), ev)
    return _inferred(attr)


def _queue_cause(attr: Attribution, share: float, storage: str | None) -> Cause:
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
    busy_side = side(busy, WORKERS_BUSY, WORKERS_BUSY_BAND) if busy is not None else -1
    if busy is not None and busy_side >= 0:
        ev["worker_busy_mean_fraction"] = busy
    capacity = prefetch.capacity_batches
    full = prefetch.full_step_fraction or 0.0
    queue = (f"{share_text(prefetch.full_step_fraction)} of steps found the prefetch queue full "
             f"(all {fmt.plural(capacity, 'batch', 'batches')} it holds ready), " if capacity else "")
    queue += f"{share_text(prefetch.empty_step_fraction)} found it empty"
    # The queue was run dry only if it was not mostly full and the wait fell mostly on steps that found it empty.
    ran_dry = full < QUEUE_MOSTLY_FULL and share <= READY_WAIT_WORKERS + READY_WAIT_BAND
    main_words = ("the time goes into moving batches into the training process (unpickling, shared "
                  f"memory{', the pin-memory thread' if attr.data.pin_memory else ''})")
    if busy is not None and busy_side > 0:
        split = _workers_split(loading, storage, ev)
        lead = (f"the workers cannot keep up — busy {share_text(busy)} of the time, they set the pace" if ran_dry else
                f"the workers set the pace — busy {share_text(busy)} of the time, they have no slack to get ahead of "
                "the loop, though the queue held batches when asked")
        return Cause(split.klass, "R6", (f"{lead} ({queue}; {share_text(share)} of the wait fell on steps that had a "
                                          f"batch in the queue, not necessarily the next one); {split.why}"),
                      ev, split.candidates)
    ready_main = side(share, READY_WAIT_MAIN, READY_WAIT_BAND)
    ready_workers = -side(share, READY_WAIT_WORKERS, READY_WAIT_BAND)  # 1: clearly little wait on ready steps
    if share <= READY_WAIT_WORKERS - READY_WAIT_BAND:
        ready_workers = 1
    if busy is not None and busy_side == 0:
        split = _workers_split(loading, storage, ev)
        if ready_workers >= 0 and share <= READY_WAIT_WORKERS + READY_WAIT_BAND:  # the queue agrees: it ran dry
            return Cause(split.klass, "R6", (
                f"the workers cannot keep up — busy {share_text(busy)} of the time, {queue}, and {share_text(1 - share)} "
                f"of the wait fell on steps that found it empty; {split.why}"), ev, split.candidates)
        saturated = attr.cpu.busy_over_usable_fraction
        if split.klass == "input:prep" and len(split.candidates) == 1 and saturated is not None \
                and saturated >= SATURATED_FRACTION:
            ev["busy_over_usable_fraction"] = saturated
            return Cause("input:prep", "R6", (
                f"the workers were busy {share_text(busy)} of the time on CPU work while the training process and "
                f"workers kept {share_text(saturated)} of the usable cores busy: a batch was often ready ({queue}), "
                f"but making the next ones takes the cores the training needs; {split.why}"), ev)
        other = "input:main" if share >= READY_WAIT_MAIN - READY_WAIT_BAND else "balanced"
        return Cause(split.klass, "R6", (
            f"the workers were busy {share_text(busy)} of the time, close to the {share_text(WORKERS_BUSY)} at which they "
            f"set the pace, while {queue} and {share_text(share)} of the wait fell on steps that had a batch ready; "
            f"if the workers set the pace, {split.why}; if not, "
            + (main_words if other == "input:main" else "supply is bursty")), ev, join_candidates(split.candidates, (other,)))
    undelivered, seen = _undelivered(attr)
    if undelivered is not None and undelivered >= 0 and ready_main >= 0 and has_loading and full < QUEUE_MOSTLY_FULL:
        # "Ready" batches that still took about as long as making one, the queue seldom full: the workers set
        # the pace. Decided when their work is CPU work (it holds the worker's interpreter, so the batch is sent
        # late); storage-bound workers release it, and the training process stays a candidate.
        ev.update(seen)
        split = _workers_split(loading, storage, ev)
        if split.klass != "input:prep":
            undelivered = 0
        words = (f"the workers set the pace — {queue}, but a step that found a batch ready still waited "
                 f"{fmt.duration(prefetch.wait_when_ready_mean_s)} on average, "
                 f"{share_text(ev['wait_when_ready_over_supply_fraction'])} of the "
                 f"{fmt.duration(ev['supply_interval_s'])} the workers take per batch: the batch was counted in "
                 f"the queue before it could be received (a worker busy with CPU work sends it late); {split.why}")
        if undelivered > 0:
            return Cause(split.klass, "R6", words, ev, split.candidates)
        return Cause(split.klass, "R6", words + f"; if not, {main_words}", ev,
                     join_candidates(split.candidates, ("input:main",)))
    if ready_main > 0:
        return Cause("input:main", "R5", (
            f"{queue}, and {share_text(share)} of the wait fell on steps that had a batch ready — the workers "
            f"keep up, and {main_words}"), ev)
    if ready_main == 0:
        return Cause("input:main", "R5", (
            f"{queue}, and {share_text(share)} of the wait fell on steps that had a batch ready, close to the "
            f"{share_text(READY_WAIT_MAIN)} from which the workers keep up: either {main_words}, or supply is "
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
        words = (f"{lead} — {queue}, and {share_text(1 - share)} of the wait fell on steps that found it empty; {why}"
                 if has_loading else f"{lead}; {why}")
        if near:
            words += "; close to the cut-off, supply may instead be bursty"
            cands = join_candidates(cands, ("balanced",))
        return Cause(klass, "R6" if has_loading else "R9", words, ev, cands)
    return Cause("balanced", "R7", (
        f"{queue}; {share_text(share)} of the wait fell on steps that had a batch ready and the rest on steps that "
        "had none — supply is bursty (a larger prefetch_factor may smooth it)"), ev)


def _undelivered(attr: Attribution) -> tuple[int | None, dict[str, float]]:
    """Whether steps that found a batch "ready" still waited about as long as the workers take to make one:
    ``side`` of that ratio against ``READY_UNDELIVERED`` (1 yes, 0 too close, -1 no; None when unknown), and
    the evidence (``supply_interval_s``: batch-making time over num_workers; the ratio)."""
    batch_s, workers = attr.loading.batch_s, attr.cpu.num_workers
    when_ready = attr.prefetch.wait_when_ready_mean_s
    if not batch_s or not workers or when_ready is None:
        return None, {}
    supply_s = batch_s / workers
    ratio = when_ready / supply_s
    return side(ratio, READY_UNDELIVERED, READY_UNDELIVERED_BAND), {
        "supply_interval_s": supply_s, "wait_when_ready_over_supply_fraction": ratio}


def _serial_cause(attr: Attribution, storage: str | None) -> Cause:
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
    whole = (total + core_s) or 1.0  # the wait (or the making), waiting for a core included: each share is of it
    contended = total > 0 and by_class[second] / total >= PART_MARGIN and core_s >= by_class[part] - by_class[second]
    close = total > 0 and ((by_class[part] - by_class[second]) / total < PART_MARGIN or contended)
    candidates = tuple(_PART_CLASS[p] for p in PARTS if p in (part, second)) if close else ()
    if close:  # the class does not flip with which of the two came out ahead: the table's order decides
        part = next(p for p in PARTS if p in (part, second))
    if wait_s is not None and part == "collate" and wait_s["own"] >= wait_s["collate"]:
        return Cause("input:main", "R3", (
            f"making a batch takes {time_text(loading.batch_s)} but the loop waited "
            f"{time_text(attr.step.data_wait_mean_s)} per step; the other {time_text(wait_s['own'])} is the training "
            "process's own work outside fetch, prep and collate (DataLoader bookkeeping, pinning) — with "
            f"collating {share_text(by_class['collate'] / whole)} of the wait, against fetching's "
            f"{share_text(by_class['fetch'] / whole)} and decoding's {share_text(by_class['prep'] / whole)}"
            f"{_core_words(core_s / whole)}"), ev, candidates)
    if close:
        shares = {p: by_class[p] / whole for p in PARTS}
        other = second if part == order[0] else order[0]
        why = (f"the training process makes every batch (num_workers = 0) and two parts of the wait are too close "
               f"to tell apart: {_share_words(part, shares[part], loading, storage)} against "
               f"{_share_words(other, shares[other], loading, storage)}{_core_words(core_s / whole)}")
        return Cause(_PART_CLASS[part], "R4", why, ev, candidates)
    return Cause(_PART_CLASS[part], "R4", (
        f"the training process makes every batch (num_workers = 0) and {share_text(loading.part_fraction(part))} "
        f"of that time is {_part_words(part, loading, storage)}{_core_words(core)}"), ev)


def _share_words(part: str, share: float, loading: LoadingEvidence, storage: str | None) -> str:
    if part == "collate":
        return f"{share_text(share)} collating and the training process's own work"
    return f"{share_text(share)} {_part_words(part, loading, storage)}"


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


def _workers_split(loading: LoadingEvidence, storage: str | None, ev: dict[str, Any]) -> Cause:
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
    fetch_words = f"{share_text(fetch)} of their batch-making time is {_part_words('fetch', loading, storage)}"
    cpu_words = (f"{share_text(cpu)} of their batch-making time is CPU work: {_part_words('prep', loading, storage)} "
                 "and collating")
    total = fetch + cpu
    # A wait for a core follows a read as well as it interrupts CPU work: where it outweighs the gap between
    # the two (and each is a real share), the split cannot say which limits.
    contended = core is not None and min(fetch, cpu) >= PART_MARGIN and core >= abs(fetch - cpu)
    if total > 0 and (abs(fetch - cpu) / total < PART_MARGIN or contended):
        return Cause("input:fetch", "", f"{fetch_words}, against {cpu_words} — too close to tell which limits"
                      + _core_words(core), {}, ("input:fetch", "input:prep"))
    if fetch >= cpu:
        return Cause("input:fetch", "", fetch_words + _core_words(core), {})
    return Cause("input:prep", "", cpu_words + _core_words(core), {})


def _core_words(core: float | None) -> str:
    """The share spent waiting for a core, said apart from the parts (it is none of them) but of the same whole
    as the shares beside it, so that they add up to it at most; nothing under ``CORE_WAIT_WORTH_SAYING``
    (0.0 % "was waiting" reads as a claim of contention)."""
    if not core or core < CORE_WAIT_WORTH_SAYING:
        return ""
    return f"; {share_text(core)} was waiting for a core (CPU contention: every core was busy)"


def _inferred(attr: Attribution) -> Cause:
    """R9: no loading split or queue readings to go by; disk reads decide, marked as inferred."""
    mean_bps = attr.disk.mean_read_bytes_per_s
    ev: dict[str, Any] = {"mean_read_bytes_per_s": mean_bps, "cause_measured": False}
    if mean_bps is not None and mean_bps >= DISK_READ_FLOOR_BYTES_PER_S:
        return Cause("input:fetch", "R9", (f"inferred, not measured (no loading records): the process tree read "
                                            f"{rate_text(mean_bps)} from disk while it waited"), ev)
    if attr.cpu.num_workers:
        return Cause("input:prep", "R9", ("inferred, not measured (no loading records): the workers read next to "
                                           "nothing from disk, so their time is CPU work"), ev)
    return Cause("input:main", "R9", ("inferred, not measured (no loading records): the training process makes "
                                       "every batch and reads next to nothing from disk"), ev)




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
    if loading.split == OFF_CPU_SPLIT and part in ("fetch", "prep"):  # a script's __getitem__
        if part == "fetch":
            what = ("reading storage, the network or sleeping" if _core_wait_fraction(loading) is not None else
                    "reading storage, the network, sleeping or waiting for a core (not told apart in this run)")
            return f"time in __getitem__ off the CPU — {what} ({time_text(loading.fetch_per_sample_s)} per sample)"
        return (f"CPU work in __getitem__ — decoding and transforms "
                f"({time_text(loading.prep_per_sample_s)} per sample)")
    if part == "fetch":
        return f"fetching samples ({time_text(loading.fetch_per_sample_s)} per sample{where})"
    if part == "prep":
        return f"decoding and transforming ({time_text(loading.prep_per_sample_s)} per sample)"
    return f"collating samples into batches ({time_text(loading.collate_per_batch_s)} per batch)"


# Sentences format through pipeprof.format; these name the words for a value that is missing.
def share_text(fraction: Any) -> str:
    """A share (0-1) as a percentage in a sentence; "an unknown share" where it is missing."""
    return fmt.pct(fraction, missing="an unknown share")


def time_text(seconds: Any) -> str:
    """A duration in seconds in a sentence; "an unknown time" where it is missing."""
    return fmt.duration(seconds, missing="an unknown time")


def rate_text(bytes_per_s: Any) -> str:
    """A byte rate in a sentence; "an unknown rate" where it is missing."""
    return fmt.byte_rate(bytes_per_s, missing="an unknown rate")
