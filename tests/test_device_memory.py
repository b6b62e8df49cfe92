"""torch.cuda memory windows (a stand-in ``cuda``), the device_memory table, and the memory-creep analysis."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeprof.analysis.device_memory import CREEP_RULE, NOISE_FLOOR_BYTES, MemoryCreep, device_memory
from pipeprof.measure.clock import FakeClock
from pipeprof.measure.cuda_memory import CudaMemoryWindows
from pipeprof.pipeline.derive import summarize
from pipeprof.pipeline.train import DeviceMemoryRows
from pipeprof.render.html import render_html
from pipeprof.run_folder import DEVICE_MEMORY_COLUMNS, SAMPLE_COLUMNS, STEP_COLUMNS, Run, load_run, save_run


class FakeCuda:
    """torch.cuda's allocator counters, per device, set by the test; peaks follow ``allocate`` as the real ones
    do, and as in torch a call without a device reads the current one (device 0 unless ``current``)."""

    def __init__(self, initialized=True, current=0):
        self.initialized, self.current = initialized, current
        self.counters = {}  # device index -> [allocated, reserved, peak allocated, peak reserved]
        self.resets = 0

    def _of(self, device):
        index = self.current if device is None else getattr(device, "index", device)
        return self.counters.setdefault(int(index), [0, 0, 0, 0])

    def allocate(self, allocated, reserved, device=0):
        c = self._of(device)
        c[0], c[1] = allocated, reserved
        c[2], c[3] = max(c[2], allocated), max(c[3], reserved)

    def is_initialized(self):
        return self.initialized

    def memory_allocated(self, device=None):
        return self._of(device)[0]

    def memory_reserved(self, device=None):
        return self._of(device)[1]

    def max_memory_allocated(self, device=None):
        return self._of(device)[2]

    def max_memory_reserved(self, device=None):
        return self._of(device)[3]

    def reset_peak_memory_stats(self, device=None):
        self.resets += 1
        c = self._of(device)
        c[2], c[3] = c[0], c[1]


def test_nothing_is_read_before_cuda_is_initialized_or_while_the_training_device_is_unknown():
    cuda = FakeCuda(initialized=False)
    windows = CudaMemoryWindows(cuda, window_s=0.5, device=0)
    assert windows.read(0.0) is None and windows.final(9.0) is None
    unknown = CudaMemoryWindows(FakeCuda(), window_s=0.5, device=lambda: None)
    assert unknown.read(0.0) is None and unknown.final(9.0) is None


def test_one_row_per_window_with_the_scripts_own_peaks_never_reset():
    cuda = FakeCuda()
    windows = CudaMemoryWindows(cuda, window_s=0.5, device=0)
    cuda.allocate(100, 200)
    assert windows.read(1.0) == (1.0, 100, 200, 100, 200)  # the first step end makes a row
    cuda.allocate(900, 1000)  # a forward pass's activations
    cuda.allocate(150, 1000)  # freed after backward
    assert windows.read(1.2) is None  # the window is not over
    assert windows.read(1.5) == (1.5, 150, 1000, 900, 1000)  # the peak inside the window is kept
    cuda.allocate(160, 1000)
    assert windows.read(2.0) == (2.0, 160, 1000, 900, 1000)  # and stays: the script's max_memory_allocated()
    assert cuda.resets == 0 and cuda.max_memory_allocated() == 900  # reads what it would unprofiled
    cuda.reset_peak_memory_stats()  # the script's own reset is its business
    cuda.allocate(170, 1000)
    assert windows.final(2.1) == (2.1, 170, 1000, 170, 1000)  # the run's end: whatever the window


def test_the_training_device_is_read_not_the_current_one():
    cuda = FakeCuda(current=0)
    cuda.allocate(7, 8, device=0)  # another process's context, or nothing at all
    cuda.allocate(500, 1000, device=1)  # the script trains on cuda:1 without set_device
    training = [None]
    windows = CudaMemoryWindows(cuda, window_s=0.0, device=lambda: training[0])
    assert windows.read(0.1) is None  # no batch copied yet: the training device is not known
    training[0] = 1
    assert windows.read(0.2) == (0.2, 500, 1000, 500, 1000)


def test_window_must_not_be_negative():
    with pytest.raises(ValueError):
        CudaMemoryWindows(FakeCuda(), window_s=-1.0)


def test_real_torch_cuda_without_a_gpu_reads_nothing():
    torch = pytest.importorskip("torch")
    windows = CudaMemoryWindows(device=0)
    if not torch.cuda.is_initialized():
        assert windows.read(0.0) is None


def test_scenario_loop_rows_at_step_ends_on_the_runs_time_axis():
    clock = FakeClock(100.0)
    cuda = FakeCuda()
    done = []
    rows = DeviceMemoryRows(CudaMemoryWindows(cuda, window_s=0.5, device=0), clock, t0_s=100.0,
                            then=lambda i, n: done.append(i))
    for step in range(1, 6):  # steps of 0.2 s: a row at 0.2 s, 0.8 s (0.6 s after), then the end
        clock.advance(0.2)
        cuda.allocate(step * 10, 1000)
        rows(step, 5)
    clock.advance(0.05)
    frame = rows.frame()
    assert done == [1, 2, 3, 4, 5]  # the progress callback still runs
    assert list(frame.columns) == DEVICE_MEMORY_COLUMNS
    assert frame["t_s"].round(6).tolist() == [0.2, 0.8, 1.05]
    assert frame["allocated_bytes"].tolist() == [10, 40, 50]
    assert frame["peak_allocated_bytes"].tolist() == [10, 40, 50]


def test_scenario_loop_on_cuda_that_never_initialized_has_no_rows():
    rows = DeviceMemoryRows(CudaMemoryWindows(FakeCuda(initialized=False), device=0), FakeClock(0.0), 0.0)
    rows(1, 1)
    assert rows.frame().empty


def test_device_memory_table_is_saved_only_when_recorded_and_old_folders_load_empty(tmp_path):
    steps = pd.DataFrame([{c: 0 for c in STEP_COLUMNS}])
    memory = pd.DataFrame([(0.5, 10, 20, 30, 40), (1.0, 11, 20, 31, 40)], columns=DEVICE_MEMORY_COLUMNS)
    folder = save_run(Run(meta={}, steps=steps, device_memory=memory), tmp_path / "cuda")
    assert (folder / "device_memory.csv").is_file()
    pd.testing.assert_frame_equal(load_run(folder).device_memory, memory)
    cpu = save_run(Run(meta={}, steps=steps), tmp_path / "cpu")
    assert not (cpu / "device_memory.csv").exists()  # a CPU run's folder is as before
    loaded = load_run(cpu).device_memory
    assert loaded.empty and list(loaded.columns) == DEVICE_MEMORY_COLUMNS


MIB = 2**20


def cuda_run(allocated, warmup=4, step_s=0.1, window_s=0.5, reserved=8 * 2**30, peak_extra=256 * MIB,
             gpu_samples=None):
    """A CUDA run of ``len(allocated)`` windows of ``window_s`` (5 steps each): ``allocated[i]`` bytes held at
    window i's end, a peak ``peak_extra`` above it inside the window."""
    n_steps = round(len(allocated) * window_s / step_s)
    steps = pd.DataFrame([{"step": i, "epoch": 0, "warmup": i < warmup, "t_start_s": i * step_s,
                           "data_wait_s": 0.01, "h2d_s": 0.005, "compute_s": 0.08, "step_s": step_s,
                           "host_wait_s": 0.01, "samples": 32, "loss": 1.0, "correct": 16,
                           "ready_batches": 1, "collective_wait_s": 0.0} for i in range(n_steps)],
                         columns=STEP_COLUMNS)
    memory = pd.DataFrame([((i + 1) * window_s, a, reserved, a + peak_extra, reserved)
                           for i, a in enumerate(allocated)], columns=DEVICE_MEMORY_COLUMNS)
    meta = {"scenario": {"name": "cuda"}, "device": "cuda:0", "absences": {},
            "gpu": {"available": gpu_samples is not None}}
    samples = gpu_samples if gpu_samples is not None else pd.DataFrame(columns=SAMPLE_COLUMNS)
    return Run(meta=meta, steps=steps, samples=samples, device_memory=memory)


