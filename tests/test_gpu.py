"""NVML access: absent-safe opening, units, unsupported metrics, device mapping; no GPU needed."""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import pytest

from pipeprof.measure.gpu import Absent, GpuMonitor, ProcessGpu, gpu_inventory, open_gpu
from pipeprof.run_folder import GPU_DEVICE_COLUMNS


class FakeNVMLError(Exception):
    def __init__(self, message="Unknown Error"):
        super().__init__(message)


class FakeNotSupported(FakeNVMLError):
    def __init__(self):
        super().__init__("Not Supported")


class FakeLibraryNotFound(FakeNVMLError):
    def __init__(self):
        super().__init__("NVML Shared Library Not Found")


class FakeNotFound(FakeNVMLError):
    def __init__(self):
        super().__init__("Not Found")


def util_sample(pid, time_us, sm):
    return SimpleNamespace(pid=pid, timeStamp=time_us, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)


class FakeNvml:
    """The pynvml names pipeprof uses, over ``count`` fake GPUs.

    ``fail`` maps a function name to the exception it raises (a class: every
    call; a list: one per call, None meaning answer normally).
    """

    NVMLError = FakeNVMLError
    NVMLError_NotSupported = FakeNotSupported
    NVMLError_NotFound = FakeNotFound
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_CLOCK_SM = 1

    def __init__(self, count=1, fail=None):
        self.count = count
        self.fail = dict(fail or {})
        self.calls: dict[str, int] = {}
        self.live_inits = 0  # nvmlInit is reference counted: each needs an nvmlShutdown
        # NVML's per-process sample buffer: (pid, CPU timestamp in us, smUtil); the call returns those newer
        # than the timestamp it is given, NotFound when there are none.
        self.util_buffer: list[tuple[int, int, int]] = []
        self.util_asked: list[int] = []  # the lastSeenTimeStamp of each call
        self.compute = [(4242, 3 * 2**30)]  # (pid, usedGpuMemory) of the compute processes
        self.graphics: list[tuple[int, object]] = []

    def _call(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1
        error = self.fail.get(name)
        if isinstance(error, list):
            error = error.pop(0) if error else None
        if error is not None:
            raise error()

    def nvmlInit(self):
        self._call("nvmlInit")
        self.live_inits += 1

    def nvmlShutdown(self):
        self._call("nvmlShutdown")
        self.live_inits -= 1

    def nvmlDeviceGetCount(self):
        self._call("nvmlDeviceGetCount")
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        self._call("nvmlDeviceGetHandleByIndex")
        assert 0 <= i < self.count
        return ("handle", i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._call("nvmlDeviceGetHandleByUUID")
        return ("uuid-handle", uuid)

    def nvmlDeviceGetName(self, h):
        self._call("nvmlDeviceGetName")
        return b"Fake H100"  # older nvidia-ml-py returns bytes

    def nvmlDeviceGetUUID(self, h):
        self._call("nvmlDeviceGetUUID")
        return f"GPU-fake-{h[1]}"

    def nvmlSystemGetDriverVersion(self):
        self._call("nvmlSystemGetDriverVersion")
        return "550.54"

    def nvmlDeviceGetMemoryInfo(self, h):
        self._call("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=80 * 2**30, used=3 * 2**30, free=77 * 2**30)

    def nvmlDeviceGetUtilizationRates(self, h):
        self._call("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=42, memory=7)

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        self._call("nvmlDeviceGetPcieThroughput")
        return {self.NVML_PCIE_UTIL_RX_BYTES: 2000, self.NVML_PCIE_UTIL_TX_BYTES: 5}[counter]  # KB/s

    def nvmlDeviceGetMemoryBusWidth(self, h):
        self._call("nvmlDeviceGetMemoryBusWidth")
        return 5120

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        self._call("nvmlDeviceGetCurrPcieLinkGeneration")
        return 1  # downshifted while idle

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        self._call("nvmlDeviceGetCurrPcieLinkWidth")
        return 16

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        self._call("nvmlDeviceGetMaxPcieLinkGeneration")
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        self._call("nvmlDeviceGetMaxPcieLinkWidth")
        return 16

    def nvmlDeviceGetClockInfo(self, h, clock):
        self._call("nvmlDeviceGetClockInfo")
        assert clock == self.NVML_CLOCK_SM
        return 1755

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        self._call("nvmlDeviceGetMaxClockInfo")
        assert clock == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetPowerUsage(self, h):
        self._call("nvmlDeviceGetPowerUsage")
        return 312_500  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        self._call("nvmlDeviceGetEnforcedPowerLimit")
        return 700_000  # mW

    def nvmlDeviceGetProcessUtilization(self, h, last_seen_us):
        self._call("nvmlDeviceGetProcessUtilization")
        self.util_asked.append(last_seen_us)
        newer = [util_sample(*s) for s in self.util_buffer if s[1] > last_seen_us]
        if not newer:
            raise FakeNotFound()
        return newer

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h):
        self._call("nvmlDeviceGetComputeRunningProcesses_v3")
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.compute]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        self._call("nvmlDeviceGetGraphicsRunningProcesses")
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.graphics]


def nan(x):
    return isinstance(x, float) and math.isnan(x)


def test_training_on_cpu_is_absent_without_touching_nvml():
    nvml = FakeNvml()
    assert open_gpu(None, nvml=nvml) == Absent("no GPU in use: training device is cpu")
    assert nvml.calls == {}


def test_missing_pynvml_is_absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    assert open_gpu(0) == Absent("NVML not available: pynvml not installed")
    assert gpu_inventory() == Absent("NVML not available: pynvml not installed")


def test_init_failure_is_absent_with_the_error():
    nvml = FakeNvml(fail={"nvmlInit": FakeLibraryNotFound})
    for result in (open_gpu(0, nvml=nvml, env={}), gpu_inventory(nvml=nvml)):
        assert isinstance(result, Absent)
        assert result.reason == "NVML not available: FakeLibraryNotFound: NVML Shared Library Not Found"
    assert nvml.live_inits == 0


def test_sample_values_and_units():
    nvml = FakeNvml()
    gpu = open_gpu(0, nvml=nvml, env={})
    assert isinstance(gpu, GpuMonitor)
    sample = gpu.sample()
    assert list(sample) == GPU_DEVICE_COLUMNS
    assert sample["gpu_util_pct"] == 42.0
    assert sample["gpu_mem_used_bytes"] == 3 * 2**30
    assert sample["pcie_rx_bytes_per_s"] == 2000 * 1024  # NVML's KB/s are KiB/s
    assert sample["pcie_tx_bytes_per_s"] == 5 * 1024
    assert sample["gpu_sm_clock_mhz"] == 1755.0
    assert sample["gpu_power_w"] == 312.5  # NVML's mW
    assert gpu.absences == {}
    gpu.close()
    gpu.close()  # twice is harmless
    assert nvml.live_inits == 0


def test_unsupported_metric_is_nan_recorded_once_and_not_asked_again():
    nvml = FakeNvml(fail={"nvmlDeviceGetPcieThroughput": FakeNotSupported})
    gpu = open_gpu(0, nvml=nvml, env={})
    for _ in range(3):
        sample = gpu.sample()
        assert nan(sample["pcie_rx_bytes_per_s"]) and nan(sample["pcie_tx_bytes_per_s"])
        assert sample["gpu_util_pct"] == 42.0
    assert set(gpu.absences) == {"pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s"}
    assert gpu.absences["pcie_rx_bytes_per_s"] == "not supported by this GPU/driver: FakeNotSupported: Not Supported"
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 2  # once per metric, then never again
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 3


def test_other_nvml_error_is_nan_for_that_sample_only():
    nvml = FakeNvml(fail={"nvmlDeviceGetUtilizationRates": [FakeNVMLError, None]})
    gpu = open_gpu(0, nvml=nvml, env={})
    assert nan(gpu.sample()["gpu_util_pct"])
    assert gpu.sample()["gpu_util_pct"] == 42.0  # still asked: the error may be transient
    assert gpu.absences == {"gpu_util_pct": "NVML error: FakeNVMLError: Unknown Error"}


def test_errors_that_are_not_nvml_errors_propagate():
    nvml = FakeNvml(fail={"nvmlDeviceGetUtilizationRates": ZeroDivisionError})
    gpu = open_gpu(0, nvml=nvml, env={})
    with pytest.raises(ZeroDivisionError):
        gpu.sample()


def test_info_fields_and_unsupported_bus_width():
    nvml = FakeNvml(fail={"nvmlDeviceGetMemoryBusWidth": FakeNotSupported})
    gpu = open_gpu(0, nvml=nvml, env={})
    info = gpu.info()
    assert info == {
        "nvml_index": 0,
        "name": "Fake H100",
        "uuid": "GPU-fake-0",
        "driver_version": "550.54",
        "memory_total_bytes": 80 * 2**30,
        "memory_bus_width_bits": None,
        "pcie_link_gen": 1,
        "pcie_link_width": 16,
        "pcie_link_max_gen": 5,
        "pcie_link_max_width": 16,
        "sm_clock_max_mhz": 1980,
        "power_limit_w": 700.0,
    }
    assert "not supported" in gpu.absences["memory_bus_width_bits"]


def test_missing_device_is_absent_and_nvml_released():
    nvml = FakeNvml(count=1)
    result = open_gpu(3, nvml=nvml, env={})
    assert result == Absent("no GPU 3: NVML sees 1 device(s)")
    assert nvml.live_inits == 0
    nvml = FakeNvml(fail={"nvmlDeviceGetCount": FakeNVMLError})
    assert "NVML cannot open GPU 0" in open_gpu(0, nvml=nvml, env={}).reason
    assert nvml.live_inits == 0
    with pytest.raises(ValueError):
        open_gpu(-1, nvml=FakeNvml())


def test_cuda_visible_devices_maps_cuda_index_to_nvml_index():
    nvml = FakeNvml(count=4)
    gpu = open_gpu(1, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "2, 3"})
    assert gpu.nvml_index == 3 and gpu.info()["uuid"] == "GPU-fake-3"
    by_uuid = open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "GPU-abc"})
    assert isinstance(by_uuid, GpuMonitor) and nvml.calls["nvmlDeviceGetHandleByUUID"] == 1
    assert "lists 2" in open_gpu(2, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "2,3"}).reason
    assert "cannot map" in open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "fast"}).reason
    assert open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": ""}).reason.startswith("no GPU 0")
    gpu.close()
    by_uuid.close()
    assert nvml.live_inits == 0


