"""Every visible GPU sampled together, and each run reading the GPU it trained on (fake NVML, no GPU)."""

from __future__ import annotations

import math
import os

import pytest

from pipeprof.measure import gpu as gpu_mod
from pipeprof.measure.gpu_set import GpuSet, NoGpu, device_column, on_gpu
from pipeprof.script.session import Session
from tests.fake_nvml import FakeNvml, GiB, gpus


def two_gpus(**kw):
    devices = gpus(2)
    devices[0].util_pct, devices[1].util_pct = 5, 93
    nvml = FakeNvml(devices, **kw)
    monitors = gpu_mod.open_visible_gpus(nvml=nvml, env={})
    return nvml, devices, GpuSet(monitors)


def test_each_gpu_is_kept_under_its_cuda_number_and_only_the_trees_are_read_once_it_is_seen():
    nvml, devices, gpu_set = two_gpus()
    first = gpu_set.sample()  # the tree holds no memory yet: every GPU is read, without its PCIe
    assert first[device_column(0, "gpu_util_pct")] == 5.0 and first[device_column(1, "gpu_util_pct")] == 93.0
    assert math.isnan(first[device_column(1, "pcie_rx_bytes_per_s")]) and "nvmlDeviceGetPcieThroughput" not in nvml.calls
    devices[1].compute = [(100, 2 * GiB)]
    devices[0].compute = [(555, GiB)]  # another user's job
    reading = gpu_set.process_sample(tree_pids={100, 101})
    assert reading.mem_bytes == {100: 2 * GiB, 555: GiB}
    row = gpu_set.sample()
    assert row[device_column(1, "gpu_util_pct")] == 93.0 and math.isnan(row[device_column(0, "gpu_util_pct")])
    assert row[device_column(1, "pcie_rx_bytes_per_s")] == 2000 * 1024
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 2  # cuda1's two PCIe readings only
    assert gpu_set.training_gpu([100, 101]) == 1
    gpu_set.close()
    assert nvml.live_inits == 0


def test_each_rank_of_a_job_reads_its_own_gpu_and_a_cpu_process_none():
    _, devices, gpu_set = two_gpus()
    devices[0].compute, devices[1].compute = [(100, GiB)], [(200, 3 * GiB), (100, 2**20)]  # rank 0 on cuda0
    gpu_set.process_sample(tree_pids={100, 200, 300})
    assert gpu_set.training_gpu([100]) == 0  # most of its memory: a context of 1 MiB on cuda1 is not its GPU
    assert gpu_set.training_gpu([200]) == 1
    cpu = gpu_set.training_gpu([300])  # NVML's pids are ours (it lists the tree): 300 held nothing
    assert isinstance(cpu, NoGpu) and "trained on the CPU" in cpu.reason
    assert isinstance(gpu_set.training_gpu([300], "cuda:1"), NoGpu)  # NVML's identity wins over a record
    gpu_set.close()


def test_in_a_container_nvmls_host_pids_leave_the_choice_to_the_runs_own_record():
    _, devices, gpu_set = two_gpus()
    devices[1].compute = [(987654, 2 * GiB)]  # the tree's process, under its host pid
    gpu_set.process_sample(tree_pids={100})
    assert gpu_set.training_gpu([100], "cuda:1") == 1
    unknown = gpu_set.training_gpu([100], "cuda")
    assert isinstance(unknown, NoGpu) and "another PID namespace" in unknown.reason
    assert isinstance(gpu_set.training_gpu([100], "cuda:7"), NoGpu)
    assert "trained on the CPU" in gpu_set.training_gpu([100], "cpu").reason
    gpu_set.close()
    nvml = FakeNvml()
    nvml.devices[0].compute = [(987654, GiB)]
    one = GpuSet(gpu_mod.open_visible_gpus(nvml=nvml, env={}))
    one.process_sample(tree_pids={100})
    assert one.training_gpu([100], "cuda") == 0  # one GPU visible: it is the one
    one.close()