def test_allocated_memory_growing_every_step_is_a_creep_and_a_verdict_note():
    leak = [2**30 + i * 50 * MIB for i in range(12)]  # 10 MiB a step, 600 MiB over the run
    run = cuda_run(leak)
    memory = device_memory(run)
    assert memory.creep.growing
    assert memory.creep.growth_bytes == pytest.approx(50 * MIB / 0.5 * (56 * 0.1), rel=1e-6)  # slope x counted
    assert memory.creep.per_step_bytes == pytest.approx(10 * MIB, rel=1e-6)
    summary = summarize(run)
    assert summary["device_memory"]["creep"]["growing"] is True
    assert summary["device_memory"]["creep"]["rule"] == CREEP_RULE
    assert any("Allocated GPU memory grew by" in n for n in summary["verdict"]["notes"])
    assert summary["verdict"]["class"] == summarize(cuda_run([2**30] * 12))["verdict"]["class"]  # a note only


def test_flat_memory_with_noise_is_not_a_creep():
    noisy = [2**30 + (40 * MIB if i % 2 else -40 * MIB) for i in range(12)]
    memory = device_memory(cuda_run(noisy))
    assert not memory.creep.growing
    assert abs(memory.creep.growth_bytes) < NOISE_FLOOR_BYTES
    assert not any("grew" in n for n in summarize(cuda_run(noisy))["verdict"]["notes"])


