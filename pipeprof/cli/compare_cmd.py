"""Compare run folders against the first: throughput ratio with its uncertainty, time shares, verdicts, settings.

Loads every run folder, re-derives each summary from the raw records (a stale
summary.json is not trusted) and compares each run with the first one, the
baseline: the throughput ratio with a 95% interval from the runs' windows of
about 1 s, the change of each share of step time (data wait, host → device,
compute, other) in percentage points, the verdict class, and the scenario
settings that differ. Differences inside the noise rules are marked as such
(a ratio whose interval contains 1; a share that moved by less than 2 points;
see pipeprof/analysis/compare.py). Prints a table and writes
reports/<UTC>-compare-<a>-vs-<b>/ with compare.json and compare.html.

Examples:
  pipeprof compare reports/20261130T010018Z-quick reports/20261130T010028Z-quick
  pipeprof compare BASELINE RUN2 RUN3 --out /tmp/comparisons --quiet

Exit status: 0 when the comparison was written, 2 for bad input (a missing or
corrupt run folder, an --out that is not a folder).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeprof.cli.output import stdout_console


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("baseline", metavar="RUN_A", type=Path, help="the baseline run folder")
    p.add_argument("others", metavar="RUN", nargs="+", type=Path, help="run folder(s) compared with RUN_A")
    p.add_argument("-o", "--out", type=Path, metavar="DIR", default=Path("reports"),
                   help="where the comparison folder goes (default: reports)")
    p.add_argument("--quiet", action="store_true", help="do not print the table")


def execute(args: argparse.Namespace) -> int:
    # pandas, matplotlib and the analysis load here, not when the parser is built (--help stays fast)
    from pipeprof.pipeline.compare import compare_folders
    from pipeprof.render.compare import compare_table

    compare, folder = compare_folders([args.baseline, *args.others], args.out)
    if not args.quiet:
        stdout_console().print(compare_table(compare, folder))
    print(f"compare: {folder / 'compare.html'}")
    return 0
