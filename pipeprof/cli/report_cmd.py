"""(Re)render report.html and summary.json of one or more run folders from their raw records."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeprof.cli.output import stdout_console

EXIT_DAMAGED = 2  # a folder was damaged: its report was written, marked damaged, from what remains


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folder(s), e.g. reports/20261129T120000Z-quick")
    p.add_argument("--quiet", action="store_true", help="do not print the summary table")


def execute(args: argparse.Namespace) -> int:
    # pandas, matplotlib and the analysis load here, not when the parser is built (--help stays fast)
    from pipeprof.cli.damaged import say_damaged
    from pipeprof.pipeline.derive import rederive
    from pipeprof.render.console import print_summary
    from pipeprof.run_folder import load_run

    console = stdout_console()
    runs = [(Path(f), load_run(Path(f))) for f in args.runs]  # validate all before writing any
    for folder, run in runs:
        summary = rederive(run, folder)  # a damaged run's: status "damaged", its damage listed
        if not args.quiet:
            print_summary(summary, folder, console)
        print(f"report: {folder / 'report.html'}")
        if run.damage:
            say_damaged(folder, run.damage)
    return EXIT_DAMAGED if any(run.damage for _, run in runs) else 0
