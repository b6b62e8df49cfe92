"""What ``make gpu-check`` runs on the GPU, and which invariants (checks.py) each check asserts on it.

Every CUDA run is a short real pipeprof command in a subprocess (``python -m
pipeprof run|profile|probe|sweep|tune``, or a small script using the Python
API), its output under the context's temporary folder; a run that several
checks read (the probe) is made once. A check has a time limit: every command
it starts gets the time left of it, and one that outlives it is a fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pipeprof.gpu_check import checks
from pipeprof.gpu_check.checks import Outcome
from pipeprof.gpu_check.sim_device import CASES
from pipeprof.measure.probe import MATMUL_SIZES
from pipeprof.run_folder import load_run

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent.parent
SCENARIOS = ROOT / "scenarios"
CUDA = "train.device=cuda"
DEVICE_IDEAL_MAX_WAIT = 0.10  # data on the device: at most 10 % of step time waiting for a batch


class CaseError(RuntimeError):
    """A command of a check failed or ran out of time: the check fails with this one line."""


@dataclass(frozen=True)
class RunFiles:
    """One run folder, read: run.json, summary.json, steps.csv, samples.csv."""

    folder: Path
    meta: dict[str, Any]
    summary: dict[str, Any]
    steps: pd.DataFrame
    samples: pd.DataFrame


def read_run(folder: Path) -> RunFiles:
    run = load_run(folder)
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return RunFiles(folder, run.meta, summary, run.steps, run.samples)


def run_folders(out: Path) -> list[Path]:
    """Run folders (a run.json) directly under ``out``, oldest name first."""
    return sorted(p.parent for p in out.glob("*/run.json"))


def only_run_folder(out: Path) -> Path:
    found = run_folders(out)
    if len(found) != 1:
        raise CaseError(f"expected one run folder under {out}, found {len(found)}")
    return found[0]


class Context:
    """Where a gpu-check writes (``tmp``), how it starts pipeprof, and the runs already made."""

    def __init__(self, tmp: Path, python: str = sys.executable, env: dict[str, str] | None = None) -> None:
        self.tmp = Path(tmp)
        self.python = python
        self.env = {**os.environ, **(env or {}), "PIPEPROF_CACHE": str(self.tmp / "cache"),
                    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.deadline = float("inf")  # monotonic seconds: set by the runner for each check
        self._made: dict[str, tuple[bool, Any]] = {}

    def folder(self, name: str) -> Path:
        path = self.tmp / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def once(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()``'s result, made the first time only; an error is kept and raised again for every check."""
        if key not in self._made:
            try:
                self._made[key] = (True, make())
            except Exception as e:  # noqa: BLE001 - kept for the other checks that need it, raised below
                self._made[key] = (False, e)
        ok, value = self._made[key]
        if not ok:
            raise value
        return value

    def command(self, args: list[str], what: str) -> subprocess.CompletedProcess[str]:
        """Run ``args`` (in the repository root) within the check's time left; a non-zero exit is a CaseError."""
        left = self.deadline - time.monotonic()
        if left <= 1:
            raise CaseError(f"{what}: no time left of the check's limit")
        try:
            done = subprocess.run(args, cwd=ROOT, env=self.env, capture_output=True, text=True,
                                  timeout=None if left == float("inf") else left)
        except subprocess.TimeoutExpired:
            raise CaseError(f"{what}: timed out after {left:.0f} s") from None
        if done.returncode != 0:
            tail = [line for line in (done.stderr or done.stdout or "").splitlines() if line.strip()][-1:]
            raise CaseError(f"{what}: exit {done.returncode}: {tail[0].strip() if tail else 'no output'}")
        return done

    def pipeprof(self, *args: str, what: str) -> subprocess.CompletedProcess[str]:
        return self.command([self.python, "-m", "pipeprof", *args], what)


@dataclass(frozen=True)
class Check:
    """A named check: ``what`` it runs and asserts (one line, for the docs' table), ``run`` it, its limit."""

    name: str
    what: str
    run: Callable[[Context], Outcome]
    limit_s: float = 90.0


# ---- the runs ----------------------------------------------------------------------------------


