"""``pipeprof merge``'s pipeline: put the parts of one distributed job, each profiled on its own node, together.

Each part is a run folder: a job run written by ``pipeprof profile -- torchrun --nnodes N --node_rank K ...``
on node K (``meta["job"]``, its ranks in ``ranks/rank-<N>/``), or one rank's own run (``meta["rank"]`` at the
top level, no ranks: one SLURM task under ``srun pipeprof profile -- python train.py``). The merged run is a
job run as the contract of issue 15 has it: every rank in rank order, ``meta["job"]`` for the whole job, the
top-level steps and loading the median rank's, and the top-level samples and processes those of the first
part (one node's system view: the others' are in their ranks' own samples). Parts of different jobs are
refused, as is a rank found twice; ranks missing from every part are merged without and named in a note.
Nothing here prints.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof.analysis.ranks import median_rank
from pipeprof.errors import UsageError
from pipeprof.measure.rank_env import job_id
from pipeprof.pipeline.derive import derived_files
from pipeprof.run_check import refuse_damaged
from pipeprof.run_folder import Run, ensure_out_folder, load_run, new_run_folder, save_run
from pipeprof.run_meta import RankInfo


@dataclass(frozen=True)
class Part:
    """One folder given to merge, read: the ranks it holds and what it says of its job."""

    folder: Path
    run: Run
    ranks: list[Run]  # its rank runs, in its own order
    job_ids: list[str]  # every job id it records (the job's, its ranks'): all equal in a sound part
    world_sizes: list[int]
    launcher: str | None
    nodes: list[str]
    untraced: list[dict[str, Any]]


@dataclass(frozen=True)
class MergedRun:
    """The merged job's saved run: its raw records, folder and summary."""

    run: Run
    folder: Path
    summary: dict[str, Any]
    warnings: list[str]  # what the user should know of the merge: missing ranks, what could not be checked


def _rank_of(run: Run) -> int | None:
    rank = run.info.rank
    return rank.rank if rank is not None else None


