"""torch.cuda memory windows (a stand-in ``cuda``), the device_memory table, and the memory-creep analysis."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeprof.measure.clock import FakeClock
from pipeprof.measure.cuda_memory import CudaMemoryWindows
from pipeprof.pipeline.train import DeviceMemoryRows
from pipeprof.run_folder import DEVICE_MEMORY_COLUMNS, STEP_COLUMNS, Run, load_run, save_run


class FakeCuda:
    """torch.cuda's allocator counters, set by the test; peaks follow ``allocate`` as the real ones do."""

    def __init__(self, initialized=True):
        self.initialized = initialized
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self.resets = 0

    def allocate(self, allocated, reserved):
        self.allocated, self.reserved = allocated, reserved
        self.peak_allocated = max(self.peak_allocated, allocated)
        self.peak_reserved = max(self.peak_reserved, reserved)

    def is_initialized(self):
        return self.initialized

    def memory_allocated(self):
        return self.allocated

    def memory_reserved(self):
        return self.reserved

    def max_memory_allocated(self):
        return self.peak_allocated

    def max_memory_reserved(self):
        return self.peak_reserved

    def reset_peak_memory_stats(self):
        self.resets += 1
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved


def test_nothing_is_read_before_cuda_is_initialized():
    cuda = FakeCuda(initialized=False)
    windows = CudaMemoryWindows(cuda, window_s=0.5)
    assert windows.read(0.0) is None and windows.final(9.0) is None
    assert cuda.resets == 0


def test_one_row_per_window_with_the_peaks_since_the_previous_row():
    cuda = FakeCuda()
    windows = CudaMemoryWindows(cuda, window_s=0.5)
    cuda.allocate(100, 200)
    assert windows.read(1.0) == (1.0, 100, 200, 100, 200)  # the first step end makes a row
    cuda.allocate(900, 1000)  # a forward pass's activations
    cuda.allocate(150, 1000)  # freed after backward
    assert windows.read(1.2) is None  # the window is not over
    assert windows.read(1.5) == (1.5, 150, 1000, 900, 1000)  # the peak inside the window is kept
    assert cuda.resets == 2
    cuda.allocate(160, 1000)
    assert windows.read(2.0) == (2.0, 160, 1000, 160, 1000)  # peaks were reset: the old 900 is gone
    cuda.allocate(170, 1000)
    assert windows.final(2.1) == (2.1, 170, 1000, 170, 1000)  # the run's end: whatever the window


def test_window_must_not_be_negative():
    with pytest.raises(ValueError):
        CudaMemoryWindows(FakeCuda(), window_s=-1.0)


def test_real_torch_cuda_without_a_gpu_reads_nothing():
    torch = pytest.importorskip("torch")
    windows = CudaMemoryWindows()
    if not torch.cuda.is_initialized():
        assert windows.read(0.0) is None


def test_scenario_loop_rows_at_step_ends_on_the_runs_time_axis():
    clock = FakeClock(100.0)
    cuda = FakeCuda()
    done = []
    rows = DeviceMemoryRows(CudaMemoryWindows(cuda, window_s=0.5), clock, t0_s=100.0,
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
    rows = DeviceMemoryRows(CudaMemoryWindows(FakeCuda(initialized=False)), FakeClock(0.0), 0.0)
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
