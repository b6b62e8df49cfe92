"""The invariants of issue 31's gpu-checks: the profiled script's own facts and the run, as pure functions.

Each takes what a run left behind (run.json as a dict, the steps and device-memory tables, the facts the
script printed) and returns an ``Outcome`` (``gpu_check.checks``). Tested on synthetic records without a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from pipeprof.gpu_check.checks import Outcome, failed, passed, skipped
from pipeprof.numbers import finite

PEAK_BYTES = 256 << 20  # the peak the ``peak`` script makes before training
SIDE_STREAM_MAX_H2D = 0.05  # copies on a side stream overlap the compute: at most 5 % of step time is h2d


def on_device(meta: Mapping[str, Any], facts: Mapping[str, Any]) -> Outcome:
    """run.json's ``device`` is the one the script trained on (``cuda:N``, by ordinal)."""
    recorded, trained = meta.get("device"), facts.get("device")
    if recorded != trained:
        return failed(f"run.json device {recorded!r}, the script trained on {trained!r}")
    return passed(f"run.json device {recorded}")


def memory_follows(memory: pd.DataFrame) -> Outcome:
    """torch.cuda's memory was read on the training device: some window holds allocated bytes."""
    allocated = pd.to_numeric(memory.get("allocated_bytes", pd.Series(dtype=float)), errors="coerce").dropna()
    if allocated.empty or not (allocated > 0).any():
        return failed(f"device_memory: {len(allocated)} windows, none with allocated bytes (read on another device?)")
    return passed(f"device_memory: {len(allocated)} windows, up to {allocated.max() / 2**20:.1f} MiB allocated")


def no_context_elsewhere(facts: Mapping[str, Any]) -> Outcome:
    """The script's process holds a CUDA context on its training device only (NVML's compute processes)."""
    contexts, device, count = facts.get("contexts"), str(facts.get("device") or ""), facts.get("device_count")
    index = int(device.split(":")[1]) if ":" in device else None
    if not isinstance(contexts, list):
        return skipped(f"contexts not read: {contexts}")
    if index not in contexts:
        return skipped(f"NVML lists the process on {contexts or 'no GPU'}, not its training GPU {index}: its pids "
                       f"are another namespace's (a container); contexts elsewhere not checked")
    others = [i for i in contexts if i != index]
    if others:
        return failed(f"a CUDA context on GPU {others} besides the training GPU {index} (of {count})")
    return passed(f"a context on GPU {index} only (of {count})")


def fact_is(facts: Mapping[str, Any], key: str, expected: Any, what: str) -> Outcome:
    """The script's own fact ``key`` is ``expected`` (``what`` it means, for the detail)."""
    value = facts.get(key)
    if value != expected:
        return failed(f"{what}: {key} = {value!r}, expected {expected!r}")
    return passed(f"{what}: {key} = {value!r}")


def no_host_sync(facts: Mapping[str, Any], steps: int) -> Outcome:
    """No synchronize (device, event, stream) and no ``.item()`` during the script's ``steps`` steps: the
    script makes none, so every one counted is pipeprof's."""
    counts = facts.get("host_syncs_during_steps")
    if not isinstance(counts, Mapping):
        return failed(f"the script counted no synchronisations: {counts!r}")
    total = sum(int(v) for v in counts.values())
    if total:
        return failed(f"{total} host synchronisations during {steps} steps: {dict(counts)}")
    return passed(f"no host synchronisation in {steps} steps (synchronize, Event/Stream.synchronize, .item())")


def h2d_overlapped(summary: Mapping[str, Any], limit: float = SIDE_STREAM_MAX_H2D) -> Outcome:
    """A side-stream prefetcher's copies are not serial h2d: h2d below ``limit`` of step time."""
    h2d = finite((summary.get("fractions") or {}).get("h2d"))
    if h2d is None:
        return failed("summary.json has no h2d fraction")
    if not h2d < limit:
        return failed(f"h2d {100 * h2d:.1f} % of step time for copies on a side stream (limit {100 * limit:g} %)")
    return passed(f"h2d {100 * h2d:.1f} % of step time (copies beside the compute)")


def peak_kept(facts: Mapping[str, Any], least: int = PEAK_BYTES) -> Outcome:
    """The script's ``max_memory_allocated()`` at its end still holds the peak it made (never reset)."""
    peak = facts.get("max_memory_allocated")
    if not isinstance(peak, int) or peak < least:
        return failed(f"max_memory_allocated() = {peak!r} at the end, below the script's own {least} byte peak "
                      f"(reset under it)")
    return passed(f"max_memory_allocated() = {peak / 2**20:.0f} MiB (the script's peak kept)")


def per_process_gpu(meta: Mapping[str, Any], samples: pd.DataFrame, columns: tuple[str, ...]) -> Outcome:
    """NVML's per-process readings (``columns``) are matched (some reading > 0) or absent with a reason in
    run.json, never a silent 0."""
    absences = meta.get("absences") or {}
    found = []
    for column in columns:
        values = pd.to_numeric(samples.get(column, pd.Series(dtype=float)), errors="coerce").dropna()
        if column in absences:
            found.append(f"{column} absent: {absences[column]}")
        elif values.empty:
            return failed(f"{column} neither sampled nor absent with a reason")
        elif not (values > 0).any():
            return failed(f"{column} reads 0 in all {len(values)} samples and is not said absent (a silent 0)")
        else:
            found.append(f"{column} up to {values.max():g}")
    return passed("; ".join(found))


def predicted_vs_measured(verification: Mapping[str, Any] | None) -> Outcome:
    """``--verify`` re-ran with the top recommendation: its predicted and measured samples/s, both recorded."""
    if not verification:
        return failed("run.json has no verification")
    status = verification.get("status")
    if status == "not applicable":
        return passed(f"no change to verify: {verification.get('reason')}")
    if status != "complete":
        return failed(f"the --verify re-run is {status}: {verification.get('reason')}")
    predicted = finite(verification.get("predicted_samples_per_s"))
    measured = finite(verification.get("measured_samples_per_s"))
    if measured is None:
        return failed(f"the re-run with {verification.get('set')} has no measured samples/s")
    shown = f"{predicted:,.0f}/s" if predicted is not None else "none"
    return passed(f"{verification.get('set')}: predicted {shown}, measured {measured:,.0f}/s")