def _world_size(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def read_part(folder: Path, run: Run) -> Part:
    """What ``run`` (loaded from ``folder``) holds for a merge; UsageError if it is neither a job's nor a rank's."""
    job = run.info.job
    if job is not None:
        ranks = list(run.ranks)
        ids = [job_id({"job_id": job.id})]
        sizes = [_world_size(job.world_size)]
        launcher = job.launcher
        nodes = [str(n) for n in job.nodes]
        untraced = [u.recorded for u in job.untraced if u.recorded is not None]
    elif _rank_of(run) is not None and not run.ranks:
        ranks, ids, sizes, launcher, nodes, untraced = [run], [], [], None, [], []
    else:
        raise UsageError(f"pipeprof merge: {folder}: not a run of a rank or of a job (its run.json has no "
                         "\"job\" and no \"rank\" with a rank number)")
    for rank_run in ranks:
        rank = rank_run.info.rank or RankInfo()
        ids.append(job_id(rank.recorded))
        sizes.append(_world_size(rank.world_size))
        launcher = launcher or rank.recorded.get("launcher")
        if rank.node is not None:
            nodes.append(str(rank.node))
    return Part(folder=folder, run=run, ranks=ranks, job_ids=[i for i in ids if i is not None],
                world_sizes=[s for s in sizes if s is not None],
                launcher=str(launcher) if launcher is not None else None,
                nodes=list(dict.fromkeys(nodes)), untraced=untraced)


def _listed(numbers: Sequence[int]) -> str:
    words = [str(n) for n in numbers]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _one_value(parts: list[Part], values_of: str, what: str) -> Any:
    """The single value every part records for ``values_of`` (None if none records one); UsageError if two differ."""
    seen: dict[Any, Path] = {}
    for part in parts:
        for value in getattr(part, values_of):
            seen.setdefault(value, part.folder)
    if len(seen) > 1:
        (a, folder_a), (b, folder_b) = list(seen.items())[:2]
        where = f"{folder_a} records" if folder_a == folder_b else f"{folder_a} and {folder_b} record"
        raise UsageError(f"pipeprof merge: not parts of one job: {where} {what} {a!r} and {b!r}")
    return next(iter(seen), None)


def merge_parts(parts: list[Part]) -> tuple[Run, list[str]]:
    """The job run made of ``parts`` and the merge's warnings (also among its notes); UsageError for parts
    of different jobs or a rank found twice."""
    if not parts:
        raise UsageError("pipeprof merge: no run folder to merge")
    ident = _one_value(parts, "job_ids", "job id")
    world_size = _one_value(parts, "world_sizes", "world size")
    by_rank: dict[int, tuple[Run, Path]] = {}
    unnumbered: list[Run] = []
    for part in parts:
        for rank_run in part.ranks:
            rank = _rank_of(rank_run)
            if rank is None:
                unnumbered.append(rank_run)
                continue
            if rank in by_rank:
                seen_in = by_rank[rank][1]
                where = f"twice in {seen_in}" if seen_in == part.folder else f"in {seen_in} and in {part.folder}"
                raise UsageError(f"pipeprof merge: rank {rank} is {where}: give each rank's part once")
            if world_size is not None and rank >= world_size:
                raise UsageError(f"pipeprof merge: {part.folder}: rank {rank} is outside the job's world size "
                                 f"{world_size}")
            by_rank[rank] = (rank_run, part.folder)
    if not by_rank:
        raise UsageError(f"pipeprof merge: no rank in {_folders(parts)}: nothing to merge")
    numbers = sorted(by_rank)
    first = parts[0]
    notes: list[str] = []
    if world_size is None:
        world_size = numbers[-1] + 1
        notes.append(f"no part records the job's world size: taken as {world_size} (the highest rank + 1)")
    missing = sorted(set(range(world_size)) - set(numbers))
    if missing:
        word = "rank" if len(missing) == 1 else "ranks"
        notes.append(f"{word} {_listed(missing)} of the job's {world_size} {'is' if len(missing) == 1 else 'are'} "
                     "missing: in none of the merged folders")
    if ident is None:
        notes.append("no part records a job id: that the parts are of one job was not checked")
    merged_from = (f"merged by pipeprof merge from {_folders(parts)}; the samples and processes at the top level "
                   f"are {first.folder}'s only (its node's view); each rank's own are in its run")
    numbered = [by_rank[r][0] for r in numbers]
    median = median_rank(numbered)  # the rule of analysis.ranks, over the ranks with a number only
    median = numbers[0] if median is None else median
    middle = by_rank[median][0]
    job = {"id": ident, "world_size": world_size, "ranks": numbers, "nodes": sorted({n for p in parts for n in p.nodes}),
           "launcher": next((p.launcher for p in parts if p.launcher), None), "median_rank": median,
           "untraced": _untraced(parts, set(numbers)), "missing_ranks": missing}
    meta = copy.deepcopy(first.run.meta)
    meta.pop("rank", None)
    meta.pop("format_version", None)
    meta["job"] = job
    meta["merge"] = {"folders": [str(p.folder) for p in parts], "system_view_from": str(first.folder)}
    meta["notes"] = [*meta.get("notes", []), merged_from, *notes]
    status, error = _status(parts)
    meta["status"], meta["error"] = status, error
    run = Run(meta=meta, steps=middle.steps.copy(), samples=first.run.samples.copy(),
              processes=first.run.processes.copy(), loading=middle.loading.copy(),
              functions=first.run.functions.copy(), attachments=dict(first.run.attachments), ranks=numbered + unnumbered)
    return run, notes


def _untraced(parts: list[Part], present: set[int]) -> list[dict[str, Any]]:
    """Every part's processes that did not train, and the ranks no part holds (once each): a node's part lists
    the ranks of the other nodes as not trained on it, which the merge has."""
    out, listed = [], set()
    for part in parts:
        for entry in part.untraced:
            rank = entry.get("rank")
            if rank is not None and (rank in present or rank in listed):
                continue
            listed.add(rank)
            out.append(entry)
    return out


def _folders(parts: list[Part]) -> str:
    names = [str(p.folder) for p in parts]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _status(parts: list[Part]) -> tuple[str, str | None]:
    """``complete`` when every part is; otherwise the first other part's status and error, naming its folder."""
    for part in parts:
        status, error = part.run.info.status or "complete", part.run.info.error
        if status != "complete":
            return status, f"{part.folder}: {error}" if error else f"{part.folder}: {status}"
    return "complete", None


def merge_folders(folders: Sequence[Path], *, out: Path, name: str | None = None) -> MergedRun:
    """Load the run folders ``folders`` (every one before writing anything), merge them into one job run and
    save it under ``out`` as ``<UTC>-<name>`` (default: the first part's run name) with its summary and report."""
    loaded = [(Path(f), load_run(Path(f))) for f in folders]
    for folder, part in loaded:  # a merged job is saved whole: a damaged part would lose its damage there
        refuse_damaged(folder, part.damage, "a merge")
    parts = [read_part(folder, part) for folder, part in loaded]
    run, warnings = merge_parts(parts)
    if name:
        run.meta["scenario"] = dict(run.info.scenario or {}, name=name)
    ensure_out_folder(out)
    folder = new_run_folder(out, run.name)
    summary, files = derived_files(run, folder.name)
    save_run(run, folder, files)
    return MergedRun(run, folder, summary, warnings)
