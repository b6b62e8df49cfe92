"""Attach to a training process that is already running: is it waiting for data, and on what? (sampled)

Examples:
  pipeprof attach 12345 --seconds 60
  pipeprof attach $(pgrep -f train.py | head -1) -o reports
  pipeprof attach 4242 --live            (a torchrun agent's pid: every rank and its workers)

The process and everything under it (DataLoader workers; under a torchrun
agent or an mp.spawn parent, every rank and its workers) are sampled from
outside with py-spy (the pyspy extra), without pausing or changing the job:
each training thread's sample is classed as waiting for a batch, copying to
the device, waiting for a collective, waiting for the device, compute or
other; each worker's as fetch, decode, transform, collate or idle. psutil
samples the tree's CPU, memory and disk; NVML its GPU use, matched by pid.

Steps cannot be cut from outside: the shares are of samples, each with its
95% interval, and step times and samples/s are absent with the reason
(pipeprof profile measures them). The recommendations follow from the
sampled shares and the loader settings the stacks show (num_workers,
pin_memory; not prefetch_factor), without a predicted speed-up. The run
folder and summary.json are the usual ones, with timing.method "sampled".

--seconds S ends the attach after S seconds; Ctrl-C ends it at once. The job
goes on either way. A job that exits during the attach leaves a kept,
partial run. A process py-spy may not read (ptrace not permitted): one line
saying what to do, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeprof.cli.arguments import pid_number, positive_int, seconds_at_least_1
from pipeprof.cli.output import stdout_console
from pipeprof.errors import EXIT_TERMINATED, UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pid", type=pid_number, help="the training process's pid (or its launcher's: torchrun)")
    p.add_argument("--seconds", type=seconds_at_least_1, metavar="S", help="end after S seconds (default: at Ctrl-C)")
    p.add_argument("-o", "--out", type=Path, metavar="DIR", default=Path("reports"),
                   help="where run folders go (default: reports/)")
    p.add_argument("--name", help="the run's name (default: attach-PID)")
    p.add_argument("--rate", type=positive_int, default=50, metavar="HZ",
                   help="py-spy's samples per second per thread (default: 50)")
    p.add_argument("--window", type=positive_int, default=5, metavar="S",
                   help="seconds per window of samples (the timeline's resolution; default: 5, 1 with --live)")
    p.add_argument("--live", action="store_true", help="a terminal dashboard refreshed every window")
    p.add_argument("--quiet", action="store_true", help="no summary table")


def execute(args: argparse.Namespace) -> int:
    from pipeprof.attach.session import attach
    from pipeprof.pipeline.derive import derived_files
    from pipeprof.render.console import print_summary
    from pipeprof.run_folder import ensure_out_folder, new_run_folder, save_run

    if args.rate > 1000:
        raise UsageError(f"pipeprof attach: --rate {args.rate}: expected at most 1000 Hz")
    ensure_out_folder(args.out)
    window_s = 1 if args.live and args.window == 5 else args.window
    on_window: Callable[[list[dict[str, Any]], dict[str, Any] | None], None] | None = None
    live = None
    if args.live:
        from pipeprof.attach.live import attached_window
        from pipeprof.render.live import LiveView
        live = LiveView(stdout_console())

        def on_window(rows: list[dict[str, Any]], tick: dict[str, Any] | None) -> None:
            assert live is not None
            live.show(attached_window(rows, window_s, tick, "no GPU sampled (no NVML, or none visible)"))
    try:
        run = attach(args.pid, seconds=args.seconds, rate_hz=args.rate, window_s=window_s, name=args.name,
                     on_window=on_window)
    finally:
        if live is not None:
            live.close()
    folder = new_run_folder(args.out, run.name)
    summary, files = derived_files(run, folder.name)
    save_run(run, folder, extra_files=files)
    if not args.quiet:
        print_summary(summary, folder, stdout_console())
    print(f"report: {folder / 'report.html'}", flush=True)
    if run.info.error:
        print(f"pipeprof attach: {run.info.error}; saved in {folder}", file=sys.stderr)
    return EXIT_TERMINATED if run.meta.get("attach", {}).get("ended") == "sigterm" else 0