def scenario_run(ctx: Context, key: str, scenario: str, *sets: str) -> RunFiles:
    """``pipeprof run scenarios/<scenario> --set train.device=cuda --set ...`` (made once per key)."""

    def make() -> RunFiles:
        out = ctx.folder(key)
        flags = [f"--set={s}" for s in (CUDA, *sets)]
        ctx.pipeprof("run", str(SCENARIOS / scenario), *flags, "--out", str(out), "--quiet", what=f"pipeprof run {scenario}")
        return read_run(only_run_folder(out))

    return ctx.once(key, make)


def run_invariants(files: RunFiles) -> list[Outcome]:
    """What every CUDA run must show: complete, device-clock timing, parts within the step, GPU columns."""
    return [checks.run_complete(files.meta), checks.timing_on_device(files.meta, files.summary),
            checks.parts_within_step(files.steps), checks.gpu_columns_in_range(files.samples)]


def scenario_check(key: str, scenario: str, *sets: str, extra: Callable[[RunFiles], list[Outcome]] | None = None
                   ) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        files = scenario_run(ctx, key, scenario, *sets)
        return checks.all_of([*run_invariants(files), *(extra(files) if extra else [])])

    return run


SHORT = ("train.steps=120", "train.max_seconds=6")
PINNED = ("pinned", "pinned-memory.toml", *SHORT)
PAGEABLE = ("pageable", "pageable-memory.toml", *SHORT)
DEVICE_IDEAL = ("device-ideal", "device-ideal.toml", *SHORT)
# A wide MLP on device-resident data: seconds of matmuls, no loading at all.
COMPUTE_BOUND = ("compute-bound", "device-ideal.toml", "model.hidden=[8192,8192,8192]", "loader.batch_size=4096",
                 "data.samples=32768", "train.steps=400", "train.max_seconds=8", "train.warmup_steps=5")
# A CPU-heavy random-affine augmentation per sample in the training process: the GPU waits.
INPUT_BOUND = ("input-bound", "augment-heavy.toml", "train.steps=400", "train.max_seconds=8", "train.threads=1")
DDP = ("ddp", "ddp-balanced.toml", "train.steps=40")


def profiled_script(ctx: Context) -> Outcome:
    out = ctx.folder("script")
    ctx.pipeprof("profile", "--out", str(out), "--steps", "150", "--warmup-steps", "10", "--quiet", "--",
                 ctx.python, str(PACKAGE / "train_script.py"), what="pipeprof profile -- python train_script.py")
    files = read_run(only_run_folder(out))
    return checks.all_of([*run_invariants(files), _h2d_timed(files)])


def python_api(ctx: Context) -> Outcome:
    out = ctx.folder("api")
    done = ctx.command([ctx.python, "-m", "pipeprof.gpu_check.api_loop", "--out", str(out), "--steps", "150"],
                       "pipeprof.profile() loop")
    folder = Path(json.loads(done.stdout.strip().splitlines()[-1])["folder"])
    files = read_run(folder)
    return checks.all_of([*run_invariants(files), _h2d_timed(files)])


def _h2d_timed(files: RunFiles) -> Outcome:
    h2d = pd.to_numeric(files.steps.get("h2d_s", pd.Series(dtype=float)), errors="coerce").dropna()
    if h2d.empty or not (h2d > 0).any():
        return checks.failed("no batch copy to the device was timed (h2d_s empty or zero)")
    return checks.passed(f"batch copies timed in {int((h2d > 0).sum())} steps (median {h2d.median() * 1e3:.3f} ms)")


def probe(ctx: Context) -> dict[str, Any]:
    """``pipeprof probe --quick --refresh --json`` (cache in the temporary folder), made once."""

    def make() -> dict[str, Any]:
        done = ctx.pipeprof("probe", "--quick", "--refresh", "--json", "--cache", str(ctx.folder("probe-cache")),
                            what="pipeprof probe --quick")
        doc: dict[str, Any] = json.loads(done.stdout)
        return doc

    return ctx.once("probe", make)


def probe_h2d(ctx: Context) -> Outcome:
    return checks.pinned_at_least_pageable(probe(ctx).get("h2d") or {"absent": "no h2d section"})


def probe_matmul(ctx: Context) -> Outcome:
    doc = probe(ctx)
    return checks.matmul_on_gpu(doc.get("matmul") or {}, doc.get("gpu") or {}, MATMUL_SIZES)


