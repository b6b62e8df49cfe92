"""``pipeprof compare``'s pipeline: load run folders, re-derive their summaries, compare them, write the folder.

Every summary is derived again from the raw records (a stale summary.json is
not trusted); the comparison itself is ``pipeprof.analysis.compare``. The
folder (compare.json, compare.html) is staged: it appears whole or not at all.
"""

from __future__ import annotations

import datetime as dt
import os
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeprof.analysis.compare import compare_runs
from pipeprof.pipeline.derive import summarize
from pipeprof.render.compare import render_compare_html
from pipeprof.run_check import refuse_damaged
from pipeprof.run_folder import ensure_out_folder, load_run, staged_folder, write_json, write_text

NAME_CHARS = 40  # of each scenario name in the comparison folder's name


def compare_folders(folders: Sequence[Path], out: Path) -> tuple[dict[str, Any], Path]:
    """Compare the runs in ``folders`` with the first; compare.json's content and the folder under ``out``.

    Every folder is loaded (and so validated) before anything is written.
    """
    runs = [load_run(f) for f in folders]
    for folder, run in zip(folders, runs):
        refuse_damaged(folder, run.damage, "a comparison")
    ensure_out_folder(out)
    now = dt.datetime.now(dt.timezone.utc)
    labels = run_labels(folders)
    summaries = [summarize(run) for run in runs]
    compare = compare_runs([(label, str(f), run, s) for label, f, run, s in zip(labels, folders, runs, summaries)],
                           created_utc=now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    with staged_folder(out, comparison_name([r.name for r in runs]), now=now) as stage:
        for entry, f in zip(compare["runs"], folders):
            entry["report"] = report_link(f, stage.folder)
        write_json(stage.tmp / "compare.json", compare)
        write_text(stage.tmp / "compare.html", render_compare_html(compare, folder_name=stage.folder.name))
    return compare, stage.folder


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
