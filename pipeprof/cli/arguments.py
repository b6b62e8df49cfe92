"""The arguments every command that trains a scenario takes: SCENARIO, --set, --out, --cache."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_scenario_arguments(p: argparse.ArgumentParser, *, example: str, out_what: str) -> None:
    """SCENARIO (e.g. ``example``), repeatable ``--set``, ``--out`` (``out_what``: "run folders go") and ``--cache``."""
    p.add_argument("scenario", metavar="SCENARIO", help=f"scenario file, e.g. {example}")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a scenario key; the value is read as TOML (repeatable)")
    p.add_argument("--out", type=Path, default=Path("reports"), help=f"where {out_what} (default: reports)")
    p.add_argument("--cache", type=Path, default=None,
                   help="data cache folder (default: $PIPEPROF_CACHE or ~/.cache/pipeprof)")
