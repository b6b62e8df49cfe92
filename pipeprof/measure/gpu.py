"""GPU metrics from NVML (package nvidia-ml-py, module ``pynvml``), absent-safe.

A machine without NVML, without a GPU, or training on the CPU is normal: the
functions here then return ``Absent(reason)`` instead of raising, and a metric
the GPU or driver does not support reads as NaN with the reason recorded once
in ``GpuMonitor.absences``. Only NVML's own errors (``NVMLError``) and the
import/load errors are caught; anything else is a bug and propagates.

The ``nvml`` argument is the ``pynvml`` module or a stand-in with the same
names, so tests run without a GPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

NAN = float("nan")
_BYTES_PER_KIB = 1024  # nvmlDeviceGetPcieThroughput reports KB/s, meaning KiB/s
_W_PER_MW = 1e-3  # nvmlDeviceGetPowerUsage and the power limits are in milliwatts
PROC_UTIL = "gpu_proc_util_pct"  # the absences' names for the per-process readings
PROC_MEM = "gpu_proc_mem_bytes"
# The running-process queries, newest struct first; pynvml has the names its version knows.
_COMPUTE_PROCS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                  "nvmlDeviceGetComputeRunningProcesses")
_GRAPHICS_PROCS = ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
                   "nvmlDeviceGetGraphicsRunningProcesses")

# Errors that mean "this GPU or driver will never answer this query": stop
# asking after the first one. Other NVMLErrors (e.g. a transient timeout) give
# NaN for that tick only.
_PERMANENT_ERRORS = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound")


@dataclass(frozen=True)
class Absent:
    """A capability that is not there, and why (one line, for run.json)."""

    reason: str


def _describe(e: BaseException) -> str:
    message = " ".join(str(e).split())
    return f"{type(e).__name__}: {message}" if message else type(e).__name__


def _text(value: Any) -> str:
    # Older nvidia-ml-py versions return bytes for strings.
    return value.decode() if isinstance(value, bytes) else str(value)


def _load(nvml: Any) -> Any:
    if nvml is not None:
        return nvml
    try:
        import pynvml
    except ImportError:
        return Absent("NVML not available: pynvml not installed")
    return pynvml


def _init(nvml: Any) -> Absent | None:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        # No driver / no library / no device: the usual case on CPU-only machines.
        return Absent(f"NVML not available: {_describe(e)}")
    except OSError as e:
        return Absent(f"NVML not available: {_describe(e)}")
    return None


def _open(nvml: Any) -> Any:
    """The initialized NVML module, or Absent with the reason."""
    nv = _load(nvml)
    if isinstance(nv, Absent):
        return nv
    failed = _init(nv)
    return nv if failed is None else failed


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:
        pass  # measurements are already taken; a failed shutdown loses nothing


def _no_samples(nvml: Any, e: BaseException) -> bool:
    """nvmlDeviceGetProcessUtilization found no sample newer than the timestamp (NVMLError_NotFound; pynvml
    raises NVMLError(NVML_SUCCESS) when the count is zero)."""
    not_found = getattr(nvml, "NVMLError_NotFound", None)
    return (not_found is not None and isinstance(e, not_found)) or getattr(e, "value", None) == 0


def _permanent_errors(nvml: Any) -> tuple[type[BaseException], ...]:
    return tuple(c for c in (getattr(nvml, n, None) for n in _PERMANENT_ERRORS) if c is not None)


def _query(nvml: Any, name: str, read: Callable[[], Any], absences: dict[str, str]) -> Any:
    """One info query: its value, or None with the reason put in ``absences``."""
    try:
        return read()
    except _permanent_errors(nvml) as e:
        absences.setdefault(name, f"not supported by this GPU/driver: {_describe(e)}")
    except nvml.NVMLError as e:
        absences.setdefault(name, f"NVML error: {_describe(e)}")
    return None


def _device_info(nvml: Any, handle: Any, absences: dict[str, str]) -> dict[str, Any]:
    """Static facts about one GPU; unsupported fields are None (JSON-safe), reason in ``absences``."""
    nv, h = nvml, handle

    def q(name: str, read: Callable[[], Any]) -> Any:
        return _query(nv, name, read, absences)

    name = q("name", lambda: _text(nv.nvmlDeviceGetName(h)))
    uuid = q("uuid", lambda: _text(nv.nvmlDeviceGetUUID(h)))
    driver = q("driver_version", lambda: _text(nv.nvmlSystemGetDriverVersion()))
    return {
        "name": name,
        "uuid": uuid,
        "driver_version": driver,
        "memory_total_bytes": q("memory_total_bytes", lambda: int(nv.nvmlDeviceGetMemoryInfo(h).total)),
        "memory_bus_width_bits": q("memory_bus_width_bits", lambda: int(nv.nvmlDeviceGetMemoryBusWidth(h))),
        # The current link often downshifts while the GPU idles (power saving),
        # so the max values say what the slot can do and the current ones what it did.
        "pcie_link_gen": q("pcie_link_gen", lambda: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(h))),
        "pcie_link_width": q("pcie_link_width", lambda: int(nv.nvmlDeviceGetCurrPcieLinkWidth(h))),
        "pcie_link_max_gen": q("pcie_link_max_gen", lambda: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h))),
        "pcie_link_max_width": q("pcie_link_max_width", lambda: int(nv.nvmlDeviceGetMaxPcieLinkWidth(h))),
        "sm_clock_max_mhz": q("sm_clock_max_mhz", lambda: int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))),
        "power_limit_w": q("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) * _W_PER_MW),
    }


@dataclass(frozen=True)
class ProcessGpu:
    """One tick's per-process reading: pid -> SM utilization (%) and device memory (bytes).

    A mapping is None when there was no reading this tick (NaN for every
    process); a pid it does not list used no SM time in the sample period, or
    holds no device memory (0: NVML lists every process with a context on the GPU).
    """

    util_pct: dict[int, float] | None = None
    mem_bytes: dict[int, float] | None = None

    def util_of(self, pid: int) -> float:
        return NAN if self.util_pct is None else self.util_pct.get(pid, 0.0)

    def mem_of(self, pid: int) -> float:
        return NAN if self.mem_bytes is None else self.mem_bytes.get(pid, 0.0)


class GpuMonitor:
    """Samples one GPU through NVML. Made by ``open_gpu``; call ``close()`` when done.

    ``absences`` maps a metric or info field name to why it is missing; each
    reason is recorded once, at the first failure.
    """

    def __init__(self, nvml: Any, handle: Any, *, nvml_index: int | None = None) -> None:
        self._nvml = nvml
        self._handle = handle
        self.nvml_index = nvml_index
        self.absences: dict[str, str] = {}
        self._unsupported: set[str] = set()
        self._permanent = _permanent_errors(nvml)
        self._closed = False
        self._last_seen_us = 0  # nvmlDeviceGetProcessUtilization returns the samples newer than this (CPU us)
        self._util_seen = False  # a per-process utilization sample has been read in this run
        self._proc_queries: list[str] | None = None  # the running-process functions this pynvml/driver answers

    def sample(self) -> dict[str, float]:
        """One reading, keys GPU_SAMPLE_COLUMNS.

        ``gpu_util_pct``: % of the last sample period (driver-defined, 1/6 s to
        1 s) during which a kernel ran. ``gpu_mem_used_bytes``: device memory in
        use by all processes. ``pcie_*_bytes_per_s``: bytes/s over a 20 ms
        window NVML measures inside the call, so each of the two PCIe queries
        blocks the calling thread ~20 ms (ctypes releases the GIL meanwhile).
        ``gpu_sm_clock_mhz``: the SM clock now (it drops when the GPU idles or
        throttles). ``gpu_power_w``: board power draw, W.
        """
        nv, h = self._nvml, self._handle
        return {
            "gpu_util_pct": self._metric("gpu_util_pct", lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
            "gpu_mem_used_bytes": self._metric("gpu_mem_used_bytes", lambda: int(nv.nvmlDeviceGetMemoryInfo(h).used)),
            "pcie_rx_bytes_per_s": self._metric(
                "pcie_rx_bytes_per_s",
                lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES) * _BYTES_PER_KIB,
            ),
            "pcie_tx_bytes_per_s": self._metric(
                "pcie_tx_bytes_per_s",
                lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES) * _BYTES_PER_KIB,
            ),
            "gpu_sm_clock_mhz": self._metric(
                "gpu_sm_clock_mhz", lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
            "gpu_power_w": self._metric("gpu_power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) * _W_PER_MW),
        }

    def process_sample(self) -> ProcessGpu:
        """Per-process SM utilization and device memory now (``ProcessGpu``).

        Utilization comes from NVML's per-process sample buffer
        (nvmlDeviceGetProcessUtilization): each call returns the samples newer
        than the last one seen, averaged here per pid. An empty buffer
        (NVMLError_NotFound: nothing ran since) is no reading this tick, not a
        missing capability. Memory is usedGpuMemory of the compute and graphics
        processes (the larger where a pid is both).
        """
        return ProcessGpu(util_pct=self._process_util(), mem_bytes=self._process_mem())

    def _process_util(self) -> dict[int, float] | None:
        if PROC_UTIL in self._unsupported:
            return None
        nv = self._nvml
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(self._handle, self._last_seen_us)
        except self._permanent as e:
            self._unsupported.add(PROC_UTIL)
            self.absences[PROC_UTIL] = f"not supported by this GPU/driver: {_describe(e)}"
            return None
        except nv.NVMLError as e:
            if _no_samples(nv, e):
                if not self._util_seen:  # until a first sample comes, say why there is none
                    self.absences.setdefault(PROC_UTIL, "NVML held no per-process utilization sample "
                                                        f"({_describe(e)}): no kernel ran while sampled")
            else:
                self.absences.setdefault(PROC_UTIL, f"NVML error: {_describe(e)}")
            return None
        sums: dict[int, list[float]] = {}
        for sample in samples:
            self._last_seen_us = max(self._last_seen_us, int(sample.timeStamp))
            if 0 <= sample.smUtil <= 100:  # some drivers fill unused entries with 0xFFFFFFFF
                sums.setdefault(int(sample.pid), []).append(float(sample.smUtil))
        if not self._util_seen:
            self._util_seen = True
            if self.absences.get(PROC_UTIL, "").startswith("NVML held no"):
                del self.absences[PROC_UTIL]
        return {pid: sum(v) / len(v) for pid, v in sums.items()}

    def _process_mem(self) -> dict[int, float] | None:
        nv = self._nvml
        if self._proc_queries is None:
            found = [next((n for n in names if hasattr(nv, n)), None) for names in (_COMPUTE_PROCS, _GRAPHICS_PROCS)]
            self._proc_queries = [n for n in found if n is not None]
            if not self._proc_queries:
                self.absences[PROC_MEM] = "this pynvml has no nvmlDeviceGet*RunningProcesses"
        mem: dict[int, float] = {}
        answered = False
        for name in list(self._proc_queries):
            try:
                procs = getattr(nv, name)(self._handle)
            except self._permanent as e:
                self._proc_queries.remove(name)
                if not self._proc_queries:
                    self.absences.setdefault(PROC_MEM, f"not supported by this GPU/driver: {_describe(e)}")
                continue
            except nv.NVMLError as e:
                self.absences.setdefault(PROC_MEM, f"NVML error: {_describe(e)}")
                continue
            answered = True
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                if used is None:  # NVML_VALUE_NOT_AVAILABLE: e.g. Windows WDDM, or MIG without rights
                    self.absences.setdefault(PROC_MEM, "NVML gives no per-process memory here "
                                                       "(usedGpuMemory not available)")
                    return None
                mem[int(p.pid)] = max(mem.get(int(p.pid), 0.0), float(used))
        return mem if answered else None

    def _metric(self, name: str, read: Callable[[], Any]) -> float:
        if name in self._unsupported:
            return NAN  # asking again costs a driver call and can only fail again
        try:
            return read()
        except self._permanent as e:
            self._unsupported.add(name)
            self.absences.setdefault(name, f"not supported by this GPU/driver: {_describe(e)}")
        except self._nvml.NVMLError as e:
            # Possibly transient: NaN for this tick, keep asking; keep the first reason.
            self.absences.setdefault(name, f"NVML error: {_describe(e)}")
        return NAN

    def info(self) -> dict[str, Any]:
        """Static facts: name, uuid, driver_version, memory_total_bytes,
        memory_bus_width_bits, pcie_link_gen/width (current), pcie_link_max_gen/width,
        sm_clock_max_mhz, power_limit_w (the enforced limit, W), nvml_index.
        Unsupported fields are None, with the reason in ``absences``."""
        return {"nvml_index": self.nvml_index, **_device_info(self._nvml, self._handle, self.absences)}

    def close(self) -> None:
        """Release NVML (nvmlShutdown). Safe to call twice."""
        if not self._closed:
            self._closed = True
            _shutdown(self._nvml)

    def __enter__(self) -> GpuMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _resolve(nvml: Any, device_index: int, env: Mapping[str, str]) -> tuple[Any, int | None] | Absent:
    """Map a CUDA device index to an NVML handle.

    CUDA numbers only the devices in CUDA_VISIBLE_DEVICES, NVML numbers all of
    them, so with CUDA_VISIBLE_DEVICES=3 CUDA's device 0 is NVML's device 3;
    sampling NVML device 0 would silently measure the wrong GPU. (Without
    CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA may also order unlike GPUs differently
    from NVML; the monitor's info() records which GPU was sampled.)
    """
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        index = device_index
    else:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if device_index >= len(entries):
            return Absent(f"no GPU {device_index}: CUDA_VISIBLE_DEVICES={visible!r} lists {len(entries)}")
        entry = entries[device_index]
        if entry.startswith(("GPU-", "MIG-")):
            return nvml.nvmlDeviceGetHandleByUUID(entry), None
        if not entry.isdigit():
            return Absent(f"cannot map CUDA device {device_index} to NVML: CUDA_VISIBLE_DEVICES entry {entry!r}")
        index = int(entry)
    count = nvml.nvmlDeviceGetCount()
    if index >= count:
        return Absent(f"no GPU {index}: NVML sees {count} device(s)")
    return nvml.nvmlDeviceGetHandleByIndex(index), index


def open_gpu(device_index: int | None, nvml: Any = None, *, env: Mapping[str, str] | None = None) -> GpuMonitor | Absent:
    """A monitor for CUDA device ``device_index``, or Absent(reason).

    ``device_index`` None means training runs on the CPU. ``env`` (default
    ``os.environ``) is read for CUDA_VISIBLE_DEVICES to find the NVML device.
    """
    if device_index is None:
        return Absent("no GPU in use: training device is cpu")
    if device_index < 0:
        raise ValueError(f"device_index must be >= 0, got {device_index}")
    nv = _open(nvml)
    if isinstance(nv, Absent):
        return nv
    try:
        resolved = _resolve(nv, device_index, os.environ if env is None else env)
    except nv.NVMLError as e:
        resolved = Absent(f"NVML cannot open GPU {device_index}: {_describe(e)}")
    if isinstance(resolved, Absent):
        _shutdown(nv)
        return resolved
    handle, nvml_index = resolved
    return GpuMonitor(nv, handle, nvml_index=nvml_index)


def gpu_inventory(nvml: Any = None) -> list[dict[str, Any]] | Absent:
    """Info for every GPU NVML sees (for the run's environment record, even on CPU runs).

    Each dict is ``GpuMonitor.info()``'s shape with ``nvml_index``, plus
    ``absences`` when some field was unsupported. An empty list means NVML
    works and sees no GPU.
    """
    nv = _open(nvml)
    if isinstance(nv, Absent):
        return nv
    try:
        devices = []
        for i in range(nv.nvmlDeviceGetCount()):
            absences: dict[str, str] = {}
            device = {"nvml_index": i, **_device_info(nv, nv.nvmlDeviceGetHandleByIndex(i), absences)}
            if absences:
                device["absences"] = absences
            devices.append(device)
    except nv.NVMLError as e:
        return Absent(f"NVML device query failed: {_describe(e)}")
    finally:
        _shutdown(nv)
    return devices