def test_inventory_lists_every_gpu_and_releases_nvml():
    nvml = FakeNvml(count=2, fail={"nvmlDeviceGetMemoryBusWidth": FakeNotSupported})
    devices = gpu_inventory(nvml=nvml)
    assert [d["nvml_index"] for d in devices] == [0, 1]
    assert devices[1]["name"] == "Fake H100" and devices[1]["memory_bus_width_bits"] is None
    assert set(devices[0]["absences"]) == {"memory_bus_width_bits"}
    assert nvml.live_inits == 0
    assert gpu_inventory(nvml=FakeNvml(count=0)) == []


def test_real_machine_does_not_raise():
    gpu = open_gpu(0)
    if isinstance(gpu, Absent):
        assert gpu.reason  # e.g. "NVML not available: NVMLError_LibraryNotFound: ..."
    else:
        try:
            assert list(gpu.sample()) == GPU_DEVICE_COLUMNS
            assert isinstance(gpu.process_sample(), ProcessGpu)
            assert gpu.info()["memory_total_bytes"] > 0
        finally:
            gpu.close()
    inventory = gpu_inventory()
    assert isinstance(inventory, (Absent, list))


def test_sm_clock_and_power_unsupported_are_nan_with_reasons():
    nvml = FakeNvml(fail={"nvmlDeviceGetClockInfo": FakeNotSupported, "nvmlDeviceGetPowerUsage": FakeNVMLError,
                          "nvmlDeviceGetMaxClockInfo": FakeNotSupported,
                          "nvmlDeviceGetEnforcedPowerLimit": FakeNotSupported})
    gpu = open_gpu(0, nvml=nvml, env={})
    for _ in range(2):
        sample = gpu.sample()
        assert nan(sample["gpu_sm_clock_mhz"]) and nan(sample["gpu_power_w"])
    info = gpu.info()
    assert info["sm_clock_max_mhz"] is None and info["power_limit_w"] is None
    assert nvml.calls["nvmlDeviceGetClockInfo"] == 1  # unsupported: not asked again
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 2  # possibly transient: asked every tick
    assert {"gpu_sm_clock_mhz", "gpu_power_w", "sm_clock_max_mhz", "power_limit_w"} <= set(gpu.absences)
    assert gpu.absences["gpu_power_w"] == "NVML error: FakeNVMLError: Unknown Error"


