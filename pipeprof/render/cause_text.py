"""The causes of a run that waits for data, in words: the sentence of each ``Reason`` that
``analysis.causes`` records for rules R3-R9 (the decision table is in ``analysis.verdict``'s docstring).
``cause_words(reason)`` is the clause the verdict's sentence ends with, for the terminal, the report and
summary.json alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.reasons import WRITTEN, Reason

UNSEEN = "(the queue itself was not observed in this run)"


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


def cause_words(r: Reason) -> str:
    """The words of a cause's reason (or of any part of one)."""
    return _WORDS[r.kind](r)


def _part(r: Reason) -> str:
    storage = f", storage: {_storage(r.parts[0])}" if r.parts else ""
    time_s, part = r["time_s"], r["part"]
    each = _per_sample(time_s, r.values.get("samples_per_call"))
    if r["off_cpu_split"]:  # a script's __getitem__
        if part == "fetch":
            what = ("reading storage, the network or sleeping" if r["core_wait_told_apart"] else
                    "reading storage, the network, sleeping or waiting for a core (not told apart in this run)")
            return f"time in __getitem__ off the CPU — {what} ({each})"
        return f"CPU work in __getitem__ — decoding and transforms ({each})"
    if part == "fetch":
        return f"fetching samples ({each}{storage})"
    if part == "prep":
        return f"decoding and transforming ({each})"
    return f"collating samples into batches ({time_text(time_s)} per batch)"


def _per_sample(time_s: Any, samples_per_call: Any) -> str:
    """"146 µs per sample"; where each __getitem__ call hands over a ready-made batch, the call's time first:
    "9.35 ms per __getitem__ call, a ready-made batch of 64 samples: 146 µs per sample"."""
    if not samples_per_call or time_s is None:
        return f"{time_text(time_s)} per sample"
    return (f"{time_text(time_s * samples_per_call)} per __getitem__ call, a ready-made batch of "
            f"{fmt.significant(samples_per_call)} samples: {time_text(time_s)} per sample")


def _storage(r: Reason) -> str:
    name = r["name"]
    if not r["throttled"]:
        return str(name)
    if r["preset"]:
        return f"{name}, throttled to emulate {r['preset']} storage"
    return (f"{name}, throttled to {fmt.duration(r['latency_s'])} + {fmt.byte_rate(r['bandwidth_bytes_per_s'])} "
            "per read (emulated)")


def _core(r: Reason) -> str:
    return f"; {share_text(r['fraction'])} was waiting for a core (CPU contention: every core was busy)" \
        if r["worth_saying"] else ""


def _queue(r: Reason) -> str:
    capacity = r["capacity_batches"]
    words = (f"{share_text(r['full_step_fraction'])} of steps found the prefetch queue full "
             f"(all {fmt.plural(capacity, 'batch', 'batches')} it holds ready), " if capacity else "")
    return words + f"{share_text(r['empty_step_fraction'])} found it empty"


def _into_main(r: Reason) -> str:
    return ("the time goes into moving batches into the training process (unpickling, shared "
            f"memory{', the pin-memory thread' if r['pin_memory'] else ''})")


def _part_share(r: Reason) -> str:
    if r["part"] == "collate":
        return f"{share_text(r['fraction'])} collating and the training process's own work"
    return f"{share_text(r['fraction'])} {_part(r.parts[0])}"


def _workers_set_pace(r: Reason) -> str:
    queue, split = (cause_words(p) for p in r.parts)
    busy, share = share_text(r["busy_fraction"]), share_text(r["ready_wait_fraction"])
    lead = (f"the workers cannot keep up — busy {busy} of the time, they set the pace" if r["ran_dry"] else
            f"the workers set the pace — busy {busy} of the time, they have no slack to get ahead of "
            "the loop, though the queue held batches when asked")
    return (f"{lead} ({queue}; {share} of the wait fell on steps that had a batch in the queue, not necessarily the "
            f"next one); {split}")


def _workers_ran_dry(r: Reason) -> str:
    queue, split = (cause_words(p) for p in r.parts)
    return (f"the workers cannot keep up — busy {share_text(r['busy_fraction'])} of the time, {queue}, and "
            f"{share_text(1 - r['ready_wait_fraction'])} of the wait fell on steps that found it empty; {split}")


def _workers_take_cores(r: Reason) -> str:
    queue, split = (cause_words(p) for p in r.parts)
    return (f"the workers were busy {share_text(r['busy_fraction'])} of the time on CPU work while the training "
            f"process and workers kept {share_text(r['busy_over_usable_fraction'])} of the usable cores busy: a "
            f"batch was often ready ({queue}), but making the next ones takes the cores the training needs; {split}")


def _workers_busy_near_ready(r: Reason) -> str:
    queue, split, other = (cause_words(p) for p in r.parts)
    return (f"the workers were busy {share_text(r['busy_fraction'])} of the time, close to the "
            f"{share_text(r['cut_fraction'])} at which they set the pace, while {queue} and "
            f"{share_text(r['ready_wait_fraction'])} of the wait fell on steps that had a batch ready; "
            f"if the workers set the pace, {split}; if not, {other}")


def _sent_late(r: Reason) -> str:
    queue, split, *main = (cause_words(p) for p in r.parts)
    words = (f"the workers set the pace — {queue}, but a step that found a batch ready still waited "
             f"{fmt.duration(r['wait_when_ready_mean_s'])} on average, "
             f"{share_text(r['wait_when_ready_over_supply_fraction'])} of the "
             f"{fmt.duration(r['supply_interval_s'])} the workers take per batch: the batch was counted in "
             f"the queue before it could be received (a worker busy with CPU work sends it late); {split}")
    return words + "".join(f"; if not, {m}" for m in main)


