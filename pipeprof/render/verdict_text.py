"""The verdict in words: its sentence, its notes and summary.json's ``bottleneck_reason``, from the reasons
``analysis.verdict`` records (a kind plus its numbers). The terminal, the report and summary.json
(``pipeline.derive.summary_document``) all take their words from here; the causes' clauses from
``render.cause_text``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.reasons import WRITTEN, Reason
from pipeprof.analysis.verdict import Verdict
from pipeprof.render.cache_text import cache_words
from pipeprof.render.cause_text import cause_words, rate_text, share_text

_CAUSE_WORDS = {
    "input:fetch": "by storage (reading samples)",
    "input:prep": "by preprocessing on the CPU (decoding and transforms)",
    "input:main": "in the training process itself",
    "input:start": "by the DataLoader workers starting",
}
_CLASS_WORDS = {
    "input:fetch": "storage (reading samples)",
    "input:prep": "preprocessing on the CPU (decoding and transforms)",
    "input:main": "the training process itself",
    "input:start": "the DataLoader workers starting",
    "balanced": "no single cause (bursty supply)",
    "compute": "compute",
    "h2d": "the copy to the device",
}


def verdict_sentence(v: Verdict) -> str:
    """summary.json's ``verdict.sentence``: the verdict in one sentence."""
    return verdict_words(v.reason)


def verdict_notes(v: Verdict) -> list[str]:
    """summary.json's ``verdict.notes``: each note in one sentence."""
    return [note_words(n) for n in v.notes]


def verdict_json(v: Verdict) -> dict[str, Any]:
    """summary.json's ``verdict``: the record's data with its sentence and notes."""
    return {**v.to_json(), "sentence": verdict_sentence(v), "notes": verdict_notes(v)}


def verdict_words(r: Reason) -> str:
    """A verdict's reason in words."""
    return _WORDS[r.kind](r)


def _extended(base: Reason, clause: str) -> str:
    """The sentence of ``base`` with ``clause`` after a semicolon, before its full stop."""
    sentence = verdict_words(base).rstrip()
    return (sentence[:-1] if sentence.endswith(".") else sentence) + f"; {clause}."


def _near(words: str) -> Callable[[Reason], str]:
    """An uncertain verdict: ``words`` (the earlier rule, near its cut-off) then the other reading's sentence."""
    def said(r: Reason) -> str:
        rest = verdict_words(r.parts[0])
        return words.format(**{k: share_text(v) for k, v in r.values.items()}) + rest[0].lower() + rest[1:]
    return said


def _too_few_steps(r: Reason) -> str:
    n, least = r["counted_steps"], r["min_counted_steps"]
    counted = "No step was counted" if n == 0 else f"Only {fmt.plural(n, 'step')} {'was' if n == 1 else 'were'} counted"
    return (f"{counted} (after warm-up); a verdict needs at least {fmt.plural(least, 'counted step')}, "
            "so there is no bottleneck to name and nothing to recommend.")


def _input(r: Reason) -> str:
    head = f"{str(r['degree']).capitalize()} ({share_text(r['data_wait_fraction'])} of step time waiting for data)"
    why = cause_words(r.parts[0]) + "".join(_disk(p) for p in r.parts[1:])
    candidates = r["candidates"]
    if len(candidates) > 1:
        return f"{head}, uncertain between {' and '.join(_CLASS_WORDS[c] for c in candidates)}: {why}."
    if r["class"] == "balanced":
        return f"{head}, with no single cause: {why}."
    return f"{head}, {_CAUSE_WORDS[r['class']]}: {why}."


def _disk(r: Reason) -> str:
    """The disk's read rate against the probed ceiling, after a storage verdict's cause."""
    if r.kind == "disk_idle":
        return "; the disk read next to nothing (the bytes came from memory or the page cache)"
    if r.kind != "disk_read":
        raise ValueError(f"no words for a disk reason of kind {r.kind!r}")
    words = (f"; the disk read {rate_text(r['mean_read_bytes_per_s'])} on average "
             f"(peak {rate_text(r['peak_read_bytes_per_s'])})")
    if r["ceiling_absent"] is not None:
        return words + " — no ceiling to compare with (" + r["ceiling_absent"] + ")"
    parts = []
    if r["peak_over_sequential_fraction"] is not None:
        parts.append(f"{share_text(r['peak_over_sequential_fraction'])} of the probed cold sequential ceiling "
                     f"({rate_text(r['sequential_cold_bytes_per_s'])})")
    if r["peak_over_random_4k_fraction"] is not None:
        parts.append(f"{share_text(r['peak_over_random_4k_fraction'])} of the cold random 4 KiB ceiling "
                     f"({rate_text(r['random_4k_cold_bytes_per_s'])})")
    return words + (", at peak " + " and ".join(parts) if parts else "")


