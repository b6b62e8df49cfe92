"""List the scenarios in a folder with their descriptions (invalid ones with their error)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pipeprof.errors import UsageError
from pipeprof.scenario import load_scenario


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", nargs="?", default="scenarios", help="folder of .toml scenarios (default: scenarios)")


def execute(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder of scenarios")
    table = Table("file", "name", "storage", "workers", "description", box=None)
    for path in sorted(folder.glob("*.toml")):
        try:
            s = load_scenario(path)
            table.add_row(str(path), s.name, s.data.storage, str(s.loader.num_workers), s.description)
        except UsageError as e:
            table.add_row(str(path), "[red]invalid[/red]", "", "", str(e))
    Console().print(table)
    return 0
