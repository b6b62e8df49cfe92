"""NVML access: absent-safe opening, units, unsupported metrics, device mapping; no GPU needed."""

from __future__ import annotations

import math
import sys

import pynvml
import pytest

from pipeprof.measure.gpu import Absent, GpuMonitor, ProcessGpu, gpu_inventory, open_gpu, open_visible_gpus
from pipeprof.run_folder import GPU_DEVICE_COLUMNS
from tests.fake_nvml import FakeGpu, FakeNvml, GiB, gpus

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
UNKNOWN = pynvml.NVML_ERROR_UNKNOWN
TIMEOUT = pynvml.NVML_ERROR_TIMEOUT


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
    nvml = FakeNvml(fail={"nvmlInit": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND})
    for result in (open_gpu(0, nvml=nvml, env={}), gpu_inventory(nvml=nvml)):
        assert isinstance(result, Absent)
        assert result.reason == "NVML not available: NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    assert nvml.live_inits == 0


def test_sample_values_and_units():
    nvml = FakeNvml()
    gpu = open_gpu(0, nvml=nvml, env={})
    assert isinstance(gpu, GpuMonitor)
    sample = gpu.sample()
    assert list(sample) == GPU_DEVICE_COLUMNS
    assert sample["gpu_util_pct"] == 42.0
    assert sample["gpu_mem_used_bytes"] == 3 * GiB  # v2: without the driver's reservation
    assert sample["pcie_rx_bytes_per_s"] == 2000 * 1024  # NVML's KB/s are KiB/s
    assert sample["pcie_tx_bytes_per_s"] == 5 * 1024
    assert sample["gpu_sm_clock_mhz"] == 1755.0
    assert sample["gpu_power_w"] == 312.5  # NVML's mW
    assert gpu.absences == {}
    gpu.close()
    gpu.close()  # twice is harmless
    assert nvml.live_inits == 0


def test_unsupported_metric_is_nan_recorded_once_and_not_asked_again():
    nvml = FakeNvml(fail={"nvmlDeviceGetPcieThroughput": NOT_SUPPORTED})
    gpu = open_gpu(0, nvml=nvml, env={})
    for _ in range(3):
        sample = gpu.sample()
        assert nan(sample["pcie_rx_bytes_per_s"]) and nan(sample["pcie_tx_bytes_per_s"])
        assert sample["gpu_util_pct"] == 42.0
    assert set(gpu.absences) == {"pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s"}
    assert gpu.absences["pcie_rx_bytes_per_s"] == "not supported by this GPU/driver: NVMLError_NotSupported: Not Supported"
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 2  # once per metric, then never again
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 3


def test_a_transient_nvml_error_is_nan_for_that_sample_only_and_counted_not_absent():
    nvml = FakeNvml(fail={"nvmlDeviceGetUtilizationRates": [TIMEOUT, None, UNKNOWN, None]})
    gpu = open_gpu(0, nvml=nvml, env={})
    assert nan(gpu.sample()["gpu_util_pct"])
    assert gpu.absences == {"gpu_util_pct": "NVML error on every reading (1): NVMLError_Timeout: Timeout"}
    assert gpu.sample()["gpu_util_pct"] == 42.0  # still asked: the error was transient
    assert nan(gpu.sample()["gpu_util_pct"]) and gpu.sample()["gpu_util_pct"] == 42.0
    assert gpu.absences == {}  # it answered: present, with two readings lost
    assert gpu.errors == {"gpu_util_pct": 2} and gpu.info()["nvml_errors"] == {"gpu_util_pct": 2}


def test_a_metric_that_never_answers_is_absent_with_its_error_and_count():
    nvml = FakeNvml(fail={"nvmlDeviceGetPowerUsage": UNKNOWN})
    gpu = open_gpu(0, nvml=nvml, env={})
    for _ in range(3):
        assert nan(gpu.sample()["gpu_power_w"])
    assert gpu.absences["gpu_power_w"] == "NVML error on every reading (3): NVMLError_Unknown: Unknown Error"


