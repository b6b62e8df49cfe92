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
    }


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

    def sample(self) -> dict[str, float]:
        """One reading, keys GPU_SAMPLE_COLUMNS.

        ``gpu_util_pct``: % of the last sample period (driver-defined, 1/6 s to
        1 s) during which a kernel ran. ``gpu_mem_used_bytes``: device memory in
        use by all processes. ``pcie_*_bytes_per_s``: bytes/s over a 20 ms
        window NVML measures inside the call, so each of the two PCIe queries
        blocks the calling thread ~20 ms (ctypes releases the GIL meanwhile).
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
        }

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
        nvml_index. Unsupported fields are None, with the reason in ``absences``."""
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
