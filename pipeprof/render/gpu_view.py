"""The report's GPU telemetry rows: the training process's own GPU use, clocks and power, torch.cuda memory.

Formatting only: the numbers are summary.json's ``gpu`` and ``device_memory``
sections and run.json's ``gpu`` info; a missing one shows its absence reason.
"""

from __future__ import annotations

from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.device_memory import DeviceMemory
from pipeprof.analysis.summary import Summary
from pipeprof.run_meta import RunMeta

Row = tuple[str, str, str]  # label, value, note (plain text: the template escapes it)


def gpu_telemetry_rows(summary: Summary, meta: RunMeta) -> list[Row]:
    """Rows for the summary table: per-process GPU use and SM clock / power (when a GPU was sampled), then
    torch.cuda's memory peaks and the creep check (always: absent with its reason off CUDA)."""
    rows: list[Row] = []
    gpu = summary.gpu
    absences = summary.absences or meta.absences
    info = meta.gpu
    if gpu is not None:
        util, mem = gpu.mean_proc_util_pct, gpu.peak_proc_mem_bytes
        value = (f"SM {_or_not(util, lambda v: fmt.pct(v / 100))}"
                 f" · memory {_or_not(mem, lambda v: fmt.byte_size(v))} peak")
        why = [f"{what}: {absences[key]}" for what, key, v in (("SM", "gpu_proc_util_pct", util),
                                                               ("memory", "gpu_proc_mem_bytes", mem))
               if v is None and absences.get(key)]
        rows.append(("GPU, training process", value,
                     "; ".join(why) or "NVML per-process, mean over counted steps; all its processes together"))
        clock, power = gpu.mean_sm_clock_mhz, gpu.mean_power_w
        limits = [f"max {fmt.number(info.sm_clock_max_mhz, 0)} MHz" if info.sm_clock_max_mhz else "",
                  f"limit {fmt.number(info.power_limit_w, 0)} W" if info.power_limit_w else ""]
        why = [f"{what}: {absences[key]}" for what, key, v in (("SM clock", "gpu_sm_clock_mhz", clock),
                                                               ("power", "gpu_power_w", power))
               if v is None and absences.get(key)]
        rows.append(("SM clock · power",
                     f"{_or_not(clock, lambda v: fmt.number(v, 0) + ' MHz')} · "
                     f"{_or_not(power, lambda v: fmt.number(v, 0) + ' W')}",
                     "; ".join(why) or "mean" + "".join(f"; {t}" for t in limits if t)))
    rows.append(_device_memory_row(summary.device_memory))
    return rows


def _device_memory_row(memory: DeviceMemory | None) -> Row:
    label = "GPU memory, torch.cuda"
    if memory is None or memory.absent is not None:
        return label, fmt.NOT_MEASURED, (memory.absent if memory is not None else None) or "not in this summary"
    value = (f"allocated {fmt.byte_size(memory.peak_allocated_bytes)} · "
             f"reserved {fmt.byte_size(memory.peak_reserved_bytes)} peak")
    creep, windows = memory.creep, fmt.plural(memory.windows, "window")
    if creep is not None and creep.growing:
        note = (f"memory creep: allocated grew by {fmt.byte_size(creep.growth_bytes)} over the counted steps "
                f"({fmt.byte_size(creep.per_step_bytes)} a step; {windows})")
    elif creep is None or creep.growth_bytes is None:
        note = f"too few windows to judge growth ({windows})"
    else:
        note = f"no memory creep: {fmt.byte_size(creep.growth_bytes)} fitted growth, within noise ({windows})"
    return label, value, note


def _or_not(value: float | None, show: Any) -> str:
    return fmt.NOT_MEASURED if value is None else str(show(value))
