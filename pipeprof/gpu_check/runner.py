"""Run the gpu-check list: each check isolated and time-limited, a table printed, the JSON written.

Exit status: 1 when a check failed, 0 otherwise (every check skipped without CUDA included), 2 for a
usage error (an unknown ``--only`` name).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeprof.errors import one_line
from pipeprof.gpu_check.cases import Check, Context, all_checks
from pipeprof.gpu_check.checks import Outcome, failed, skipped
from pipeprof.gpu_check.truth_cases import truth_checks_list
from pipeprof.run_folder import write_json

DEFAULT_OUT = Path("reports") / "gpu-check.json"


@dataclass(frozen=True)
class Device:
    """Whether CUDA is usable here, the device's name, and why not when it is not."""

    cuda: bool
    name: str | None = None
    reason: str | None = None


def detect() -> Device:
    """CUDA as torch sees it, and the reason in words when ``torch.cuda.is_available()`` is False."""
    import torch

    if torch.cuda.is_available():
        return Device(True, torch.cuda.get_device_name(0))
    if torch.version.cuda is None:
        why = f"torch {torch.__version__} was built without CUDA"
    else:
        why = (f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no usable GPU "
               "(no NVIDIA driver, or CUDA_VISIBLE_DEVICES hides every device)")
    return Device(False, None, f"torch.cuda.is_available() is False: {why}")


def every_check() -> list[Check]:
    """The whole list: the runs and the simulated cases (``cases``), then the CUDA truths (``truth_cases``)."""
    return [*all_checks(), *truth_checks_list()]


def run_checks(checklist: Sequence[Check], device: Device, ctx: Context,
               clock: Callable[[], float] = time.monotonic) -> list[dict[str, Any]]:
    """One result per check (``name``, ``status``, ``detail``, ``seconds``): skipped without CUDA; a check
    that raises is a fail with the one-line error, and the next one runs."""
    results = []
    for check in checklist:
        start = clock()
        if not device.cuda:
            outcome = skipped(device.reason or "no CUDA")
        else:
            ctx.deadline = start + check.limit_s
            try:
                outcome = check.run(ctx)
                if not isinstance(outcome, Outcome):
                    outcome = failed(f"the check returned {type(outcome).__name__}, not an Outcome")
            except Exception as e:  # noqa: BLE001 - one check's error is its fail; the others still run
                outcome = failed(one_line(e))
        results.append({"name": check.name, "status": outcome.status, "detail": outcome.detail,
                        "seconds": round(clock() - start, 3)})
    return results


def document(device: Device, results: list[dict[str, Any]]) -> dict[str, Any]:
    """reports/gpu-check.json: ``cuda``, ``device``, ``checks`` (and ``reason`` when no CUDA)."""
    return {"cuda": device.cuda, "device": device.name, "reason": device.reason, "checks": results}


def table(doc: dict[str, Any]) -> Table:
    """The results as a table; a skip for want of CUDA says its reason once, in the caption."""
    title = f"gpu-check on {doc['device']}" if doc["device"] else "gpu-check: no CUDA device"
    t = Table(title=title, caption=doc["reason"], show_lines=False)
    t.add_column("check", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("s", justify="right", no_wrap=True)
    t.add_column("detail", overflow="fold")
    style = {"pass": "green", "fail": "bold red", "skipped": "yellow"}
    for r in doc["checks"]:
        detail = "(no CUDA: see below)" if doc["reason"] and r["detail"] == doc["reason"] else r["detail"]
        t.add_row(r["name"], f"[{style[r['status']]}]{r['status']}[/]", f"{r['seconds']:.1f}", escape(detail))
    return t


def main(argv: Sequence[str] | None = None, *, checklist: Sequence[Check] | None = None,
         device: Device | None = None, console: Console | None = None) -> int:
    """``python -m pipeprof.gpu_check [--out FILE] [--only NAME ...] [--keep DIR] [--list]``."""
    p = argparse.ArgumentParser(prog="python -m pipeprof.gpu_check", description=__doc__)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSON written (default {DEFAULT_OUT})")
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this check (repeatable)")
    p.add_argument("--keep", type=Path, default=None, metavar="DIR",
                   help="write the runs into DIR and keep them (default: a temporary folder, deleted)")
    p.add_argument("--list", action="store_true", help="print each check's name and what it runs, and exit")
    args = p.parse_args(argv)
    console = console or Console()
    checklist = list(every_check() if checklist is None else checklist)
    if args.list:
        for c in checklist:
            console.print(f"[bold]{c.name}[/]: {c.what}", highlight=False)
        return 0
    unknown = sorted(set(args.only) - {c.name for c in checklist})
    if unknown:
        console.print(f"gpu-check: error: unknown check {', '.join(unknown)} (see --list)", highlight=False)
        return 2
    if args.only:
        checklist = [c for c in checklist if c.name in args.only]
    device = device or detect()
    with tempfile.TemporaryDirectory(prefix="pipeprof-gpu-check-") as tmp:
        where = args.keep or Path(tmp)
        results = run_checks(checklist, device, Context(where))
    doc = document(device, results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, doc)
    console.print(table(doc))
    counts = {s: sum(r["status"] == s for r in results) for s in ("pass", "fail", "skipped")}
    console.print(f"{counts['pass']} passed, {counts['fail']} failed, {counts['skipped']} skipped: {args.out}",
                  highlight=False)
    return 1 if counts["fail"] else 0
