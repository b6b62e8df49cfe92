"""Sweep a scenario over a grid of settings: every point in a fresh process, one comparison page.

Every combination of the grid's values is a point, run one after the other
as `python -m pipeprof run` in a fresh process (no point inherits another's
page cache, torch threads or workers). By default each point runs until its
windowed throughput is steady (the last 5 windows of ~0.5 s within 5%
coefficient of variation; everything before them is warm-up: worker start,
first-epoch cache fill) or its --max-seconds budget is spent, whichever
comes first (--fixed-steps: the scenario's own steps instead). A failing
point is recorded with its error and the sweep goes on; a combination that
is invalid together is skipped with the reason; Ctrl-C keeps the finished
points (exit 130).

Writes reports/<UTC>-sweep-<scenario>/: sweep.html (sortable table,
throughput against num_workers per storage kind, wait/compute per point, the
best point, links to each point's report), points.csv, sweep.json (`best`,
`points`), and each point's run folder under points/.

Examples:
  pipeprof sweep scenarios/quick.toml --grid loader.num_workers=0,1,2 --grid data.storage=ram,memmap
  pipeprof sweep scenarios/sweep-workers.toml           # the grid from its [sweep] table

Exit status: 0 when at least one point completed, 1 when none did, 130 when
interrupted, 2 for bad input (unknown grid key, wrong type, empty grid).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

import pipeprof
from pipeprof.analysis.sweep import best_point, best_summary, near_best, point_record
from pipeprof.cli.arguments import add_scenario_arguments
from pipeprof.errors import EXIT_FAILED, EXIT_INTERRUPTED, UsageError
from pipeprof.grid import Point, axes_from_table, build_axes, parse_axis, plan, read_sweep_table
from pipeprof.pipeline.fresh_process import run_child
from pipeprof.render.sweep import render_sweep_html, sweep_table
from pipeprof.run_folder import ensure_out_folder, new_run_folder, write_json, write_text
from pipeprof.scenario import Scenario, load_scenario
from pipeprof.variants import to_toml

SWEEP_SCHEMA_VERSION = 1
DEFAULT_MAX_SECONDS = 30.0
DEFAULT_MAX_STEPS = 5000


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario_arguments(p, example="scenarios/quick.toml", out_what="the sweep folder goes")
    p.add_argument("--grid", action="append", default=[], metavar="SECTION.KEY=V1,V2,...",
                   help="an axis of the grid; values read as TOML, bare words as strings (repeatable; "
                        "replaces the scenario's [sweep] axis of the same key)")
    add_measure_arguments(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar and no table")


def add_measure_arguments(p: argparse.ArgumentParser) -> None:
    """How long each point runs (shared with tune)."""
    p.add_argument("--max-seconds", type=positive_float, default=DEFAULT_MAX_SECONDS, metavar="S",
                   help=f"time budget per point for steady-state measurement (default {DEFAULT_MAX_SECONDS:g})")
    p.add_argument("--fixed-steps", action="store_true",
                   help="run each point for the scenario's own steps/epochs instead of until steady")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def measure_change(scenario: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    """The keys every point gets: steady-state measurement within the time budget, unless --fixed-steps."""
    if args.fixed_steps:
        return {}
    return {"train.steady": True, "train.max_seconds": args.max_seconds,
            "train.steps": max(DEFAULT_MAX_STEPS, scenario.total_steps())}


def execute(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, args.overrides)
    where = str(args.scenario)
    axes = build_axes(axes_from_table(read_sweep_table(args.scenario), where),
                      [parse_axis(g) for g in args.grid], where)
    points = plan(scenario, axes, where, measure_change(scenario, args))
    runnable = [p for p in points if p.variant is not None]
    if not runnable:
        raise UsageError(f"{where}: every point of the grid is invalid; the first: {points[0].skipped}")
    folder = create_folder(args.out, f"sweep-{scenario.name}")
    doc = new_document("sweep", scenario, args, axes)
    console = Console(stderr=True)
    status = run_points(doc, points, folder, args.cache, console, quiet=args.quiet)
    finish(doc, folder, status)
    if not args.quiet:
        Console().print(sweep_table(doc, folder))
    return report_end(doc, folder, console)


def create_folder(out: Path, name: str) -> Path:
    """The sweep's folder, created at once: points are saved into it as they finish."""
    ensure_out_folder(out)
    folder = new_run_folder(out, name)
    try:
        folder.mkdir()
    except OSError as e:
        raise UsageError(f"--out {out}: cannot create {folder.name} ({e.strerror or e})") from None
    return folder


