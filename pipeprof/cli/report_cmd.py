"""(Re)render report.html and summary.json of one or more run folders from their raw records.

A run folder that `pipeprof profile` left unsaved (pipeprof was killed, or the disk was full) holds the raw
records it recorded (recording/): its run is rebuilt from them, marked interrupted and cut short.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeprof.cli.output import stdout_console
from pipeprof.errors import UsageError

EXIT_DAMAGED = 2  # a folder was damaged: its report was written, marked damaged, from what remains


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folder(s), e.g. reports/20261129T120000Z-quick")
    p.add_argument("--quiet", action="store_true", help="do not print the summary table")


def execute(args: argparse.Namespace) -> int:
    # pandas, matplotlib and the analysis load here, not when the parser is built (--help stays fast)
    from pipeprof.cli.damaged import say_damaged
    from pipeprof.pipeline.derive import rederive
    from pipeprof.pipeline.recording import is_recording, rebuilt_run
    from pipeprof.render.console import print_summary
    from pipeprof.run_folder import load_run, save_run, unwritable

    console = stdout_console()
    # validate all before writing any; a folder pipeprof profile left unsaved (killed) is rebuilt from its recording
    runs = [(Path(f), rebuilt_run(Path(f)) if is_recording(Path(f)) else load_run(Path(f))) for f in args.runs]
    for folder, _ in runs:
        why = unwritable(folder)
        if why is not None:
            raise UsageError(f"{folder}: cannot write in the run folder ({why}): report writes summary.json and "
                             "report.html into it; copy the folder to one you can write to")
    for folder, run in runs:
        if run.info.cut_short and not (folder / "run.json").exists():
            save_run(run, folder)
            print(f"pipeprof: {folder}: {run.info.error}", file=sys.stderr)
        summary = rederive(run, folder)  # a damaged run's: status "damaged", its damage listed
        if not args.quiet:
            print_summary(summary, folder, console)
        print(f"report: {folder / 'report.html'}")
        if run.damage:
            say_damaged(folder, run.damage)
    return EXIT_DAMAGED if any(run.damage for _, run in runs) else 0
