"""make gpu-check without a GPU: every check skipped with its reason (exit 0), the runner's isolation and exit
status with injected checks, and every invariant of pipeprof/gpu_check/checks.py on passing and failing records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from pipeprof.gpu_check import cases, checks, sim_device
from pipeprof.gpu_check.cases import CaseError, Check, Context
from pipeprof.gpu_check.runner import Device, main, run_checks
from pipeprof.run_folder import SAMPLE_COLUMNS, Run, save_run, to_json

ROOT = Path(__file__).resolve().parent.parent
CUDA_TIMING = {"method": "cuda-events", "parts": {"data_wait": "cuda-events", "h2d": "cuda-events",
                                                  "compute": "cuda-events"}, "reason": None}


def steps_table(rows, warmup=1):
    """steps.csv rows from (data_wait_s, h2d_s, compute_s, step_s); the first ``warmup`` are warm-up."""
    return pd.DataFrame([{"step": i, "epoch": 0, "warmup": i < warmup, "t_start_s": i * 0.01, "data_wait_s": w,
                          "h2d_s": h, "compute_s": c, "step_s": s, "host_wait_s": w, "samples": 32,
                          "loss": 1.0, "correct": 8}
                         for i, (w, h, c, s) in enumerate(rows)])


def samples_table(util=(50.0, 70.0), mem=(2e9, 2.1e9)):
    return pd.DataFrame({"t_s": [0.1 * i for i in range(len(util))], "gpu_util_pct": list(util),
                         "gpu_mem_used_bytes": list(mem), "pcie_rx_bytes_per_s": [1e9] * len(util)})


# ---- the command without CUDA ------------------------------------------------------------------


def test_without_cuda_every_check_is_skipped_with_its_reason_and_it_exits_0(tmp_path):
    out = tmp_path / "gpu-check.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # skipped even on a machine with a GPU
    done = subprocess.run([sys.executable, "-m", "pipeprof.gpu_check", "--out", str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["cuda"] is False and doc["device"] is None
    assert doc["reason"].startswith("torch.cuda.is_available() is False: ")
    assert len(doc["checks"]) >= 10
    names = [c["name"] for c in doc["checks"]]
    assert len(set(names)) == len(names)
    for c in doc["checks"]:
        assert set(c) >= {"name", "status", "detail"}
        assert c["status"] == "skipped" and c["detail"] == doc["reason"]
    assert "0 passed, 0 failed" in done.stdout and "skipped" in done.stdout
    assert not list(tmp_path.glob("pipeprof-gpu-check-*"))  # nothing left beside the JSON


def test_the_list_names_every_path_the_issue_asks_for_and_one_check_per_simulated_case():
    names = [c.name for c in cases.all_checks()]
    for wanted in ("scenario-pinned", "scenario-pageable", "device-ideal", "profiled-script", "python-api",
                   "probe-h2d", "probe-matmul", "sweep-3-points", "tune-2-trials", "ddp-2-ranks",
                   "gpu-util-compute-bound", "gpu-util-input-bound"):
        assert wanted in names
    assert [n for n in names if n.startswith("sim-device:")] == [f"sim-device:{c.name}" for c in sim_device.CASES]


# ---- the runner ----------------------------------------------------------------------------------


def ok(ctx):
    return checks.passed("fine")


def boom(ctx):
    raise ValueError("the device\nfell over")


def test_a_check_that_raises_is_a_fail_with_its_one_line_error_and_the_others_still_run(tmp_path):
    listed = [Check("first", "", ok), Check("raises", "", boom), Check("wrong type", "", lambda ctx: "yes"),
              Check("last", "", ok)]
    results = run_checks(listed, Device(True, "Fake GPU"), Context(tmp_path))
    assert [(r["name"], r["status"]) for r in results] == [("first", "pass"), ("raises", "fail"),
                                                           ("wrong type", "fail"), ("last", "pass")]
    assert results[1]["detail"] == "ValueError: the device fell over"
    assert "not an Outcome" in results[2]["detail"]


def test_without_cuda_no_check_runs(tmp_path):
    results = run_checks([Check("raises", "", boom)], Device(False, None, "no CUDA here"), Context(tmp_path))
    assert results[0]["status"] == "skipped" and results[0]["detail"] == "no CUDA here"


def test_exit_status_is_1_when_a_check_fails_and_0_when_all_pass(tmp_path, capsys):
    out = tmp_path / "r.json"
    gpu = Device(True, "Fake GPU")
    assert main(["--out", str(out)], checklist=[Check("a", "", ok), Check("b", "", boom)], device=gpu) == 1
    doc = json.loads(out.read_text())
    assert doc["cuda"] is True and doc["device"] == "Fake GPU"
    assert [c["status"] for c in doc["checks"]] == ["pass", "fail"]
    assert main(["--out", str(out)], checklist=[Check("a", "", ok)], device=gpu) == 0
    assert main(["--out", str(out), "--only", "b"], checklist=[Check("a", "", ok), Check("b", "", boom)],
                device=gpu) == 1
    assert [c["name"] for c in json.loads(out.read_text())["checks"]] == ["b"]
    assert main(["--out", str(out), "--only", "nope"], checklist=[Check("a", "", ok)], device=gpu) == 2
    assert "Fake GPU" in capsys.readouterr().out


def test_a_command_past_the_checks_time_limit_is_a_fail_and_a_failing_one_names_its_last_line(tmp_path):
    ctx = Context(tmp_path)
    ctx.deadline = time.monotonic() + 1.5
    start = time.monotonic()
    with pytest.raises(CaseError, match="sleeper: timed out"):
        ctx.command([sys.executable, "-c", "import time; time.sleep(30)"], "sleeper")
    assert time.monotonic() - start < 10
    ctx.deadline = time.monotonic() + 30
    with pytest.raises(CaseError, match="exit 3: last words"):
        ctx.command([sys.executable, "-c", "import sys; print('x', file=sys.stderr); "
                     "print('last words', file=sys.stderr); sys.exit(3)"], "crasher")


def test_a_run_several_checks_need_is_made_once_and_its_error_fails_each_of_them(tmp_path):
    ctx = Context(tmp_path)
    made = []

    def make():
        made.append(1)
        raise CaseError("probe: exit 1: no GPU after all")

    listed = [Check(n, "", lambda c: checks.passed(str(c.once("probe", make)))) for n in ("h2d", "matmul")]
    results = run_checks(listed, Device(True, "Fake GPU"), ctx)
    assert made == [1]
    assert [r["detail"] for r in results] == ["CaseError: probe: exit 1: no GPU after all"] * 2


# ---- the invariants ------------------------------------------------------------------------------


def test_timing_on_device():
    assert checks.timing_on_device({"timing": CUDA_TIMING}, {"timing": CUDA_TIMING}).status == "pass"
    assert checks.timing_on_device({"timing": CUDA_TIMING}, {}).status == "pass"  # a summary without timing
    host = {"method": "host-clock", "parts": {}, "reason": "CUDA events unavailable"}
    out = checks.timing_on_device({"timing": host})
    assert out.status == "fail" and "host-clock" in out.detail and "CUDA events unavailable" in out.detail
    assert checks.timing_on_device({"timing": CUDA_TIMING}, {"timing": host}).status == "fail"
    assert checks.timing_on_device({}).status == "fail"
    assert checks.timing_on_device({"timing": {**CUDA_TIMING, "method": "mixed"}}).status == "fail"


def test_parts_within_step():
    good = steps_table([(9, 9, 9, 1.0), (0.2, 0.1, 0.6, 1.0), (0.2, 0.1, 0.705, 1.0)])  # the warm-up is not counted
    assert checks.parts_within_step(good).status == "pass"  # 1.005: within the 1 % tolerance
    bad = steps_table([(0.1, 0.1, 0.1, 1.0), (0.2, 0.1, 0.6, 1.0), (0.5, 0.1, 0.6, 1.0)])
    out = checks.parts_within_step(bad)
    assert out.status == "fail" and "1 of 2 counted steps" in out.detail and "step 2" in out.detail
    with_nan = steps_table([(0, 0, 0, 1.0), (float("nan"), 0.1, 0.5, 1.0), (0.1, 0.1, 0.1, float("nan"))])
    assert checks.parts_within_step(with_nan).status == "pass"
    assert checks.parts_within_step(steps_table([(0, 0, 0, 1.0)])).status == "fail"  # only warm-up
    assert checks.parts_within_step(pd.DataFrame()).status == "fail"
    as_read = steps_table([(0, 0, 0, 1.0), (0.5, 0.1, 0.6, 1.0)]).astype({"warmup": str})  # "True"/"False" text
    assert checks.parts_within_step(as_read).status == "fail"


def test_gpu_columns_in_range():
    out = checks.gpu_columns_in_range(samples_table())
    assert out.status == "pass" and "gpu_util_pct 50..70" in out.detail
    assert checks.gpu_columns_in_range(samples_table(util=(50.0, 120.0))).status == "fail"
    assert checks.gpu_columns_in_range(samples_table(util=(-1.0, 20.0))).status == "fail"
    assert checks.gpu_columns_in_range(samples_table(mem=(0.0, 2e9))).status == "fail"
    assert checks.gpu_columns_in_range(samples_table(util=(float("nan"),) * 2)).status == "fail"  # never sampled
    assert checks.gpu_columns_in_range(samples_table().drop(columns=["gpu_util_pct"])).status == "fail"
    per_process = samples_table().assign(gpu_proc_util_pct=[10.0, 130.0])
    assert "gpu_proc_util_pct" in checks.gpu_columns_in_range(per_process).detail
    assert checks.gpu_columns_in_range(per_process).status == "fail"
    assert checks.gpu_columns_in_range(samples_table().assign(pcie_rx_bytes_per_s=[1.0, -5.0])).status == "pass"
    assert checks.gpu_columns_in_range(samples_table().assign(gpu_proc_mem_bytes=[1.0, -5.0])).status == "fail"


def test_utilization_bounds_read_the_summary_else_the_samples():
    summary = {"gpu": {"mean_util_pct": 92.0}, "fractions": {"data_wait": 0.01, "compute": 0.95}}
    high = checks.utilization(summary, samples_table(), above=60)
    assert high.status == "pass" and "92.0 %" in high.detail and "compute 95.0 %" in high.detail
    assert checks.utilization(summary, samples_table(), below=40).status == "fail"
    from_samples = checks.utilization({"gpu": {"mean_util_pct": None}}, samples_table(util=(10.0, 20.0)), below=40)
    assert from_samples.status == "pass" and "15.0 %" in from_samples.detail
    assert checks.utilization({}, samples_table(util=(10.0, 20.0)), above=60).status == "fail"
    assert checks.utilization({}, pd.DataFrame({"t_s": [0.0]}), below=40).status == "fail"  # nothing sampled


def test_data_wait_below():
    assert checks.data_wait_below({"fractions": {"data_wait": 0.02}}, 0.1).status == "pass"
    assert checks.data_wait_below({"fractions": {"data_wait": 0.3}}, 0.1).status == "fail"
    assert checks.data_wait_below({"fractions": {}}, 0.1).status == "fail"


def test_pinned_at_least_pageable():
    h2d = {"buffer_bytes": 16 << 20, "pinned": {"median_bytes_per_s": 50e9}, "pageable": {"median_bytes_per_s": 20e9}}
    out = checks.pinned_at_least_pageable(h2d)
    assert out.status == "pass" and "pinned 50.00 GB/s" in out.detail and "x2.50" in out.detail
    slower = {**h2d, "pinned": {"median_bytes_per_s": 10e9}}
    assert checks.pinned_at_least_pageable(slower).status == "fail"
    refused = {**h2d, "pinned": {"absent": "cannot allocate pinned host memory"}}
    assert "cannot allocate" in checks.pinned_at_least_pageable(refused).detail
    assert checks.pinned_at_least_pageable({"absent": "no CUDA device"}).status == "fail"


def matmul(device="cuda:0", ratios=(1.0, 0.7, 0.75, 0.8, 0.9)):
    sizes = {str(n): {"n": n, "median_gflop_per_s": 40000 * r, "ratio_to_reference": r}
             for n, r in zip(cases.MATMUL_SIZES, ratios)}
    return {"device": device, "sizes": sizes, "float32_matmul_precision": "highest"}


def test_matmul_on_gpu_reports_every_size_beside_the_bus_width():
    gpu = {"devices": [{"name": "NVIDIA H200", "memory_bus_width_bits": 6144}]}
    out = checks.matmul_on_gpu(matmul(), gpu, cases.MATMUL_SIZES)
    assert out.status == "pass"
    assert "1024: 40000 GFLOP/s x1.000" in out.detail and "1025: 28000 GFLOP/s x0.700" in out.detail
    assert "memory bus 6144 bits" in out.detail
    assert "bus width absent (NVML absent)" in checks.matmul_on_gpu(matmul(), {"absent": "NVML absent"},
                                                                    cases.MATMUL_SIZES).detail
    assert checks.matmul_on_gpu(matmul(device="cpu"), gpu, cases.MATMUL_SIZES).status == "fail"
    assert checks.matmul_on_gpu(matmul(ratios=(1.0, 0.7, 0.75, 0.8, 90.0)), gpu, cases.MATMUL_SIZES).status == "fail"
    missing = matmul()
    del missing["sizes"]["1032"]
    assert "size 1032 missing" in checks.matmul_on_gpu(missing, gpu, cases.MATMUL_SIZES).detail


def test_fractions_agree_within_ten_points():
    sim = {"data_wait": 0.55, "h2d": 0.05, "compute": 0.30, "other": 0.10}
    near = checks.fractions_agree({"data_wait": 0.60, "compute": 0.22}, sim)
    assert near.status == "pass" and "data_wait real 60.0 % vs simulated 55.0 %" in near.detail
    far = checks.fractions_agree({"data_wait": 0.66, "compute": 0.30}, sim)
    assert far.status == "fail" and "11.0 points apart" in far.detail
    assert checks.fractions_agree({"data_wait": None, "compute": 0.3}, sim).status == "fail"


def test_run_complete_and_all_of():
    assert checks.run_complete({"status": "complete"}).status == "pass"
    failed = checks.run_complete({"status": "failed", "error": "RuntimeError: CUDA out of memory"})
    assert failed.status == "fail" and "out of memory" in failed.detail
    both = checks.all_of([checks.passed("a"), checks.failed("b"), checks.failed("c")])
    assert both == checks.Outcome("fail", "b; c")
    assert checks.all_of([checks.passed("a"), checks.passed("b")]) == checks.Outcome("pass", "a; b")
    assert checks.all_of([]).status == "fail"
    with pytest.raises(ValueError):
        checks.Outcome("fine", "")


# ---- the runs, on synthetic run folders --------------------------------------------------------


def write_run(folder, *, timing=CUDA_TIMING, rows=((0, 0, 0, 1.0), (0.2, 0.1, 0.6, 1.0)), samples=None, job=None):
    meta = {"status": "complete", "error": None, "timing": timing, "device": "cuda"}
    if job:
        meta["job"] = job
    summary = {"timing": timing, "fractions": {"data_wait": 0.2, "compute": 0.6}, "gpu": {"mean_util_pct": 55.0}}
    samples = samples_table() if samples is None else samples
    samples = samples.assign(**{c: 0.0 for c in SAMPLE_COLUMNS if c not in samples})  # the host's columns
    run = Run(meta=meta, steps=steps_table(rows), samples=samples)
    return save_run(run, folder, {"summary.json": to_json(summary)})


def test_a_run_folder_passes_the_run_invariants_and_a_host_clocked_one_fails_them(tmp_path):
    good = cases.read_run(write_run(tmp_path / "good"))
    assert checks.all_of(cases.run_invariants(good)).status == "pass"
    host = {"method": "host-clock", "parts": {}, "reason": "no CUDA"}
    bad = cases.read_run(write_run(tmp_path / "bad", timing=host, rows=((0, 0, 0, 1), (0.5, 0.1, 0.6, 1.0))))
    out = checks.all_of(cases.run_invariants(bad))
    assert out.status == "fail" and "host-clock" in out.detail and "1 of 1 counted steps" in out.detail


class FakeContext(Context):
    """A context whose pipeprof commands write what ``make`` writes into the folder given as --out."""

    def __init__(self, tmp, make):
        super().__init__(tmp)
        self.make, self.calls = make, []

    def pipeprof(self, *args, what):
        self.calls.append(args)
        self.make(Path(args[args.index("--out") + 1]), args)
        return subprocess.CompletedProcess(args, 0, "", "")


def test_the_sweep_check_reads_every_points_run_folder(tmp_path):
    def make(out, args, statuses=("complete",) * 3):
        folder = out / "20260101T000000Z-sweep-quick"
        points = []
        for i, status in enumerate(statuses):
            write_run(folder / "points" / f"p{i}")
            points.append({"index": i, "label": f"num_workers={i}", "status": status, "folder": f"points/p{i}",
                           "samples_per_s": 1000.0 * (i + 1)})
        (folder / "sweep.json").write_text(json.dumps({"points": points}))

    ctx = FakeContext(tmp_path, make)
    out = cases.sweep(ctx)
    assert out.status == "pass", out.detail
    assert "3 of 3 points complete" in out.detail and "num_workers=2 3,000/s" in out.detail
    assert "--grid" in ctx.calls[0] and "loader.num_workers=0,1,2" in ctx.calls[0]
    ctx = FakeContext(tmp_path / "b", lambda out, args: make(out, args, ("complete", "failed", "complete")))
    assert cases.sweep(ctx).status == "fail"


def test_the_ddp_check_wants_a_job_of_two_ranks(tmp_path):
    two = FakeContext(tmp_path / "a", lambda out, args: write_run(out / "job", job={"world_size": 2, "ranks": [0, 1]}))
    assert cases.ddp_job(two).status == "pass"
    assert "--set=train.device=cuda" in two.calls[0]
    one = FakeContext(tmp_path / "b", lambda out, args: write_run(out / "job"))
    out = cases.ddp_job(one)
    assert out.status == "fail" and "expected a job of 2 ranks" in out.detail


def test_the_make_target_runs_the_module_after_install():
    text = (ROOT / "Makefile").read_text()
    assert "gpu-check: install\n\t$(PY) -m pipeprof.gpu_check --out reports/gpu-check.json" in text
    assert "gpu-check" in text.split(".PHONY:", 1)[1].splitlines()[0]


# ---- the CUDA truths (issue 31): the list, and each invariant on passing and failing records -------------


def test_the_list_has_the_cuda_truth_checks_and_at_least_16_named_checks():
    from pipeprof.gpu_check.runner import every_check

    names = [c.name for c in every_check()]
    assert len(names) >= 16 and len(set(names)) == len(names)
    for wanted in ("last-device", "script-sets-visible-devices", "fork-after-start", "long-run-no-host-sync",
                   "side-stream-prefetcher", "peak-memory-kept", "nvml-per-process", "ddp-nccl-max-seconds",
                   "verify-recommendation"):
        assert wanted in names


def test_truth_invariants_on_passing_and_failing_records():
    from pipeprof.gpu_check import truth_checks as t

    assert t.on_device({"device": "cuda:1"}, {"device": "cuda:1"}).status == "pass"
    assert t.on_device({"device": "cuda"}, {"device": "cuda:1"}).status == "fail"
    memory = pd.DataFrame({"allocated_bytes": [0, 5 << 20]})
    assert t.memory_follows(memory).status == "pass"
    assert t.memory_follows(pd.DataFrame({"allocated_bytes": [0, 0]})).status == "fail"  # device 0's zeros
    assert t.no_context_elsewhere({"device": "cuda:1", "contexts": [1], "device_count": 2}).status == "pass"
    assert t.no_context_elsewhere({"device": "cuda:1", "contexts": [0, 1], "device_count": 2}).status == "fail"
    assert t.no_context_elsewhere({"device": "cuda:1", "contexts": [], "device_count": 2}).status == "skipped"
    assert t.no_host_sync({"host_syncs_during_steps": {}}, 600).status == "pass"
    assert t.no_host_sync({"host_syncs_during_steps": {"synchronize": 2}}, 600).status == "fail"
    assert t.no_host_sync({}, 600).status == "fail"
    assert t.h2d_overlapped({"fractions": {"h2d": 0.01}}).status == "pass"
    assert t.h2d_overlapped({"fractions": {"h2d": 0.3}}).status == "fail"
    assert t.peak_kept({"max_memory_allocated": 300 << 20}).status == "pass"
    assert t.peak_kept({"max_memory_allocated": 40 << 20}).status == "fail"  # reset under the script
    cols = ("gpu_proc_util_pct",)
    zeros = pd.DataFrame({"gpu_proc_util_pct": [0.0, 0.0]})
    assert t.per_process_gpu({"absences": {}}, zeros, cols).status == "fail"  # a silent 0
    assert t.per_process_gpu({"absences": {"gpu_proc_util_pct": "pids of another namespace"}}, zeros,
                             cols).status == "pass"
    assert t.per_process_gpu({}, pd.DataFrame({"gpu_proc_util_pct": [0.0, 41.0]}), cols).status == "pass"
    verified = {"status": "complete", "set": "loader.num_workers=4", "predicted_samples_per_s": 9000.0,
                "measured_samples_per_s": 8000.0}
    outcome = t.predicted_vs_measured(verified)
    assert outcome.status == "pass" and "predicted 9,000/s, measured 8,000/s" in outcome.detail
    assert t.predicted_vs_measured({"status": "failed", "reason": "boom"}).status == "fail"
    assert t.predicted_vs_measured(None).status == "fail"


@pytest.mark.parametrize("backend, status", [("nccl", "pass"), ("gloo", "fail")])
def test_the_nccl_check_reads_each_ranks_own_backend(tmp_path, monkeypatch, backend, status):
    import torch

    from pipeprof.gpu_check import truth_cases

    def make(out, args):  # a 2-rank job: the job's ``ranks`` holds rank numbers, each rank's run.json its backend
        samples = samples_table().assign(**{c: 0.0 for c in SAMPLE_COLUMNS if c not in samples_table()})
        ranks = [Run(meta={"status": "complete", "error": None, "device": "cuda",
                           "rank": {"rank": r, "world_size": 2, "backend": backend}},
                     steps=steps_table(((0, 0, 0, 1.0), (0.2, 0.1, 0.6, 1.0))), samples=samples)
                 for r in (0, 1)]
        job = Run(meta={"status": "complete", "error": None, "device": "cuda",
                        "job": {"world_size": 2, "ranks": [0, 1]}}, steps=ranks[0].steps,
                  samples=samples, ranks=ranks)
        save_run(job, out / "job")

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    out = truth_cases.ddp_nccl_max_seconds(FakeContext(tmp_path, make))
    assert out.status == status, out.detail
    assert ("backend nccl" in out.detail) if status == "pass" else (f"backends {{'{backend}'}}" in out.detail)