def test_on_gpu_puts_the_chosen_gpus_series_in_the_runs_columns():
    import pandas as pd

    samples = pd.DataFrame({"t_s": [0.0, 0.1], device_column(0, "gpu_util_pct"): [1.0, 2.0],
                            device_column(1, "gpu_util_pct"): [90.0, 95.0], "gpu_util_pct": [float("nan")] * 2})
    assert on_gpu(samples, 1)["gpu_util_pct"].tolist() == [90.0, 95.0]
    assert on_gpu(samples, None)["gpu_util_pct"].isna().all()
    assert device_column(1, "gpu_util_pct") in on_gpu(samples, 1)  # every GPU's raw series stays
    with pytest.raises(ValueError):
        GpuSet([])


def profiled(tmp_path, monkeypatch, fake):
    """A script session over this process (no steps: the hooks wrote no event), NVML faked; its Run."""
    real = gpu_mod.open_visible_gpus
    monkeypatch.setattr(gpu_mod, "open_visible_gpus", lambda nvml=None, env=None: real(nvml=fake, env={}))
    events = tmp_path / "events.jsonl"
    events.write_text("")
    session = Session("s", events, sample_hz=20, cuda_available=True)
    session.start(os.getpid())
    return session.finish("complete", None, {})


def test_a_script_reads_the_gpu_it_holds_memory_on_not_gpu_0(tmp_path, monkeypatch):
    devices = gpus(3)
    devices[0].util_pct, devices[2].util_pct = 77, 12  # cuda0 is busy with another user's job
    devices[0].compute, devices[2].compute = [(4_000_000, 40 * GiB)], [(os.getpid(), 2 * GiB)]
    fake = FakeNvml(devices)
    run = profiled(tmp_path, monkeypatch, fake)
    assert run.meta["gpu"]["available"] and run.meta["gpu"]["cuda_index"] == 2
    assert run.meta["gpu"]["uuid"] == devices[2].uuid
    assert set(run.samples["gpu_util_pct"].dropna()) == {12.0}
    assert [g["uuid"] for g in run.meta["gpu"]["visible"]] == [d.uuid for d in devices]
    assert "gpu" not in run.meta["absences"] and fake.live_inits == 0


def test_a_script_training_on_the_cpu_of_a_gpu_machine_shows_no_gpu_evidence(tmp_path, monkeypatch):
    devices = gpus(2)
    devices[0].compute = [(4_000_000, 40 * GiB)]  # someone else's job on cuda0
    fake = FakeNvml(devices)
    run = profiled(tmp_path, monkeypatch, fake)
    assert run.meta["device"] == "cpu" and not run.meta["gpu"]["available"]
    assert run.meta["absences"]["gpu"] == run.meta["gpu"]["reason"] == "the run trained on the CPU"
    assert run.samples["gpu_util_pct"].isna().all()  # not cuda0's 42 %
    assert "gpu_proc_mem_bytes" not in run.meta["absences"]  # the other job's pids are not a namespace question
    assert fake.live_inits == 0


def test_a_scenario_jobs_gpu_series_is_its_median_ranks_gpu():
    import pandas as pd

    from pipeprof.pipeline.ranks_run import median_gpu
    from pipeprof.run_folder import Run

    def rank(r, step_s, device):
        steps = pd.DataFrame({"step": range(4), "warmup": [True, False, False, False], "step_s": [9.0] + [step_s] * 3,
                              "samples": [4] * 4, "t_start_s": [0.0, 1.0, 2.0, 3.0]})
        return Run(meta={"status": "complete", "device": device, "rank": {"rank": r}}, steps=steps)

    runs = [rank(0, 0.3, "cuda:0"), rank(1, 0.1, "cuda:1"), rank(2, 0.2, "cuda:2")]
    assert median_gpu(runs) == 2  # the median rank (0.2 s) trained on cuda:2, not on GPU 0
    assert median_gpu([rank(0, 0.1, "cpu")]) is None
