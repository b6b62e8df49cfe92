"""What a command says about a damaged run folder (``Run.damage``) it could still analyse: each damaged row named."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from pipeprof.run_check import Damage

SHOWN = 10  # damaged rows named on the terminal; the summary's ``damage`` lists them all


def say_damaged(folder: Path, damage: Sequence[Damage]) -> None:
    """On stderr: that ``folder`` is damaged, and its first damaged rows and files, one a line."""
    print(f"{folder}: damaged run folder: {len(damage)} set aside, analysed without them", file=sys.stderr)
    for d in damage[:SHOWN]:
        print(f"  {folder / d.file}{'' if d.line is None else f' line {d.line}'}: {d.reason}", file=sys.stderr)
    if len(damage) > SHOWN:
        print(f"  ... and {len(damage) - SHOWN} more (summary.json's damage lists them all)", file=sys.stderr)
