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

--fail-if-slower PCT makes it a regression gate for CI: exit status 1 when
a run's throughput is below the baseline's by more than PCT percent and the
whole 95% interval of the ratio lies below 1 (beyond the runs' joint noise);
0 inside the noise, slower by PCT or less, or faster; a line says why either
way (see pipeprof/analysis/gate.py). A run too short to have throughput
windows cannot be told from noise: exit status 2, with the reason. --json
prints the comparisons and the gate as one JSON object instead of the table.

Examples:
  pipeprof compare reports/20261130T010018Z-quick reports/20261130T010028Z-quick
  pipeprof compare BASELINE RUN2 RUN3 --out /tmp/comparisons --quiet
  pipeprof compare main-run/ this-run/ --fail-if-slower 5 --json

Exit status: 0 when the comparison was written (and the gate passed), 1 when
the gate failed, 2 for bad input (a missing or corrupt run folder, an --out
that is not a folder, a bad PCT) or a run the gate could not judge.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipeprof.cli.output import stdout_console


def percentage(text: str) -> float:
    """An argument type: a percentage >= 0 and < 100 (a slowdown of 100% or more is no throughput at all)."""
    from pipeprof.analysis.gate import check_pct

    try:
        return check_pct(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage >= 0 and < 100, got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("baseline", metavar="RUN_A", type=Path, help="the baseline run folder")
    p.add_argument("others", metavar="RUN", nargs="+", type=Path, help="run folder(s) compared with RUN_A")
    p.add_argument("-o", "--out", type=Path, metavar="DIR", default=Path("reports"),
                   help="where the comparison folder goes (default: reports)")
    p.add_argument("--quiet", action="store_true", help="do not print the table")
    p.add_argument("--fail-if-slower", type=percentage, metavar="PCT", default=None,
                   help="regression gate: exit 1 when a run is slower than RUN_A by more than PCT percent "
                        "and beyond the runs' joint noise")
    p.add_argument("--json", action="store_true",
                   help="print the comparisons (and the gate) as one JSON object instead of the table")


def execute(args: argparse.Namespace) -> int:
    # pandas, matplotlib and the analysis load here, not when the parser is built (--help stays fast)
    from pipeprof.analysis.gate import gate_exit_status, regression_gate
    from pipeprof.pipeline.compare import compare_folders
    from pipeprof.render.compare import compare_table
    from pipeprof.render.gate import gate_json, gate_line
    from pipeprof.run_folder import to_json

    compare, folder = compare_folders([args.baseline, *args.others], args.out)
    gate = None if args.fail_if_slower is None else regression_gate(compare, args.fail_if_slower)
    if args.json:
        result = {"compare": str(folder / "compare.json"), "runs": compare["runs"],
                  "comparisons": compare["comparisons"],
                  "gate": None if gate is None else gate_json(gate, gate_exit_status(gate))}
        print(json.dumps(json.loads(to_json(result)), sort_keys=True))  # to_json: NaN as null
        return 0 if gate is None else gate_exit_status(gate)
    if not args.quiet:
        stdout_console().print(compare_table(compare, folder))
    print(f"compare: {folder / 'compare.html'}")
    if gate is None:
        return 0
    for r in gate:
        print(gate_line(r))
    return gate_exit_status(gate)
