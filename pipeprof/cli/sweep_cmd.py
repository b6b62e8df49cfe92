"""Sweep a scenario over a grid of settings: every point in a fresh process, one comparison page.

Every combination of the grid's values is a point, run one after the other
as `python -m pipeprof run` in a fresh process (no point inherits another's
page cache, torch threads or workers). By default each point runs until its
windowed throughput is steady (the last 5 windows of ~0.5 s within 5%
coefficient of variation; everything before them is warm-up: worker start,
first-epoch cache fill) or its --max-seconds budget is spent, whichever
comes first (--fixed-steps: the scenario's own steps instead). A failing
point is recorded with its error and the sweep goes on; a combination that
is invalid together is skipped with the reason; Ctrl-C keeps the finished
points (exit 130).

Writes reports/<UTC>-sweep-<scenario>/: sweep.html (sortable table,
throughput against num_workers per storage kind, wait/compute per point, the
best point, links to each point's report), points.csv, sweep.json (`best`,
`points`), and each point's run folder under points/.

Examples:
  pipeprof sweep scenarios/quick.toml --grid loader.num_workers=0,1,2 --grid data.storage=ram,memmap
  pipeprof sweep scenarios/sweep-workers.toml           # the grid from its [sweep] table

Exit status: 0 when at least one point completed, 1 when none did, 130 when
interrupted, 2 for bad input (unknown grid key, wrong type, empty grid).
"""

from __future__ import annotations

import argparse

from rich.console import Console

from pipeprof.cli.arguments import add_scenario_arguments, positive_float
from pipeprof.cli.progress import Bars, columns
from pipeprof.cli.sweep_output import print_table, report_end
from pipeprof.errors import UsageError
from pipeprof.pipeline.progress import SILENT
from pipeprof.scenario import load_scenario

DEFAULT_MAX_SECONDS = 30.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario_arguments(p, example="scenarios/quick.toml", out_what="the sweep folder goes")
    p.add_argument("--grid", action="append", default=[], metavar="SECTION.KEY=V1,V2,...",
                   help="an axis of the grid; values read as TOML, bare words as strings (repeatable; "
                        "replaces the scenario's [sweep] axis of the same key)")
    p.add_argument("--max-seconds", type=positive_float, default=None, metavar="S",
                   help=f"time budget per point for steady-state measurement (default {DEFAULT_MAX_SECONDS:g}; "
                        "not with --fixed-steps)")
    p.add_argument("--fixed-steps", action="store_true",
                   help="run each point for the scenario's own steps/epochs instead of until steady")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no table")


def execute(args: argparse.Namespace) -> int:
    if args.fixed_steps and args.max_seconds is not None:
        raise UsageError(f"--max-seconds {args.max_seconds:g} is not used with --fixed-steps (each "
                         "point runs the scenario's own steps or epochs): give one of them")
    max_seconds = DEFAULT_MAX_SECONDS if args.max_seconds is None else args.max_seconds
    scenario = load_scenario(args.scenario, args.overrides)  # bad input refused before torch loads
    from pipeprof.pipeline.sweep import Measure, run_sweep  # pandas and torch load here, not for --help

    console = Console(stderr=True)
    progress = SILENT if args.quiet else Bars(console, columns(eta_label=True))
    doc, folder = run_sweep(scenario, scenario_file=args.scenario, overrides=args.overrides, grid=args.grid,
                            out=args.out, measure=Measure(max_seconds, args.fixed_steps), cache=args.cache,
                            progress=progress)
    if not args.quiet:
        print_table(doc, folder)
    return report_end(doc, folder, console)
