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
import datetime as dt
import os
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

NAME_CHARS = 40  # of each scenario name in the comparison folder's name


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("baseline", metavar="RUN_A", type=Path, help="the baseline run folder")
    p.add_argument("others", metavar="RUN", nargs="+", type=Path, help="run folder(s) compared with RUN_A")
    p.add_argument("--out", type=Path, default=Path("reports"),
                   help="where the comparison folder goes (default: reports)")
    p.add_argument("--quiet", action="store_true", help="do not print the table")


def execute(args: argparse.Namespace) -> int:
    # pandas, matplotlib and the analysis load here, not when the parser is built (--help stays fast)
    from pipeprof.analysis.compare import compare_runs
    from pipeprof.analysis.summary import summarize
    from pipeprof.render.compare import compare_table, render_compare_html
    from pipeprof.run_folder import ensure_out_folder, load_run, staged_folder, write_json, write_text

    folders = [args.baseline, *args.others]
    runs = [load_run(f) for f in folders]  # every folder validated before anything is written
    ensure_out_folder(args.out)
    now = dt.datetime.now(dt.timezone.utc)
    labels = run_labels(folders)
    summaries = [summarize(run) for run in runs]
    compare = compare_runs([(label, str(f), run, s) for label, f, run, s in zip(labels, folders, runs, summaries)],
                           created_utc=now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    with staged_folder(args.out, comparison_name([r.name for r in runs]), now=now) as stage:
        for entry, f in zip(compare["runs"], folders):
            entry["report"] = report_link(f, stage.folder)
        write_json(stage.tmp / "compare.json", compare)
        write_text(stage.tmp / "compare.html", render_compare_html(compare, folder_name=stage.folder.name))
    folder = stage.folder
    if not args.quiet:
        Console().print(compare_table(compare, folder))
    print(f"compare: {folder / 'compare.html'}")
    return 0


def run_labels(folders: Sequence[Path]) -> list[str]:
    """Each run's folder name, made unique with " (2)", " (3)" when two folders share a name."""
    labels: list[str] = []
    for f in folders:
        name = Path(f).name or Path(f).resolve().name or str(f)
        label, n = name, 1
        while label in labels:
            n += 1
            label = f"{name} ({n})"
        labels.append(label)
    return labels


def comparison_name(scenarios: Sequence[str]) -> str:
    """``compare-<a>-vs-<b>``, and ``-and-<n>-more`` beyond two runs."""
    a, b = (s[:NAME_CHARS] for s in scenarios[:2])
    more = f"-and-{len(scenarios) - 2}-more" if len(scenarios) > 2 else ""
    return f"compare-{a}-vs-{b}{more}"


def report_link(run_folder: Path, compare_folder: Path) -> str | None:
    """The run's report.html relative to the comparison folder, URL-quoted; None without a report."""
    report = Path(run_folder) / "report.html"
    if not report.is_file():
        return None
    try:
        rel = os.path.relpath(report.resolve(), Path(compare_folder).resolve())
    except ValueError:  # another drive (Windows): no relative path exists
        return report.resolve().as_uri()
    return urllib.parse.quote(rel.replace(os.sep, "/"))