def test_errors_that_are_not_nvml_errors_propagate():
    nvml = FakeNvml()
    gpu = open_gpu(0, nvml=nvml, env={})
    nvml.nvmlDeviceGetUtilizationRates = lambda h: 1 / 0
    with pytest.raises(ZeroDivisionError):
        gpu.sample()


def test_info_fields_and_unsupported_bus_width():
    nvml = FakeNvml(fail={"nvmlDeviceGetMemoryBusWidth": NOT_SUPPORTED})
    gpu = open_gpu(0, nvml=nvml, env={})
    info = gpu.info()
    assert info == {
        "nvml_index": 0,
        "cuda_index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": nvml.devices[0].uuid,
        "driver_version": "550.54.15",
        "memory_total_bytes": 80 * 2**30,
        "memory_bus_width_bits": None,
        "pcie_link_gen": 1,
        "pcie_link_width": 16,
        "pcie_link_max_gen": 5,
        "pcie_link_max_width": 16,
        "sm_clock_max_mhz": 1980,
        "power_limit_w": 700.0,
        "memory_info_version": None,  # not read yet
    }
    assert "not supported" in gpu.absences["memory_bus_width_bits"]


def test_missing_device_is_absent_and_nvml_released():
    nvml = FakeNvml()
    result = open_gpu(3, nvml=nvml, env={})
    assert result == Absent("no GPU 3: 1 visible (CUDA_VISIBLE_DEVICES unset)")
    assert nvml.live_inits == 0
    nvml = FakeNvml(fail={"nvmlDeviceGetCount": UNKNOWN})
    assert "NVML cannot open GPU 0" in open_gpu(0, nvml=nvml, env={}).reason
    assert nvml.live_inits == 0
    with pytest.raises(ValueError):
        open_gpu(-1, nvml=FakeNvml())


def test_inventory_lists_every_gpu_and_releases_nvml():
    nvml = FakeNvml(gpus(2), fail={"nvmlDeviceGetMemoryBusWidth": NOT_SUPPORTED})
    devices = gpu_inventory(nvml=nvml)
    assert [d["nvml_index"] for d in devices] == [0, 1]
    assert devices[1]["name"] == "NVIDIA H100 80GB HBM3" and devices[1]["memory_bus_width_bits"] is None
    assert set(devices[0]["absences"]) == {"memory_bus_width_bits"}
    assert nvml.live_inits == 0
    assert gpu_inventory(nvml=FakeNvml([])) == []


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
    nvml = FakeNvml(fail={"nvmlDeviceGetClockInfo": NOT_SUPPORTED, "nvmlDeviceGetPowerUsage": UNKNOWN,
                          "nvmlDeviceGetMaxClockInfo": NOT_SUPPORTED,
                          "nvmlDeviceGetEnforcedPowerLimit": NOT_SUPPORTED})
    gpu = open_gpu(0, nvml=nvml, env={})
    for _ in range(2):
        sample = gpu.sample()
        assert nan(sample["gpu_sm_clock_mhz"]) and nan(sample["gpu_power_w"])
    info = gpu.info()
    assert info["sm_clock_max_mhz"] is None and info["power_limit_w"] is None
    assert nvml.calls["nvmlDeviceGetClockInfo"] == 1  # unsupported: not asked again
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 2  # possibly transient: asked every tick
    assert {"gpu_sm_clock_mhz", "gpu_power_w", "sm_clock_max_mhz", "power_limit_w"} <= set(gpu.absences)
    assert gpu.absences["gpu_power_w"] == "NVML error on every reading (2): NVMLError_Unknown: Unknown Error"


def test_per_process_utilization_reads_the_buffer_past_the_last_sample_seen():
    nvml = FakeNvml()
    gpu = open_gpu(0, nvml=nvml, env={})
    nvml.devices[0].util_buffer = [(4242, 100, 80), (4242, 200, 60), (77, 150, 10)]
    first = gpu.process_sample()
    assert first.util_pct == {4242: 70.0, 77: 10.0}  # the mean of a pid's samples
    assert first.util_of(4242) == 70.0 and first.util_of(5) == 0.0  # not in the buffer: no SM time
    nvml.devices[0].util_buffer.append((4242, 300, 90))
    assert gpu.process_sample().util_pct == {4242: 90.0}  # only the sample newer than 200
    assert nvml.util_asked == [0, 200]
    assert gpu.absences == {}


