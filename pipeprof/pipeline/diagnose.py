"""``pipeprof diagnose``'s pipeline: three short runs (compute ceiling, prep only, real) and their diagnosis.

``sub_scenarios`` derives the three scenarios, ``diagnose`` trains them one
after the other in this process (a fresh workload each), saves each run
folder and writes diagnosis.json and diagnosis.html, all in one staged
folder. The stall fractions come from ``pipeprof.analysis.differential``.
Nothing here prints: progress goes to the ``Progress`` given.
"""

from __future__ import annotations

import datetime as dt
import gc
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof.analysis.differential import RUN_TITLES, RUNS, differential
from pipeprof.errors import UsageError, interrupt_reason
from pipeprof.measure.loading import LoadingRecorder
from pipeprof.pipeline.derive import derived_files
from pipeprof.pipeline.progress import BAD, OK, SILENT, WARN, Progress
from pipeprof.pipeline.recording import scenario_record_to, start_recording
from pipeprof.pipeline.train import build_workload, profile_workload, resolve_device
from pipeprof.render.diagnosis import render_diagnosis_html
from pipeprof.render.diagnosis_text import diagnosis_words
from pipeprof.run_folder import ensure_out_folder, save_run, staged_folder, write_json, write_text
from pipeprof.scenario import Scenario
from pipeprof.variants import vary

DIAGNOSIS_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class SubRun:
    """One of the three runs: its role (``compute`` / ``prep`` / ``real``), scenario and what changed."""

    role: str
    scenario: Scenario
    changes: tuple[str, ...]  # "data.storage = 'device' (was 'memmap')", ...


CHANGES: dict[str, dict[str, Any]] = {"compute": {"data.storage": "device", "loader.num_workers": 0},
                                      "prep": {"data.storage": "ram"},
                                      "real": {}}


def sub_scenarios(scenario: Scenario, steps: int, where: str) -> dict[str, SubRun]:
    """The compute, prep and real scenarios, each ``steps`` long, validated like a scenario file.

    compute: ``data.storage = "device"``, ``loader.num_workers = 0``; prep:
    ``data.storage = "ram"`` with the loader as given; real: the scenario as
    given. Keys the new placement has no use for are dropped (image format and
    quality, cold cache, throttle — it emulates storage, so the prep run has
    none; see ``pipeprof.variants``). All keep the transform, model, device
    and warm-up.
    """
    if scenario.train.warmup_steps >= steps:
        raise UsageError(f"--steps {steps} (on {where}): each run needs more steps than its "
                         f"train.warmup_steps = {scenario.train.warmup_steps}, so some steps are counted")
    out = {}
    for role in RUNS:
        v = vary(scenario, {**CHANGES[role], "train.steps": steps}, f"{where} (diagnose: {role} run)",
                 name=f"{scenario.name}-{role}" if CHANGES[role] else None)
        out[role] = SubRun(role, v.scenario, v.changes)
    return out


def diagnose(scenario: Scenario, *, scenario_file: str, overrides: list[str], out: Path, max_steps: int,
             cache: Path | None = None, progress: Progress = SILENT) -> tuple[dict[str, Any], Path]:
    """Run the three sub-runs of ``scenario`` (its length, at most ``max_steps`` steps each) and write the
    diagnosis folder under ``out``; diagnosis.json's content and the folder."""
    steps = min(scenario.total_steps(), max_steps)
    plans = sub_scenarios(scenario, steps, scenario_file)
    resolve_device(scenario.train.device)  # a usage error before any progress line shows
    ensure_out_folder(out)
    context = {"scenario_file": scenario_file, "overrides": list(overrides)}
    with staged_folder(out, f"diagnose-{scenario.name}") as stage:
        outcomes: dict[str, dict[str, Any]] = {}
        with progress.showing():
            for role, plan in plans.items():
                if any(o["status"] == "interrupted" for o in outcomes.values()):
                    outcomes[role] = _outcome(plan, "skipped", "not run: the diagnosis was interrupted")
                    continue
                try:
                    outcomes[role] = sub_run(plan, stage.tmp, cache, progress,
                                             dict(context, diagnose={"role": role, "changes": list(plan.changes)}),
                                             report_name=f"{stage.folder.name}/{role}")
                except KeyboardInterrupt as e:  # outside the run's own handling (saving it, between its parts)
                    outcomes[role] = _outcome(plan, "interrupted", interrupt_reason(e))
        diagnosis = build_diagnosis(scenario, plans, outcomes, steps, context)
        write_json(stage.tmp / "diagnosis.json", diagnosis)
        write_text(stage.tmp / "diagnosis.html", render_diagnosis_html(diagnosis, folder_name=stage.folder.name))
    return diagnosis, stage.folder