def test_per_process_utilization_reads_the_buffer_past_the_last_sample_seen():
    nvml = FakeNvml()
    gpu = open_gpu(0, nvml=nvml, env={})
    nvml.util_buffer = [(4242, 100, 80), (4242, 200, 60), (77, 150, 10)]
    first = gpu.process_sample()
    assert first.util_pct == {4242: 70.0, 77: 10.0}  # the mean of a pid's samples
    assert first.util_of(4242) == 70.0 and first.util_of(5) == 0.0  # not in the buffer: no SM time
    nvml.util_buffer.append((4242, 300, 90))
    assert gpu.process_sample().util_pct == {4242: 90.0}  # only the sample newer than 200
    assert nvml.util_asked == [0, 200]
    assert gpu.absences == {}


def test_per_process_utilization_without_samples_is_no_reading_this_tick_not_an_absence():
    nvml = FakeNvml()
    gpu = open_gpu(0, nvml=nvml, env={})
    empty = gpu.process_sample()
    assert empty.util_pct is None and nan(empty.util_of(4242))  # no reading, not a zero
    assert "no kernel ran" in gpu.absences["gpu_proc_util_pct"]  # said while nothing ever came
    nvml.util_buffer = [(4242, 100, 55)]
    assert gpu.process_sample().util_of(4242) == 55.0
    assert "gpu_proc_util_pct" not in gpu.absences  # it came: the capability is there
    assert nan(gpu.process_sample().util_of(4242))  # an empty buffer again: NaN this tick, asked again
    assert "gpu_proc_util_pct" not in gpu.absences
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] == 3


