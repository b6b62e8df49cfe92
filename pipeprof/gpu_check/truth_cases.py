"""``make gpu-check``'s checks of the CUDA truths: the training device, no CUDA before the script, no host
synchronisation during steps, side streams, the script's own peak memory, DDP stopping on NCCL, NVML per
process, and a recommendation verified on the GPU.

Each profiles ``gpu_check/truth_script.py`` in one mode (``pipeprof profile -- python truth_script.py
MODE``), or runs a scenario, and holds the facts the script printed and the run folder against
``truth_checks``. Skipped without CUDA by the runner, like every check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pipeprof.gpu_check import checks, truth_checks
from pipeprof.gpu_check.cases import (
    CUDA,
    PACKAGE,
    SCENARIOS,
    CaseError,
    Check,
    Context,
    RunFiles,
    only_run_folder,
    read_run,
    run_invariants,
    scenario_run,
)
from pipeprof.gpu_check.checks import Outcome
from pipeprof.measure import gpu as gpu_mod
from pipeprof.run_folder import load_run

LONG_STEPS = 600


def profiled_mode(ctx: Context, mode: str) -> tuple[RunFiles, dict[str, Any]]:
    """``pipeprof profile -- python truth_script.py MODE`` (made once per mode): the run and the script's facts."""

    def make() -> tuple[RunFiles, dict[str, Any]]:
        out = ctx.folder(f"truth-{mode}")
        done = ctx.pipeprof("profile", "--out", str(out), "--warmup-steps", "10", "--quiet", "--", ctx.python,
                            str(PACKAGE / "truth_script.py"), mode, what=f"pipeprof profile truth_script.py {mode}")
        lines = [line for line in done.stdout.splitlines() if line.startswith('{"mode"')]
        if not lines:
            raise CaseError(f"truth_script.py {mode} printed no facts")
        return read_run(only_run_folder(out)), json.loads(lines[-1])

    result: tuple[RunFiles, dict[str, Any]] = ctx.once(f"truth-{mode}", make)
    return result


def last_device(ctx: Context) -> Outcome:
    files, facts = profiled_mode(ctx, "last-device")
    memory = load_run(files.folder).device_memory
    return checks.all_of([*run_invariants(files), truth_checks.on_device(files.meta, facts),
                          truth_checks.memory_follows(memory), _or_pass(truth_checks.no_context_elsewhere(facts))])


def sets_visible(ctx: Context) -> Outcome:
    files, facts = profiled_mode(ctx, "sets-visible")
    seen = truth_checks.fact_is(facts, "visible_devices", 1, "CUDA_VISIBLE_DEVICES set by the script")
    if seen.status == "pass" and int(facts.get("gpus_on_machine") or 0) < 2:
        seen = checks.passed(f"{seen.detail} (one GPU here: the script's choice is also the default one)")
    return checks.all_of([*run_invariants(files), seen])


def forks(ctx: Context) -> Outcome:
    files, facts = profiled_mode(ctx, "forks")
    return checks.all_of([*run_invariants(files),
                          truth_checks.fact_is(facts, "child_ok", True, "a child forked after the start used CUDA")])


def long_run(ctx: Context) -> Outcome:
    files, facts = profiled_mode(ctx, "long")
    return checks.all_of([*run_invariants(files), truth_checks.no_host_sync(facts, LONG_STEPS)])


def side_stream(ctx: Context) -> Outcome:
    files, _ = profiled_mode(ctx, "side-stream")
    return checks.all_of([*run_invariants(files), truth_checks.h2d_overlapped(files.summary)])


def peak_memory(ctx: Context) -> Outcome:
    files, facts = profiled_mode(ctx, "peak")
    return checks.all_of([checks.run_complete(files.meta), truth_checks.peak_kept(facts)])


def nvml_per_process(ctx: Context) -> Outcome:
    files, _ = profiled_mode(ctx, "last-device")
    return truth_checks.per_process_gpu(files.meta, files.samples, (gpu_mod.PROC_UTIL, gpu_mod.PROC_MEM))


def ddp_nccl_max_seconds(ctx: Context) -> Outcome:
    import torch

    if torch.cuda.device_count() < 2:
        return checks.skipped(f"{torch.cuda.device_count()} GPU: NCCL needs a GPU per rank (2 ranks)")
    files = scenario_run(ctx, "ddp-nccl", "ddp-balanced.toml", "train.steps=100000", "train.max_seconds=5")
    run = load_run(files.folder)
    # each rank's backend is in its own run.json ``rank`` record (the job's ``ranks`` lists rank numbers only)
    backends = {(r.info.rank.recorded.get("backend") if r.info.rank is not None else None) for r in run.ranks}
    steps = [len(r.steps) for r in run.ranks]
    same = checks.passed(f"ranks trained {steps} steps, stopped together") if len(set(steps)) == 1 and steps \
        else checks.failed(f"ranks trained {steps} steps")
    nccl = checks.passed("backend nccl") if backends == {"nccl"} else checks.failed(f"backends {backends}")
    return checks.all_of([checks.run_complete(files.meta), same, nccl])


def verified_recommendation(ctx: Context) -> Outcome:
    out = ctx.folder("verify")
    ctx.pipeprof("run", str(SCENARIOS / "quick.toml"), f"--set={CUDA}", "--verify", "--out", str(out), "--quiet",
                 what="pipeprof run quick.toml --verify")
    files = read_run(only_run_folder(out))
    return checks.all_of([checks.run_complete(files.meta),
                          truth_checks.predicted_vs_measured(files.meta.get("verification"))])


def _or_pass(outcome: Outcome) -> Outcome:
    """A part that could not be checked here passes with its reason in the detail (the rest still counts)."""
    return checks.passed(f"not checked: {outcome.detail}") if outcome.status == "skipped" else outcome


def truth_checks_list() -> list[Check]:
    """The CUDA-truth checks, in the order they run (after ``cases.all_checks()``'s)."""
    script = "pipeprof profile -- python gpu_check/truth_script.py"
    found: list[tuple[str, str, Callable[[Context], Outcome], float]] = [
        ("last-device", f"{script} last-device (.to(cuda:N-1), no set_device): run.json device cuda:N-1, "
         "cuda-events, memory read there, no context on another GPU", last_device, 150),
        ("script-sets-visible-devices", f"{script} sets-visible: CUDA_VISIBLE_DEVICES set by the script holds "
         "(it sees one device)", sets_visible, 150),
        ("fork-after-start", f"{script} forks: a child forked after the start initialises CUDA", forks, 150),
        ("long-run-no-host-sync", f"{script} long ({LONG_STEPS} steps): no synchronize or .item() during them",
         long_run, 240),
        ("side-stream-prefetcher", f"{script} side-stream: copies on a side stream are not h2d (< 5 %)",
         side_stream, 150),
        ("peak-memory-kept", f"{script} peak: the script's max_memory_allocated() keeps its 256 MiB peak",
         peak_memory, 150),
        ("nvml-per-process", "the last-device run: NVML per-process SM and memory matched or absent with a "
         "reason (measure/gpu.py), never a silent 0", nvml_per_process, 150),
        ("ddp-nccl-max-seconds", "pipeprof run ddp-balanced.toml on 2 GPUs (NCCL) --max-seconds 5: complete, "
         "ranks stop together", ddp_nccl_max_seconds, 150),
        ("verify-recommendation", "pipeprof run quick.toml on cuda --verify: the top recommendation applied, "
         "predicted vs measured samples/s recorded", verified_recommendation, 300),
    ]
    return [Check(name, what, run, limit_s=limit) for name, what, run, limit in found]