def new_document(kind: str, scenario: Scenario, args: argparse.Namespace,
                 axes: list[tuple[str, list[Any]]]) -> dict[str, Any]:
    """The sweep.json (or tune.json) skeleton, status ``running``."""
    steady = None if args.fixed_steps else {
        "max_seconds": args.max_seconds,
        "words": f"each until steady or {args.max_seconds:g} s",
    }
    return {
        "schema_version": SWEEP_SCHEMA_VERSION,
        "kind": kind,
        "pipeprof_version": pipeprof.__version__,
        "scenario": scenario.name,
        "description": scenario.description,
        "scenario_file": str(args.scenario),
        "overrides": list(args.overrides),
        "created_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "status": "running",
        "steady": steady,
        "axes": [{"key": k, "values": v} for k, v in axes],
        "points": [],
        "best": None,
        "near_best": [],
        "notes": [],
    }


def run_points(doc: dict[str, Any], points: list[Point], folder: Path, cache: Path | None, console: Console,
               *, quiet: bool) -> str:
    """Run every runnable point in a fresh process, saving sweep.json after each; the sweep's status."""
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                        console=console, disable=quiet, refresh_per_second=4)
    runnable = sum(p.variant is not None for p in points)
    status = "complete"
    with progress:
        task = progress.add_task(doc["scenario"], total=runnable)
        for point in points:
            if point.variant is None:
                doc["points"].append(point_record(point.index, point.label, point.change, "skipped",
                                                  reason=point.skipped))
                continue
            if status == "interrupted":
                doc["points"].append(point_record(point.index, point.label, point.change, "not run",
                                                  reason="the sweep was interrupted"))
                continue
            try:
                progress.update(task, description=f"{doc['scenario']}: {point.label}")
                record = run_point(point, folder, cache)
            except KeyboardInterrupt:  # outside the child's run: nothing of this point to keep
                record = point_record(point.index, point.label, point.change, "not run",
                                      reason="the sweep was interrupted")
            doc["points"].append(record)
            if record["status"] in ("interrupted", "not run"):
                status = "interrupted"
            elif not quiet:
                rate = record["samples_per_s"]
                progress.console.print(f"  {point.label}: " + (f"{rate:,.0f} samples/s" if rate is not None
                                                               else f"{record['status']}: {record['reason']}"))
            progress.advance(task)
            save_document(doc, folder)
    return status


def run_point(point: Point, folder: Path, cache: Path | None) -> dict[str, Any]:
    """One point in a fresh process: its scenario file under scenarios/, its run folder under points/."""
    scenario_file = folder / "scenarios" / f"{point.index:03d}.toml"
    scenario_file.parent.mkdir(exist_ok=True)
    write_text(scenario_file, to_toml(point.variant.raw))
    start = time.monotonic()
    try:
        child = run_child(scenario_file, folder / "points", cache=cache)
    except KeyboardInterrupt:  # between the child's end and our bookkeeping
        return point_record(point.index, point.label, point.change, "interrupted", reason="interrupted")
    rel = str(child.folder.relative_to(folder)) if child.folder else None
    return point_record(point.index, point.label, point.change, child.status, reason=child.error, folder=rel,
                        summary=child.summary if child.status in ("complete", "interrupted") else None,
                        wall_s=time.monotonic() - start)


def finish(doc: dict[str, Any], folder: Path, status: str) -> None:
    """The best point and the final files: sweep.json, points.csv, sweep.html."""
    best = best_point(doc["points"])
    doc["best"] = best_summary(best, {})
    doc["near_best"] = near_best(doc["points"], best)
    doc["status"] = status if best is not None or status == "interrupted" else "failed"
    save_document(doc, folder)
    write_text(folder / f"{doc['kind']}.html", render_sweep_html(doc, folder_name=folder.name))


def save_document(doc: dict[str, Any], folder: Path) -> None:
    write_json(folder / f"{doc['kind']}.json", doc)
    write_text(folder / "points.csv", points_frame(doc).to_csv(index=False))


def points_frame(doc: dict[str, Any]) -> pd.DataFrame:
    """points.csv: one row per point, the axes as columns."""
    keys = [a["key"] for a in doc.get("axes") or []]
    rows = []
    for p in doc["points"]:
        row = {"index": p["index"], **{k: p["change"].get(k) for k in keys}}
        row.update({k: p.get(k) for k in ("status", "samples_per_s", "samples_per_s_low", "samples_per_s_high",
                                          "step_time_median_s", "verdict", "cpu_mean_util_pct", "peak_rss_bytes",
                                          "wall_s", "reason", "report")})
        row.update({f"{k}_fraction": v for k, v in (p.get("fractions") or {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def report_end(doc: dict[str, Any], folder: Path, console: Console) -> int:
    best = doc.get("best")
    page = folder / f"{doc['kind']}.html"
    if best:
        console.print(f"best: {best['label']}: {best['samples_per_s']:,.0f} samples/s", markup=False,
                      highlight=False)
    print(f"{doc['kind']}: {page}")
    if doc["status"] == "interrupted":
        return EXIT_INTERRUPTED
    return 0 if best else EXIT_FAILED