def test_a_late_spike_lifts_the_slope_but_not_the_medians():
    spike = [2**30] * 11 + [2**30 + 2 * 2**30]  # an evaluation pass's activations in the last window
    memory = device_memory(cuda_run(spike))
    assert memory.creep.growth_bytes > NOISE_FLOOR_BYTES  # the slope alone would call it growth
    assert not memory.creep.growing


def test_growth_below_five_percent_of_a_large_level_is_noise():
    big = [40 * 2**30 + i * 15 * MIB for i in range(12)]  # 165 MiB on 40 GiB: above 64 MiB, below 5 %
    assert not device_memory(cuda_run(big)).creep.growing
    assert device_memory(cuda_run([2**30 + i * 15 * MIB for i in range(12)])).creep.growing  # on 1 GiB: growth


def test_peaks_are_over_the_windows_that_overlap_the_counted_steps():
    allocated = [2**30] * 8
    run = cuda_run(allocated, warmup=10)  # the counted steps start at 1.0 s: windows 0 and 1 end by then
    run.device_memory.loc[0, "peak_allocated_bytes"] = 30 * 2**30  # model loading, in the warm-up
    run.device_memory.loc[2, "peak_allocated_bytes"] = 5 * 2**30  # window (1.0, 1.5]: counted
    memory = device_memory(run)
    assert memory.windows == 6
    assert memory.peak_allocated_bytes == 5 * 2**30
    assert memory.peak_reserved_bytes == 8 * 2**30


def test_too_few_windows_gives_no_creep_verdict():
    memory = device_memory(cuda_run([2**30, 3 * 2**30, 5 * 2**30], warmup=0))
    assert memory.windows == 3
    assert memory.creep == MemoryCreep(growing=False, growth_bytes=None, per_step_bytes=None)


