"""``pipeprof sweep``'s pipeline: a grid of settings, every point run in a fresh process, one document.

``plan_sweep`` turns the scenario's ``[sweep]`` table and the ``--grid``
axes into points (invalid combinations skipped with the reason);
``run_sweep`` runs them one after the other (``pipeprof.pipeline.
fresh_process``), saving sweep.json and points.csv after each point, and
writes sweep.html at the end. ``tune`` shares the folder, the document and
its files. Nothing here prints: progress goes to the ``Progress`` given.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pipeprof import track_record
from pipeprof.analysis.prediction_check import prediction_check
from pipeprof.analysis.sweep import best_point, best_summary, near_best, point_record
from pipeprof.errors import UsageError
from pipeprof.grid import Point, axes_from_table, build_axes, parse_axis, plan, read_sweep_table
from pipeprof.pipeline.fresh_process import run_child
from pipeprof.pipeline.progress import SILENT, Progress
from pipeprof.render.sweep import render_sweep_html
from pipeprof.run_folder import ensure_out_folder, new_run_folder, write_json, write_text
from pipeprof.scenario import Scenario
from pipeprof.variants import to_toml
from pipeprof.version import __version__

SWEEP_SCHEMA_VERSION = 1
DEFAULT_MAX_STEPS = 5000  # steps of a point measured until steady: the time budget ends it first


@dataclass(frozen=True)
class Measure:
    """How long each point runs: until steady within ``max_seconds``, or the scenario's own steps."""

    max_seconds: float
    fixed_steps: bool = False

    def change(self, scenario: Scenario) -> dict[str, Any]:
        """The keys every point gets: steady-state measurement within the time budget, unless fixed_steps."""
        if self.fixed_steps:
            return {}
        return {"train.steady": True, "train.max_seconds": self.max_seconds,
                "train.steps": max(DEFAULT_MAX_STEPS, scenario.total_steps())}


def plan_sweep(scenario: Scenario, scenario_file: Path, grid: list[str],
               measure: Measure) -> tuple[list[tuple[str, list[Any]]], list[Point]]:
    """The grid's axes (the file's ``[sweep]`` table, replaced key by key by ``grid``) and its points;
    a UsageError when no point of it is valid."""
    where = str(scenario_file)
    axes = build_axes(axes_from_table(read_sweep_table(scenario_file), where), [parse_axis(g) for g in grid], where)
    points = plan(scenario, axes, where, measure.change(scenario))
    if not any(p.variant is not None for p in points):
        raise UsageError(f"{where}: every point of the grid is invalid; the first: {points[0].skipped}")
    return axes, points


def run_sweep(scenario: Scenario, *, scenario_file: Path, overrides: list[str], grid: list[str], out: Path,
              measure: Measure, cache: Path | None = None,
              progress: Progress = SILENT) -> tuple[dict[str, Any], Path]:
    """Plan and run the sweep; its document (sweep.json) and its folder under ``out``."""
    axes, points = plan_sweep(scenario, scenario_file, grid, measure)
    folder = create_folder(out, f"sweep-{scenario.name}")
    doc = new_document("sweep", scenario, scenario_file=str(scenario_file), overrides=overrides, axes=axes,
                       measure=measure)
    status = run_points(doc, points, folder, cache, progress)
    finish(doc, folder, status)
    return doc, folder


def create_folder(out: Path, name: str) -> Path:
    """The sweep's folder, created at once: points are saved into it as they finish."""
    ensure_out_folder(out)
    folder = new_run_folder(out, name)
    try:
        folder.mkdir()
    except OSError as e:
        raise UsageError(f"--out {out}: cannot create {folder.name} ({e.strerror or e})") from None
    return folder


def new_document(kind: str, scenario: Scenario, *, scenario_file: str, overrides: list[str],
                 axes: list[tuple[str, list[Any]]], measure: Measure) -> dict[str, Any]:
    """The sweep.json (or tune.json) skeleton, status ``running``."""
    steady = None if measure.fixed_steps else {
        "max_seconds": measure.max_seconds,
        "words": f"each until steady or {measure.max_seconds:g} s",
    }
    return {
        "schema_version": SWEEP_SCHEMA_VERSION,
        "kind": kind,
        "pipeprof_version": __version__,
        "scenario": scenario.name,
        "description": scenario.description,
        "scenario_file": scenario_file,
        "overrides": list(overrides),
        "created_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "status": "running",
        "steady": steady,
        "axes": [{"key": k, "values": v} for k, v in axes],
        "points": [],
        "best": None,
        "near_best": [],
        "notes": [],
    }


def run_points(doc: dict[str, Any], points: list[Point], folder: Path, cache: Path | None,
               progress: Progress = SILENT) -> str:
    """Run every runnable point in a fresh process, saving sweep.json after each; the sweep's status."""
    runnable = sum(p.variant is not None for p in points)
    status = "complete"
    save_document(doc, folder)  # "running" from the start: a sweep killed in its first point still says so
    with progress.showing():
        task = progress.task(doc["scenario"], runnable)
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
                progress.update(task, title=f"{doc['scenario']}: {point.label}")
                record = run_point(point, folder, cache)
            except KeyboardInterrupt:  # outside the child's run: nothing of this point to keep
                record = point_record(point.index, point.label, point.change, "not run",
                                      reason="the sweep was interrupted")
            doc["points"].append(record)
            if record["status"] in ("interrupted", "not run"):
                status = "interrupted"
            else:
                rate = record["samples_per_s"]
                progress.line(f"  {point.label}: " + (f"{rate:,.0f} samples/s" if rate is not None
                                                      else f"{record['status']}: {record['reason']}"))
            progress.advance(task)
            save_document(doc, folder)
    return status


def run_point(point: Point, folder: Path, cache: Path | None) -> dict[str, Any]:
    """One point in a fresh process: its scenario file under scenarios/, its run folder under points/."""
    assert point.variant is not None  # skipped points never run
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
    doc["prediction_check"] = prediction_check(doc["points"]).to_json()
    keep_checks(doc, "sweep")
    doc["status"] = status if best is not None or status == "interrupted" else "failed"
    save_document(doc, folder)
    write_text(folder / f"{doc['kind']}.html", render_sweep_html(doc, folder_name=folder.name))


def keep_checks(doc: dict[str, Any], source: str) -> None:
    """The document's ``prediction_check`` rows added to this machine's track record (``pipeprof.track_record``);
    a record that cannot be written is said in the document's notes."""
    why_not = track_record.append(track_record.prediction_check_rows(source, doc.get("prediction_check")))
    if why_not:
        doc.setdefault("notes", []).append(f"{why_not}: these checks do not count towards this machine's intervals.")


def save_document(doc: dict[str, Any], folder: Path) -> None:
    """``<kind>.json`` and points.csv, as they stand."""
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