def _document(out: Path, name: str) -> tuple[dict[str, Any], Path]:
    found = sorted(out.glob(f"*/{name}"))
    if len(found) != 1:
        raise CaseError(f"expected one {name} under {out}, found {len(found)}")
    return json.loads(found[0].read_text()), found[0].parent


def _point_timing(points: Iterable[dict[str, Any]], folder: Path) -> list[Outcome]:
    outcomes = []
    for p in points:
        if not p.get("folder"):
            outcomes.append(checks.failed(f"point {p.get('index')} ({p.get('label')}) has no run folder"))
            continue
        path = Path(p["folder"])
        path = path if path.is_absolute() else folder / path
        files = read_run(path)
        outcomes += [checks.Outcome(o.status, f"{p.get('label')}: {o.detail}")
                     for o in (checks.timing_on_device(files.meta, files.summary), checks.parts_within_step(files.steps))]
    return outcomes


def sweep(ctx: Context) -> Outcome:
    out = ctx.folder("sweep")
    ctx.pipeprof("sweep", str(SCENARIOS / "quick.toml"), f"--set={CUDA}", "--grid", "loader.num_workers=0,1,2",
                 "--max-seconds", "4", "--out", str(out), "--quiet", what="pipeprof sweep (3 points)")
    doc, folder = _document(out, "sweep.json")
    points = doc.get("points") or []
    complete = [p for p in points if p.get("status") == "complete"]
    count = checks.passed(f"{len(complete)} of 3 points complete") if len(points) == 3 and len(complete) == 3 else \
        checks.failed(f"{len(points)} points, {len(complete)} complete: "
                      + ", ".join(f"{p.get('label')}: {p.get('status')} {p.get('reason') or ''}".strip() for p in points))
    rates = ", ".join(f"{p.get('label')} {p.get('samples_per_s') or 0:,.0f}/s" for p in complete)
    return checks.all_of([count, *_point_timing(complete, folder), checks.passed(rates or "no rates")])


def tune(ctx: Context) -> Outcome:
    out = ctx.folder("tune")
    ctx.pipeprof("tune", str(SCENARIOS / "quick.toml"), f"--set={CUDA}", "--max-evals", "2", "--window", "2",
                 "--confirm-seconds", "3", "--keep-storage", "--out", str(out), "--quiet", what="pipeprof tune (2 trials)")
    doc, folder = _document(out, "tune.json")
    points = doc.get("points") or []
    trials = [p for p in points if p.get("index", -1) >= 0 and p.get("status") == "complete"]
    confirm = [p for p in points if p.get("index") == -1 and p.get("status") == "complete"]
    found = [checks.passed(f"{len(trials)} trials complete, confirmed in a fresh process")
             if len(trials) >= 2 and confirm else
             checks.failed(f"{len(trials)} complete trials (expected 2), confirm "
                           f"{'complete' if confirm else 'missing or failed'}: {[p.get('status') for p in points]}")]
    best = doc.get("best") or {}
    found.append(checks.passed(f"best {best.get('changed') or 'as given'}: {best.get('samples_per_s') or 0:,.0f}/s")
                 if best else checks.failed("tune.json has no best"))
    return checks.all_of([*found, *_point_timing(confirm, folder)])


def ddp_job(ctx: Context) -> Outcome:
    files = scenario_run(ctx, *DDP)
    job = files.meta.get("job") or {}
    ranks = job.get("ranks") or []
    seen = checks.passed(f"ranks {ranks} of a job of {job.get('world_size')}") if len(ranks) == 2 else \
        checks.failed(f"expected a job of 2 ranks in run.json, found {job or 'no job'}")
    return checks.all_of([*run_invariants(files), seen])


# ---- the simulated device against the real one ---------------------------------------------------


def sim_runs(ctx: Context) -> dict[str, dict[str, Any]]:
    """Every simulated-device case run on CUDA under pipeprof.profile() (one process, made once)."""

    def make() -> dict[str, dict[str, Any]]:
        out = ctx.folder("sim")
        done = ctx.command([ctx.python, "-m", "pipeprof.gpu_check.sim_loops", "--out", str(out)],
                           "simulated-device cases on CUDA")
        rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        return {row["case"]: row for row in rows}

    return ctx.once("sim", make)


