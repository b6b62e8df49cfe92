"""The verdict: what limits this run's training, with the evidence, from one run's records.

Pure functions over a Run's tables and metadata (no torch). ``attribution``
gathers the direct evidence; ``verdict`` turns it into one class and a
sentence in plain words. Both land in summary.json (``attribution``,
``verdict``); the coarse ``bottleneck`` (input / compute / balanced) stays
as it was.

Classes: ``compute``; ``input:fetch`` (storage: reading samples' bytes);
``input:prep`` (decoding and transforms on the CPU); ``input:main`` (the
training process: collate with ``num_workers = 0``, receiving batches from
workers, pinning, DataLoader bookkeeping); ``h2d`` (copy to the device);
``balanced`` (no single cause).

Decision table — the first row that matches wins. ``wait`` and ``h2d`` are
shares of counted step time; "ready share" is the share of the data wait
spent on steps that found at least one batch already waiting in the prefetch
queue (a batch was there, yet the loop waited: the time went into receiving
it), the rest of the wait being on steps that found the queue empty.

====  ==========================================================  ==============================
rule  condition                                                   class
====  ==========================================================  ==============================
R0    no counted steps                                            balanced (nothing to judge)
R1    h2d >= 0.20 and h2d >= wait                                 h2d
R2    wait < 0.05                                                 compute
      -- from here wait >= 0.05: "input-bound" from 0.20, "partly input-bound" below --
R3    0 workers, loading records, a batch's production time       input:main (the training
      covers < 50% of the mean wait per step                      process's own overhead)
R4    0 workers, loading records                                  largest of fetch / prep /
                                                                  collate -> input:fetch /
                                                                  input:prep / input:main
R5    workers, ready_batches observed, ready share >= 0.6         input:main
R6    workers, ready_batches observed, ready share <= 0.4         workers too slow: fetch vs
                                                                  prep + collate in the workers
                                                                  -> input:fetch / input:prep
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

Besides the class, ``notes`` say when ``num_workers`` + torch threads exceed
the usable cores (oversubscription) and when a cold page cache was not cold.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from pipeprof.analysis.loading import counted_batches, loading_summary
from pipeprof.analysis.summary import (COMPUTE_BOUND_FRACTION, INPUT_BOUND_FRACTION, cache_check,
                                       counted_steps, counted_window_s, fractions)
from pipeprof.numbers import finite as _finite
from pipeprof.run import Run

CLASSES = ("compute", "input:fetch", "input:prep", "input:main", "h2d", "balanced")

H2D_BOUND_FRACTION = 0.20
PRODUCTION_COVERS_WAIT = 0.5  # R3
READY_WAIT_MAIN = 0.6  # R5: ready share at or above
READY_WAIT_WORKERS = 0.4  # R6: ready share at or below
WORKERS_IDLE_BUSY = 0.5  # R8
WORKERS_BUSY = 0.8  # R8
DISK_READ_FLOOR_BYTES_PER_S = 1e6  # R9
DEFAULT_PREFETCH_FACTOR = 2  # torch.utils.data.DataLoader's default with workers
RANDOM_READ_BYTES = 4096  # the probe's random reads are 4 KiB
NO_PROBE = "no machine probe: run pipeprof probe"


# ---- attribution ------------------------------------------------------------------------


def attribution(run: Run, probe: dict | None = None, summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """The direct attribution evidence of one run; every number carries its unit in its name.

    ``summary`` (when ``summarize`` calls this) supplies the step fractions, the
    loading summary and the cache check it already derived, so they are not
    computed twice.

    Sections (``{"absent": reason}`` where something was not measured, never a zero):

    * ``step``: ``data_wait_fraction``, ``h2d_fraction``, ``compute_fraction``,
      ``other_fraction`` of counted step time; ``steps``; ``step_mean_s``, ``data_wait_mean_s``.
    * ``loading``: ``workers`` (0: the training process made the batches);
      ``fetch_per_sample_s``, ``prep_per_sample_s``, ``collate_per_sample_s``,
      ``collate_per_batch_s``, ``batch_s`` (mean production time per batch);
      ``fetch_fraction``, ``prep_fraction``, ``collate_fraction`` of production time;
      ``busy_fraction_by_worker`` (``"main"``, ``"0"``, …) and ``worker_busy_mean_fraction``
      (DataLoader workers only); ``production_over_wait_fraction``: ``batch_s`` over the
      mean data wait per step.
    * ``cpu``: ``cores_usable`` (affinity and cgroup quota), ``torch_threads``,
      ``num_workers``, ``threads_wanted`` (workers + torch threads), ``oversubscribed``;
      ``main_cpu_mean_pct`` and ``workers_cpu_mean_pct`` (% of one core),
      ``machine_cpu_mean_pct`` and ``machine_cpu_peak_pct`` (% of all cores),
      ``busy_cores`` (training process + workers, in cores) and ``busy_over_usable_fraction``.
    * ``disk``: ``mean_read_bytes_per_s``, ``peak_read_bytes_per_s`` (process tree, real
      reads, counted steps) and ``ceiling``: ``sequential_cold_bytes_per_s``,
      ``random_4k_cold_reads_per_s`` and ``random_4k_cold_bytes_per_s`` from the probe, with
      ``mean_over_sequential_fraction``, ``peak_over_sequential_fraction``,
      ``peak_over_random_4k_fraction`` — or ``{"absent": reason}`` without a probe.
    * ``gpu``: ``mean_util_pct`` and ``idle_pct`` (100 - utilization).
    * ``prefetch``: ``num_workers``, ``prefetch_factor``, ``capacity_batches``
      (workers × prefetch factor), ``steps_observed``, ``mean_ready_batches``,
      ``mean_occupancy_fraction`` (ready / capacity), ``empty_step_fraction`` and
      ``full_step_fraction`` (share of observed counted steps that found no batch / a
      full queue), ``ready_wait_fraction`` (share of their data wait on steps that found
      at least one batch ready), ``wait_when_ready_mean_s``, ``wait_when_empty_mean_s``.
    * ``data``: ``storage`` kind, ``throttle`` (emulated slow storage or None),
      ``pin_memory``; ``cache``: ``{"cache", "verified", "reason"}`` or absent.
    """
    meta = run.meta if isinstance(run.meta, dict) else {}
    scenario = _dict(meta.get("scenario"))
    steps = counted_steps(run.steps)
    if summary is None:
        frac = fractions(run.steps)
        loading = loading_summary(counted_batches(run.loading, run.steps))
        cache = cache_check(run)
    else:
        frac, loading, cache = summary["fractions"], summary["loading"], summary["cache"]
    wait_mean_s = _mean(steps.get("data_wait_s"))
    num_workers = _num_workers(scenario, loading)
    return {
        "step": {
            "steps": int(len(steps)),
            **{f"{p}_fraction": _finite(v) for p, v in frac.items()},
            "step_mean_s": _mean(steps.get("step_s")),
            "data_wait_mean_s": wait_mean_s,
        },
        "loading": _loading(loading, wait_mean_s, meta),
        "cpu": _cpu(run, meta, num_workers),
        "disk": _disk(run, probe),
        "gpu": _gpu(run, meta),
        "prefetch": _prefetch(steps, scenario, num_workers),
        "data": {"storage": _dict(scenario.get("data")).get("storage"),
                 "throttle": _dict(scenario.get("data")).get("throttle"),
                 "pin_memory": _dict(scenario.get("loader")).get("pin_memory")},
        "cache": ({"cache": cache.get("cache"), "verified": cache.get("verified"), "reason": cache.get("reason")}
                  if cache else {"absent": "this run has no page-cache record (recorded before page-cache control)"}),
    }


def _loading(loading: dict | None, wait_mean_s: float | None, meta: dict) -> dict[str, Any]:
    if not loading:
        return {"absent": str(_dict(meta.get("absences")).get("loading")
                              or "no loading records for counted steps (recorded without worker-side timing?)")}
    busy = {w: v.get("busy_fraction") for w, v in loading["by_worker"].items()}
    workers_busy = [b for w, b in busy.items() if w != "main" and b is not None]
    part = loading.get("fractions") or {}
    return {
        "workers": loading["workers"],
        "fetch_per_sample_s": loading["fetch_s"],
        "prep_per_sample_s": loading["prep_s"],
        "collate_per_sample_s": loading["collate_per_sample_s"],
        "collate_per_batch_s": loading["collate_s"],
        "batch_s": loading["batch_s"],
        **{f"{p}_fraction": part.get(p) for p in ("fetch", "prep", "collate")},
        "busy_fraction_by_worker": busy,
        "worker_busy_mean_fraction": sum(workers_busy) / len(workers_busy) if workers_busy else None,
        "production_over_wait_fraction": (loading["batch_s"] / wait_mean_s
                                          if wait_mean_s and loading["batch_s"] is not None else None),
    }


def _cpu(run: Run, meta: dict, num_workers: int | None) -> dict[str, Any]:
    env = _dict(meta.get("environment"))
    cores, threads = env.get("cpu_cores"), env.get("torch_threads")
    during = _during(run)
    main, workers = _mean(during.get("main_cpu_pct")), _mean(during.get("workers_cpu_pct"))
    busy = None if main is None else (main + (workers or 0.0)) / 100
    wanted = None if threads is None or num_workers is None else num_workers + threads
    return {
        "cores_usable": cores,
        "torch_threads": threads,
        "num_workers": num_workers,
        "threads_wanted": wanted,
        "oversubscribed": None if wanted is None or not cores else wanted > cores,
        "main_cpu_mean_pct": main,
        "workers_cpu_mean_pct": workers,
        "machine_cpu_mean_pct": _mean(during.get("cpu_util_pct")),
        "machine_cpu_peak_pct": _max(during.get("cpu_util_pct")),
        "busy_cores": busy,
        "busy_over_usable_fraction": busy / cores if busy is not None and cores else None,
    }


def _disk(run: Run, probe: dict | None) -> dict[str, Any]:
    reads = _during(run).get("read_bytes_per_s")
    mean_bps, peak_bps = _mean(reads), _max(reads)
    if mean_bps is None:
        reason = _dict(run.meta.get("absences")).get("io_counters") if isinstance(run.meta, dict) else None
        return {"absent": str(reason or "no disk read samples during counted steps")}
    return {"mean_read_bytes_per_s": mean_bps, "peak_read_bytes_per_s": peak_bps,
            "ceiling": _disk_ceiling(probe, mean_bps, peak_bps)}


def _disk_ceiling(probe: dict | None, mean_bps: float, peak_bps: float | None) -> dict[str, Any]:
    if not probe:
        return {"absent": NO_PROBE}
    disk = _dict(probe.get("disk"))
    seq, rnd = _dict(disk.get("sequential_read_cold")), _dict(disk.get("random_read_cold"))
    seq_bps, rnd_iops = seq.get("median_bytes_per_s"), rnd.get("median_reads_per_s")
    if not seq_bps and not rnd_iops:
        why = seq.get("absent") or rnd.get("absent") or disk.get("absent") or "the probe has no cold disk numbers"
        return {"absent": f"machine probe: {why}"}
    rnd_bps = rnd_iops * RANDOM_READ_BYTES if rnd_iops else None
    return {
        "sequential_cold_bytes_per_s": seq_bps,
        "random_4k_cold_reads_per_s": rnd_iops,
        "random_4k_cold_bytes_per_s": rnd_bps,
        "mean_over_sequential_fraction": mean_bps / seq_bps if seq_bps else None,
        "peak_over_sequential_fraction": peak_bps / seq_bps if seq_bps and peak_bps is not None else None,
        "peak_over_random_4k_fraction": peak_bps / rnd_bps if rnd_bps and peak_bps is not None else None,
    }


def _gpu(run: Run, meta: dict) -> dict[str, Any]:
    gpu = _dict(meta.get("gpu"))
    absences = _dict(meta.get("absences"))
    if not gpu.get("available"):
        return {"absent": str(gpu.get("reason") or absences.get("gpu") or "no GPU was recorded for this run")}
    util = _mean(_during(run).get("gpu_util_pct"))
    if util is None:
        return {"absent": str(absences.get("gpu_util_pct") or "a GPU was in use, but no utilization was sampled")}
    return {"mean_util_pct": util, "idle_pct": 100.0 - util}


def _prefetch(steps: pd.DataFrame, scenario: dict, num_workers: int | None) -> dict[str, Any]:
    if num_workers == 0:
        return {"absent": "no prefetch queue: num_workers = 0 (the training process makes each batch when asked)"}
    ready = pd.to_numeric(steps.get("ready_batches", pd.Series(dtype=float)), errors="coerce")
    seen = steps.assign(ready=ready).dropna(subset=["ready"])
    if seen.empty:
        return {"absent": "the queue was not observed (no ready_batches readings: a run from before they were "
                          "recorded, or a loader whose internals do not show them)"}
    factor = _dict(scenario.get("loader")).get("prefetch_factor")
    capacity = num_workers * (factor or DEFAULT_PREFETCH_FACTOR) if num_workers else None
    wait = pd.to_numeric(seen["data_wait_s"], errors="coerce").fillna(0.0)
    has_ready = seen["ready"] >= 1
    total_wait = float(wait.sum())
    return {
        "num_workers": num_workers,
        "prefetch_factor": factor or DEFAULT_PREFETCH_FACTOR,
        "capacity_batches": capacity,
        "steps_observed": int(len(seen)),
        "mean_ready_batches": float(seen["ready"].mean()),
        "mean_occupancy_fraction": float(seen["ready"].mean()) / capacity if capacity else None,
        "empty_step_fraction": float((~has_ready).mean()),
        "full_step_fraction": float((seen["ready"] >= capacity).mean()) if capacity else None,
        "ready_wait_fraction": float(wait[has_ready].sum()) / total_wait if total_wait > 0 else None,
        "wait_when_ready_mean_s": float(wait[has_ready].mean()) if has_ready.any() else None,
        "wait_when_empty_mean_s": float(wait[~has_ready].mean()) if (~has_ready).any() else None,
    }


# ---- verdict ----------------------------------------------------------------------------


def verdict(run: Run, probe: dict | None = None) -> dict[str, Any]:
    """One class (``CLASSES``) with its evidence and a sentence; see the module's decision table.

    Returns ``{"class", "rule", "degree", "sentence", "evidence", "notes"}``: ``rule`` is
    the row of the table that decided; ``degree`` is ``"input-bound"`` (data wait >= 20%)
    or ``"partly input-bound"`` (5-20%) for ``input:*`` and ``balanced`` with a wait, else
    None; ``evidence`` holds the numbers behind the decision (units in the names);
    ``notes`` are sentences about oversubscribed cores and a cold cache that was not cold.
    """
    return verdict_from_attribution(attribution(run, probe))


def verdict_from_attribution(attr: dict[str, Any]) -> dict[str, Any]:
    """The verdict from an ``attribution(...)`` result (what ``summarize`` uses: computed once)."""
    step = attr["step"]
    wait, h2d = step.get("data_wait_fraction"), step.get("h2d_fraction")
    evidence = {k: step.get(k) for k in ("data_wait_fraction", "h2d_fraction", "compute_fraction")}
    notes = _notes(attr)
    if not step.get("steps") or wait is None:
        return _result("balanced", "R0", None, "No counted steps: nothing to judge.", evidence, notes)
    h2d = h2d or 0.0
    if h2d >= H2D_BOUND_FRACTION and h2d >= wait:
        return _result("h2d", "R1", None,
                       f"Bound by the copy to the device: {_pct(h2d)} of step time moves batches host → device "
                       f"(data wait {_pct(wait)}, compute {_pct(step.get('compute_fraction'))}).", evidence, notes)
    if wait < COMPUTE_BOUND_FRACTION:
        return _result("compute", "R2", None,
                       f"Compute-bound: only {_pct(wait)} of step time waits for data; forward, backward and the "
                       f"optimizer step take {_pct(step.get('compute_fraction'))}.", evidence, notes)
    degree = "input-bound" if wait >= INPUT_BOUND_FRACTION else "partly input-bound"
    klass, rule, why, more = _input_cause(attr)
    evidence.update(more)
    head = f"{degree.capitalize()} ({_pct(wait)} of step time waiting for data)"
    if klass == "input:fetch":
        why += _disk_words(attr["disk"], evidence)
    if klass == "balanced":
        sentence = f"{head}, with no single cause: {why}."
    else:
        sentence = f"{head}, {_CAUSE_WORDS[klass]}: {why}."
    return _result(klass, rule, degree, sentence, evidence, notes)


_CAUSE_WORDS = {
    "input:fetch": "by storage (reading samples)",
    "input:prep": "by preprocessing on the CPU (decoding and transforms)",
    "input:main": "in the training process itself",
}


def _input_cause(attr: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
    """(class, rule, reason in words, evidence) for a run that waits for data (R3-R9)."""
    loading, prefetch = attr["loading"], attr["prefetch"]
    workers = attr["cpu"].get("num_workers")
    storage = _storage_words(attr["data"])
    has_loading = "absent" not in loading
    if workers == 0 and has_loading:
        ev = {k: loading.get(k) for k in ("fetch_fraction", "prep_fraction", "collate_fraction", "batch_s",
                                          "production_over_wait_fraction")}
        ev["data_wait_mean_s"] = attr["step"].get("data_wait_mean_s")
        covers = loading.get("production_over_wait_fraction")
        if covers is not None and covers < PRODUCTION_COVERS_WAIT:
            return "input:main", "R3", (
                f"making a batch takes {_time(loading['batch_s'])} but the loop waited "
                f"{_time(ev['data_wait_mean_s'])} per step; the rest is the training process's own work outside "
                "fetch, prep and collate (DataLoader bookkeeping, pinning)"), ev
        part = _largest(loading, ("fetch", "prep", "collate"))
        return _PART_CLASS[part], "R4", (
            f"the training process makes every batch (num_workers = 0) and {_pct(loading[f'{part}_fraction'])} "
            f"of that time is {_part_words(part, loading, storage)}"), ev
    if workers != 0 and "absent" not in prefetch and prefetch.get("ready_wait_fraction") is not None:
        ev = {k: prefetch.get(k) for k in ("capacity_batches", "mean_ready_batches", "empty_step_fraction",
                                           "full_step_fraction", "ready_wait_fraction")}
        # No step found the queue empty (or ready): there is no such mean, and "not measured" would mislead.
        ev.update({k: prefetch[k] for k in ("wait_when_ready_mean_s", "wait_when_empty_mean_s")
                   if prefetch.get(k) is not None})
        share = prefetch["ready_wait_fraction"]
        capacity = prefetch.get("capacity_batches")
        queue = (f"{_pct(prefetch['full_step_fraction'])} of steps found the prefetch queue full "
                 f"({capacity} of {capacity}), " if capacity else "")
        queue += f"{_pct(prefetch['empty_step_fraction'])} found it empty"
        if share >= READY_WAIT_MAIN:
            return "input:main", "R5", (
                f"{queue}, and {_pct(share)} of the wait fell on steps that had a batch ready — the workers "
                "keep up, and the time goes into moving batches into the training process (unpickling, shared "
                f"memory{', the pin-memory thread' if attr['data'].get('pin_memory') else ''})"), ev
        if share <= READY_WAIT_WORKERS:
            if has_loading:
                klass, words = _workers_split(loading, storage, ev)
                return klass, "R6", (f"the workers cannot keep up — {queue}, and {_pct(1 - share)} of the wait fell "
                                     f"on steps that found it empty; {words}"), ev
            klass, rule, why, more = _inferred(attr)
            return klass, rule, f"the workers cannot keep up ({queue}); {why}", {**ev, **more}
        return "balanced", "R7", (
            f"{queue}; {_pct(share)} of the wait fell on steps that had a batch ready and the rest on steps that "
            "had none — supply is bursty (a larger prefetch_factor may smooth it)"), ev
    if workers != 0 and has_loading and loading.get("worker_busy_mean_fraction") is not None:
        busy = loading["worker_busy_mean_fraction"]
        ev = {"worker_busy_mean_fraction": busy}
        if busy <= WORKERS_IDLE_BUSY:
            return "input:main", "R8", (
                f"the workers were busy only {_pct(busy)} of the time, so batches were ready; the time goes into "
                "moving them into the training process (the queue itself was not observed in this run)"), ev
        if busy >= WORKERS_BUSY:
            klass, words = _workers_split(loading, storage, ev)
            return klass, "R8", f"the workers were busy {_pct(busy)} of the time; {words}", ev
        return "balanced", "R8", (f"the workers were busy {_pct(busy)} of the time, neither idle nor saturated "
                                  "(the queue itself was not observed in this run)"), ev
    return _inferred(attr)


_PART_CLASS = {"fetch": "input:fetch", "prep": "input:prep", "collate": "input:main"}


def _workers_split(loading: dict, storage: str | None, ev: dict) -> tuple[str, str]:
    """input:fetch or input:prep by where the workers' time goes (collate counts as CPU work with prep)."""
    fetch = loading.get("fetch_fraction") or 0.0
    cpu = (loading.get("prep_fraction") or 0.0) + (loading.get("collate_fraction") or 0.0)
    ev.update({k: loading.get(k) for k in ("fetch_fraction", "prep_fraction", "collate_fraction",
                                           "fetch_per_sample_s", "prep_per_sample_s")})
    if fetch >= cpu:
        return "input:fetch", f"{_pct(fetch)} of their batch-making time is {_part_words('fetch', loading, storage)}"
    return "input:prep", (f"{_pct(cpu)} of their batch-making time is CPU work: "
                          f"{_part_words('prep', loading, storage)} and collating")