def costliest_words(r: Reason) -> str:
    """"RandomResizedCrop(size=224) takes 61% of preparation, 1.30 ms per sample" (no share: the time only)."""
    time = f"{fmt.duration(r['per_sample_s'])} per sample"
    if r["cpu_said"]:
        time += f" ({fmt.duration(r['cpu_per_sample_s'])} of it on the CPU)"
    if r["share_of_prep"] is None:
        return f"{r['name']} takes {time}"
    return f"{r['name']} takes {fmt.pct(r['share_of_prep'])} of preparation, {time}"


def _off_cpu_in_transforms(r: Reason) -> str:
    return _extended(r.parts[0], "most of that time off the CPU is spent inside the transforms, not outside them "
                                 f"reading: {r['name']} takes {fmt.duration(r['per_sample_s'])} per sample, "
                                 f"{fmt.duration(r['off_cpu_per_sample_s'])} of it off the CPU")


def _workers_starting(r: Reason) -> str:
    head = f"{str(r['degree']).capitalize()} ({share_text(r['data_wait_fraction'])} of step time waiting for data)"
    inside = ""
    if r["main_import_s"] is not None:
        inside = (f"; a worker spends {fmt.duration(r['main_import_s'])} importing the script's main module again "
                  f"and {fmt.duration(r['dataset_unpickle_s'])} unpickling the dataset")
    return (f"{head}, by the DataLoader workers starting: {fmt.pct(r['pass_start_share'])} of the wait falls on "
            f"the first batch of a pass, while {fmt.plural(r['workers_per_pass'], 'spawned worker')} "
            f"{'starts' if r['workers_per_pass'] == 1 else 'start'} "
            f"({fmt.duration(r['per_pass_s'])} a pass over {r['passes']} pass(es){inside}).")


_WORDS: dict[str, Callable[[Reason], str]] = {
    WRITTEN: lambda r: str(r["text"]),
    "too_few_steps": _too_few_steps,
    "h2d": lambda r: (f"Bound by the copy to the device: {share_text(r['h2d_fraction'])} of step time moves batches "
                      f"host → device (data wait {share_text(r['data_wait_fraction'])}, compute "
                      f"{share_text(r['compute_fraction'])})."),
    "h2d_near": _near("Uncertain: the copy to the device takes {h2d_fraction} of step time, close to the "
                      "{cut_fraction} from which it is the bound (data wait {data_wait_fraction}); if it is not, "),
    "compute": lambda r: (f"Compute-bound: only {share_text(r['data_wait_fraction'])} of step time waits for data; "
                          f"forward, backward and the optimizer step take {share_text(r['compute_fraction'])}."),
    "collective_wait": lambda r: (
        f"Waiting for the other ranks: {share_text(r['collective_wait_fraction'])} of step time is blocked in "
        f"collectives (DDP's all-reduce), more than its own forward, backward and optimizer step "
        f"({share_text(r['compute_fraction'])}); only {share_text(r['data_wait_fraction'])} waits for data. The job "
        "goes at its slowest rank's pace: see the straggler."),
    "compute_near": _near("Uncertain: {data_wait_fraction} of step time waits for data, close to the "
                          "{cut_fraction} under which the run is compute-bound; if it is not, "),
    "input": _input,
    "workers_starting": _workers_starting,
    "costliest_prep": lambda r: _extended(r.parts[0], costliest_words(r)),
    "off_cpu_in_transforms": _off_cpu_in_transforms,
    "run_varied": lambda r: _extended(r.parts[0], "uncertain: the run itself varied between its windows (a note "
                                                  "names them)"),
}


def note_words(r: Reason) -> str:
    """A verdict's note in words."""
    return _NOTES[r.kind](r)


def _oversubscribed(r: Reason) -> str:
    busy = (f"; the training process and workers kept {r['busy_cores']:.1f} of them busy on average"
            if r["busy_cores"] is not None else "")
    return (f"{fmt.plural(r['num_workers'], 'worker')} + {fmt.plural(r['torch_threads'], 'torch thread')} on "
            f"{r['cores_usable']} usable cores: more threads than cores, so they compete for CPU "
            f"whenever all are busy{busy}.")