def test_per_process_utilization_without_samples_is_no_reading_this_tick_not_an_absence():
    nvml = FakeNvml()
    gpu = open_gpu(0, nvml=nvml, env={})
    empty = gpu.process_sample()
    assert empty.util_pct is None and nan(empty.util_of(4242))  # no reading, not a zero
    assert "no kernel ran" in gpu.absences["gpu_proc_util_pct"]  # said while nothing ever came
    nvml.devices[0].util_buffer = [(4242, 100, 55)]
    assert gpu.process_sample().util_of(4242) == 55.0
    assert "gpu_proc_util_pct" not in gpu.absences  # it came: the capability is there
    assert nan(gpu.process_sample().util_of(4242))  # an empty buffer again: NaN this tick, asked again
    assert "gpu_proc_util_pct" not in gpu.absences
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] == 3


def test_per_process_utilization_unsupported_is_absent_and_not_asked_again():
    nvml = FakeNvml(fail={"nvmlDeviceGetProcessUtilization": NOT_SUPPORTED})
    gpu = open_gpu(0, nvml=nvml, env={})
    for _ in range(3):
        assert gpu.process_sample().util_pct is None
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] == 1
    assert gpu.absences["gpu_proc_util_pct"].startswith("not supported by this GPU/driver")


def test_per_process_memory_from_compute_and_graphics_processes():
    nvml = FakeNvml()
    nvml.devices[0].compute = [(4242, 3 * 2**30), (4300, 2**20)]
    nvml.devices[0].graphics = [(4242, 3 * 2**30), (999, 2**28)]  # a pid in both lists counts once
    gpu = open_gpu(0, nvml=nvml, env={})
    reading = gpu.process_sample()
    assert reading.mem_bytes == {4242: 3 * 2**30, 4300: 2**20, 999: 2**28}
    assert reading.mem_of(1) == 0.0  # not listed: no context on this GPU
    assert "nvmlDeviceGetComputeRunningProcesses_v3" in nvml.calls  # the newest struct this pynvml has


def test_per_process_memory_not_available_is_nan_with_the_reason():
    nvml = FakeNvml()
    nvml.devices[0].compute = [(4242, None)]  # pynvml's NVML_VALUE_NOT_AVAILABLE
    gpu = open_gpu(0, nvml=nvml, env={})
    reading = gpu.process_sample()
    assert reading.mem_bytes is None and nan(reading.mem_of(4242))
    assert "usedGpuMemory not available" in gpu.absences["gpu_proc_mem_bytes"]


def test_per_process_memory_unsupported_queries_are_dropped_one_by_one():
    nvml = FakeNvml(fail={"nvmlDeviceGetComputeRunningProcesses_v3": NOT_SUPPORTED})
    nvml.devices[0].graphics = [(4242, 2**30)]
    gpu = open_gpu(0, nvml=nvml, env={})
    assert gpu.process_sample().mem_bytes == {4242: 2**30}  # the graphics list still answers
    assert gpu.process_sample().mem_bytes == {4242: 2**30}
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1
    assert "gpu_proc_mem_bytes" not in gpu.absences
    nvml = FakeNvml(fail={"nvmlDeviceGetComputeRunningProcesses_v3": NOT_SUPPORTED,
                          "nvmlDeviceGetGraphicsRunningProcesses_v3": NOT_SUPPORTED})
    gpu = open_gpu(0, nvml=nvml, env={})
    assert gpu.process_sample().mem_bytes is None
    assert gpu.absences["gpu_proc_mem_bytes"].startswith("not supported by this GPU/driver")


def test_no_samples_as_pynvml_raises_it_is_no_reading_not_an_error():
    for code in (pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_NOT_FOUND):  # the wrapper's count 0, the driver's own
        gpu = open_gpu(0, nvml=FakeNvml(empty_util_code=code), env={})
        assert gpu.process_sample().util_pct is None
        assert "no kernel ran" in gpu.absences["gpu_proc_util_pct"] and gpu.errors == {}


