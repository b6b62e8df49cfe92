"""The machine's probe for the terminal: its ceilings as a table, and where the figures came from."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from pipeprof import format as fmt

_ABSENT_STYLE = "dim italic"


def provenance(probe: dict[str, Any]) -> str:
    """Whether the probe was measured now or reused from the cache (how old, where), in one line."""
    cache = probe.get("cache") or {}
    kind = "quick probe" if probe.get("quick") else "probe"
    if cache.get("reused"):
        return (f"cached {kind} from {probe.get('measured_at_utc')} ({_age(cache.get('age_s'))} ago), "
                f"{cache.get('path')}; pipeprof probe --refresh measures again")
    return f"{kind} measured now ({cache.get('reason')}), saved to {cache.get('path')}"


def _age(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return "unknown time"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{max(seconds, 0):.0f} s"


def _stat(entry: Any, unit: str, scale: float, digits: int = 1) -> tuple[str, str]:
    """``median [min - max]`` of one measurement, scaled, or its absence."""
    if not isinstance(entry, dict):
        return "not measured", _ABSENT_STYLE
    if "absent" in entry:
        return f"absent: {entry['absent']}", _ABSENT_STYLE
    med, lo, hi = (entry.get(f"{k}_{unit}") for k in ("median", "min", "max"))
    if not (isinstance(med, (int, float)) and isinstance(lo, (int, float)) and isinstance(hi, (int, float))):
        return "not measured", _ABSENT_STYLE
    return f"{fmt.number(med / scale, digits)}  [{fmt.number(lo / scale, digits)} – {fmt.number(hi / scale, digits)}]", ""


def probe_table(probe: dict[str, Any]) -> Table:
    """The probe as a two-column table: measure (with unit), median [min – max] over repeats."""
    table = Table(title=Text("pipeprof probe: this machine's ceilings", style="bold"), show_header=False,
                  box=None, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column("measure", style="dim", no_wrap=True)
    table.add_column("value", overflow="fold")

    def add(label: str, value: str, style: str = "") -> None:
        table.add_row(Text(label), Text(value, style=style))

    machine = probe.get("machine") or {}
    cpu = probe.get("cpu") or {}
    add("machine", f"{machine.get('hostname')} · {machine.get('cpu_model')} · "
                   f"{fmt.byte_size(machine.get('ram_bytes'))} RAM · key {machine.get('key')}")
    add("cores usable / logical, torch threads",
        f"{cpu.get('usable_cores')} / {cpu.get('cpu_count_logical')}, {cpu.get('torch_threads')}")
    add("memory copy (MiB/s, read + write)", *_stat(probe.get("memory_bandwidth"), "bytes_per_s", fmt.MIB, 0))
    disk = probe.get("disk") or {}
    if "absent" in disk:
        add("disk", f"absent: {disk['absent']}", _ABSENT_STYLE)
    else:
        where = f"{disk.get('folder')} ({disk.get('filesystem')}, {fmt.byte_size(disk.get('file_bytes'))} file)"
        add("disk test file", where)
        add("sequential read cold (MiB/s)", *_stat(disk.get("sequential_read_cold"), "bytes_per_s", fmt.MIB, 0))
        add("sequential read warm (MiB/s)", *_stat(disk.get("sequential_read_warm"), "bytes_per_s", fmt.MIB, 0))
        add("random 4 KiB read cold (IOPS)", *_stat(disk.get("random_read_cold"), "reads_per_s", 1, 0))
        add("random 4 KiB read warm (IOPS)", *_stat(disk.get("random_read_warm"), "reads_per_s", 1, 0))
    h2d = probe.get("h2d") or {}
    if "absent" in h2d:
        add("host → device (MiB/s)", f"absent: {h2d['absent']}", _ABSENT_STYLE)
    else:
        add("host → device pinned (MiB/s)", *_stat(h2d.get("pinned"), "bytes_per_s", fmt.MIB, 0))
        add("host → device pageable (MiB/s)", *_stat(h2d.get("pageable"), "bytes_per_s", fmt.MIB, 0))
    matmul = probe.get("matmul") or {}
    for n, entry in (matmul.get("sizes") or {}).items():
        value, style = _stat(entry, "gflop_per_s", 1)
        ratio = entry.get("ratio_to_reference")
        if isinstance(ratio, (int, float)):
            value += f"  ×{ratio:.2f} of {matmul.get('reference_n')}"
        add(f"matmul {n}² float32 on {matmul.get('device')} (GFLOP/s)", value, style)
    gpu = probe.get("gpu") or {}
    if "absent" in gpu:
        add("GPU", f"absent: {gpu['absent']}", _ABSENT_STYLE)
    for device in gpu.get("devices") or []:
        memory = device.get("memory_total_bytes")
        memory_text = fmt.byte_size(memory, missing="memory unknown")
        bus = device.get("memory_bus_width_bits")
        bus_text = f"{bus}-bit memory bus" if bus is not None else "memory bus width unknown"
        add(f"GPU {device.get('nvml_index')}", f"{device.get('name')} · {memory_text} · {bus_text}")
    add("measured (UTC)", f"{probe.get('measured_at_utc')} in {probe.get('probe_duration_s', 0):.1f} s"
                          f"{' (quick)' if probe.get('quick') else ''}, pipeprof {probe.get('pipeprof')}")
    return table
