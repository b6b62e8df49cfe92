"""Diagnose a scenario: fetch and prep stalls from three short runs (compute ceiling, prep only, real).

Trains the scenario three times, one after the other, each with a fresh
workload and at most --steps steps (default: the scenario's own length, at
most 200; warm-up kept):

  compute  the data resident on the device, batches by index, no DataLoader
  prep     the data already decoded in RAM, the same transform and loader
  real     the scenario as given (fetch + prep)

From their samples/s it derives the fetch-stall and prep-stall fractions
(DS-Analyzer, VLDB 2021) and cross-checks them with the real run's direct
attribution (its data wait and its fetch/prep loading split); a disagreement
beyond the stated tolerance is shown, not hidden. Writes
reports/<UTC>-diagnose-<scenario>/ with the three run folders, diagnosis.json
and diagnosis.html.

Examples:
  pipeprof diagnose scenarios/jpeg-decode.toml --set data.samples=5000
  pipeprof diagnose scenarios/memmap-cold-2workers.toml --steps 100

Exit status: 0 when all three runs completed, 1 when one failed (the others
are kept and the diagnosis is still written), 130 when interrupted, 2 for bad
input.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pipeprof.analysis.differential import RUN_TITLES, RUNS, differential
from pipeprof.cli.arguments import add_scenario_arguments
from pipeprof.cli.run_cmd import materializing_progress
from pipeprof.errors import EXIT_FAILED, EXIT_INTERRUPTED, UsageError, interrupt_reason
from pipeprof.measure.loading import LoadingRecorder
from pipeprof.pipeline.derive import derived_files
from pipeprof.pipeline.train import build_workload, profile_workload, resolve_device
from pipeprof.render.diagnosis import diagnosis_table, render_diagnosis_html
from pipeprof.run_folder import ensure_out_folder, save_run, staged_folder, write_json, write_text
from pipeprof.scenario import Scenario, load_scenario
from pipeprof.variants import vary

DIAGNOSIS_SCHEMA_VERSION = 1
DEFAULT_MAX_STEPS = 200  # per sub-run: long enough to leave warm-up behind, short enough for three runs


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario_arguments(p, example="scenarios/jpeg-decode.toml", out_what="the diagnosis folder goes")
    p.add_argument("--steps", type=_positive_int, default=None, metavar="N",
                   help=f"at most N steps per run, warm-up included (default: the scenario's length, "
                        f"at most {DEFAULT_MAX_STEPS})")
    p.add_argument("--quiet", action="store_true", help="no progress lines and no table")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


# ---- the three scenarios ------------------------------------------------------------------


@dataclass(frozen=True)
class SubRun:
    """One of the three runs: its role (``compute`` / ``prep`` / ``real``), scenario and what changed."""

    role: str
    scenario: Scenario
    changes: tuple[str, ...]  # "data.storage = 'device' (was 'memmap')", ...


CHANGES = {"compute": {"data.storage": "device", "loader.num_workers": 0},
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


# ---- running them -------------------------------------------------------------------------


def execute(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, args.overrides)
    steps = min(scenario.total_steps(), args.steps or DEFAULT_MAX_STEPS)
    plans = sub_scenarios(scenario, steps, str(args.scenario))
    resolve_device(scenario.train.device)  # a usage error before any progress line shows
    ensure_out_folder(args.out)
    context = {"scenario_file": str(args.scenario), "overrides": list(args.overrides)}
    console = Console(stderr=True)
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(),
                        console=console, disable=args.quiet, refresh_per_second=4)
    with staged_folder(args.out, f"diagnose-{scenario.name}") as stage:
        outcomes: dict[str, dict[str, Any]] = {}
        with progress:
            for role, plan in plans.items():
                if any(o["status"] == "interrupted" for o in outcomes.values()):
                    outcomes[role] = _outcome(plan, "skipped", "not run: the diagnosis was interrupted")
                    continue
                try:
                    outcomes[role] = _sub_run(plan, stage.tmp, args.cache, progress,
                                              dict(context, diagnose={"role": role, "changes": list(plan.changes)}),
                                              report_name=f"{stage.folder.name}/{role}")
                except KeyboardInterrupt as e:  # outside the run's own handling (saving it, between its parts)
                    outcomes[role] = _outcome(plan, "interrupted", interrupt_reason(e))
        diagnosis = build_diagnosis(scenario, plans, outcomes, steps, context)
        write_json(stage.tmp / "diagnosis.json", diagnosis)
        write_text(stage.tmp / "diagnosis.html", render_diagnosis_html(diagnosis, folder_name=stage.folder.name))
    folder = stage.folder
    if not args.quiet:
        Console().print(diagnosis_table(diagnosis, folder))
    return _report_status(diagnosis, folder)


def _sub_run(plan: SubRun, tmp: Path, cache: Path | None, progress: Progress, context: dict[str, Any], *,
             report_name: str) -> dict[str, Any]:
    """Build a fresh workload for ``plan``, profile it, save its run folder under ``tmp``; the outcome."""
    scenario = plan.scenario
    title = f"{plan.role:<8} {RUN_TITLES[plan.role]}"
    task = None

    def result(text: str) -> None:
        nonlocal task
        if task is None:
            task = progress.add_task(title, total=scenario.total_steps())
        progress.update(task, description=f"{title}  {text}")

    recorder = LoadingRecorder() if scenario.profile.loading else None
    try:
        # Data built on first use shows its own bars; the run's line comes after them.
        work = build_workload(scenario, cache, recorder=recorder, progress=materializing_progress(progress))
        task = progress.add_task(title, total=scenario.total_steps())
    except UsageError:
        raise  # bad input (an unwritable cache folder) is the same for every run: exit 2
    except KeyboardInterrupt as e:
        result("[yellow]interrupted")
        return _outcome(plan, "interrupted", f"{interrupt_reason(e)} while building the workload")
    except Exception as e:  # noqa: BLE001 - recorded in the diagnosis: which run failed and why
        result("[red]failed")
        return _outcome(plan, "failed", f"building the workload: {type(e).__name__}: {_one_line(e)}")
    try:
        run = profile_workload(work, recorder=recorder, context=context,
                               on_step=lambda done, total: progress.update(task, completed=done))
    except Exception as e:  # noqa: BLE001 - training failures come back in the run; this is the profiler's own
        result("[red]failed")
        return _outcome(plan, "failed", f"profiling: {type(e).__name__}: {_one_line(e)}")
    finally:
        del work  # the next run starts from nothing: no data, model or DataLoader workers left over
        gc.collect()
    summary, files = derived_files(run, report_name)
    save_run(run, tmp / plan.role, files)
    status = str(run.meta.get("status") or "failed")
    rate = summary.get("samples_per_s")
    result(f"{rate:,.0f} samples/s" if status == "complete" and rate else f"[red]{status}")
    return _outcome(plan, status, run.meta.get("error"), folder=plan.role, summary=summary)


def _outcome(plan: SubRun, status: str, error: str | None, *, folder: str | None = None,
             summary: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"plan": plan, "status": status, "error": error, "folder": folder, "summary": summary}


def build_diagnosis(scenario: Scenario, plans: dict[str, SubRun], outcomes: dict[str, dict[str, Any]],
                    steps: int, context: dict[str, Any]) -> dict[str, Any]:
    """diagnosis.json: the runs, their throughputs, the stall fractions and the cross-check."""
    summaries, missing = {}, {}
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
        **analysis,
    }


def _report_status(diagnosis: dict[str, Any], folder: Path) -> int:
    """Errors and disagreements on stderr, the report path on stdout; the exit status."""
    for role, r in diagnosis["runs"].items():
        if r["status"] in ("failed", "interrupted"):
            print(f"pipeprof: error: the {role} run ({r['title']}) {r['status']}: {r['error']}", file=sys.stderr)
    check = diagnosis["cross_check"]
    for name, label in (("data_wait", "data wait"), ("fetch_share", "fetch share of loading")):
        c = check[name]
        if c["agree"] is False:
            print(f"pipeprof: WARNING: cross-check {label}: direct {100 * c['direct']:.1f}% vs differential "
                  f"{100 * c['differential']:.1f}%, beyond the ±{100 * check['tolerance']:.0f} pp tolerance",
                  file=sys.stderr)
    print(f"diagnosis: {folder / 'diagnosis.html'}")
    if diagnosis["status"] == "interrupted":
        return EXIT_INTERRUPTED
    return 0 if diagnosis["status"] == "complete" else EXIT_FAILED


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__