def _workers_keep_up(r: Reason) -> str:
    queue, main = (cause_words(p) for p in r.parts)
    return (f"{queue}, and {share_text(r['ready_wait_fraction'])} of the wait fell on steps that had a batch ready "
            f"— the workers keep up, and {main}")


def _workers_keep_up_near(r: Reason) -> str:
    queue, main = (cause_words(p) for p in r.parts)
    return (f"{queue}, and {share_text(r['ready_wait_fraction'])} of the wait fell on steps that had a batch ready, "
            f"close to the {share_text(r['cut_fraction'])} from which the workers keep up: either {main}, or supply "
            "is bursty")


def _workers_behind(r: Reason) -> str:
    queue, why = (cause_words(p) for p in r.parts)
    lead = "the workers cannot keep up" if r["ran_dry"] else "the workers fall behind at times"
    if r["measured"]:
        words = (f"{lead} — {queue}, and {share_text(1 - r['ready_wait_fraction'])} of the wait fell on steps that "
                 f"found it empty; {why}")
    else:
        words = f"{lead} ({queue}); {why}"
    return words + ("; close to the cut-off, supply may instead be bursty" if r["near"] else "")


def _bursty_supply(r: Reason) -> str:
    return (f"{cause_words(r.parts[0])}; {share_text(r['ready_wait_fraction'])} of the wait fell on steps that had "
            "a batch ready and the rest on steps that had none — supply is bursty (a larger prefetch_factor may "
            "smooth it)")


def _own_work(r: Reason) -> str:
    return (f"making a batch takes {time_text(r['batch_s'])} but the loop waited "
            f"{time_text(r['data_wait_mean_s'])} per step; the other {time_text(r['own_s'])} is the training "
            "process's own work outside fetch, prep and collate (DataLoader bookkeeping, pinning) — with "
            f"collating {share_text(r['collate_fraction'])} of the wait, against fetching's "
            f"{share_text(r['fetch_fraction'])} and decoding's {share_text(r['prep_fraction'])}"
            f"{_core(r.parts[0])}")


def _serial_close(r: Reason) -> str:
    first, second, core = (cause_words(p) for p in r.parts)
    return (f"the training process makes every batch (num_workers = 0) and two parts of the wait are too close "
            f"to tell apart: {first} against {second}{core}")


def _serial(r: Reason) -> str:
    part, core = (cause_words(p) for p in r.parts)
    return (f"the training process makes every batch (num_workers = 0) and {share_text(r['fraction'])} "
            f"of that time is {part}{core}")


def _workers_fetch(r: Reason) -> str:
    return f"{share_text(r['fraction'])} of their batch-making time is {_part(r.parts[0])}"


def _workers_cpu(r: Reason) -> str:
    return f"{share_text(r['fraction'])} of their batch-making time is CPU work: {_part(r.parts[0])} and collating"


def _workers_split_close(r: Reason) -> str:
    fetch, cpu, core = (cause_words(p) for p in r.parts)
    return f"{fetch}, against {cpu} — too close to tell which limits{core}"


_WORDS: dict[str, Callable[[Reason], str]] = {
    WRITTEN: lambda r: str(r["text"]),
    "part": _part, "storage": _storage, "core_wait": _core, "queue": _queue, "into_main": _into_main,
    "bursty": lambda r: "supply is bursty", "part_share": _part_share,
    "workers_idle": lambda r: (f"the workers were busy only {share_text(r['busy_fraction'])} of the time, so "
                               "batches were ready; the time goes into moving them into the training process "
                               f"{UNSEEN}"),
    "workers_idle_near": lambda r: (f"the workers were busy {share_text(r['busy_fraction'])} of the time, close to "
                                    f"the {share_text(r['cut_fraction'])} at or below which they have slack "
                                    f"{UNSEEN}: the time goes into moving batches into the training process, or "
                                    "supply is bursty"),
    "workers_busy": lambda r: (f"the workers were busy {share_text(r['busy_fraction'])} of the time; "
                               f"{cause_words(r.parts[0])}"),
    "workers_busy_near": lambda r: (f"the workers were busy {share_text(r['busy_fraction'])} of the time, close to "
                                    f"the {share_text(r['cut_fraction'])} at which they set the pace {UNSEEN}; if "
                                    f"they do, {cause_words(r.parts[0])}"),
    "workers_between": lambda r: (f"the workers were busy {share_text(r['busy_fraction'])} of the time, neither "
                                  f"idle nor saturated {UNSEEN}"),
    "workers_set_pace": _workers_set_pace, "workers_ran_dry": _workers_ran_dry,
    "workers_take_cores": _workers_take_cores, "workers_busy_near_ready": _workers_busy_near_ready,
    "sent_late": _sent_late, "sent_late_or_main": _sent_late, "workers_keep_up": _workers_keep_up,
    "workers_keep_up_near": _workers_keep_up_near, "workers_behind": _workers_behind,
    "bursty_supply": _bursty_supply, "own_work": _own_work, "serial_close": _serial_close, "serial": _serial,
    "workers_fetch": _workers_fetch, "workers_cpu": _workers_cpu, "workers_split_close": _workers_split_close,
    "workers_split": lambda r: "".join(cause_words(p) for p in r.parts),
    "inferred_disk": lambda r: ("inferred, not measured (no loading records): the process tree read "
                                f"{rate_text(r['mean_read_bytes_per_s'])} from disk while it waited"),
    "inferred_workers_cpu": lambda r: ("inferred, not measured (no loading records): the workers read next to "
                                       "nothing from disk, so their time is CPU work"),
    "inferred_main": lambda r: ("inferred, not measured (no loading records): the training process makes "
                                "every batch and reads next to nothing from disk"),
}
