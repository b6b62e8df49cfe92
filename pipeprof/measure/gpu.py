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
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from pipeprof.measure.nvml_calls import (
    W_PER_MW,
    Absent,
    describe,
    device_info,
    init_nvml,
    no_samples,
    open_nvml,
    permanent_errors,
    shutdown_nvml,
)
from pipeprof.measure.nvml_devices import Unresolved, VisibleGpu, describe_visible, gpu_by_uuid, visible_gpus

NAN = float("nan")
_BYTES_PER_KIB = 1024  # nvmlDeviceGetPcieThroughput reports KB/s, meaning KiB/s
PROC_UTIL = "gpu_proc_util_pct"  # the absences' names for the per-process readings
PROC_MEM = "gpu_proc_mem_bytes"
# The running-process queries, newest struct first; pynvml has the names its version knows.
_COMPUTE_PROCS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                  "nvmlDeviceGetComputeRunningProcesses")
_GRAPHICS_PROCS = ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
                   "nvmlDeviceGetGraphicsRunningProcesses")

# A list query whose pynvml wrapper sized its buffer a moment before more processes appeared fails with
# InsufficientSize; asked again at once it answers. These many tries in one tick, then it counts as an error.
_LIST_TRIES = 3


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

    ``absences`` maps a metric or info field name to why it is missing: not
    supported (recorded at the first failure, never asked again), or an NVML
    error on every reading so far. A metric that answered at least once is
    present; its failed readings are NaN and counted in ``errors``.
    """

    def __init__(self, nvml: Any, handle: Any, *, nvml_index: int | None = None,
                 cuda_index: int | None = None, uuid: str | None = None) -> None:
        self._nvml = nvml
        self._handle = handle
        self.nvml_index = nvml_index
        self.cuda_index = cuda_index  # its N in cuda:N in the profiled process
        self.uuid = uuid
        self.errors: dict[str, int] = {}  # metric -> readings lost to an NVML error
        self._unsupported: dict[str, str] = {}  # metric -> why it is never asked again
        self._failing: dict[str, str] = {}  # metric -> its first error, while it has never answered
        self._notes: dict[str, str] = {}  # per-process readings: why there is none
        self._answered: set[str] = set()
        self._permanent = permanent_errors(nvml)
        self._insufficient = getattr(nvml, "NVMLError_InsufficientSize", None)
        # pynvml's unversioned process queries raise this (not an NVMLError) where the driver lacks the function
        self._mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        self._closed = False
        self._last_seen_us = 0  # nvmlDeviceGetProcessUtilization returns the samples newer than this (CPU us)
        self._util_seen = False  # a per-process utilization sample has been read in this run
        # The running-process functions still to try, newest struct first, per list (compute, graphics).
        self._proc_chains: list[list[str]] | None = None
        self.memory_info_version: int | None = None  # 2: used excludes the driver's reservation; 1: includes it
        self._memory_v1_reason: str | None = None

    @property
    def absences(self) -> dict[str, str]:
        merged = {**self._notes, **self._unsupported}
        for name, reason in self._failing.items():
            n = self.errors.get(name, 0)
            merged.setdefault(name, f"NVML error on every reading ({n}): {reason}")
        return merged

    def _failed(self, name: str, e: BaseException) -> None:
        self.errors[name] = self.errors.get(name, 0) + 1
        if name not in self._answered:
            self._failing.setdefault(name, describe(e))

    def _ok(self, name: str) -> None:
        self._answered.add(name)
        self._failing.pop(name, None)

    def sample(self, *, pcie: bool = True) -> dict[str, float]:
        """One reading, keys GPU_SAMPLE_COLUMNS (``pcie`` False: the PCIe ones NaN, not read).

        ``gpu_util_pct``: % of the last sample period (driver-defined, 1/6 s to
        1 s) during which a kernel ran. ``gpu_mem_used_bytes``: device memory in
        use by all processes (``nvmlDeviceGetMemoryInfo`` v2 where the driver has
        it: v1's used also counts the driver's reservation). ``pcie_*_bytes_per_s``:
        bytes/s over a 20 ms window NVML measures inside the call, so each of the
        two PCIe queries blocks the calling thread ~20 ms (ctypes releases the GIL
        meanwhile). ``gpu_sm_clock_mhz``: the SM clock now (it drops when the GPU
        idles or throttles). ``gpu_power_w``: board power draw, W.
        """
        nv, h = self._nvml, self._handle
        return {
            "gpu_util_pct": self._metric("gpu_util_pct", lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
            "gpu_mem_used_bytes": self._metric("gpu_mem_used_bytes", self._memory_used),
            "pcie_rx_bytes_per_s": self._metric(
                "pcie_rx_bytes_per_s",
                lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES) * _BYTES_PER_KIB,
            ) if pcie else NAN,
            "pcie_tx_bytes_per_s": self._metric(
                "pcie_tx_bytes_per_s",
                lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES) * _BYTES_PER_KIB,
            ) if pcie else NAN,
            "gpu_sm_clock_mhz": self._metric(
                "gpu_sm_clock_mhz", lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
            "gpu_power_w": self._metric("gpu_power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) * W_PER_MW),
        }

    def _memory_used(self) -> int:
        nv, h = self._nvml, self._handle
        version = getattr(nv, "nvmlMemory_v2", None)
        if self.memory_info_version != 1:
            if version is None:
                self._memory_v1_reason = "this pynvml has no nvmlMemory_v2"
            else:
                try:
                    used = int(nv.nvmlDeviceGetMemoryInfo(h, version=version).used)
                except self._permanent as e:  # the driver has no nvmlDeviceGetMemoryInfo_v2
                    self._memory_v1_reason = f"no v2 memory info here: {describe(e)}"
                else:
                    self.memory_info_version = 2
                    return used
            self.memory_info_version = 1
        return int(nv.nvmlDeviceGetMemoryInfo(h).used)

    def process_sample(self, tree_pids: Collection[int] = ()) -> ProcessGpu:
        """Per-process SM utilization and device memory now (``ProcessGpu``).

        Utilization comes from NVML's per-process sample buffer
        (nvmlDeviceGetProcessUtilization): each call returns the samples newer
        than the last one seen, averaged here per pid. An empty buffer
        (NVMLError_NotFound, or pynvml's NVMLError(NVML_SUCCESS): nothing ran
        since) is no reading this tick, not a missing capability. Memory is
        usedGpuMemory of the compute and graphics processes (the larger where a
        pid is both). The pids are NVML's: the host's PID namespace. ``tree_pids``
        (the profiled tree's) matter only to a set of GPUs (``gpu_set``).
        """
        return ProcessGpu(util_pct=self._process_util(), mem_bytes=self._process_mem())

    def _listed(self, read: Callable[[], Any]) -> Any:
        """A list query, asked again at once when it raced to InsufficientSize."""
        for attempt in range(_LIST_TRIES):
            try:
                return read()
            except self._nvml.NVMLError as e:
                if self._insufficient is None or not isinstance(e, self._insufficient) or attempt + 1 == _LIST_TRIES:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _process_util(self) -> dict[int, float] | None:
        if PROC_UTIL in self._unsupported:
            return None
        nv = self._nvml
        try:
            samples = self._listed(lambda: nv.nvmlDeviceGetProcessUtilization(self._handle, self._last_seen_us))
        except self._permanent as e:
            self._unsupported[PROC_UTIL] = f"not supported by this GPU/driver: {describe(e)}"
            return None
        except nv.NVMLError as e:
            if no_samples(nv, e):
                if not self._util_seen:  # until a first sample comes, say why there is none
                    self._notes.setdefault(PROC_UTIL, "NVML held no per-process utilization sample "
                                                      f"({describe(e)}): no kernel ran while sampled")
            else:
                self._failed(PROC_UTIL, e)
            return None
        self._ok(PROC_UTIL)
        sums: dict[int, list[float]] = {}
        for sample in samples:
            self._last_seen_us = max(self._last_seen_us, int(sample.timeStamp))
            if 0 <= sample.smUtil <= 100:  # some drivers fill unused entries with 0xFFFFFFFF
                sums.setdefault(int(sample.pid), []).append(float(sample.smUtil))
        if not self._util_seen:
            self._util_seen = True
            self._notes.pop(PROC_UTIL, None)
        return {pid: sum(v) / len(v) for pid, v in sums.items()}

    def _process_mem(self) -> dict[int, float] | None:
        nv = self._nvml
        if self._proc_chains is None:
            self._proc_chains = [[n for n in names if hasattr(nv, n)] for names in (_COMPUTE_PROCS, _GRAPHICS_PROCS)]
            if not any(self._proc_chains):
                self._unsupported[PROC_MEM] = "this pynvml has no nvmlDeviceGet*RunningProcesses"
        if PROC_MEM in self._unsupported:
            return None
        mem: dict[int, float] = {}
        answered = lost = False
        for chain in self._proc_chains:
            if not chain:
                continue
            procs = self._running(chain)
            if procs is None:
                lost |= bool(chain)  # an error this tick, not an unsupported list: the reading is incomplete
                continue
            answered = True
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                if used is None:  # NVML_VALUE_NOT_AVAILABLE: e.g. Windows WDDM, or MIG without rights
                    self._notes.setdefault(PROC_MEM, "NVML gives no per-process memory here "
                                                     "(usedGpuMemory not available)")
                    return None
                mem[int(p.pid)] = max(mem.get(int(p.pid), 0.0), float(used))
        if not any(self._proc_chains):
            self._unsupported.setdefault(PROC_MEM, "not supported by this GPU/driver: "
                                                   + self._failing.pop(PROC_MEM, "no running-process query"))
            return None
        if lost or not answered:
            return None
        self._ok(PROC_MEM)
        return mem

    def _running(self, chain: list[str]) -> list[Any] | None:
        """One running-process list: the newest query this driver has (``_v3``, then ``_v2``, then the
        unversioned one), or None (an error this tick, or the list is unsupported)."""
        nv = self._nvml
        while chain:
            query = getattr(nv, chain[0])
            try:
                return list(self._listed(lambda: query(self._handle)))  # noqa: B023 - called at once
            except self._permanent as e:
                function_not_found = getattr(nv, "NVMLError_FunctionNotFound", None)
                if function_not_found is not None and isinstance(e, function_not_found):
                    chain.pop(0)  # an older driver: its older struct
                else:
                    chain.clear()  # NotSupported: no version of the query answers on this GPU
                if PROC_MEM not in self._answered:
                    self._failing.setdefault(PROC_MEM, describe(e))
            except nv.NVMLError as e:
                self._failed(PROC_MEM, e)
                return None
            except Exception as e:
                if self._mismatch is None or not isinstance(e, self._mismatch):
                    raise
                chain.pop(0)  # pynvml's NVMLLibraryMismatchError: the unversioned name's function is missing
                if PROC_MEM not in self._answered:
                    self._failing.setdefault(PROC_MEM, describe(e))
        return None

    def _metric(self, name: str, read: Callable[[], Any]) -> float:
        if name in self._unsupported:
            return NAN  # asking again costs a driver call and can only fail again
        try:
            value = read()
        except self._permanent as e:
            self._unsupported[name] = f"not supported by this GPU/driver: {describe(e)}"
            self._failing.pop(name, None)
        except self._nvml.NVMLError as e:
            self._failed(name, e)  # possibly transient: NaN for this tick, keep asking
        else:
            self._ok(name)
            return value
        return NAN

    def info(self) -> dict[str, Any]:
        """Static facts: name, uuid, driver_version, memory_total_bytes,
        memory_bus_width_bits, pcie_link_gen/width (current), pcie_link_max_gen/width,
        sm_clock_max_mhz, power_limit_w (the enforced limit, W), nvml_index, cuda_index
        (its N in cuda:N), memory_info_version (which nvmlDeviceGetMemoryInfo gave
        gpu_mem_used_bytes, with memory_info_v1_reason when 1), nvml_errors (readings
        lost to NVML errors, per metric, when any). Unsupported fields are None, with
        the reason in ``absences``."""
        facts: dict[str, Any] = {"nvml_index": self.nvml_index, "cuda_index": self.cuda_index,
                                 **device_info(self._nvml, self._handle, self._unsupported),
                                 "memory_info_version": self.memory_info_version}
        if self._memory_v1_reason is not None and self.memory_info_version == 1:
            facts["memory_info_v1_reason"] = self._memory_v1_reason
        if self.errors:
            facts["nvml_errors"] = dict(sorted(self.errors.items()))
        return facts

    def close(self) -> None:
        """Release NVML (nvmlShutdown). Safe to call twice."""
        if not self._closed:
            self._closed = True
            shutdown_nvml(self._nvml)

    def __enter__(self) -> GpuMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _monitor(nvml: Any, gpu: VisibleGpu) -> GpuMonitor:
    return GpuMonitor(nvml, gpu.handle, nvml_index=gpu.nvml_index, cuda_index=gpu.cuda_index, uuid=gpu.uuid)


def open_gpu(device_index: int | None, nvml: Any = None, *, env: Mapping[str, str] | None = None,
             uuid: str | None = None) -> GpuMonitor | Absent:
    """A monitor for CUDA device ``device_index`` (its N in ``cuda:N``), or Absent(reason).

    ``device_index`` None means training runs on the CPU. The GPU is found by
    identity: ``uuid`` (torch's ``get_device_properties(N).uuid``, where the
    caller has it), else ``env`` (default ``os.environ``) resolved as CUDA does
    (``nvml_devices``), then matched by NVML UUID.
    """
    if device_index is None:
        return Absent("no GPU in use: training device is cpu")
    if device_index < 0:
        raise ValueError(f"device_index must be >= 0, got {device_index}")
    nv = open_nvml(nvml)
    if isinstance(nv, Absent):
        return nv
    environ = os.environ if env is None else env
    try:
        gpus = visible_gpus(nv, environ) if uuid is None else gpu_by_uuid(nv, uuid, device_index)
    except nv.NVMLError as e:
        gpus = Unresolved(f"NVML cannot open GPU {device_index}: {describe(e)}")
    found = _pick(gpus, device_index, uuid, environ)
    if isinstance(found, Absent):
        shutdown_nvml(nv)
        return found
    return _monitor(nv, found)


def _pick(gpus: list[VisibleGpu] | Unresolved, device_index: int, uuid: str | None,
          env: Mapping[str, str]) -> VisibleGpu | Absent:
    if isinstance(gpus, Unresolved):
        return Absent(gpus.reason)
    if uuid is not None:
        if not gpus:
            return Absent(f"no GPU NVML sees has the training device's UUID {uuid}")
        return gpus[0]
    if device_index >= len(gpus):
        return Absent(f"no GPU {device_index}: {len(gpus)} visible ({describe_visible(env)})")
    return gpus[device_index]


def open_visible_gpus(nvml: Any = None, *, env: Mapping[str, str] | None = None) -> list[GpuMonitor] | Absent:
    """A monitor for every GPU a process with ``env`` sees, in CUDA's order (``cuda_index``), or Absent(reason).
    Each monitor holds one NVML reference: close them all."""
    nv = open_nvml(nvml)
    if isinstance(nv, Absent):
        return nv
    environ = os.environ if env is None else env
    try:
        gpus = visible_gpus(nv, environ)
    except nv.NVMLError as e:
        gpus = Unresolved(f"NVML cannot list the GPUs: {describe(e)}")
    if isinstance(gpus, Unresolved) or not gpus:
        shutdown_nvml(nv)
        return Absent(gpus.reason if isinstance(gpus, Unresolved) else f"no GPU visible ({describe_visible(environ)})")
    monitors = [_monitor(nv, gpus[0])]
    for gpu in gpus[1:]:
        failed = init_nvml(nv)  # NVML counts its inits: one per monitor, each released by its close()
        if failed is not None:
            break
        monitors.append(_monitor(nv, gpu))
    return monitors


def gpu_inventory(nvml: Any = None) -> list[dict[str, Any]] | Absent:
    """Info for every GPU NVML sees (for the run's environment record, even on CPU runs).

    Each dict is ``GpuMonitor.info()``'s shape with ``nvml_index``, plus
    ``absences`` when some field was unsupported. An empty list means NVML
    works and sees no GPU.
    """
    nv = open_nvml(nvml)
    if isinstance(nv, Absent):
        return nv
    try:
        devices = []
        for i in range(nv.nvmlDeviceGetCount()):
            absences: dict[str, str] = {}
            device = {"nvml_index": i, **device_info(nv, nv.nvmlDeviceGetHandleByIndex(i), absences)}
            if absences:
                device["absences"] = absences
            devices.append(device)
    except nv.NVMLError as e:
        return Absent(f"NVML device query failed: {describe(e)}")
    finally:
        shutdown_nvml(nv)
    return devices
