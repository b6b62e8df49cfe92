"""``pipeprof run --verify``: re-run with the top recommendation applied, record predicted vs measured.

The run folder is saved first (nothing measured is ever at the mercy of the
re-run). Then the first recommendation that changes a setting is applied to
the resolved scenario (``pipeprof.variants.vary``: keys the change makes
meaningless are dropped and listed), written as ``verify/scenario.toml`` in
the run folder, and run in fresh processes (``pipeprof.pipeline.fresh_process``)
alternately with the scenario as run (``verify/base.toml``): A B A B ...,
``repeats`` of each, the change's run folders in ``verify/``, the base's in
``verify/base/``. A machine that slows for a while slows both alike; the
medians and their spread are recorded, the base's too, so a disturbed base is
seen (``analysis.verification``). The outcome goes into run.json as
``verification`` and summary.json and report.html are derived again.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeprof import track_record
from pipeprof.analysis.recommend import Recommendation
from pipeprof.errors import UsageError
from pipeprof.pipeline.derive import rederive
from pipeprof.pipeline.fresh_process import ChildRun, run_child
from pipeprof.pipeline.progress import SILENT, Progress
from pipeprof.render.interval_text import change_text
from pipeprof.run_folder import RUN_FORMAT_VERSION, Run, write_json, write_text
from pipeprof.scenario import Scenario
from pipeprof.variants import to_toml, vary

VERIFY_FOLDER = "verify"
VERIFY_REPEATS = 3  # runs of the base and of the change each, interleaved


def first_change(recommendations: Any) -> dict[str, Any] | None:
    """The highest-ranked recommendation that changes scenario settings (not code, not the negative)."""
    for rec in recommendations if isinstance(recommendations, list) else []:
        if isinstance(rec, dict) and isinstance(rec.get("change"), dict) and rec["change"]:
            return rec
    return None


def checked_change(summary: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The recommendation a re-run checks and the verification record's start (its change and prediction), or
    None and the whole record when none applies (the top one is a code change, or nothing will help)."""
    rec = first_change(summary.get("recommendations"))
    if rec is None:
        recs = summary.get("recommendations") or [{}]
        top = recs[0] if isinstance(recs[0], dict) else {}
        why = (f"the top recommendation is a code change ({top['code_change']})" if top.get("code_change")
               else top.get("reason") or "no recommendation")
        return None, {"status": "not applicable", "reason": why, "change": {}}
    return rec, {"change": rec["change"], "predicted_samples_per_s": rec.get("predicted_samples_per_s"),
                 "predicted_speedup": rec.get("predicted_speedup"), "recommendation_reason": rec.get("reason")}


def verify(scenario: Scenario, summary: dict[str, Any], folder: Path, *, cache: Path | None = None,
           progress: Progress = SILENT, repeats: int = VERIFY_REPEATS,
           runner: Callable[..., ChildRun] = run_child) -> dict[str, Any]:
    """Re-run ``scenario`` with its top applicable recommendation, interleaved with the scenario as run (A B A B
    ..., ``repeats`` each, fresh processes); the raw ``verification`` record. ``progress`` shows the waits;
    ``runner`` runs one child (tests: a stand-in)."""
    rec, record = checked_change(summary)
    if rec is None:
        return record
    record["set"] = words = change_text(Recommendation.from_json(rec))
    try:
        variant = vary(scenario, rec["change"], f"--verify ({words})", name=f"{scenario.name}-verify")
        base = vary(scenario, {}, "--verify (the scenario as run)")
    except UsageError as e:
        return {**record, "status": "invalid", "reason": str(e)}
    out = folder / VERIFY_FOLDER
    out.mkdir(exist_ok=True)
    scenario_file, base_file = out / "scenario.toml", out / "base.toml"
    write_text(scenario_file, to_toml(variant.raw))
    write_text(base_file, to_toml(base.raw))
    record["dropped"] = list(variant.dropped)
    base_rates: list[float] = []
    rates: list[float] = []
    child: ChildRun | None = None
    for i in range(max(repeats, 1)):
        with progress.waiting(f"verify: the scenario as run ({i + 1} of {repeats})"):
            base_child = runner(base_file, out / "base", cache=cache)
        if base_child.status == "interrupted":
            child = base_child
            break
        rate = (base_child.summary or {}).get("samples_per_s")
        if base_child.status == "complete" and isinstance(rate, (int, float)):
            base_rates.append(float(rate))
        with progress.waiting(f"verify: re-running with {words} ({i + 1} of {repeats})"):
            child = runner(scenario_file, out, cache=cache)
        rate = (child.summary or {}).get("samples_per_s")
        if child.status != "complete" or not isinstance(rate, (int, float)):
            break
        rates.append(float(rate))
    assert child is not None
    complete = bool(rates) and child.status != "interrupted"
    record.update(
        status="complete" if complete else child.status,
        reason=None if complete else child.error,
        exit_code=child.exit_code,
        folder=str(child.folder.relative_to(folder)) if child.folder else None,
        measured_samples_per_s=statistics.median(rates) if rates else None,
        measured_verdict=((child.summary or {}).get("verdict") or {}).get("class"),
        measured_runs_samples_per_s=rates,
        base_samples_per_s=statistics.median(base_rates) if base_rates else None,
        base_runs_samples_per_s=base_rates,
    )
    return record


def store(run: Run, folder: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Put ``record`` into run.json and derive summary.json and report.html again; the new summary."""
    run.meta["verification"] = record
    write_json(folder / "run.json", dict(run.meta, format_version=RUN_FORMAT_VERSION))
    summary = rederive(run, folder)
    why_not = track_record.append([track_record.verification_row(summary)])  # this machine's record of checks
    if why_not:
        print(f"pipeprof: warning: {why_not}: this check does not count towards this machine's intervals",
              file=sys.stderr)
    return summary