def _worker_start(r: Reason) -> str:
    inside = ""
    if r["main_import_s"] is not None:
        inside = (f": {fmt.duration(r['interpreter_s'])} starting the interpreter, "
                  f"{fmt.duration(r['main_import_s'])} importing the script's main module again, "
                  f"{fmt.duration(r['dataset_unpickle_s'])} unpickling the dataset")
    return (f"Starting the DataLoader workers (spawn / forkserver) took {r['share_of_wall']:.0%} of the script's "
            f"wall time, {fmt.duration(r['per_pass_s'])} a pass over {r['passes']} pass(es); a worker "
            f"took {fmt.duration(r['median_s'])}{inside}.")


def _load_words(other_load_fraction: float | None) -> str:
    if other_load_fraction is None:
        return " (the machine's other load not sampled)"
    return f" (other processes used {fmt.pct(other_load_fraction)} of the machine's cores)"


def _run_varied_windows(r: Reason) -> str:
    return (f"The run itself varied: steps {r['low_first_step']}-{r['low_last_step']} waited "
            f"{fmt.pct(r['low_data_wait_fraction'])} of their time for data{_load_words(r['low_other_load_fraction'])}"
            f", steps {r['high_first_step']}-{r['high_last_step']} {fmt.pct(r['high_data_wait_fraction'])}"
            f"{_load_words(r['high_other_load_fraction'])}; a re-run may be judged either way, so the class is "
            "uncertain.")


_NOTES: dict[str, Callable[[Reason], str]] = {
    WRITTEN: lambda r: str(r["text"]),
    "oversubscribed": _oversubscribed,
    "pin_memory_without_cuda": lambda r: (f"pin_memory=True has no effect here: the batches went to the "
                                          f"{r['device']}, and pinning only speeds up copies to a CUDA device."),
    "cache_not_cold_note": lambda r: ("The cold page cache was not cold, so the cost of reading from disk is "
                                      f"understated. {''.join(cache_words(p) or '' for p in r.parts)}").strip(),
    "memory_creep": lambda r: (
        f"Allocated GPU memory grew by {fmt.byte_size(r['growth_bytes'])} over the counted steps "
        f"({fmt.byte_size(r['per_step_bytes'])} a step): tensors outlive their step (a loss or outputs kept "
        "without .item() / .detach(), a growing list); a long run will run out of device memory."),
    "worker_start": _worker_start,
    "run_varied_windows": _run_varied_windows,
}


def bottleneck_words(r: Reason) -> str:
    """summary.json's ``bottleneck_reason``: the coarse class's reason in words (``Summary.bottleneck_why``)."""
    if r.kind == WRITTEN:
        return str(r["text"])
    if r.kind == "sampled":  # an attach's: judged on sampled shares
        return bottleneck_words(r.parts[0]) + " (sampled)"
    if r.kind == "bottleneck_unknown":
        return (f"too few counted steps to judge: {fmt.plural(r['counted_steps'], 'step')} counted, at least "
                f"{r['min_counted_steps']} needed")
    pct = 100 * r["data_wait_fraction"]
    if r.kind == "bottleneck_compute":
        return (f"compute-bound: only {pct:.1f}% of step time was spent waiting for data "
                f"(under {100 * r['cut_fraction']:.0f}%)")
    if r.kind == "bottleneck_h2d":
        return (f"bound by the copy to the device: {100 * r['h2d_fraction']:.0f}% of step time moved batches "
                f"host → device (from {100 * r['cut_fraction']:.0f}%, and no less than the "
                f"{pct:.0f}% waiting for data)")
    if r.kind == "bottleneck_input":
        words = (f"input-bound: {pct:.0f}% of step time was spent waiting for data "
                 f"(input-bound from {100 * r['cut_fraction']:.0f}%)")
    elif r.kind == "bottleneck_partly_input":
        words = (f"partly input-bound: {pct:.0f}% of step time was spent waiting for data "
                 f"(between {100 * r['low_fraction']:.0f}% and {100 * r['high_fraction']:.0f}%)")
    else:
        raise ValueError(f"no words for a bottleneck reason of kind {r.kind!r}")
    return words + ("; no single cause" if r["no_single_cause"] else "")


def live_verdict_words(r: Reason) -> str:
    """A ``live_verdict`` (``LiveWindow.verdict``): the live view's verdict so far."""
    assert r.kind == "live_verdict", r.kind
    n = r.values
    klass, wait = n["klass"], n["wait"]
    if klass == "unknown":
        return "unknown (no shares yet)"
    if klass == "h2d":
        return f"bound by the copy to the device ({fmt.pct(n['h2d'], 0)})"
    if klass == "compute":
        return f"compute-bound (data wait {fmt.pct(wait, 0)})"
    return f"{klass} (data wait {fmt.pct(wait, 0)}, input-bound from {fmt.pct(n['input_bound_from'], 0)})"
