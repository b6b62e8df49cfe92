"""The machine's probe (``measure.probe``'s dict, as probe.json and run.json hold it) read once into typed records.

``ProbeRecord.from_json`` is the typed reader the terminal's table (``render.probe``) reads its fields from. It
is lenient, as probe.json is written by several versions: a missing or wrong-typed value reads as None (a
measurement not taken), never an error; a section the probe could not measure keeps its ``absent`` reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeprof.run_meta import as_number, as_object, as_str


def _absent(d: dict[str, Any]) -> str | None:
    """A section's ``absent`` reason, as text, where it has one (present but null reads as "None")."""
    return str(d["absent"]) if "absent" in d else None


@dataclass(frozen=True)
class Measurement:
    """One measurement over repeats: its median, min and max in its unit (None: not measured), or why it is
    absent."""

    median: float | None = None
    min: float | None = None
    max: float | None = None
    absent: str | None = None

    @classmethod
    def from_json(cls, data: Any, unit: str) -> Measurement | None:
        """``data``'s ``median_<unit>``, ``min_<unit>``, ``max_<unit>``; None where it is not a JSON object."""
        if not isinstance(data, dict):
            return None
        return cls(median=as_number(data.get(f"median_{unit}")), min=as_number(data.get(f"min_{unit}")),
                   max=as_number(data.get(f"max_{unit}")), absent=_absent(data))


@dataclass(frozen=True)
class ProbeDisk:
    """The disk test: its file (folder, filesystem, size in bytes) and the reads, cold and warm (bytes/s for
    sequential reads, reads/s for random 4 KiB ones)."""

    absent: str | None = None
    folder: str | None = None
    filesystem: str | None = None
    file_bytes: float | None = None
    sequential_read_cold: Measurement | None = None
    sequential_read_warm: Measurement | None = None
    random_read_cold: Measurement | None = None
    random_read_warm: Measurement | None = None

    @classmethod
    def from_json(cls, data: Any) -> ProbeDisk:
        d = as_object(data)
        return cls(absent=_absent(d), folder=as_str(d.get("folder")), filesystem=as_str(d.get("filesystem")),
                   file_bytes=as_number(d.get("file_bytes")),
                   sequential_read_cold=Measurement.from_json(d.get("sequential_read_cold"), "bytes_per_s"),
                   sequential_read_warm=Measurement.from_json(d.get("sequential_read_warm"), "bytes_per_s"),
                   random_read_cold=Measurement.from_json(d.get("random_read_cold"), "reads_per_s"),
                   random_read_warm=Measurement.from_json(d.get("random_read_warm"), "reads_per_s"))


@dataclass(frozen=True)
class MatmulSize:
    """One matmul size's GFLOP/s and its ratio to the reference size's."""

    gflop_per_s: Measurement | None
    ratio_to_reference: float | None


@dataclass(frozen=True)
class GpuDevice:
    """One GPU as NVML describes it."""

    nvml_index: Any = None
    name: str | None = None
    memory_total_bytes: float | None = None
    memory_bus_width_bits: float | None = None


@dataclass(frozen=True)
class ProbeRecord:
    """The probe: the machine, its cores, and its ceilings (memory copy, disk, host → device, matmul, GPUs),
    with when and how it was measured and whether it came from the cache (``cache_*``)."""

    hostname: str | None = None
    cpu_model: str | None = None
    ram_bytes: float | None = None
    machine_key: str | None = None
    usable_cores: float | None = None
    cpu_count_logical: float | None = None
    torch_threads: float | None = None
    memory_bandwidth: Measurement | None = None  # bytes/s, read + write
    disk: ProbeDisk = field(default_factory=ProbeDisk)
    h2d_absent: str | None = None
    h2d_pinned: Measurement | None = None  # bytes/s
    h2d_pageable: Measurement | None = None
    matmul_device: str | None = None
    matmul_reference_n: Any = None
    matmul_sizes: dict[str, MatmulSize] = field(default_factory=dict)  # n -> GFLOP/s of an n x n float32 matmul
    gpu_absent: str | None = None
    gpus: tuple[GpuDevice, ...] = ()
    measured_at_utc: str | None = None
    probe_duration_s: float = 0.0
    quick: bool = False
    pipeprof: str | None = None
    cache_reused: bool = False
    cache_age_s: float | None = None
    cache_path: str | None = None
    cache_reason: str | None = None

    @classmethod
    def from_json(cls, data: Any) -> ProbeRecord:
        d = as_object(data)
        machine, cpu, h2d = as_object(d.get("machine")), as_object(d.get("cpu")), as_object(d.get("h2d"))
        matmul, gpu, cache = as_object(d.get("matmul")), as_object(d.get("gpu")), as_object(d.get("cache"))
        return cls(
            hostname=as_str(machine.get("hostname")), cpu_model=as_str(machine.get("cpu_model")),
            ram_bytes=as_number(machine.get("ram_bytes")), machine_key=as_str(machine.get("key")),
            usable_cores=as_number(cpu.get("usable_cores")), cpu_count_logical=as_number(cpu.get("cpu_count_logical")),
            torch_threads=as_number(cpu.get("torch_threads")),
            memory_bandwidth=Measurement.from_json(d.get("memory_bandwidth"), "bytes_per_s"),
            disk=ProbeDisk.from_json(d.get("disk")), h2d_absent=_absent(h2d),
            h2d_pinned=Measurement.from_json(h2d.get("pinned"), "bytes_per_s"),
            h2d_pageable=Measurement.from_json(h2d.get("pageable"), "bytes_per_s"),
            matmul_device=as_str(matmul.get("device")), matmul_reference_n=matmul.get("reference_n"),
            matmul_sizes={str(n): MatmulSize(Measurement.from_json(e, "gflop_per_s"),
                                             as_number(as_object(e).get("ratio_to_reference")))
                          for n, e in as_object(matmul.get("sizes")).items()},
            gpu_absent=_absent(gpu),
            gpus=tuple(GpuDevice(nvml_index=g.get("nvml_index"), name=as_str(g.get("name")),
                                 memory_total_bytes=as_number(g.get("memory_total_bytes")),
                                 memory_bus_width_bits=as_number(g.get("memory_bus_width_bits")))
                       for g in gpu.get("devices") or [] if isinstance(g, dict)),
            measured_at_utc=as_str(d.get("measured_at_utc")), probe_duration_s=as_number(d.get("probe_duration_s")) or 0,
            quick=bool(d.get("quick")), pipeprof=as_str(d.get("pipeprof")),
            cache_reused=bool(cache.get("reused")), cache_age_s=as_number(cache.get("age_s")),
            cache_path=as_str(cache.get("path")), cache_reason=as_str(cache.get("reason")))