def test_absent_reasons():
    cpu = Run(meta={"device": "cpu"}, steps=cuda_run([1] * 4).steps)
    assert device_memory(cpu).to_json() == {"absent": "torch.cuda memory is read on CUDA only: the training "
                                                      "device was cpu"}
    cuda = Run(meta={"device": "cuda:0"}, steps=cpu.steps)
    assert "no torch.cuda memory window was recorded" in device_memory(cuda).absent
    told = Run(meta={"device": "cuda:0", "absences": {"device_memory": "torch.cuda.memory_stats failed"}},
               steps=cpu.steps)
    assert summarize(told)["device_memory"] == {"absent": "torch.cuda.memory_stats failed"}


def test_gpu_summary_has_the_process_share_sm_clock_and_power():
    samples = pd.DataFrame([{"t_s": t, "gpu_util_pct": 90.0, "gpu_mem_used_bytes": 9 * 2**30,
                             "pcie_rx_bytes_per_s": 1e9, "pcie_tx_bytes_per_s": 1e6, "gpu_sm_clock_mhz": clock,
                             "gpu_power_w": power, "gpu_proc_util_pct": util, "gpu_proc_mem_bytes": mem}
                            for t, clock, power, util, mem in [(1.0, 1400.0, 300.0, 80.0, 4 * 2**30),
                                                              (2.0, 1600.0, 340.0, float("nan"), 5 * 2**30)]])
    gpu = summarize(cuda_run([2**30] * 8, gpu_samples=samples))["gpu"]
    assert gpu["mean_proc_util_pct"] == 80.0  # the tick without a reading does not count as 0
    assert gpu["peak_proc_mem_bytes"] == 5 * 2**30
    assert gpu["mean_sm_clock_mhz"] == 1500.0 and gpu["mean_power_w"] == 320.0


def test_report_shows_gpu_telemetry_and_each_absence_reason():
    samples = pd.DataFrame([{"t_s": t, "gpu_util_pct": 90.0, "gpu_mem_used_bytes": 9 * 2**30,
                             "pcie_rx_bytes_per_s": 1e9, "pcie_tx_bytes_per_s": 1e6, "gpu_sm_clock_mhz": 1410.0,
                             "gpu_power_w": 305.0, "gpu_proc_util_pct": 74.0, "gpu_proc_mem_bytes": 4 * 2**30}
                            for t in (1.0, 2.0)])
    run = cuda_run([2**30 + i * 50 * MIB for i in range(12)], gpu_samples=samples)
    run.meta["gpu"] = {"available": True, "name": "Fake H200", "memory_bus_width_bits": 6144, "pcie_link_gen": 5,
                       "pcie_link_width": 16, "sm_clock_max_mhz": 1980, "power_limit_w": 700.0}
    html = render_html(run, summarize(run))
    for text in ("GPU, training process", "SM 74%", "memory 4.00 GiB peak", "1,410 MHz", "305 W", "max 1,980 MHz",
                 "limit 700 W", "memory creep: allocated grew by", "memory_bus_width_bits", "6144",
                 "pcie_link_gen"):
        assert text in html, text

    samples[["gpu_proc_util_pct", "gpu_power_w"]] = float("nan")
    run = cuda_run([2**30] * 12, gpu_samples=samples)
    run.meta["absences"] = {"gpu_proc_util_pct": "NVML held no per-process utilization sample",
                            "gpu_power_w": "not supported by this GPU/driver: NVMLError_NotSupported"}
    html = render_html(run, summarize(run))
    assert "SM not measured" in html and "NVML held no per-process utilization sample" in html
    assert "power: not supported by this GPU/driver" in html
    assert "no memory creep" in html

    cpu = Run(meta={"scenario": {"name": "cpu"}, "device": "cpu", "gpu": {"available": False}},
              steps=cuda_run([1] * 4).steps)
    html = render_html(cpu, summarize(cpu))
    assert "torch.cuda memory is read on CUDA only: the training device was cpu" in html
