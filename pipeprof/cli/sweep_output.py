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


def report_end(doc: dict[str, Any], folder: Path, console: Console) -> int:
    """The best point on ``console`` (stderr), the page on stdout; 0 with a best point, 1 without, 130 when
    interrupted."""
    best = doc.get("best")
    page = folder / f"{doc['kind']}.html"
    if best:
        console.print(f"best: {best['label']}: {fmt.rate(best['samples_per_s'])}", markup=False,
                      highlight=False)
    print(f"{doc['kind']}: {page}")
    if doc["status"] == "interrupted":
        return EXIT_INTERRUPTED
    return 0 if best else EXIT_FAILED
