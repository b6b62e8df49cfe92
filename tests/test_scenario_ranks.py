"""Scenarios with ranks (issue 15 item 6): ``train.ranks = N`` runs a scenario as a DDP job on this machine.

Validation of the keys, the collective-wait meter and the step timer with fake clocks, the shard
sampler, the job run's composition; then real 2-rank gloo jobs: rank 1's reads slowed
(``data.slow_ranks``) makes rank 0 wait in the all-reduce, compare and sweep read multi-rank runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import torch
from support.shared import made_once
from torch.utils.data import DistributedSampler

from pipeprof.analysis.ranks import median_rank
from pipeprof.cli.main import main
from pipeprof.errors import UsageError
from pipeprof.measure.clock import FakeClock
from pipeprof.measure.steps import StepTimer
from pipeprof.pipeline.ranks_run import job_run, rank_device, run_ranks
from pipeprof.pipeline.train import build_workload, profile_workload
from pipeprof.run_folder import STEP_COLUMNS, Run, load_run
from pipeprof.scenario import LoaderSpec, load_scenario, scenario_from_dict
from pipeprof.storage.device import DeviceDataset
from pipeprof.workload.data import build_data
from pipeprof.workload.distributed import CollectiveWait, DistributedParts, EveryPassSampler, ShardedDeviceBatches, backend_for

REPO = Path(__file__).resolve().parents[1]


def _scenario(**sections):
    raw = {"name": "t", "train": {"steps": 10, "warmup_steps": 2}}
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return scenario_from_dict(raw, "t.toml")


# ---- the scenario keys ---------------------------------------------------------------------


def test_ranks_default_to_one_process_and_shard_the_epoch():
    assert _scenario().train.ranks == 1
    s = _scenario(train={"ranks": 2, "epochs": 1, "steps": None}, data={"samples": 1001}, loader={"batch_size": 100})
    assert s.train.ranks == 2
    assert s.steps_per_epoch() == 6  # 501 samples per rank (padded): 5 full batches and one of 1
    assert s.total_steps() == 6
    assert _scenario(data={"samples": 1001}, loader={"batch_size": 100}).steps_per_epoch() == 11


@pytest.mark.parametrize("sections, words", [
    ({"train": {"ranks": 0}}, "train.ranks = 0 is not allowed: expected an integer >= 1"),
    ({"train": {"ranks": "2"}}, "train.ranks = '2' is not allowed: expected an integer >= 1"),
    ({"train": {"ranks": 2.0}}, "train.ranks = 2.0 is not allowed"),
    ({"data": {"slow_ranks": [1], "throttle": "nfs"}},
     "data.slow_ranks = [1] is not allowed with train.ranks = 1"),
    ({"data": {"slow_ranks": [1]}, "train": {"ranks": 2}}, "data.slow_ranks = [1] needs data.throttle"),
    ({"data": {"slow_ranks": [2], "throttle": "nfs"}, "train": {"ranks": 2}},
     "rank 2 does not exist (ranks 0 .. 1)"),
    ({"data": {"slow_ranks": [-1]}}, "data.slow_ranks = [-1] is not allowed: expected a list of rank numbers"),
    ({"data": {"slow_ranks": 1}}, "data.slow_ranks = 1 is not allowed"),
    ({"model": {"implementation": "scratch"}, "train": {"ranks": 2}}, "DistributedDataParallel wraps an nn.Module"),
    ({"model": {"compile": True}, "train": {"ranks": 2}}, "train.ranks = 2 is not allowed with model.compile"),
])
def test_bad_rank_settings_are_one_clear_line(sections, words):
    with pytest.raises(UsageError) as e:
        _scenario(**sections)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_bad_rank_count_exits_2_on_the_command_line(tmp_path, capsys):
    status = main(["run", str(REPO / "scenarios" / "ddp-balanced.toml"), "--set", "train.ranks=-1",
                   "--out", str(tmp_path), "--quiet"])
    assert status == 2
    assert "train.ranks = -1 is not allowed" in capsys.readouterr().err


def test_the_library_scenarios_load():
    straggler = load_scenario(REPO / "scenarios" / "ddp-straggler.toml")
    balanced = load_scenario(REPO / "scenarios" / "ddp-balanced.toml")
    assert straggler.train.ranks == balanced.train.ranks == 2
    assert straggler.data.slow_ranks == (1,) and straggler.data.throttle is not None
    assert balanced.data.slow_ranks == () and balanced.data.throttle is None
    assert straggler.to_dict()["data"]["slow_ranks"] == [1]


# ---- collective wait, with fake clocks ---------------------------------------------------------


class _Clocks:
    def __init__(self, queued: float | None = 0.0):
        self.wall, self.cpu = FakeClock(), FakeClock()
        self.queued = queued

    def run_queue(self):
        return self.queued


class _Loss:
    """A loss whose backward takes ``wall`` s, ``cpu`` of them on the CPU and ``queued`` waiting for a core."""

    def __init__(self, clocks, wall, cpu, queued):
        self.clocks, self.times = clocks, (wall, cpu, queued)

    def backward(self):
        wall, cpu, queued = self.times
        self.clocks.wall.advance(wall)
        self.clocks.cpu.advance(cpu)
        if self.clocks.queued is not None:
            self.clocks.queued += queued


def test_collective_wait_is_backward_time_off_the_cpu_not_waiting_for_a_core():
    clocks = _Clocks()
    meter = CollectiveWait(clocks.wall, clocks.cpu, clocks.run_queue)
    meter.backward(_Loss(clocks, wall=0.010, cpu=0.003, queued=0.002))
    assert meter.take() == pytest.approx(0.005)
    assert meter.take() == 0.0  # taken once
    meter.backward(_Loss(clocks, wall=0.004, cpu=0.004, queued=0.0))  # all on the CPU: no wait
    meter.backward(_Loss(clocks, wall=0.006, cpu=0.001, queued=0.0))
    assert meter.take() == pytest.approx(0.005)  # the step's passes add up


def test_collective_wait_without_run_queue_readings_counts_all_off_cpu_time():
    clocks = _Clocks(queued=None)
    meter = CollectiveWait(clocks.wall, clocks.cpu, clocks.run_queue)
    meter.backward(_Loss(clocks, wall=0.010, cpu=0.003, queued=0.002))
    assert meter.take() == pytest.approx(0.007)


def test_the_step_timer_moves_collective_wait_out_of_compute():
    clock = FakeClock(100.0)
    waits = iter([0.006, 0.5])  # the second more than the whole compute span: capped to it
    timer = StepTimer(clock, 100.0, collective_wait=lambda: next(waits))
    for compute_s in (0.010, 0.002):
        timer.begin()
        clock.advance(0.001)
        timer.waited()
        timer.copied()
        clock.advance(compute_s)
        timer.computed(16, 1.0, 3)
    timer.finish()
    first, second = timer.rows()
    assert list(first) == STEP_COLUMNS
    assert first["collective_wait_s"] == pytest.approx(0.006) and first["compute_s"] == pytest.approx(0.004)
    assert second["collective_wait_s"] == pytest.approx(0.002) and second["compute_s"] == pytest.approx(0.0)
    assert first["step_s"] == pytest.approx(0.011)


def test_without_a_source_the_timer_records_no_collective_wait():
    clock = FakeClock()
    timer = StepTimer(clock, 0.0)
    timer.begin()
    timer.waited()
    timer.copied()
    clock.advance(0.01)
    timer.computed(1, 0.0, 0)
    timer.finish()
    (row,) = timer.rows()
    assert row["collective_wait_s"] == 0.0 and row["compute_s"] == pytest.approx(0.01)


def test_on_device_shards_split_like_the_distributed_sampler():
    x = torch.arange(10, dtype=torch.float32).reshape(10, 1)
    dataset = DeviceDataset(x, np.arange(10))
    spec = LoaderSpec(batch_size=2, shuffle=True)
    shards = [ShardedDeviceBatches(dataset, spec, 3, rank, 3) for rank in range(3)]
    assert [len(s) for s in shards] == [2, 2, 2]  # 4 indices each (10 padded to 12), in batches of 2
    passes = [[int(v) for xb, _ in s for v in xb.flatten()] for s in shards]
    assert sorted(sum(passes, [])) == sorted(list(range(10)) + [passes[0][0], passes[1][0]])  # 2 padded repeats
    samplers = [list(DistributedSampler(list(range(10)), num_replicas=3, rank=r, shuffle=False)) for r in range(3)]
    unshuffled = [[int(v) for xb, _ in ShardedDeviceBatches(dataset, LoaderSpec(batch_size=2, shuffle=False), 3,
                                                            rank, 3) for v in xb.flatten()] for rank in range(3)]
    assert unshuffled == samplers


@pytest.mark.parametrize("storage", ["ram", "device"])
def test_a_ranks_batches_are_its_shard_and_only_slow_ranks_are_throttled(storage, tmp_path):
    data = {"storage": storage, "samples": 1001}
    if storage == "ram":
        data.update(throttle={"latency_ms": 1, "bandwidth_mb_s": 100}, slow_ranks=[1])
    s = _scenario(train={"ranks": 3, "epochs": 1, "steps": None}, data=data, loader={"batch_size": 100})
    built = [build_data(s, torch.device("cpu"), tmp_path, rank=DistributedParts(r, 3, "gloo")) for r in range(3)]
    assert [len(b.batches) for b in built] == [s.steps_per_epoch()] * 3 == [4] * 3  # 334 samples each
    assert [sum(len(batch[1]) for batch in b.batches) for b in built] == [334] * 3
    if storage == "ram":
        throttled = [getattr(b.dataset, "throttle", None) is not None for b in built]
        assert throttled == [False, True, False]


def test_every_pass_gets_a_new_shuffle_and_the_shards_cover_the_data():
    data = list(range(10))
    samplers = [EveryPassSampler(data, num_replicas=2, rank=r, shuffle=True, seed=3) for r in (0, 1)]
    first = [list(s) for s in samplers]
    second = [list(s) for s in samplers]
    assert sorted(first[0] + first[1]) == data and sorted(second[0] + second[1]) == data
    assert first != second


def test_each_rank_gets_a_gpu_of_its_own_where_there_are_enough_and_nccl_only_then(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert [rank_device(cuda, r, 2) for r in range(3)] == [torch.device("cuda", i) for i in (0, 1, 0)]
    assert rank_device(torch.device("cuda:1"), 1, 2) == torch.device("cuda", 0)
    assert rank_device(cpu, 3, 0) == cpu
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert backend_for(cuda, 2) == "gloo" and backend_for(cuda, 1) == "nccl"  # NCCL refuses two ranks on one GPU
    assert backend_for(cpu, 2) == "gloo"


# ---- the job run ---------------------------------------------------------------------------


def _rank_run(rank, step_s, status="complete", steps_run=6):
    steps = pd.DataFrame({"step": range(steps_run), "warmup": [True] + [False] * (steps_run - 1),
                          "step_s": [9.0] + [step_s] * (steps_run - 1), "samples": [4] * steps_run,
                          "t_start_s": [float(i) for i in range(steps_run)]})
    return Run(meta={"status": status, "error": None if status == "complete" else "boom", "absences": {},
                     "rank": {"rank": rank, "node": "n1", "pid": 100 + rank}}, steps=steps)


def test_the_median_rank_is_the_lower_middle_of_the_ranks_median_step_times():
    runs = [_rank_run(0, 0.3), _rank_run(1, 0.1), _rank_run(2, 0.2), _rank_run(3, 0.4)]
    assert median_rank(runs) == 2  # 0.1, 0.2 | 0.3, 0.4: the lower middle (warm-up's 9 s not counted)
    assert median_rank(runs[:3]) == 2
    assert median_rank([_rank_run(0, 0.5), _rank_run(1, 0.1)]) == 1


def test_the_job_run_holds_its_ranks_and_the_median_ranks_steps():
    runs = [_rank_run(1, 0.1, status="failed"), _rank_run(0, 0.3)]
    samples = pd.DataFrame({"t_s": [0.0]})
    job = job_run(runs, samples, pd.DataFrame(), job_id="127.0.0.1:1234")
    assert [r.meta["rank"]["rank"] for r in job.ranks] == [0, 1]
    assert job.meta["job"] == {"id": "127.0.0.1:1234", "world_size": 2, "ranks": [0, 1], "nodes": ["n1"],
                               "launcher": "scenario", "median_rank": 1, "untraced": []}  # 0.1 s of 0.1, 0.3
    assert job.steps is job.ranks[1].steps and job.samples is samples and "rank" not in job.meta
    assert job.meta["status"] == "failed" and job.meta["error"] == "rank 1: boom"


def test_the_job_error_names_first_the_rank_that_stopped_first():
    runs = [_rank_run(0, 0.1, status="failed", steps_run=6), _rank_run(1, 0.1, status="failed", steps_run=3),
            _rank_run(2, 0.1)]
    job = job_run(runs, pd.DataFrame(), pd.DataFrame(), job_id=None)
    assert job.meta["error"] == "rank 1: boom; rank 0: boom"


# ---- real jobs -----------------------------------------------------------------------------


def _fractions(steps):
    counted = steps[~steps["warmup"].astype(bool)]
    total = counted["step_s"].sum()
    return {k: counted[f"{k}_s"].sum() / total for k in ("data_wait", "collective_wait", "compute")}


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory):
    """ddp-straggler and ddp-balanced, each run once (2 ranks, gloo). No probes after the runs: these tests read
    the ranks' steps and collectives, not the predictions (5-7 s of probes a job, twice)."""
    def build(tmp: Path) -> list[str]:
        out, cache = tmp / "reports", tmp / "cache"
        common = ["--out", str(out), "--cache", str(cache), "--quiet", "--set", "profile.what_ifs=false"]
        for name in ("ddp-straggler", "ddp-balanced"):
            assert main(["run", str(REPO / "scenarios" / f"{name}.toml"), *common]) == 0
        jobs = [next(p for p in out.iterdir() if p.name.endswith(f"-{n}")) for n in ("ddp-straggler", "ddp-balanced")]
        return [str(out), str(cache), *map(str, jobs)]

    out, cache, straggler, balanced = map(Path, made_once(tmp_path_factory, "ddp-straggler, ddp-balanced", build))
    return out, cache, straggler, balanced