def test_per_process_utilization_unsupported_is_absent_and_not_asked_again():
    nvml = FakeNvml(fail={"nvmlDeviceGetProcessUtilization": FakeNotSupported})
    gpu = open_gpu(0, nvml=nvml, env={})
    for _ in range(3):
        assert gpu.process_sample().util_pct is None
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] == 1
    assert gpu.absences["gpu_proc_util_pct"].startswith("not supported by this GPU/driver")


def test_per_process_memory_from_compute_and_graphics_processes():
    nvml = FakeNvml()
    nvml.compute = [(4242, 3 * 2**30), (4300, 2**20)]
    nvml.graphics = [(4242, 3 * 2**30), (999, 2**28)]  # a pid in both lists counts once
    gpu = open_gpu(0, nvml=nvml, env={})
    reading = gpu.process_sample()
    assert reading.mem_bytes == {4242: 3 * 2**30, 4300: 2**20, 999: 2**28}
    assert reading.mem_of(1) == 0.0  # not listed: no context on this GPU
    assert "nvmlDeviceGetComputeRunningProcesses_v3" in nvml.calls  # the newest struct this pynvml has


def test_per_process_memory_not_available_is_nan_with_the_reason():
    nvml = FakeNvml()
    nvml.compute = [(4242, None)]  # pynvml's NVML_VALUE_NOT_AVAILABLE
    gpu = open_gpu(0, nvml=nvml, env={})
    reading = gpu.process_sample()
    assert reading.mem_bytes is None and nan(reading.mem_of(4242))
    assert "usedGpuMemory not available" in gpu.absences["gpu_proc_mem_bytes"]


def test_per_process_memory_unsupported_queries_are_dropped_one_by_one():
    nvml = FakeNvml(fail={"nvmlDeviceGetComputeRunningProcesses_v3": FakeNotSupported})
    nvml.graphics = [(4242, 2**30)]
    gpu = open_gpu(0, nvml=nvml, env={})
    assert gpu.process_sample().mem_bytes == {4242: 2**30}  # the graphics list still answers
    assert gpu.process_sample().mem_bytes == {4242: 2**30}
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1
    assert "gpu_proc_mem_bytes" not in gpu.absences
    nvml = FakeNvml(fail={"nvmlDeviceGetComputeRunningProcesses_v3": FakeNotSupported,
                          "nvmlDeviceGetGraphicsRunningProcesses": FakeNotSupported})
    gpu = open_gpu(0, nvml=nvml, env={})
    assert gpu.process_sample().mem_bytes is None
    assert gpu.absences["gpu_proc_mem_bytes"].startswith("not supported by this GPU/driver")
