"""Calling NVML: loading and initialising it, describing its errors, and one GPU's static facts.

The ``nvml`` argument is the ``pynvml`` module or a stand-in with the same names (tests' fake NVML).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

W_PER_MW = 1e-3  # NVML gives power and power limits in milliwatts
# Errors that mean "this GPU or driver will never answer this query": stop
# asking after the first one. Other NVMLErrors (e.g. a transient timeout) give
# NaN for that tick only, are counted, and make the metric absent only when it never answered.
_PERMANENT_ERRORS = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound")

@dataclass(frozen=True)
class Absent:
    """A capability that is not there, and why (one line, for run.json)."""

    reason: str


def describe(e: BaseException) -> str:
    message = " ".join(str(e).split())
    return f"{type(e).__name__}: {message}" if message else type(e).__name__


def _text(value: Any) -> str:
    # Older nvidia-ml-py versions return bytes for strings.
    return value.decode() if isinstance(value, bytes) else str(value)


def load_nvml(nvml: Any) -> Any:
    if nvml is not None:
        return nvml
    try:
        import pynvml
    except ImportError:
        return Absent("NVML not available: pynvml not installed")
    return pynvml


def init_nvml(nvml: Any) -> Absent | None:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        # No driver / no library / no device: the usual case on CPU-only machines.
        return Absent(f"NVML not available: {describe(e)}")
    except OSError as e:
        return Absent(f"NVML not available: {describe(e)}")
    return None


def open_nvml(nvml: Any) -> Any:
    """The initialized NVML module, or Absent with the reason."""
    nv = load_nvml(nvml)
    if isinstance(nv, Absent):
        return nv
    failed = init_nvml(nv)
    return nv if failed is None else failed


def shutdown_nvml(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:
        pass  # measurements are already taken; a failed shutdown loses nothing


def no_samples(nvml: Any, e: BaseException) -> bool:
    """nvmlDeviceGetProcessUtilization found no sample newer than the timestamp (NVMLError_NotFound; pynvml
    raises NVMLError(NVML_SUCCESS) when the count is zero)."""
    not_found = getattr(nvml, "NVMLError_NotFound", None)
    return (not_found is not None and isinstance(e, not_found)) or getattr(e, "value", None) == 0


def permanent_errors(nvml: Any) -> tuple[type[BaseException], ...]:
    return tuple(c for c in (getattr(nvml, n, None) for n in _PERMANENT_ERRORS) if c is not None)


def query_info(nvml: Any, name: str, read: Callable[[], Any], absences: dict[str, str]) -> Any:
    """One info query: its value, or None with the reason put in ``absences``."""
    try:
        return read()
    except permanent_errors(nvml) as e:
        absences.setdefault(name, f"not supported by this GPU/driver: {describe(e)}")
    except nvml.NVMLError as e:
        absences.setdefault(name, f"NVML error: {describe(e)}")
    return None


def device_info(nvml: Any, handle: Any, absences: dict[str, str]) -> dict[str, Any]:
    """Static facts about one GPU; unsupported fields are None (JSON-safe), reason in ``absences``."""
    nv, h = nvml, handle

    def q(name: str, read: Callable[[], Any]) -> Any:
        return query_info(nv, name, read, absences)

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
        "power_limit_w": q("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) * W_PER_MW),
    }