def test_memory_used_is_v2_without_the_drivers_reservation_and_v1_where_the_driver_lacks_v2():
    nvml = FakeNvml()
    gpu = open_gpu(0, nvml=nvml, env={})
    assert gpu.sample()["gpu_mem_used_bytes"] == 3 * GiB
    assert gpu.info()["memory_info_version"] == 2
    old = FakeNvml(missing=("nvmlDeviceGetMemoryInfo_v2",))
    gpu = open_gpu(0, nvml=old, env={})
    assert gpu.sample()["gpu_mem_used_bytes"] == 3 * GiB + 512 * 2**20  # v1 counts the reservation
    assert gpu.sample()["gpu_mem_used_bytes"] == 3 * GiB + 512 * 2**20
    info = gpu.info()
    assert info["memory_info_version"] == 1 and "FunctionNotFound" in info["memory_info_v1_reason"]
    assert old.calls["nvmlDeviceGetMemoryInfo_v2"] == 1 and gpu.absences == {}  # v2 asked once


def test_process_queries_fall_back_from_v3_to_v2_where_the_driver_lacks_v3():
    nvml = FakeNvml(missing=("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"))
    nvml.devices[0].compute = [(4242, 2 * GiB)]
    gpu = open_gpu(0, nvml=nvml, env={})
    assert gpu.process_sample().mem_bytes == {4242: 2 * GiB}
    assert gpu.process_sample().mem_bytes == {4242: 2 * GiB}
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1  # not asked again
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 2
    assert "gpu_proc_mem_bytes" not in gpu.absences
    none = FakeNvml(missing=tuple(f"nvmlDevice{k}RunningProcesses{v}" for k in ("GetCompute", "GetGraphics")
                                  for v in ("_v3", "_v2")))
    gpu = open_gpu(0, nvml=none, env={})
    assert gpu.process_sample().mem_bytes is None  # the unversioned names raise NVMLLibraryMismatchError
    assert gpu.absences["gpu_proc_mem_bytes"].startswith("not supported by this GPU/driver")


def test_process_queries_racing_to_insufficient_size_are_asked_again_at_once():
    size = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    nvml = FakeNvml(fail={"nvmlDeviceGetComputeRunningProcesses_v3": [size, None, size, size, size],
                          "nvmlDeviceGetProcessUtilization": [size, None]})
    nvml.devices[0].compute = [(4242, GiB)]
    nvml.devices[0].util_buffer = [(4242, 10, 50)]
    gpu = open_gpu(0, nvml=nvml, env={})
    reading = gpu.process_sample()
    assert reading.mem_bytes == {4242: GiB} and reading.util_pct == {4242: 50.0}
    assert gpu.errors == {}
    assert gpu.process_sample().mem_bytes is None  # three races in a row: this tick's reading is lost, not {}
    assert gpu.errors == {"gpu_proc_mem_bytes": 1} and "gpu_proc_mem_bytes" not in gpu.absences


def test_a_transient_error_before_the_first_process_reading_is_not_an_absence_once_it_answers():
    nvml = FakeNvml(fail={"nvmlDeviceGetComputeRunningProcesses_v3": [pynvml.NVML_ERROR_GPU_IS_LOST, None]})
    nvml.devices[0].compute = [(4242, GiB)]
    gpu = open_gpu(0, nvml=nvml, env={})
    gpu.process_sample()
    assert "NVMLError_GpuIsLost" in gpu.absences["gpu_proc_mem_bytes"]
    assert gpu.process_sample().mem_bytes == {4242: GiB}
    assert "gpu_proc_mem_bytes" not in gpu.absences and gpu.errors == {"gpu_proc_mem_bytes": 1}


def four_gpus():
    devices = gpus(4)
    return FakeNvml(devices), [d.uuid for d in devices]