def _inferred(attr: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
    """R9: no loading split or queue readings to go by; disk reads decide, marked as inferred."""
    disk = attr["disk"]
    mean_bps = disk.get("mean_read_bytes_per_s")
    ev = {"mean_read_bytes_per_s": mean_bps, "cause_measured": False}
    if mean_bps is not None and mean_bps >= DISK_READ_FLOOR_BYTES_PER_S:
        return "input:fetch", "R9", (f"inferred, not measured (no loading records): the process tree read "
                                     f"{_rate(mean_bps)} from disk while it waited"), ev
    if attr["cpu"].get("num_workers"):
        return "input:prep", "R9", ("inferred, not measured (no loading records): the workers read next to "
                                    "nothing from disk, so their time is CPU work"), ev
    return "input:main", "R9", ("inferred, not measured (no loading records): the training process makes "
                                "every batch and reads next to nothing from disk"), ev


def _disk_words(disk: dict[str, Any], evidence: dict[str, Any]) -> str:
    """The disk's read rate against the probed ceiling, for a storage verdict (and its evidence)."""
    if "absent" in disk:
        return ""
    ceiling = _dict(disk.get("ceiling"))
    evidence["mean_read_bytes_per_s"] = disk.get("mean_read_bytes_per_s")
    evidence["peak_read_bytes_per_s"] = disk.get("peak_read_bytes_per_s")
    peak_bps = disk.get("peak_read_bytes_per_s") or 0.0
    if peak_bps < DISK_READ_FLOOR_BYTES_PER_S:
        return "; the disk read next to nothing (the bytes came from memory or the page cache)"
    words = f"; the disk read {_rate(disk['mean_read_bytes_per_s'])} on average (peak {_rate(peak_bps)})"
    if "absent" in ceiling:
        evidence["disk_ceiling"] = ceiling["absent"]
        return words + " — no ceiling to compare with (" + ceiling["absent"] + ")"
    for key in ("sequential_cold_bytes_per_s", "peak_over_sequential_fraction", "random_4k_cold_bytes_per_s",
                "peak_over_random_4k_fraction"):
        evidence[key] = ceiling.get(key)
    parts = []
    if ceiling.get("peak_over_sequential_fraction") is not None:
        parts.append(f"{_pct(ceiling['peak_over_sequential_fraction'])} of the probed cold sequential ceiling "
                     f"({_rate(ceiling['sequential_cold_bytes_per_s'])})")
    if ceiling.get("peak_over_random_4k_fraction") is not None:
        parts.append(f"{_pct(ceiling['peak_over_random_4k_fraction'])} of the cold random 4 KiB ceiling "
                     f"({_rate(ceiling['random_4k_cold_bytes_per_s'])})")
    return words + (", at peak " + " and ".join(parts) if parts else "")


def _notes(attr: dict[str, Any]) -> list[str]:
    cpu, notes = attr["cpu"], []
    if cpu.get("oversubscribed"):
        busy = (f"; the training process and workers kept {cpu['busy_cores']:.1f} of them busy on average"
                if cpu.get("busy_cores") is not None else "")
        notes.append(f"{cpu['num_workers']} workers + {cpu['torch_threads']} torch threads on "
                     f"{cpu['cores_usable']} usable cores: more threads than cores, so they compete for CPU "
                     f"whenever all are busy{busy}.")
    cache = attr["cache"]
    if cache.get("cache") == "cold" and cache.get("verified") is False:
        notes.append("The cold page cache was not cold, so the cost of reading from disk is understated. "
                     f"{cache.get('reason') or ''}".strip())
    return notes


def _result(klass: str, rule: str, degree: str | None, sentence: str, evidence: dict, notes: list[str]) -> dict:
    assert klass in CLASSES, klass
    return {"class": klass, "rule": rule, "degree": degree, "sentence": sentence, "evidence": evidence,
            "notes": notes}


# ---- helpers ----------------------------------------------------------------------------


def _num_workers(scenario: dict, loading: dict | None) -> int | None:
    """num_workers from the scenario as run; else from who made the batches; else unknown."""
    value = _dict(scenario.get("loader")).get("num_workers")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    return int(loading["workers"]) if loading else None


def _during(run: Run) -> pd.DataFrame:
    """System samples inside the counted-steps window."""
    samples = run.samples
    start_s, end_s = counted_window_s(run.steps)
    if samples is None or samples.empty or "t_s" not in samples or math.isnan(start_s):
        return pd.DataFrame()
    t = pd.to_numeric(samples["t_s"], errors="coerce")
    return samples.loc[(t >= start_s) & (t <= end_s)]


def _mean(series: pd.Series | None) -> float | None:
    values = pd.to_numeric(series, errors="coerce").dropna() if series is not None else None
    return None if values is None or values.empty else float(values.mean())


def _max(series: pd.Series | None) -> float | None:
    values = pd.to_numeric(series, errors="coerce").dropna() if series is not None else None
    return None if values is None or values.empty else float(values.max())




def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _largest(loading: dict, parts: tuple[str, ...]) -> str:
    return max(parts, key=lambda p: loading.get(f"{p}_fraction") or 0.0)


def _storage_words(data: dict[str, Any]) -> str | None:
    storage, throttle = data.get("storage"), data.get("throttle")
    if storage and throttle:
        spec = _dict(throttle)
        label = spec.get("preset") or (throttle if isinstance(throttle, str) else None)
        if label:
            return f"{storage}, throttled to emulate {label} storage"
        return (f"{storage}, throttled to {spec.get('latency_ms')} ms + {spec.get('bandwidth_mb_s')} MB/s per read "
                "(emulated)")
    return storage


def _part_words(part: str, loading: dict, storage: str | None) -> str:
    where = f", storage: {storage}" if storage else ""
    if part == "fetch":
        return f"fetching samples ({_time(loading.get('fetch_per_sample_s'))} per sample{where})"
    if part == "prep":
        return f"decoding and transforming ({_time(loading.get('prep_per_sample_s'))} per sample)"
    return f"collating samples into batches ({_time(loading.get('collate_per_batch_s'))} per batch)"


def _pct(fraction: Any) -> str:
    v = _finite(fraction)
    if v is None:
        return "an unknown share"
    if v == 0:
        return "0%"
    return f"{100 * v:.1f}%" if abs(v) < 0.1 else f"{100 * v:.0f}%"


def _time(seconds: Any) -> str:
    v = _finite(seconds)
    if v is None:
        return "an unknown time"
    if v >= 1:
        return f"{v:.2f} s"
    if v >= 1e-3:
        return f"{v * 1e3:.1f} ms"
    return f"{v * 1e6:.0f} µs"


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e6:.1f} MB/s"
