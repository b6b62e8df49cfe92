"""Merge the run folders of one distributed job, each written on its own node, into one job run.

Examples:
  pipeprof merge node0/20261201T120000Z-train node1/20261201T120001Z-train
  pipeprof merge --out reports --name ddp-job slurm-task-*/2026*

Each FOLDER is what `pipeprof profile` wrote on one node (`-- torchrun --nnodes N
--node_rank K ...`: a job run of that node's ranks) or for one rank (a SLURM
task: `srun pipeprof profile -- python train.py`). The merged run holds every
rank in rank order; its top-level steps are the median rank's (the rank whose
median step time is the median of the ranks'), its system samples the first
folder's. Folders of different jobs (different job ids or world sizes), a rank
given twice, or a folder that is no rank's or job's run are refused (exit 2);
ranks in none of the folders are named in a note of the merged run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeprof import format as fmt
from pipeprof.cli.output import stdout_closed
from pipeprof.run_meta import JobInfo


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folders", nargs="+", type=Path, metavar="FOLDER", help="run folders of the job's parts")
    p.add_argument("-o", "--out", type=Path, metavar="DIR", default=Path("reports"),
                   help="where the merged run folder goes (default: reports)")
    p.add_argument("--name", help="the merged run's name (default: the first folder's)")


def execute(args: argparse.Namespace) -> int:
    # pandas and the analysis load here, not when the parser is built (pipeprof --help stays fast)
    from pipeprof.pipeline.merge import merge_folders

    merged = merge_folders(args.folders, out=args.out, name=args.name)
    job, folder = merged.run.info.job or JobInfo(), merged.folder
    try:
        print(f"merged: {len(job.ranks or ())} of {fmt.plural(job.world_size or 0, 'rank')} from "
              f"{fmt.plural(len(args.folders), 'folder')} (median rank {job.median_rank})")
        for warning in merged.warnings:
            print(f"note: {warning}")
        print(f"report: {folder / 'report.html'}", flush=True)
    except BrokenPipeError:
        stdout_closed()
        print(f"pipeprof: report: {folder / 'report.html'}", file=sys.stderr)
    return 0