def test_cuda_visible_devices_indices_pick_the_gpu_by_identity():
    nvml, uuids = four_gpus()
    gpu = open_gpu(1, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "2, 3"})
    assert (gpu.nvml_index, gpu.cuda_index, gpu.uuid) == (3, 1, uuids[3])
    assert gpu.info()["uuid"] == uuids[3]
    reordered = open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "3,1"})
    assert reordered.uuid == uuids[3]  # CUDA numbers them in the listed order
    assert open_gpu(2, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "2,3"}).reason == \
        "no GPU 2: 2 visible (CUDA_VISIBLE_DEVICES='2,3')"
    assert open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": ""}).reason.startswith("no GPU 0: 0 visible")
    for g in (gpu, reordered):
        g.close()
    assert nvml.live_inits == 0


def test_cuda_visible_devices_uuids_and_unique_prefixes():
    nvml, uuids = four_gpus()
    assert open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": uuids[2]}).uuid == uuids[2]
    prefix = uuids[3][:12]  # "GPU-00000003"
    assert open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": prefix}).uuid == uuids[3]
    # "GPU-0000000" is a prefix of all four: CUDA rejects it and stops reading the list there
    assert open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "GPU-0000000,1"}).reason.startswith("no GPU 0: 0")


def test_cuda_stops_at_the_first_entry_it_cannot_use():
    nvml, uuids = four_gpus()
    env = {"CUDA_VISIBLE_DEVICES": "0,2,-1,1"}
    assert open_gpu(1, nvml=nvml, env=env).uuid == uuids[2]
    assert open_gpu(2, nvml=nvml, env=env).reason.startswith("no GPU 2: 2 visible")
    assert open_gpu(1, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "1,7,2"}).reason.startswith("no GPU 1: 1 visible")
    assert open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "fast"}).reason.startswith("no GPU 0: 0 visible")


def test_mig_device_by_its_uuid():
    devices = gpus(1) + [FakeGpu(uuid="MIG-a1b2c3d4-0000-1111-2222-333344445555", mig=True)]
    nvml = FakeNvml(devices)
    gpu = open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": devices[1].uuid})
    assert gpu.uuid == devices[1].uuid and gpu.nvml_index is None
    legacy = open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": f"MIG-{devices[0].uuid}/1/0"})
    assert isinstance(legacy, Absent)


def test_unlike_gpus_numbered_fastest_first_are_absent_unless_ordered_by_pci_bus_or_named_by_uuid():
    devices = [FakeGpu(uuid="GPU-aaaa", name="NVIDIA T4"), FakeGpu(uuid="GPU-bbbb", name="NVIDIA A100")]
    nvml = FakeNvml(devices)
    ambiguous = open_gpu(0, nvml=nvml, env={})
    assert isinstance(ambiguous, Absent) and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in ambiguous.reason
    assert isinstance(open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "1"}), Absent)
    assert open_gpu(1, nvml=nvml, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}).uuid == "GPU-bbbb"
    assert open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}).uuid == "GPU-bbbb"


def test_a_uuid_from_torch_picks_its_gpu_whatever_the_order():
    devices = [FakeGpu(uuid="GPU-aaaa-1", name="NVIDIA T4"), FakeGpu(uuid="GPU-bbbb-2", name="NVIDIA A100")]
    nvml = FakeNvml(devices)
    gpu = open_gpu(0, nvml=nvml, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, uuid="bbbb-2")  # torch's form
    assert gpu.uuid == "GPU-bbbb-2"
    assert open_gpu(0, nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "0"}, uuid="bbbb-2").uuid == "GPU-bbbb-2"
    assert open_gpu(0, nvml=nvml, env={}, uuid="cccc").reason == "no GPU NVML sees has the training device's UUID cccc"


def test_open_visible_gpus_gives_one_monitor_per_visible_gpu_each_holding_nvml():
    nvml, uuids = four_gpus()
    monitors = open_visible_gpus(nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "3,0"})
    assert [(m.cuda_index, m.uuid) for m in monitors] == [(0, uuids[3]), (1, uuids[0])]
    assert nvml.live_inits == 2
    for m in monitors:
        m.close()
    assert nvml.live_inits == 0
    assert open_visible_gpus(nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "-1"}) == \
        Absent("no GPU visible (CUDA_VISIBLE_DEVICES='-1')")
    assert nvml.live_inits == 0
