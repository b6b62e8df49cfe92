"""The machine's probe for the terminal: its ceilings as a table, and where the figures came from."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from pipeprof import format as fmt
from pipeprof.measure.probe_record import Measurement, ProbeRecord

_ABSENT_STYLE = "dim italic"


def provenance(probe: ProbeRecord | dict[str, Any]) -> str:
    """Whether the probe was measured now or reused from the cache (how old, where), in one line."""
    p = _record(probe)
    kind = "quick probe" if p.quick else "probe"
    if p.cache_reused:
        return (f"cached {kind} from {p.measured_at_utc} ({_age(p.cache_age_s)} ago), "
                f"{p.cache_path}; pipeprof probe --refresh measures again")
    return f"{kind} measured now ({p.cache_reason}), saved to {p.cache_path}"


def _record(probe: ProbeRecord | dict[str, Any]) -> ProbeRecord:
    """``probe`` itself, or the probe's dict read once (``ProbeRecord.from_json``)."""
    return probe if isinstance(probe, ProbeRecord) else ProbeRecord.from_json(probe)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "unknown time"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{max(seconds, 0):.0f} s"


def _stat(entry: Measurement | None, scale: float, digits: int = 1) -> tuple[str, str]:
    """``median [min - max]`` of one measurement, scaled, or its absence."""
    if entry is None:
        return "not measured", _ABSENT_STYLE
    if entry.absent is not None:
        return f"absent: {entry.absent}", _ABSENT_STYLE
    med, lo, hi = entry.median, entry.min, entry.max
    if med is None or lo is None or hi is None:
        return "not measured", _ABSENT_STYLE
    return f"{fmt.number(med / scale, digits)}  [{fmt.number(lo / scale, digits)} – {fmt.number(hi / scale, digits)}]", ""


def probe_table(probe: ProbeRecord | dict[str, Any]) -> Table:
    """The probe as a two-column table: measure (with unit), median [min – max] over repeats."""
    p = _record(probe)
    table = Table(title=Text("pipeprof probe: this machine's ceilings", style="bold"), show_header=False,
                  box=None, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column("measure", style="dim", no_wrap=True)
    table.add_column("value", overflow="fold")

    def add(label: str, value: str, style: str = "") -> None:
        table.add_row(Text(label), Text(value, style=style))

    add("machine", f"{p.hostname} · {p.cpu_model} · {fmt.byte_size(p.ram_bytes)} RAM · key {p.machine_key}")
    add("cores usable / logical, torch threads", f"{p.usable_cores} / {p.cpu_count_logical}, {p.torch_threads}")
    add("memory copy (MiB/s, read + write)", *_stat(p.memory_bandwidth, fmt.MIB, 0))
    disk = p.disk
    if disk.absent is not None:
        add("disk", f"absent: {disk.absent}", _ABSENT_STYLE)
    else:
        add("disk test file", f"{disk.folder} ({disk.filesystem}, {fmt.byte_size(disk.file_bytes)} file)")
        add("sequential read cold (MiB/s)", *_stat(disk.sequential_read_cold, fmt.MIB, 0))
        add("sequential read warm (MiB/s)", *_stat(disk.sequential_read_warm, fmt.MIB, 0))
        add("random 4 KiB read cold (IOPS)", *_stat(disk.random_read_cold, 1, 0))
        add("random 4 KiB read warm (IOPS)", *_stat(disk.random_read_warm, 1, 0))
    if p.h2d_absent is not None:
        add("host → device (MiB/s)", f"absent: {p.h2d_absent}", _ABSENT_STYLE)
    else:
        add("host → device pinned (MiB/s)", *_stat(p.h2d_pinned, fmt.MIB, 0))
        add("host → device pageable (MiB/s)", *_stat(p.h2d_pageable, fmt.MIB, 0))
    for n, size in p.matmul_sizes.items():
        value, style = _stat(size.gflop_per_s, 1)
        if size.ratio_to_reference is not None:
            value += f"  ×{size.ratio_to_reference:.2f} of {p.matmul_reference_n}"
        add(f"matmul {n}² float32 on {p.matmul_device} (GFLOP/s)", value, style)
    if p.gpu_absent is not None:
        add("GPU", f"absent: {p.gpu_absent}", _ABSENT_STYLE)
    for device in p.gpus:
        memory_text = fmt.byte_size(device.memory_total_bytes, missing="memory unknown")
        bus = device.memory_bus_width_bits
        bus_text = f"{bus}-bit memory bus" if bus is not None else "memory bus width unknown"
        add(f"GPU {device.nvml_index}", f"{device.name} · {memory_text} · {bus_text}")
    add("measured (UTC)", f"{p.measured_at_utc} in {p.probe_duration_s:.1f} s"
                          f"{' (quick)' if p.quick else ''}, pipeprof {p.pipeprof}")
    return table


def track_record_text(record: dict[str, Any]) -> str:
    """This machine's track record (``pipeprof.track_record.summary``) in a few lines: by tier, the checks kept,
    their median and worst error, the share inside their interval, and whether the intervals use them yet."""
    tiers, need = record.get("tiers") or {}, record.get("min_checks")
    lines = [f"track record of predictions checked on this machine ({record.get('path')}; --verify, tune and "
             f"sweep add to it; delete it to start again):"]
    for tier in ("measured", "estimated"):
        t = tiers.get(tier) or {}
        checks = int(t.get("checks") or 0)
        if not checks:
            lines.append(f"  {tier}: no check yet; intervals use the yardstick's typical error until it has "
                         f"{need} checks")
            continue
        inside = f", {fmt.pct(t.get('inside_share'))} inside their interval" \
            if t.get("inside_share") is not None else ""
        use = ("its median is the intervals' model error" if t.get("used") else
               f"intervals use the yardstick's typical error until it has {need} checks")
        lines.append(f"  {tier}: {fmt.plural(checks, 'check')}, median error {fmt.pct(t.get('median_abs_error'))}, "
                     f"worst {fmt.pct(t.get('worst_abs_error'))}{inside}; {use}")
    return "\n".join(lines)
