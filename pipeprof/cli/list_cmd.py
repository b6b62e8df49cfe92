"""List the scenarios in a folder with their descriptions (invalid ones with their error).

Names and files are printed in full whatever the width. On a terminal, each
description is folded into the rest of its line (below the row when the
terminal is too narrow for that); piped, every scenario is one line.
--json prints a list of objects: name, file, storage, num_workers,
description and error (null unless the file is invalid).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.cells import cell_len

from pipeprof.errors import UsageError
from pipeprof.scenario import load_scenario

COLUMNS = ("name", "storage", "workers", "file")
GAP = "  "
MIN_DESCRIPTION_WIDTH = 30  # narrower than this, a description goes below its row instead of beside it
INDENT = "    "


@dataclass(frozen=True)
class Entry:
    """One scenario file as the list shows it; name and settings are None for an invalid file."""

    file: str
    name: str | None
    storage: str | None
    num_workers: int | None
    description: str | None
    error: str | None = None

    def cells(self) -> tuple[str, ...]:
        if self.error is not None:
            return ("invalid", "", "", self.file)
        return (self.name or "", self.storage or "", str(self.num_workers), self.file)

    def text(self) -> str:
        return self.error if self.error is not None else self.description or ""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", nargs="?", default="scenarios", help="folder of .toml scenarios (default: scenarios)")
    p.add_argument("--json", action="store_true", help="print the list as JSON instead of a table")


def execute(args: argparse.Namespace) -> int:
    entries = scenario_entries(Path(args.folder))
    if args.json:
        text = json.dumps([asdict(e) for e in entries], indent=2, ensure_ascii=False)
    else:
        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
        text = "\n".join(listing(entries, width))
    sys.stdout.write(text + "\n")
    sys.stdout.flush()  # a closed pipe shows here, inside main's BrokenPipeError handling
    return 0


def scenario_entries(folder: Path) -> list[Entry]:
    """Every ``*.toml`` in ``folder``, sorted by file name, loaded and validated."""
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder of scenarios")
    entries = []
    for path in sorted(folder.glob("*.toml")):
        try:
            s = load_scenario(path)
            entries.append(Entry(str(path), s.name, s.data.storage, s.loader.num_workers, s.description))
        except UsageError as e:
            entries.append(Entry(str(path), None, None, None, None, str(e)))
    return entries


def listing(entries: list[Entry], width: int | None) -> list[str]:
    """The lines of the table: a header, then each entry with name, storage, workers and file in full.

    ``width`` None (not a terminal): each description whole at the end of its row. A width in columns: the
    description folded into the rest of the line, or below the row, indented, when less than
    MIN_DESCRIPTION_WIDTH columns would be left.
    """
    rows = [COLUMNS, *(e.cells() for e in entries)]
    widths = [max(cell_len(row[i]) for row in rows) for i in range(len(COLUMNS))]

    def line(cells: tuple[str, ...]) -> str:
        return GAP.join(c + " " * (w - cell_len(c)) for c, w in zip(cells, widths, strict=True))

    left = cell_len(line(COLUMNS)) + len(GAP)
    beside = width is None or width - left >= MIN_DESCRIPTION_WIDTH
    lines = [(line(COLUMNS) + (GAP + "description" if beside else "")).rstrip()]
    for entry in entries:
        text = " ".join(entry.text().split())
        if width is None:
            lines.append(f"{line(entry.cells())}{GAP}{text}".rstrip())
        elif beside:
            folded = textwrap.wrap(text, width - left, break_on_hyphens=False) or [""]
            lines.append(f"{line(entry.cells())}{GAP}{folded[0]}".rstrip())
            lines += [" " * left + rest for rest in folded[1:]]
        else:
            lines.append(line(entry.cells()).rstrip())
            lines += textwrap.wrap(text, max(width - len(INDENT), MIN_DESCRIPTION_WIDTH), initial_indent=INDENT,
                                   subsequent_indent=INDENT, break_on_hyphens=False)
    return lines
