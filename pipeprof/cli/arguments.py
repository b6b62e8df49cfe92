"""The arguments every command that trains a scenario takes (SCENARIO, --set, -o/--out, --cache), and argument types."""

from __future__ import annotations

import argparse
import math
from pathlib import Path


def add_scenario_arguments(p: argparse.ArgumentParser, *, example: str, out_what: str) -> None:
    """SCENARIO (e.g. ``example``), repeatable ``--set``, ``-o/--out`` (``out_what``: "run folders go") and ``--cache``."""
    p.add_argument("scenario", metavar="SCENARIO", help=f"scenario file, e.g. {example}")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a scenario key; the value is read as TOML (repeatable)")
    p.add_argument("-o", "--out", type=Path, metavar="DIR", default=Path("reports"),
                   help=f"where {out_what} (default: reports)")
    p.add_argument("--cache", type=Path, default=None,
                   help="data cache folder (default: $PIPEPROF_CACHE or ~/.cache/pipeprof)")


def positive_float(text: str) -> float:
    """An argument type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def seconds_at_least_1(text: str) -> float:
    """An argument type: a finite number of seconds >= 1 (NaN and infinity refused)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value >= 1 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 1, got {text!r}")
    return value


PID_MAX = 2**22  # Linux's largest pid_max (/proc/sys/kernel/pid_max says this machine's)


def pid_number(text: str) -> int:
    """An argument type: a process id, a whole number from 1 to the system's largest."""
    value = _int(text)
    try:
        most = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        most = PID_MAX
    if not 1 <= value <= most:
        raise argparse.ArgumentTypeError(f"expected a process id from 1 to {most}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argument type: a whole number >= 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An argument type: a whole number >= 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