def sub_run(plan: SubRun, tmp: Path, cache: Path | None, progress: Progress, context: dict[str, Any], *,
            report_name: str) -> dict[str, Any]:
    """Build a fresh workload for ``plan``, profile it, save its run folder under ``tmp``; the outcome."""
    scenario = plan.scenario
    title = f"{plan.role:<8} {RUN_TITLES[plan.role]}"
    task = None

    def result(text: str, tone: str = OK) -> None:
        nonlocal task
        if task is None:
            task = progress.task(title, scenario.total_steps())
        progress.update(task, title=f"{title}  {text}", tone=tone)

    recorder = LoadingRecorder() if scenario.profile.loading else None
    try:
        # Data built on first use shows its own bars; the run's line comes after them.
        work = build_workload(scenario, cache, recorder=recorder, progress=progress.building)
        task = progress.task(title, scenario.total_steps())
    except UsageError:
        raise  # bad input (an unwritable cache folder) is the same for every run: exit 2
    except KeyboardInterrupt as e:
        result("interrupted", WARN)
        return _outcome(plan, "interrupted", f"{interrupt_reason(e)} while building the workload")
    except Exception as e:  # noqa: BLE001 - recorded in the diagnosis: which run failed and why
        result("failed", BAD)
        return _outcome(plan, "failed", f"building the workload: {type(e).__name__}: {_message(e)}")
    folder = tmp / plan.role
    try:  # its raw records stream into its folder: a killed diagnose leaves them for `pipeprof report`
        recording = start_recording(folder)
        run = profile_workload(work, recorder=recorder, context=context, record_to=scenario_record_to(recording),
                               on_step=lambda done, total: progress.update(task, completed=done))
    except Exception as e:  # noqa: BLE001 - training failures come back in the run; this is the profiler's own
        shutil.rmtree(folder, ignore_errors=True)
        result("failed", BAD)
        return _outcome(plan, "failed", f"profiling: {type(e).__name__}: {_message(e)}")
    finally:
        del work  # the next run starts from nothing: no data, model or DataLoader workers left over
        gc.collect()
    summary, files = derived_files(run, report_name)
    save_run(run, folder, files)
    status = run.info.status or "failed"
    rate = summary.get("samples_per_s")
    if status == "complete" and rate:
        result(f"{rate:,.0f} samples/s")
    else:
        result(status, BAD)
    return _outcome(plan, status, run.info.error, folder=plan.role, summary=summary)


def _outcome(plan: SubRun, status: str, error: str | None, *, folder: str | None = None,
             summary: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"plan": plan, "status": status, "error": error, "folder": folder, "summary": summary}


def build_diagnosis(scenario: Scenario, plans: dict[str, SubRun], outcomes: dict[str, dict[str, Any]],
                    steps: int, context: dict[str, Any]) -> dict[str, Any]:
    """diagnosis.json: the runs, their throughputs, the stall fractions and the cross-check."""
    summaries: dict[str, dict[str, Any] | None] = {}
    missing: dict[str, str] = {}
    for role, o in outcomes.items():
        if o["status"] == "complete":
            summaries[role] = o["summary"]
        else:
            summaries[role] = None
            missing[role] = f"{o['status']}: {o['error']}" if o["error"] else o["status"]
    real = plans["real"].scenario
    analysis = differential(summaries, missing=missing, storage=real.data.storage,
                            num_workers=real.loader.num_workers)
    runs = {}
    for role, o in outcomes.items():
        s = o["summary"] or {}
        sub = plans[role].scenario
        runs[role] = {
            "title": RUN_TITLES[role],
            "scenario": sub.name,
            "storage": sub.data.storage,
            "num_workers": sub.loader.num_workers,
            "changes": list(plans[role].changes),
            "status": o["status"],
            "error": o["error"],
            "folder": o["folder"],
            "report": f"{o['folder']}/report.html" if o["folder"] else None,
            "samples_per_s": s.get("samples_per_s"),
            "data_wait": (s.get("fractions") or {}).get("data_wait"),
            "device": s.get("device"),
        }
    statuses = [o["status"] for o in outcomes.values()]
    status = ("interrupted" if "interrupted" in statuses else
              "complete" if all(st == "complete" for st in statuses) else "failed")
    return {
        "schema_version": DIAGNOSIS_SCHEMA_VERSION,
        "scenario": scenario.name,
        "description": scenario.description,
        "scenario_file": context.get("scenario_file"),
        "overrides": context.get("overrides", []),
        "created_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "steps_per_run": steps,
        "warmup_steps": scenario.train.warmup_steps,
        "status": status,
        "runs": runs,
        **diagnosis_words(analysis),  # its reasons in words, here at the edge
    }


def _message(e: BaseException) -> str:
    """The exception's message on one line (its type when it has none)."""
    return " ".join(str(e).split()) or type(e).__name__
