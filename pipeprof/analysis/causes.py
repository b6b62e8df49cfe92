"""The causes of a run that waits for data: rules R3-R9 of the verdict's decision table (``verdict``).

Pure functions over an ``Attribution`` (no torch). ``input_cause`` returns a
``Cause``: the class, its rule, the reason (a ``Reason``, worded by
``render.cause_text``), the evidence behind it,
and every candidate class (more than one: the verdict is uncertain). The
decision table, the physics behind each rule and the uncertain bands are in
``pipeprof.analysis.verdict``'s docstring; the cut-offs and bands in ``thresholds``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeprof.analysis.attribution import Attribution
from pipeprof.analysis.evidence import OFF_CPU_SPLIT, PARTS, DataEvidence, Evidence, LoadingEvidence
from pipeprof.analysis.reasons import Reason
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
from pipeprof.run_meta import as_object


@dataclass(frozen=True)
class Cause:
    """What R3-R9 found: the class, its rule, the reason (``render.cause_text`` words it), evidence, and every
    candidate (the class first; more than one: uncertain)."""

    klass: str
    rule: str
    reason: Reason
    evidence: Evidence
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
    storage = _storage(attr.data)
    has_loading = loading.absent is None
    if workers == 0 and has_loading:
        return _serial_cause(attr, storage)
    share = prefetch.ready_wait_fraction if prefetch.absent is None else None
    if workers != 0 and share is not None:
        return _queue_cause(attr, share, storage)
    busy = loading.worker_busy_mean_fraction if has_loading else None
    if workers != 0 and busy is not None:
        ev: Evidence = {"worker_busy_mean_fraction": busy}
        busy_side = side(busy, WORKERS_BUSY, WORKERS_BUSY_BAND)
        if busy <= WORKERS_IDLE_BUSY - WORKERS_IDLE_BUSY_BAND:
            return Cause("input:main", "R8", Reason("workers_idle", {"busy_fraction": busy}), ev)
        if busy <= WORKERS_IDLE_BUSY + WORKERS_IDLE_BUSY_BAND:
            return Cause("input:main", "R8", Reason("workers_idle_near", {"busy_fraction": busy,
                                                                          "cut_fraction": WORKERS_IDLE_BUSY}),
                         ev, ("input:main", "balanced"))
        if busy_side > 0:
            split = _workers_split(loading, storage, ev)
            return Cause(split.klass, "R8", Reason("workers_busy", {"busy_fraction": busy}, (split.reason,)), ev,
                         split.candidates)
        if busy_side == 0:
            split = _workers_split(loading, storage, ev)
            return Cause(split.klass, "R8", Reason("workers_busy_near", {"busy_fraction": busy,
                                                                         "cut_fraction": WORKERS_BUSY},
                                                   (split.reason,)),
                         ev, join_candidates(split.candidates, ("balanced",)))
        return Cause("balanced", "R8", Reason("workers_between", {"busy_fraction": busy}), ev)
    return _inferred(attr)


def _queue_cause(attr: Attribution, share: float, storage: Reason | None) -> Cause:
    """R5-R7: workers and the prefetch queue observed; ``share`` of the wait fell on steps with a batch ready."""
    loading, prefetch = attr.loading, attr.prefetch
    has_loading = loading.absent is None
    ev: Evidence = {"capacity_batches": prefetch.capacity_batches,
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
    queue = Reason("queue", {"capacity_batches": capacity, "full_step_fraction": prefetch.full_step_fraction,
                             "empty_step_fraction": prefetch.empty_step_fraction})
    # The queue was run dry only if it was not mostly full and the wait fell mostly on steps that found it empty.
    ran_dry = full < QUEUE_MOSTLY_FULL and share <= READY_WAIT_WORKERS + READY_WAIT_BAND
    main = Reason("into_main", {"pin_memory": bool(attr.data.pin_memory)})
    numbers = {"busy_fraction": busy, "ready_wait_fraction": share}
    if busy is not None and busy_side > 0:
        split = _workers_split(loading, storage, ev)
        return Cause(split.klass, "R6", Reason("workers_set_pace", {**numbers, "ran_dry": ran_dry},
                                               (queue, split.reason)), ev, split.candidates)
    ready_main = side(share, READY_WAIT_MAIN, READY_WAIT_BAND)
    ready_workers = -side(share, READY_WAIT_WORKERS, READY_WAIT_BAND)  # 1: clearly little wait on ready steps
    if share <= READY_WAIT_WORKERS - READY_WAIT_BAND:
        ready_workers = 1
    if busy is not None and busy_side == 0:
        split = _workers_split(loading, storage, ev)
        if ready_workers >= 0 and share <= READY_WAIT_WORKERS + READY_WAIT_BAND:  # the queue agrees: it ran dry
            return Cause(split.klass, "R6", Reason("workers_ran_dry", numbers, (queue, split.reason)), ev,
                         split.candidates)
        saturated = attr.cpu.busy_over_usable_fraction
        if split.klass == "input:prep" and len(split.candidates) == 1 and saturated is not None \
                and saturated >= SATURATED_FRACTION:
            ev["busy_over_usable_fraction"] = saturated
            return Cause("input:prep", "R6", Reason("workers_take_cores",
                                                    {**numbers, "busy_over_usable_fraction": saturated},
                                                    (queue, split.reason)), ev)
        into_main = share >= READY_WAIT_MAIN - READY_WAIT_BAND
        return Cause(split.klass, "R6", Reason("workers_busy_near_ready", {**numbers, "cut_fraction": WORKERS_BUSY},
                                               (queue, split.reason, main if into_main else Reason("bursty"))),
                     ev, join_candidates(split.candidates, ("input:main" if into_main else "balanced",)))
    undelivered, seen = _undelivered(attr)
    if undelivered is not None and undelivered >= 0 and ready_main >= 0 and has_loading and full < QUEUE_MOSTLY_FULL:
        # "Ready" batches that still took about as long as making one, the queue seldom full: the workers set
        # the pace. Decided when their work is CPU work (it holds the worker's interpreter, so the batch is sent
        # late); storage-bound workers release it, and the training process stays a candidate.
        ev.update(seen)
        split = _workers_split(loading, storage, ev)
        if split.klass != "input:prep":
            undelivered = 0
        late = {"wait_when_ready_mean_s": prefetch.wait_when_ready_mean_s,
                "wait_when_ready_over_supply_fraction": ev["wait_when_ready_over_supply_fraction"],
                "supply_interval_s": ev["supply_interval_s"]}
        if undelivered > 0:
            return Cause(split.klass, "R6", Reason("sent_late", late, (queue, split.reason)), ev, split.candidates)
        return Cause(split.klass, "R6", Reason("sent_late_or_main", late, (queue, split.reason, main)), ev,
                     join_candidates(split.candidates, ("input:main",)))
    if ready_main > 0:
        return Cause("input:main", "R5", Reason("workers_keep_up", numbers, (queue, main)), ev)
    if ready_main == 0:
        return Cause("input:main", "R5", Reason("workers_keep_up_near", {**numbers, "cut_fraction": READY_WAIT_MAIN},
                                                (queue, main)), ev, ("input:main", "balanced"))
    if share <= READY_WAIT_WORKERS + READY_WAIT_BAND:
        near = share > READY_WAIT_WORKERS - READY_WAIT_BAND
        if has_loading:
            split = _workers_split(loading, storage, ev)
            klass, why, cands = split.klass, split.reason, split.candidates
        else:
            inferred = _inferred(attr)
            ev.update(inferred.evidence)
            klass, why, cands = inferred.klass, inferred.reason, inferred.candidates
        if near:
            cands = join_candidates(cands, ("balanced",))
        return Cause(klass, "R6" if has_loading else "R9",
                     Reason("workers_behind", {**numbers, "ran_dry": ran_dry, "measured": has_loading, "near": near},
                            (queue, why)), ev, cands)
    return Cause("balanced", "R7", Reason("bursty_supply", numbers, (queue,)), ev)


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


def _serial_cause(attr: Attribution, storage: Reason | None) -> Cause:
    """R3-R4: with 0 workers, the largest share of the mean wait (fetch, prep, the training process's own)."""
    loading = attr.loading
    ev: Evidence = {"fetch_fraction": loading.fetch_fraction, "prep_fraction": loading.prep_fraction,
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
        return Cause("input:main", "R3", Reason("own_work", {
            "batch_s": loading.batch_s, "data_wait_mean_s": attr.step.data_wait_mean_s, "own_s": wait_s["own"],
            "collate_fraction": by_class["collate"] / whole, "fetch_fraction": by_class["fetch"] / whole,
            "prep_fraction": by_class["prep"] / whole}, (_core(core_s / whole),)), ev, candidates)
    if close:
        shares = {p: by_class[p] / whole for p in PARTS}
        other = second if part == order[0] else order[0]
        return Cause(_PART_CLASS[part], "R4", Reason("serial_close", {}, (
            _share(part, shares[part], loading, storage), _share(other, shares[other], loading, storage),
            _core(core_s / whole))), ev, candidates)
    return Cause(_PART_CLASS[part], "R4", Reason("serial", {"fraction": loading.part_fraction(part)}, (
        _part(part, loading, storage), _core(core))), ev)


def _share(part: str, share: float, loading: LoadingEvidence, storage: Reason | None) -> Reason:
    """A part's share of the wait (collate with the training process's own work)."""
    return Reason("part_share", {"part": part, "fraction": share}, (_part(part, loading, storage),))


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


def _workers_split(loading: LoadingEvidence, storage: Reason | None, ev: Evidence) -> Cause:
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
    fetch_part = Reason("workers_fetch", {"fraction": fetch}, (_part("fetch", loading, storage),))
    cpu_part = Reason("workers_cpu", {"fraction": cpu}, (_part("prep", loading, storage),))
    total = fetch + cpu
    # A wait for a core follows a read as well as it interrupts CPU work: where it outweighs the gap between
    # the two (and each is a real share), the split cannot say which limits.
    contended = core is not None and min(fetch, cpu) >= PART_MARGIN and core >= abs(fetch - cpu)
    if total > 0 and (abs(fetch - cpu) / total < PART_MARGIN or contended):
        return Cause("input:fetch", "", Reason("workers_split_close", {}, (fetch_part, cpu_part, _core(core))), {},
                     ("input:fetch", "input:prep"))
    if fetch >= cpu:
        return Cause("input:fetch", "", Reason("workers_split", {}, (fetch_part, _core(core))), {})
    return Cause("input:prep", "", Reason("workers_split", {}, (cpu_part, _core(core))), {})


def _core(core: float | None) -> Reason:
    """The share spent waiting for a core, said apart from the parts (it is none of them) but of the same whole
    as the shares beside it, so that they add up to it at most; said only from ``CORE_WAIT_WORTH_SAYING``
    (0.0 % "was waiting" reads as a claim of contention)."""
    worth_saying = core is not None and core != 0 and core >= CORE_WAIT_WORTH_SAYING
    return Reason("core_wait", {"fraction": core, "worth_saying": worth_saying})


def _inferred(attr: Attribution) -> Cause:
    """R9: no loading split or queue readings to go by; disk reads decide, marked as inferred."""
    mean_bps = attr.disk.mean_read_bytes_per_s
    ev: Evidence = {"mean_read_bytes_per_s": mean_bps, "cause_measured": False}
    if mean_bps is not None and mean_bps >= DISK_READ_FLOOR_BYTES_PER_S:
        return Cause("input:fetch", "R9", Reason("inferred_disk", {"mean_read_bytes_per_s": mean_bps}), ev)
    if attr.cpu.num_workers:
        return Cause("input:prep", "R9", Reason("inferred_workers_cpu"), ev)
    return Cause("input:main", "R9", Reason("inferred_main"), ev)


def _storage(data: DataEvidence) -> Reason | None:
    """The storage a scenario read from, with the throttle that emulated another (None: not named)."""
    storage, throttle = data.storage, data.throttle
    if not storage:
        return None
    if not throttle:
        return Reason("storage", {"name": storage, "throttled": False})
    spec = as_object(throttle)
    label = spec.get("preset") or (throttle if isinstance(throttle, str) else None)
    return Reason("storage", {"name": storage, "throttled": True, "preset": label or None,
                              "latency_s": _scaled(spec.get("latency_ms"), 1e-3),
                              "bandwidth_bytes_per_s": _scaled(spec.get("bandwidth_mb_s"), 1e6)})


def _part(part: str, loading: LoadingEvidence, storage: Reason | None) -> Reason:
    """A part of making a batch (fetch, prep, collate) with its time; a script's ``__getitem__`` split on and
    off the CPU (``OFF_CPU_SPLIT``) is said as such."""
    time_s = (loading.fetch_per_sample_s if part == "fetch" else loading.prep_per_sample_s if part == "prep"
              else loading.collate_per_batch_s)
    return Reason("part", {"part": part, "time_s": time_s,
                           "off_cpu_split": loading.split == OFF_CPU_SPLIT and part in ("fetch", "prep"),
                           "core_wait_told_apart": _core_wait_fraction(loading) is not None,
                           "samples_per_call": loading.samples_per_call if part in ("fetch", "prep") else None},
                  (storage,) if storage is not None else ())
