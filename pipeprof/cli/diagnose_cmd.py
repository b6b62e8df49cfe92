"""Diagnose a scenario: fetch and prep stalls from three short runs (compute ceiling, prep only, real).

Trains the scenario three times, one after the other, each with a fresh
workload and at most --steps steps (default: the scenario's own length, at
most 200; warm-up kept):

  compute  the data resident on the device, batches by index, no DataLoader
  prep     the data already decoded in RAM, the same transform and loader
  real     the scenario as given (fetch + prep)

From their samples/s it derives the fetch-stall and prep-stall fractions
(DS-Analyzer, VLDB 2021) and cross-checks them with the real run's direct
attribution (its data wait and its fetch/prep loading split); a disagreement
beyond the stated tolerance is shown, not hidden. Writes
reports/<UTC>-diagnose-<scenario>/ with the three run folders, diagnosis.json
and diagnosis.html.

Examples:
  pipeprof diagnose scenarios/jpeg-decode.toml --set data.samples=5000
  pipeprof diagnose scenarios/memmap-cold-2workers.toml --steps 100

Exit status: 0 when all three runs completed, 1 when one failed (the others
are kept and the diagnosis is still written), 130 when interrupted, 2 for bad
input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from pipeprof import format as fmt
from pipeprof.cli.arguments import add_scenario_arguments
from pipeprof.cli.output import stdout_console
from pipeprof.cli.progress import Bars, columns
from pipeprof.errors import EXIT_FAILED, EXIT_INTERRUPTED
from pipeprof.pipeline.progress import SILENT
from pipeprof.scenario import load_scenario

DEFAULT_MAX_STEPS = 200  # per sub-run: long enough to leave warm-up behind, short enough for three runs


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario_arguments(p, example="scenarios/jpeg-decode.toml", out_what="the diagnosis folder goes")
    p.add_argument("--steps", type=_positive_int, default=None, metavar="N",
                   help=f"at most N steps per run, warm-up included (default: the scenario's length, "
                        f"at most {DEFAULT_MAX_STEPS})")
    p.add_argument("--quiet", action="store_true", help="no progress lines and no table")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def execute(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, args.overrides)  # bad input refused before torch loads
    # torch and the analysis load here, not when the parser is built (pipeprof --help stays fast)
    from pipeprof.pipeline.diagnose import diagnose
    from pipeprof.render.diagnosis import diagnosis_table

    progress = SILENT if args.quiet else Bars(Console(stderr=True), columns(remaining=False))
    diagnosis, folder = diagnose(scenario, scenario_file=str(args.scenario), overrides=args.overrides,
                                 out=args.out, max_steps=args.steps or DEFAULT_MAX_STEPS, cache=args.cache, progress=progress)
    if not args.quiet:
        stdout_console().print(diagnosis_table(diagnosis, folder))
    return _report_status(diagnosis, folder)


def _report_status(diagnosis: dict[str, Any], folder: Path) -> int:
    """Errors and disagreements on stderr, the report path on stdout; the exit status."""
    for role, r in diagnosis["runs"].items():
        if r["status"] in ("failed", "interrupted"):
            print(f"pipeprof: error: the {role} run ({r['title']}) {r['status']}: {r['error']}", file=sys.stderr)
    check = diagnosis["cross_check"]
    for name, label in (("data_wait", "data wait"), ("fetch_share", "fetch share of loading")):
        c = check[name]
        if c["agree"] is False:
            print(f"pipeprof: WARNING: cross-check {label}: direct {fmt.pct(c['direct'], 1)} vs differential "
                  f"{fmt.pct(c['differential'], 1)}, beyond the ±{fmt.number(100 * check['tolerance'], 0)} pp tolerance",
                  file=sys.stderr)
    print(f"diagnosis: {folder / 'diagnosis.html'}")
    if diagnosis["status"] == "interrupted":
        return EXIT_INTERRUPTED
    return 0 if diagnosis["status"] == "complete" else EXIT_FAILED
