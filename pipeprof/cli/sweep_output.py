"""What ``sweep`` and ``tune`` print at the end: the points table, the best line, the page; the exit status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from pipeprof import format as fmt
from pipeprof.cli.output import stdout_console
from pipeprof.errors import EXIT_FAILED, EXIT_INTERRUPTED


def print_table(doc: dict[str, Any], folder: Path) -> None:
    """The points as a table on stdout."""
    from pipeprof.render.sweep import sweep_table  # its renderers load pandas and matplotlib: not for --help

    stdout_console().print(sweep_table(doc, folder))


def best_words(doc: dict[str, Any], best: dict[str, Any]) -> str:
    """How the best point is introduced: a tune's best is confirmed by its fresh-process run (index -1); a
    short trial's best, or an interrupted run's, says so."""
    if doc["kind"] == "tune" and not _confirmed(best):
        words = "best trial so far, not confirmed" if doc["status"] == "interrupted" else \
            "best trial, not confirmed by a full run"
    else:
        words = "best of the points measured" if doc["status"] == "interrupted" else "best"
    return f"interrupted: {words}" if doc["status"] == "interrupted" else words


def _confirmed(best: dict[str, Any] | None) -> bool:
    return best is not None and best.get("index") == -1


def check_words(doc: dict[str, Any]) -> str | None:
    """One line on the predictions' track record in this sweep (``prediction_check``), the undisturbed pairs
    apart when some pair has an end that never settled or shared the machine; None with nothing to check."""
    summary = (doc.get("prediction_check") or {}).get("summary") or {}
    pairs = summary.get("pairs")
    if not pairs:
        return None

    def record(s: dict[str, Any]) -> str:
        inside = s.get("inside_share")
        return (f"median error {fmt.pct(s['median_abs_error'])}, worst {fmt.pct(s['worst_abs_error'])}"
                + (f", inside the 80 % interval {fmt.pct(inside)}" if inside is not None else ""))

    line = (f"predictions checked: {fmt.plural(pairs, 'recommendation')} landed on another point measured here: "
            f"{record(summary)}")
    calm = summary.get("undisturbed") or {}
    if calm.get("pairs") != pairs:
        line += (f"; between points measured undisturbed ({calm['pairs']}): {record(calm)}" if calm.get("pairs")
                 else "; every pair has a point that never settled or shared the machine (see the page)")
    return line


def report_end(doc: dict[str, Any], folder: Path, console: Console) -> int:
    """The best point on ``console`` (stderr), the page on stdout; 0 with a best point, 1 without, 130 when
    interrupted."""
    best = doc.get("best")
    page = folder / f"{doc['kind']}.html"
    interrupted = doc["status"] == "interrupted"
    if best:
        console.print(f"{best_words(doc, best)}: {best['label']}: {fmt.rate(best['samples_per_s'])}", markup=False,
                      highlight=False)
    checked = check_words(doc)
    if checked:
        console.print(checked, markup=False, highlight=False)
    if interrupted:
        measured = sum(1 for p in doc.get("points") or [] if p.get("status") == "complete")
        console.print(f"pipeprof: {doc['kind']} interrupted after {fmt.plural(measured, 'complete point')}"
                      f"{'; no best was confirmed' if doc['kind'] == 'tune' and not _confirmed(best) else ''}; "
                      f"saved in {folder}", markup=False, highlight=False)
    print(f"{doc['kind']}: {page}")
    if doc["status"] == "interrupted":
        return EXIT_INTERRUPTED
    return 0 if best else EXIT_FAILED
