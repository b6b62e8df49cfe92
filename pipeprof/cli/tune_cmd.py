"""Tune a scenario: find its fastest DataLoader and placement settings on this machine, by measurement.

Searches loader.num_workers, train.threads, loader.prefetch_factor,
loader.persistent_workers, loader.pin_memory (on CUDA) and the placement
(decoded samples cached in RAM, or held on the device where they fit), and
loader.batch_size only with --batch-sizes. The search (pipeprof/analysis/
tune.py) starts from the scenario as given, tries next what its
recommendations predict to be best, then walks one setting at a time and
keeps a change only when it gains more than 3%. Each trial is a short
steady-state measurement (--window seconds at most) in this process, a
fresh workload each time (data, model and DataLoader workers rebuilt; torch
threads set explicitly). The best setting is then confirmed by a full run in
a fresh process (--confirm-seconds), whose run folder and report land in
points/, and compared with the compute ceiling (the data on the device, no
loading at all).

Prints the best settings as a TOML snippet and as DataLoader arguments.
Writes reports/<UTC>-tune-<scenario>/: tune.html, tune.json (`best`,
`points` = the trials in order, `ceiling`), points.csv.

Examples:
  pipeprof tune scenarios/jpeg-decode.toml
  pipeprof tune scenarios/quick.toml --max-evals 8 --window 3

Exit status: 0 when a best setting was found, 1 when no trial completed, 130
when interrupted (the trials so far are kept), 2 for bad input.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from pipeprof.cli.arguments import add_scenario_arguments, positive_float
from pipeprof.cli.progress import Lines
from pipeprof.cli.sweep_output import print_table, report_end
from pipeprof.errors import UsageError
from pipeprof.pipeline.progress import SILENT
from pipeprof.scenario import load_scenario

DEFAULT_MAX_EVALS = 12
DEFAULT_WINDOW_S = 4.0
DEFAULT_CONFIRM_S = 10.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario_arguments(p, example="scenarios/jpeg-decode.toml", out_what="the tune folder goes")
    p.add_argument("--max-evals", type=int, default=DEFAULT_MAX_EVALS, metavar="N",
                   help=f"at most N trial measurements (default {DEFAULT_MAX_EVALS})")
    p.add_argument("--window", type=positive_float, default=DEFAULT_WINDOW_S, metavar="S",
                   help=f"seconds per trial at most, until steady (default {DEFAULT_WINDOW_S:g})")
    p.add_argument("--confirm-seconds", type=positive_float, default=DEFAULT_CONFIRM_S, metavar="S",
                   help=f"the confirming run of the best setting, in a fresh process (default {DEFAULT_CONFIRM_S:g})")
    p.add_argument("--keep-storage", action="store_true",
                   help="do not try other placements of the data (RAM, device): only loader and thread settings")
    p.add_argument("--batch-sizes", default=None, metavar="B1,B2,...",
                   help="also search loader.batch_size over these values (changes the optimization!)")
    p.add_argument("--quiet", action="store_true", help="no progress lines and no table")


def execute(args: argparse.Namespace) -> int:
    from pipeprof.pipeline.tune import Budget, tune  # torch and the analysis load here, not for --help

    scenario = load_scenario(args.scenario, args.overrides)
    console = Console(stderr=True)
    doc, folder = tune(scenario, scenario_file=args.scenario, overrides=args.overrides, out=args.out,
                       budget=Budget(args.max_evals, args.window, args.confirm_seconds),
                       batch_sizes=_batch_sizes(args.batch_sizes), keep_storage=args.keep_storage, cache=args.cache,
                       progress=SILENT if args.quiet else Lines(console))
    if not args.quiet:
        print_table(doc, folder)
        if doc.get("toml_snippet"):
            print(f"best settings (TOML):\n{doc['toml_snippet']}\nas DataLoader arguments:\n"
                  f"{doc['dataloader_kwargs']}\n{doc['ceiling']['words']}")
    return report_end(doc, folder, console)


def _batch_sizes(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        sizes = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--batch-sizes {text}: expected integers >= 1 separated by commas, e.g. 64,128,256") \
            from None
    if any(s < 1 for s in sizes):
        raise UsageError(f"--batch-sizes {text}: expected integers >= 1 separated by commas, e.g. 64,128,256")
    return sizes
