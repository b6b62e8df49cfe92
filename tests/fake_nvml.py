"""A fake NVML that behaves like the real ``pynvml`` (nvidia-ml-py), for tests without a GPU.

It raises the real module's error classes (``pynvml.NVMLError(code)`` maps a code to its subclass, as the real
wrappers' ``_nvmlCheckReturn`` does), and copies the behaviours of the real wrappers that pipeprof must survive:

- devices numbered in PCI order, each with a UUID (``GPU-…``; MIG devices ``MIG-…`` opened by UUID only);
- pids as NVML gives them: the host's PID namespace (``host_pid`` maps a process's own pid to the host's);
- ``nvmlDeviceGetProcessUtilization`` with no sample newer than the timestamp: ``NVMLError(NVML_SUCCESS)`` (the
  wrapper's first call returns a count of 0), or ``NVMLError_NotFound`` (``empty_util_code``);
- a function the driver lacks (``missing``): ``NVMLError_FunctionNotFound`` from its versioned name, and
  ``NVMLLibraryMismatchError`` from the unversioned ``nvmlDeviceGetComputeRunningProcesses``, as pynvml's
  ``throwOnVersionMismatch`` does;
- ``nvmlDeviceGetMemoryInfo(handle, version=nvmlMemory_v2)``: v2's ``used`` excludes the driver's reservation,
  v1's includes it;
- a scheduled failure per function (``fail``): a code raised on every call, or a list of codes (None: answer),
  one per call — e.g. a transient ``NVML_ERROR_TIMEOUT`` or an ``NVML_ERROR_INSUFFICIENT_SIZE`` race.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

NVMLError = pynvml.NVMLError
GiB = 2**30


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    total_bytes: int = 80 * GiB
    used_bytes: int = 3 * GiB  # by processes (v2's used)
    reserved_bytes: int = 512 * 2**20  # the driver's own (v1 counts it in used)
    util_pct: int = 42
    # (host pid, usedGpuMemory) of the compute and graphics processes
    compute: list[tuple[int, int | None]] = field(default_factory=list)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    # NVML's per-process sample buffer: (host pid, CPU timestamp us, smUtil)
    util_buffer: list[tuple[int, int, int]] = field(default_factory=list)
    mig: bool = False


def gpus(count: int, name: str = "NVIDIA H100 80GB HBM3") -> list[FakeGpu]:
    return [FakeGpu(uuid=f"GPU-{i:08x}-1111-2222-3333-44445555{i:04x}", name=name) for i in range(count)]


class FakeNvml:
    """The pynvml names pipeprof uses, over ``devices`` (default: one H100)."""

    NVMLError = pynvml.NVMLError
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    NVML_PCIE_UTIL_TX_BYTES = pynvml.NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = pynvml.NVML_PCIE_UTIL_RX_BYTES
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM

    def __init__(self, devices: list[FakeGpu] | None = None, *, fail: dict[str, Any] | None = None,
                 missing: tuple[str, ...] = (), empty_util_code: int = pynvml.NVML_SUCCESS,
                 driver: str = "550.54.15") -> None:
        self.devices = gpus(1) if devices is None else devices
        self.fail = dict(fail or {})
        self.missing = set(missing)
        self.empty_util_code = empty_util_code
        self.driver = driver
        self.calls: dict[str, int] = {}
        self.live_inits = 0  # nvmlInit is reference counted: each needs an nvmlShutdown
        self.util_asked: list[int] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVMLError_"):  # the real module's subclasses: NVMLError_NotFound, …
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _call(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.missing:
            raise NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        code = self.fail.get(name)
        if isinstance(code, list):
            code = code.pop(0) if code else None
        if code is not None:
            raise NVMLError(code)

    def _gpu(self, handle: Any) -> FakeGpu:
        assert isinstance(handle, tuple) and handle[0] == "handle", f"not a device handle: {handle!r}"
        return self.devices[handle[1]]

    def nvmlInit(self) -> None:
        self._call("nvmlInit")
        self.live_inits += 1

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")
        if self.live_inits == 0:
            raise NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        self.live_inits -= 1

    def _physical(self) -> list[int]:
        return [i for i, d in enumerate(self.devices) if not d.mig]

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self._physical())

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        self._call("nvmlDeviceGetHandleByIndex")
        physical = self._physical()
        if not 0 <= i < len(physical):
            raise NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return ("handle", physical[i])

    def nvmlDeviceGetHandleByUUID(self, uuid: Any) -> Any:
        self._call("nvmlDeviceGetHandleByUUID")
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for i, d in enumerate(self.devices):
            if d.uuid == text:
                return ("handle", i)
        raise NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        self._call("nvmlDeviceGetUUID")
        return self._gpu(h).uuid

    def nvmlDeviceGetName(self, h: Any) -> bytes:
        self._call("nvmlDeviceGetName")
        return self._gpu(h).name.encode()  # older nvidia-ml-py returns bytes

    def nvmlSystemGetDriverVersion(self) -> str:
        self._call("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> Any:
        gpu = self._gpu(h)
        if not version:
            self._call("nvmlDeviceGetMemoryInfo")
            used = gpu.used_bytes + gpu.reserved_bytes
            return SimpleNamespace(total=gpu.total_bytes, used=used, free=gpu.total_bytes - used)
        self._call("nvmlDeviceGetMemoryInfo_v2")
        free = gpu.total_bytes - gpu.used_bytes - gpu.reserved_bytes
        return SimpleNamespace(version=version, total=gpu.total_bytes, reserved=gpu.reserved_bytes,
                               used=gpu.used_bytes, free=free)

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        self._call("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=self._gpu(h).util_pct, memory=7)

    def nvmlDeviceGetPcieThroughput(self, h: Any, counter: int) -> int:
        self._call("nvmlDeviceGetPcieThroughput")
        return {self.NVML_PCIE_UTIL_RX_BYTES: 2000, self.NVML_PCIE_UTIL_TX_BYTES: 5}[counter]  # KB/s

    def nvmlDeviceGetMemoryBusWidth(self, h: Any) -> int:
        self._call("nvmlDeviceGetMemoryBusWidth")
        return 5120

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Any) -> int:
        self._call("nvmlDeviceGetCurrPcieLinkGeneration")
        return 1  # downshifted while idle

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Any) -> int:
        self._call("nvmlDeviceGetCurrPcieLinkWidth")
        return 16

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: Any) -> int:
        self._call("nvmlDeviceGetMaxPcieLinkGeneration")
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: Any) -> int:
        self._call("nvmlDeviceGetMaxPcieLinkWidth")
        return 16

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:
        self._call("nvmlDeviceGetClockInfo")
        assert clock == self.NVML_CLOCK_SM
        return 1755

    def nvmlDeviceGetMaxClockInfo(self, h: Any, clock: int) -> int:
        self._call("nvmlDeviceGetMaxClockInfo")
        assert clock == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        self._call("nvmlDeviceGetPowerUsage")
        return 312_500  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:
        self._call("nvmlDeviceGetEnforcedPowerLimit")
        return 700_000  # mW

    def nvmlDeviceGetProcessUtilization(self, h: Any, last_seen_us: int) -> list[Any]:
        self._call("nvmlDeviceGetProcessUtilization")
        self.util_asked.append(last_seen_us)
        newer = [SimpleNamespace(pid=p, timeStamp=t, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
                 for p, t, sm in self._gpu(h).util_buffer if t > last_seen_us]
        if not newer:
            raise NVMLError(self.empty_util_code)
        return newer

    def _procs(self, name: str, listed: list[tuple[int, int | None]]) -> list[Any]:
        self._call(name)
        return [SimpleNamespace(pid=p, usedGpuMemory=m, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
                for p, m in listed]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: Any) -> list[Any]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v3", self._gpu(h).compute)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: Any) -> list[Any]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v2", self._gpu(h).compute)

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        try:  # pynvml: the unversioned name calls _v3 under throwOnVersionMismatch
            return self.nvmlDeviceGetComputeRunningProcesses_v3(h)
        except pynvml.NVMLError_FunctionNotFound:
            raise pynvml.NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does "
                                                  "not match the NVML lib version.") from None

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, h: Any) -> list[Any]:
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses_v3", self._gpu(h).graphics)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, h: Any) -> list[Any]:
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses_v2", self._gpu(h).graphics)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Any) -> list[Any]:
        try:
            return self.nvmlDeviceGetGraphicsRunningProcesses_v3(h)
        except pynvml.NVMLError_FunctionNotFound:
            raise pynvml.NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does "
                                                  "not match the NVML lib version.") from None