def sim_check(name: str) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        row = sim_runs(ctx).get(name)
        if row is None:
            raise CaseError(f"case {name} was not run")
        files = read_run(Path(row["folder"]))
        agree = checks.fractions_agree(files.summary.get("fractions") or {}, row["simulated"])
        return checks.all_of([checks.timing_on_device(files.meta, files.summary), agree,
                              checks.passed(f"calibrated: {row.get('calibration')}")])

    return run


# ---- the list ------------------------------------------------------------------------------------


def _high_util(files: RunFiles) -> list[Outcome]:
    return [checks.utilization(files.summary, files.samples, above=checks.COMPUTE_BOUND_MIN_UTIL_PCT)]


def _low_util(files: RunFiles) -> list[Outcome]:
    return [checks.utilization(files.summary, files.samples, below=checks.INPUT_BOUND_MAX_UTIL_PCT)]


def _ceiling(files: RunFiles) -> list[Outcome]:
    return [checks.data_wait_below(files.summary, DEVICE_IDEAL_MAX_WAIT)]


INVARIANTS = "complete, timing.method cuda-events, data_wait+h2d+compute <= step (+1 %) per counted step, " \
             "GPU columns in range"


def all_checks() -> list[Check]:
    """Every check of ``make gpu-check``, in the order they run."""
    found = [
        Check("scenario-pinned", f"pipeprof run pinned-memory.toml on cuda (120 steps, <= 6 s): {INVARIANTS}",
              scenario_check(*PINNED)),
        Check("scenario-pageable", f"pipeprof run pageable-memory.toml on cuda (120 steps, <= 6 s): {INVARIANTS}",
              scenario_check(*PAGEABLE)),
        Check("device-ideal", f"pipeprof run device-ideal.toml on cuda: {INVARIANTS}; data_wait < 10 %",
              scenario_check(*DEVICE_IDEAL, extra=_ceiling)),
        Check("profiled-script", "pipeprof profile --steps 150 -- python pipeprof/gpu_check/train_script.py "
              f"(pin_memory loader, .to(cuda, non_blocking=True)): {INVARIANTS}; copies timed", profiled_script),
        Check("python-api", "pipeprof.profile() around a CUDA MLP loop (gpu_check/api_loop.py, 150 steps): "
              f"{INVARIANTS}; copies timed", python_api),
        Check("probe-h2d", "pipeprof probe --quick: pinned h2d bandwidth >= pageable", probe_h2d, limit_s=120),
        Check("probe-matmul", "pipeprof probe --quick: matmul 1024 vs 1025/1026/1028/1032 on cuda, GFLOP/s > 0, "
              "ratios 0.05-20, beside NVML's memory bus width", probe_matmul, limit_s=120),
        Check("sweep-3-points", "pipeprof sweep quick.toml on cuda --grid loader.num_workers=0,1,2 --max-seconds 4: "
              "3 points complete, each cuda-events and parts <= step", sweep, limit_s=150),
        Check("tune-2-trials", "pipeprof tune quick.toml on cuda --max-evals 2 --window 2 --confirm-seconds 3: "
              "2 trials complete, confirmed run cuda-events", tune, limit_s=150),
        Check("ddp-2-ranks", "pipeprof run ddp-balanced.toml on cuda (2 ranks, gloo on one GPU, 40 steps): "
              f"{INVARIANTS}; a job of 2 ranks", ddp_job, limit_s=150),
        Check("gpu-util-compute-bound", "pipeprof run device-ideal.toml with hidden [8192]x3, batch 4096 "
              f"(<= 8 s): {INVARIANTS}; mean GPU utilization > 60 %", scenario_check(*COMPUTE_BOUND, extra=_high_util)),
        Check("gpu-util-input-bound", "pipeprof run augment-heavy.toml on cuda, 1 thread (<= 8 s): "
              f"{INVARIANTS}; mean GPU utilization < 40 %", scenario_check(*INPUT_BOUND, extra=_low_util)),
    ]
    what = ("the sim_device case's loop on CUDA under pipeprof.profile() (sleeping __getitem__, "
            "torch.cuda._sleep compute calibrated with events): data_wait and compute within 10 points of "
            "sim_device.simulated_fractions")
    found += [Check(f"sim-device:{case.name}", what, sim_check(case.name), limit_s=120) for case in CASES]
    return found
