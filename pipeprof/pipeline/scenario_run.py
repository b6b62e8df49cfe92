"""``pipeprof run``'s pipeline: train a scenario under measurement, derive its report, save the run folder.

``run_scenario`` reads the machine's cached probe, builds the workload,
profiles it, derives summary.json and report.html and saves all of it in a
new run folder (atomically: a half-written folder never looks whole).
``verify_run`` then re-runs it with its top recommendation applied in a fresh
process (``pipeprof.pipeline.verify``) and derives the report again. Neither
prints: progress goes to the ``Progress`` given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof.errors import NotSaved, one_line, saving
from pipeprof.measure.loading import LoadingRecorder
from pipeprof.measure.probe_cache import cached_probe
from pipeprof.pipeline.derive import derived_files
from pipeprof.pipeline.progress import SILENT, Progress
from pipeprof.pipeline.ranks_run import run_ranks
from pipeprof.pipeline.train import build_workload, profile_workload, resolve_device
from pipeprof.pipeline.verify import VERIFY_REPEATS, store, verify
from pipeprof.run_folder import Run, ensure_out_folder, new_run_folder, save_run
from pipeprof.scenario import Scenario


class PreparationFailed(Exception):
    """The workload could not be built or started (a full disk, a compiler torch.compile cannot use)."""


@dataclass(frozen=True)
class ScenarioRun:
    """A saved run: its raw records, its folder and the summary derived from them."""

    run: Run
    folder: Path
    summary: dict[str, Any]

    @property
    def status(self) -> str | None:
        """The run's status (``complete``, ``failed``, ``interrupted``); ``interrupted`` too when its
        verification re-run was."""
        if (self.summary.get("verification") or {}).get("status") == "interrupted":
            return "interrupted"
        return self.run.meta.get("status")


def run_scenario(scenario: Scenario, *, scenario_file: str, overrides: list[str], out: Path,
                 cache: Path | None = None, progress: Progress = SILENT) -> ScenarioRun:
    """Train ``scenario`` under measurement and save its run folder under ``out`` with its report.

    Raises UsageError for bad input (``out`` is a file, an unavailable device)
    before anything trains, and PreparationFailed when the workload cannot be
    built or started.
    """
    ensure_out_folder(out)  # a read-only or unwritable --out is refused before anything trains
    probe, why_not = cached_probe(cache)  # the machine's ceilings, if `pipeprof probe` ran here
    context: dict[str, Any] = {"scenario_file": scenario_file, "overrides": list(overrides), "probe": probe}
    if probe is None:
        context["absences"] = {"probe": f"{why_not}: run pipeprof probe"}
    resolve_device(scenario.train.device)  # a usage error before any progress bar shows
    recorder = LoadingRecorder() if scenario.profile.loading else None
    try:
        with progress.showing():
            if scenario.train.ranks > 1:  # a DDP job: every rank a process (pipeline/ranks_run.py)
                run = run_ranks(scenario, context=context, cache=cache, progress=progress)
            else:
                work = build_workload(scenario, cache, recorder=recorder, progress=progress.building)
                task = progress.task(scenario.name, scenario.total_steps())
                run = profile_workload(work, recorder=recorder, context=context,
                                       on_step=lambda done, total: progress.update(task, completed=done))
    except (OSError, RuntimeError) as e:
        raise PreparationFailed(f"preparing {scenario.name}: {' '.join(str(e).split())}") from e
    return _save(run, out, scenario)


def _save(run: Run, out: Path, scenario: Scenario) -> ScenarioRun:
    with saving():  # a Ctrl-C or SIGTERM now (a sweep's child gets Ctrl-C twice) waits for the folder
        folder = new_run_folder(out, scenario.name)
        summary, files = derived_files(run, folder.name)
        try:
            save_run(run, folder, files)
        except OSError as e:  # a full disk: nothing half-written is left, and the message names the folder
            raise NotSaved(f"could not write the run folder {folder} ({one_line(e)}); its records were in "
                           f"memory and are lost: make room in {out} and run again") from e
    return ScenarioRun(run, folder, summary)


def verify_run(saved: ScenarioRun, scenario: Scenario, *, cache: Path | None = None,
               progress: Progress = SILENT, repeats: int = VERIFY_REPEATS) -> ScenarioRun:
    """Re-run ``scenario`` with the top recommendation of ``saved`` applied; the run with its report
    derived again (``summary["verification"]``: predicted vs measured)."""
    record = verify(scenario, saved.summary, saved.folder, cache=cache, progress=progress, repeats=repeats)
    return ScenarioRun(saved.run, saved.folder, store(saved.run, saved.folder, record))
