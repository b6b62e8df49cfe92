"""Profile a scenario: train it, time every step, sample the system, write the run folder and report.

Examples:
  pipeprof run scenarios/quick.toml
  pipeprof run scenarios/quick.toml --set loader.num_workers=2 --set data.storage=memmap
  pipeprof run scenarios/quick.toml --set model.hidden=[256,128] --set train.steps=100
  pipeprof run scenarios/jpeg-decode.toml --verify    # re-run with the top recommendation applied

Exit status: 0 when the run completed, 1 when training failed, 130 when
interrupted (the steps measured so far are still saved), 2 for bad input.
The run folder is made when training starts and its raw records written
into it as the run goes: after a kill -9, `pipeprof report FOLDER` rebuilds
what was recorded, marked cut short.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from pipeprof.cli.arguments import add_scenario_arguments
from pipeprof.cli.keyflags import add_code_profile_flags
from pipeprof.cli.output import stdout_console
from pipeprof.cli.progress import Bars, columns
from pipeprof.errors import EXIT_FAILED, EXIT_INTERRUPTED
from pipeprof.pipeline.progress import SILENT
from pipeprof.scenario import load_scenario


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario_arguments(p, example="scenarios/quick.toml", out_what="run folders go")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary table")
    add_code_profile_flags(p)  # --cprofile [STEPS], --pyspy [HZ]: sugar for --set profile.<key>
    p.add_argument("--verify", action="store_true",
                   help="after the run, re-run in a fresh process with the top recommendation applied and "
                        "report predicted vs measured speed-up (the re-run goes into the run folder's verify/)")
    p.add_argument("--verify-repeats", type=_repeats, default=3, metavar="N",
                   help="--verify runs the scenario as run and the change alternately, N of each in fresh "
                        "processes, and compares their medians (default 3)")


def execute(args: argparse.Namespace) -> int:
    # the scenario is checked first: bad input is refused before torch loads (2-5 s on 2 busy cores)
    scenario = load_scenario(args.scenario, args.overrides)
    # torch, pandas and the analysis load here, not when the parser is built (pipeprof --help stays fast)
    from pipeprof.analysis.summary import as_summary
    from pipeprof.pipeline.scenario_run import PreparationFailed, run_scenario, verify_run
    from pipeprof.render.console import print_summary
    from pipeprof.render.verification_text import print_verification

    progress = SILENT if args.quiet else Bars(Console(stderr=True), columns())
    try:
        saved = run_scenario(scenario, scenario_file=str(args.scenario), overrides=args.overrides, out=args.out,
                             cache=args.cache, progress=progress)
    except PreparationFailed as e:
        print(f"pipeprof: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    run, folder, summary = saved.run, saved.folder, saved.summary
    if not args.quiet:
        print_summary(summary, folder, stdout_console())
    if (summary.get("cache") or {}).get("verified") is False:
        print(f"pipeprof: WARNING: {summary['cache']['reason']}", file=sys.stderr)
    for note in run.info.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.verify and saved.status == "complete":
        saved = verify_run(saved, scenario, cache=args.cache, progress=progress, repeats=args.verify_repeats)
        print_verification(as_summary(saved.summary).verification)
    print(f"report: {folder / 'report.html'}")
    if saved.status == "interrupted":
        print(f"pipeprof: {run.info.error or 'interrupted'}: {len(run.steps)} steps saved in {folder}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if saved.status == "failed":
        print(f"pipeprof: error: training failed after {len(run.steps)} steps: {run.info.error}",
              file=sys.stderr)
        return EXIT_FAILED
    return 0


def _repeats(text: str) -> int:
    """``--verify-repeats``: an integer >= 1, else one line (argparse's usage error, exit status 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= 1 (runs of each, e.g. 3)")
    return value
