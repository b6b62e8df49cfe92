"""Derive a run's summary and its files (summary.json, report.html) from its raw records."""

from __future__ import annotations

from typing import Any

from pipeprof.analysis.summary import summarize
from pipeprof.render.html import render_html
from pipeprof.run_folder import Run, to_json


def derived_files(run: Run, folder_name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The summary of ``run`` and the derived files (summary.json, report.html) as text."""
    summary = summarize(run)
    return summary, {"summary.json": to_json(summary),
                     "report.html": render_html(run, summary, folder_name=folder_name)}
