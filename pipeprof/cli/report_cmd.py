"""(Re)render report.html and summary.json of one or more run folders from their raw records."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeprof.analysis.summary import summarize
from pipeprof.render.console import print_summary
from pipeprof.render.html import render_html
from pipeprof.run import Run, load_run, to_json, write_text


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folder(s), e.g. reports/20261129T120000Z-quick")
    p.add_argument("--quiet", action="store_true", help="do not print the summary table")


def derived_files(run: Run, folder_name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The summary of ``run`` and the derived files (summary.json, report.html) as text."""
    summary = summarize(run)
    return summary, {"summary.json": to_json(summary),
                     "report.html": render_html(run, summary, folder_name=folder_name)}


def execute(args: argparse.Namespace) -> int:
    runs = [(Path(f), load_run(Path(f))) for f in args.runs]  # validate all before writing any
    for folder, run in runs:
        summary, files = derived_files(run, folder.name)
        for name, text in files.items():
            write_text(folder / name, text)
        if not args.quiet:
            print_summary(summary, folder)
        print(f"report: {folder / 'report.html'}")
    return 0