@pytest.mark.integration
def test_a_slow_ranks_data_makes_the_fast_rank_wait_in_the_all_reduce(two_jobs):
    _, _, folder, _ = two_jobs
    job = load_run(folder)
    fast, slow = job.ranks
    assert [r.meta["rank"]["rank"] for r in job.ranks] == [0, 1]
    for r in job.ranks:
        rank = r.meta["rank"]
        assert rank["world_size"] == 2 and rank["backend"] == "gloo" and rank["status"] == "complete"
        assert rank["pid"] > 0 and rank["node"] and r.meta["status"] == "complete"
        assert len(r.steps) == 40 and r.meta["environment"]["torch_threads"] == 1
    assert fast.meta["rank"]["pid"] != slow.meta["rank"]["pid"]
    f0, f1 = _fractions(fast.steps), _fractions(slow.steps)
    assert f0["collective_wait"] > 0.5, f0  # rank 0 waits for rank 1 in the gradient all-reduce ...
    assert f1["data_wait"] > 0.5, f1  # ... while rank 1 waits for its slow reads
    assert f1["collective_wait"] < 0.2 and f0["data_wait"] < 0.2
    # The ranks go in step (one all-reduce a step): rank 0 waits there about as long as rank 1 waits for data.
    assert abs(f0["collective_wait"] - f1["data_wait"]) < 0.15, (f0, f1)
    meta = job.meta["job"]
    assert meta["launcher"] == "scenario" and meta["world_size"] == 2 and meta["ranks"] == [0, 1]
    median = job.ranks[meta["median_rank"]]
    pd.testing.assert_frame_equal(job.steps, median.steps)
    # The parent sampled the whole tree: itself, the fork server, the ranks.
    assert len(job.samples) and {fast.meta["rank"]["pid"], slow.meta["rank"]["pid"]} <= set(job.processes["pid"])
    # One time axis: both ranks' steps start within a second of each other on the parent's clock.
    assert abs(fast.steps["t_start_s"].iloc[0] - slow.steps["t_start_s"].iloc[0]) < 1.0
    summary = json.loads((folder / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]


@pytest.mark.integration
def test_without_a_slow_rank_neither_rank_waits_mostly_for_data(two_jobs):
    _, _, _, folder = two_jobs
    job = load_run(folder)
    for r in job.ranks:
        assert _fractions(r.steps)["data_wait"] < 0.3


@pytest.mark.integration
def test_compare_reads_two_multi_rank_runs(two_jobs, capsys, tmp_path):
    _, _, straggler, balanced = two_jobs
    out = tmp_path  # the shared jobs' folder is read-only to the tests
    capsys.readouterr()
    assert main(["compare", str(straggler), str(balanced), "--out", str(out)]) == 0
    (folder,) = [p for p in out.iterdir() if "-compare-" in p.name]
    c = json.loads((folder / "compare.json").read_text())
    assert [r["status"] for r in c["runs"]] == ["complete", "complete"]
    (cmp,) = c["comparisons"]
    assert cmp["throughput_ratio"]["ratio"] > 1  # the balanced job is faster


@pytest.mark.integration
def test_a_sweep_over_ranks_runs_each_job_until_steady_with_every_rank_stopping_together(tmp_path, capsys):
    out, cache = tmp_path / "reports", tmp_path / "cache"
    status = main(["sweep", str(REPO / "scenarios" / "ddp-balanced.toml"), "--grid", "train.ranks=1,2",
                   "--set", "profile.what_ifs=false",  # the points' steps are the subject, not predictions
                   "--max-seconds", "1", "--out", str(out), "--cache", str(cache), "--quiet"])
    assert status == 0
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    doc = json.loads((folder / "sweep.json").read_text())
    by_label = {p["label"]: p for p in doc["points"]}
    assert [p["status"] for p in doc["points"]] == ["complete", "complete"]
    job = load_run(folder / by_label["ranks=2"]["folder"])
    assert job.meta["steady"]["max_seconds"] == 1 and len(job.ranks) == 2
    # Stopped by a time budget or steadiness that one rank reached first, yet both trained the same steps.
    assert len(job.ranks[0].steps) == len(job.ranks[1].steps) > 10
    assert by_label["ranks=2"]["samples_per_s"] > 0
    assert load_run(folder / by_label["ranks=1"]["folder"]).ranks == []


@pytest.mark.parametrize("command", ["diagnose", "tune"])
def test_commands_that_train_one_process_refuse_a_job_of_ranks(command, tmp_path, capsys):
    status = main([command, str(REPO / "scenarios" / "ddp-balanced.toml"), "--out", str(tmp_path), "--quiet"])
    assert status == 2
    assert "train.ranks = 2: a job of several ranks runs with pipeprof run or sweep" in capsys.readouterr().err


@pytest.mark.integration
def test_a_rank_killed_mid_run_is_recorded_failed_beside_the_others(tmp_path):
    scenario = load_scenario(REPO / "scenarios" / "ddp-straggler.toml", ["train.steps=3000"])
    me = psutil.Process()
    killed = []

    def kill_a_rank():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ranks = [p for p in me.children(recursive=True) if p.ppid() != me.pid]  # the fork server's children
            if len(ranks) == 2:
                time.sleep(6)  # both train by now (3000 steps take over a minute)
                killed.append(ranks[1].pid)
                os.kill(ranks[1].pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_rank, daemon=True)
    killer.start()
    job = run_ranks(scenario, context={}, cache=tmp_path / "cache")
    killer.join()
    assert killed
    (lost,) = [r for r in job.ranks if r.meta["rank"]["pid"] == killed[0]]
    (kept,) = [r for r in job.ranks if r is not lost]
    assert lost.meta["status"] == "failed" and "was killed by signal SIGKILL without saving its run" in \
        lost.meta["error"] and len(lost.steps) == 0 and lost.meta["rank"]["status"] == "failed"
    assert kept.meta["status"] == "failed" and 0 < len(kept.steps) < 3000  # its all-reduce saw the peer go
    assert job.meta["status"] == "failed"
    assert job.meta["error"].startswith(f"rank {lost.meta['rank']['rank']}: ")  # the cause first
    assert [r.meta["rank"]["rank"] for r in job.ranks] == [0, 1]


@pytest.mark.integration
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupted_job_saves_every_ranks_steps(how, tmp_path):
    out = tmp_path / "reports"
    proc = subprocess.Popen([sys.executable, "-m", "pipeprof", "run", str(REPO / "scenarios" / "ddp-straggler.toml"),
                             "--set", "train.steps=3000", "--out", str(out), "--cache", str(tmp_path / "cache"),
                             "--quiet"], start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(psutil.Process(proc.pid).children(recursive=True)) < 4:
        time.sleep(0.1)  # the fork server, the resource tracker and both ranks
    time.sleep(5)  # both train by now (3000 steps take over a minute)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: to the foreground process group
    else:
        proc.send_signal(signal.SIGTERM)  # to pipeprof alone, which passes it on to the ranks
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == (130 if how == "ctrl-c" else 143), err
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    job = load_run(folder)
    assert job.meta["status"] == "interrupted"
    assert job.meta["error"] == ("interrupted by the user (Ctrl-C)" if how == "ctrl-c" else "terminated (SIGTERM)")
    # Rank 1 is interrupted waiting for its data; rank 0, blocked in the all-reduce, is interrupted once rank 1
    # has left it (a closed connection, and the pending signal): both save their steps.
    assert job.ranks[1].meta["status"] == "interrupted" and job.ranks[0].meta["status"] in ("interrupted", "failed")
    assert len(job.ranks[1].steps) > 5 and abs(len(job.ranks[0].steps) - len(job.ranks[1].steps)) <= 1


def test_a_rank_without_a_collective_meter_records_the_absence(tmp_path):
    """On CUDA a rank has no meter (NCCL does not block the host): its collective wait is 0 and said absent."""
    scenario = _scenario(data={"samples": 256}, loader={"batch_size": 32}, model={"hidden": [16]},
                         train={"device": "cpu", "threads": 1})
    work = build_workload(scenario, tmp_path)
    work.rank = DistributedParts(0, 1, "nccl")  # what a CUDA rank holds: no model wrapped here, no meter
    run = profile_workload(work)
    assert run.meta["status"] == "complete"
    assert "not measured on CUDA (nccl)" in run.meta["absences"]["collective_wait"]
    assert (run.steps["collective_wait_s"] == 0).all()
    assert run.meta["compute_ceiling"]["samples_per_s"] > 0
