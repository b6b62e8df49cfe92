"""A scenario with ``train.ranks = N >= 2``: a DDP job of N processes on this machine, one Run for the job.

The parent (``run_ranks``) makes the data once, picks a free port on
127.0.0.1 and starts N rank processes (``forkserver``: forked from a fresh
interpreter that imported torch once, not from the parent). Each joins the process group (gloo on the CPU, NCCL
on CUDA), builds its workload with its shard and the model under
DistributedDataParallel (``workload.distributed``), profiles it with the
ordinary per-process profiler (``profile_workload``: its own steps, loading
records and sampler of its own process tree) and saves its Run in a
temporary folder. Meanwhile the parent samples the whole tree (itself, the
ranks, their workers). Every process counts time from the parent's clock
reading, so the job's and the ranks' records share one time axis.

The job's Run (``run_folder`` contract): ``ranks`` the ranks' runs in rank
order, each with ``meta["rank"]``; ``meta["job"]`` with launcher
``"scenario"`` and the median rank; steps and loading records the median
rank's, samples and processes the parent's whole tree. A rank that trains
with torch's default threads (``train.threads = 0``) gets 1, as torchrun
sets ``OMP_NUM_THREADS=1`` for several processes per node.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue as queue_mod
import shutil
import signal
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from pipeprof.analysis.ranks import median_rank
from pipeprof.errors import interrupt_reason, one_line
from pipeprof.measure import gpu as gpu_mod
from pipeprof.measure.clock import monotonic_clock
from pipeprof.measure.gpu_set import GpuSet, on_gpu
from pipeprof.measure.loading import LoadingRecorder
from pipeprof.measure.sampler import SystemSampler
from pipeprof.pipeline.progress import SILENT, Progress
from pipeprof.pipeline.train import build_workload, profile_workload, resolve_device
from pipeprof.run_folder import STEP_COLUMNS, Run, load_run, sample_tables, save_run
from pipeprof.scenario import Scenario
from pipeprof.workload.data import build_data
from pipeprof.workload.distributed import DistributedParts, backend_for, join_group, leave_group

LAUNCHER = "scenario"
POLL_S = 0.1
PROGRESS_UPDATES = 100  # rank 0 tells the parent its steps done this many times a run at most
DDP_IMPORTS = "torch._dynamo"  # DistributedDataParallel() imports it (1.3 s here): once, in the fork server
STOP_GRACE_S = 30.0  # after one rank ended badly, how long the others get to save their runs


class RankFailed(RuntimeError):
    """A rank could not build or start its workload, or died without saving its run."""


@dataclass(frozen=True)
class RankTask:
    """What a rank process is given (picklable: it crosses into a spawned interpreter)."""

    scenario: Scenario
    rank: int
    world_size: int
    port: int
    cache: Path | None
    folder: Path  # where the rank saves its Run
    t0_s: float
    context: dict[str, Any]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the rendezvous of the job's process group)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_main(task: RankTask, progress: Any = None) -> None:
    """One rank's process: join the group, profile its workload, save its Run (or an error line)."""
    # A process group of its own (its DataLoader workers join it): a Ctrl-C at the terminal reaches the
    # parent alone, which passes it on once (a second SIGINT while a rank saves its run would lose it).
    os.setpgrp()
    scenario = task.scenario
    notes = []
    if not scenario.train.threads:
        torch.set_num_threads(1)
        notes.append("train.threads = 0 in a job of several ranks: each rank trains with 1 torch thread "
                     "(as torchrun sets OMP_NUM_THREADS=1)")
    try:
        device = resolve_device(scenario.train.device)
        if device.type == "cuda":
            device = rank_device(device, task.rank, torch.cuda.device_count())
            torch.cuda.set_device(device)
            scenario = _on_device(scenario, str(device))
        parts = DistributedParts(task.rank, task.world_size, backend_for(device, task.world_size))
        join_group(task.rank, task.world_size, task.port, parts.backend)
        recorder = LoadingRecorder() if scenario.profile.loading else None
        work = build_workload(scenario, task.cache, recorder=recorder, rank=parts)
        work.notes.extend(notes)
    except Exception as e:  # noqa: BLE001 - said by the parent as one line
        _write_error(task.folder, one_line(e))
        leave_group()
        raise SystemExit(1) from None

    if progress is not None:
        progress.cancel_join_thread()  # steps done are for the progress bar: never wait at exit to send one
    every = max(1, scenario.total_steps() // PROGRESS_UPDATES)

    def report(done: int, total: int) -> None:
        if progress is not None and (done % every == 0 or done == total):
            progress.put((done, total))

    run = profile_workload(work, recorder=recorder, context=task.context, t0_s=task.t0_s,
                           on_step=report if task.rank == 0 else None)
    run.meta["rank"] = {"rank": task.rank, "local_rank": task.rank, "world_size": task.world_size,
                        "node": socket.gethostname(), "node_rank": 0, "pid": os.getpid(),
                        "backend": parts.backend, "status": run.info.status, "error": run.info.error}
    save_run(run, task.folder)
    leave_group()


def rank_device(device: torch.device, rank: int, gpus: int) -> torch.device:
    """A rank's GPU: the scenario's device for rank 0, the next ones for the next ranks, round the ``gpus``."""
    if device.type != "cuda":
        return device
    return torch.device("cuda", ((device.index or 0) + rank) % max(1, gpus))


def _on_device(scenario: Scenario, device: str) -> Scenario:
    return dataclasses.replace(scenario, train=dataclasses.replace(scenario.train, device=device))


def _write_error(folder: Path, text: str) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    (folder.parent / f"{folder.name}.error").write_text(text + "\n")


def run_ranks(scenario: Scenario, *, context: dict[str, Any], cache: Path | None = None,
              progress: Progress = SILENT) -> Run:
    """Run ``scenario`` as a DDP job of ``scenario.train.ranks`` processes; the job's Run (see module docstring).

    Raises RankFailed (a RuntimeError) when a rank could not build its workload or died without a run.
    As with any ``multiprocessing`` start method but fork, a script that calls this runs its top level again
    in each rank unless it is guarded by ``if __name__ == "__main__":`` (``python -m pipeprof`` is).
    """
    world = scenario.train.ranks
    device = resolve_device(scenario.train.device)
    # The data set is made once here, before any rank reads it (two ranks must not both build it).
    prepared = build_data(scenario, torch.device("cpu"), cache, progress=progress.building)
    prepared.dataset.close()
    port = free_port()
    mp = multiprocessing.get_context("forkserver")
    # The server imports torch and pipeprof once; every rank is forked from it, a clean process without
    # threads (a fork of this one, whose sampler thread runs, would not be safe).
    mp.set_forkserver_preload([__name__, DDP_IMPORTS])
    steps_done = mp.Queue()
    with tempfile.TemporaryDirectory(prefix="pipeprof-ranks-") as tmp:
        root = Path(tmp)
        spool = root / "spool"
        spool.mkdir()
        t0_s = monotonic_clock()
        # The ranks train on several GPUs (rank_device): every visible one is sampled, the job shows its
        # median rank's (each rank's own run reads its own GPU).
        gpus = gpu_mod.open_visible_gpus() if device.type == "cuda" else None
        monitor = GpuSet(gpus) if isinstance(gpus, list) else None
        profile = scenario.profile
        sampler = SystemSampler(os.getpid(), profile.sample_hz, t0_s=t0_s, gpu=monitor,
                                tree_refresh_s=profile.tree_refresh_s, uss_interval_s=profile.uss_interval_s,
                                spool_dir=spool)
        tasks = [RankTask(scenario, r, world, port, cache, root / f"rank-{r}", t0_s, dict(context))
                 for r in range(world)]
        procs = [mp.Process(target=rank_main, args=(t, steps_done), name=f"pipeprof-rank-{t.rank}")
                 for t in tasks]
        task = progress.task(f"{scenario.name} ({world} ranks)", scenario.total_steps())
        sampler.start()
        interrupted: KeyboardInterrupt | None = None
        try:
            for p in procs:
                p.start()
            try:
                _wait(procs, steps_done, lambda done: progress.update(task, completed=done))
            except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (errors.Terminated): every rank saves its steps
                interrupted = e
                for p in procs:
                    _interrupt(p)
                for p in procs:
                    p.join(STOP_GRACE_S)
        finally:
            sampler.stop()
            for p in procs:
                if p.pid is None:  # never started
                    continue
                if p.is_alive():
                    p.terminate()
                p.join()
        samples, processes = sample_tables(*sampler.frames(), monitor is not None)
        try:
            runs = _rank_runs(tasks, procs)
            if monitor is not None:
                index = median_gpu(runs)
                monitor.select(index)
                samples = on_gpu(samples, index)
            absences = dict(sampler.absences)
        finally:
            if monitor is not None:
                monitor.close()
        shutil.rmtree(spool, ignore_errors=True)
    job = job_run(runs, samples, processes, job_id=f"127.0.0.1:{port}", absences=absences)
    if interrupted is not None:
        job.meta.update(status="interrupted", error=interrupt_reason(interrupted))
    return job


def median_gpu(runs: list[Run]) -> int | None:
    """The CUDA number of the GPU the job's median rank trained on (its run.json ``device``), None on the CPU."""
    ranked = sorted(runs, key=_rank_of)
    median = next(r for r in ranked if _rank_of(r) == median_rank(ranked))
    device = median.info.device or "cpu"
    if not device.startswith("cuda"):
        return None
    return int(device.partition(":")[2] or 0)


def _interrupt(proc: Any) -> None:
    """SIGINT to a rank's process group (the rank and its DataLoader workers), as a terminal's Ctrl-C."""
    if proc.pid is None or not proc.is_alive():
        return
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:  # ended meanwhile
        pass


def _wait(procs: list[Any], steps_done: Any, on_step: Any) -> None:
    """Until every rank ended; one that ended badly gives the others STOP_GRACE_S to save their runs."""
    bad_since_s: float | None = None
    while any(p.is_alive() for p in procs):
        try:
            done, _ = steps_done.get(timeout=POLL_S)
            on_step(done)
        except queue_mod.Empty:
            pass
        if bad_since_s is None and any(p.exitcode not in (None, 0) for p in procs):
            bad_since_s = monotonic_clock()
        if bad_since_s is not None and monotonic_clock() - bad_since_s > STOP_GRACE_S:
            return


def _rank_runs(tasks: list[RankTask], procs: list[Any]) -> list[Run]:
    """The ranks' saved runs; a rank that died without saving (killed) is a failed run with no steps,
    beside the others. RankFailed when a rank could not start, or none saved a run."""
    for task in tasks:
        error = task.folder.parent / f"{task.folder.name}.error"
        if error.exists():
            raise RankFailed(f"rank {task.rank}: {error.read_text().strip()}")
    saved = {t.rank: load_run(t.folder) for t in tasks if t.folder.is_dir()}
    lost = {t.rank: f"rank {t.rank} {_ended(p.exitcode)} without saving its run" for t, p in zip(tasks, procs)
            if t.rank not in saved}
    if not saved:
        raise RankFailed("; ".join(lost.values()))
    like = next(iter(saved.values()))
    return [saved.get(t.rank) or _lost_run(t, p.pid, lost[t.rank], like) for t, p in zip(tasks, procs)]


def _ended(exitcode: int | None) -> str:
    if exitcode is None:
        return "was stopped"
    if exitcode < 0:
        return f"was killed by signal {signal.Signals(-exitcode).name}"
    return f"ended with exit status {exitcode}"


def _lost_run(task: RankTask, pid: int | None, error: str, like: Run) -> Run:
    """A failed run with no records for a rank that died without saving; settings from a rank that saved."""
    meta = {k: v for k, v in like.meta.items() if k not in ("steady", "code_profile", "verification")}
    meta.update(status="failed", error=error, compute_ceiling=None)
    meta["rank"] = {**like.meta["rank"], "rank": task.rank, "local_rank": task.rank, "pid": pid,
                    "status": "failed", "error": error}
    return Run(meta=meta, steps=pd.DataFrame(columns=STEP_COLUMNS))


def _last_step_s(run: Run) -> float:
    """When ``run``'s last step started (-inf without steps: a rank lost before it saved any)."""
    return float(run.steps["t_start_s"].max()) if len(run.steps) else float("-inf")


def _rank_of(run: Run) -> int:
    rank = run.info.rank
    if rank is None or rank.rank is None:
        raise ValueError("a rank's run without its rank number (run.json rank.rank)")
    return rank.rank


def _node_of(run: Run) -> Any:
    return run.info.rank.node if run.info.rank is not None else None


def job_run(runs: list[Run], samples: Any, processes: Any, *, job_id: str | None,
            absences: dict[str, str] | None = None) -> Run:
    """The job's Run from its ranks' runs (rank order) and the parent's samples of the whole process tree."""
    runs = sorted(runs, key=_rank_of)
    middle = median_rank(runs)
    median = next(r for r in runs if _rank_of(r) == middle)
    meta = {k: v for k, v in median.meta.items() if k != "rank"}
    # The rank that stopped first is the likely cause (the others saw its end as a closed connection).
    failed = sorted((r for r in runs if r.info.status != "complete"), key=_last_step_s)
    if failed:
        meta["status"] = "interrupted" if any(r.info.status == "interrupted" for r in failed) else "failed"
        meta["error"] = "; ".join(f"rank {_rank_of(r)}: {r.info.error}" for r in failed)
    meta["absences"] = {**median.info.absences, **(absences or {})}
    meta["job"] = {"id": job_id, "world_size": len(runs), "ranks": [_rank_of(r) for r in runs],
                   "nodes": sorted({str(_node_of(r)) for r in runs}), "launcher": LAUNCHER,
                   "median_rank": middle, "untraced": []}
    return Run(meta=meta, steps=median.steps, samples=samples, processes=processes, loading=median.loading,
               functions=median.functions, attachments=dict(median.attachments), ranks=runs)
