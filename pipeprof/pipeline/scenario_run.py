"""``pipeprof run``'s pipeline: train a scenario under measurement, derive its report, save the run folder.

``run_scenario`` reads the machine's cached probe, builds the workload,
profiles it, derives summary.json and report.html and saves all of it in a
new run folder (atomically: a half-written folder never looks whole). The
raw records stream into that folder's ``recording/`` as the run goes
(``pipeline.recording``): a pipeprof killed with kill -9 leaves them, and
``pipeprof report FOLDER`` rebuilds the run from them, cut short.
``verify_run`` then re-runs it with its top recommendation applied in a fresh
process (``pipeprof.pipeline.verify``) and derives the report again. Neither
prints: progress goes to the ``Progress`` given.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof import track_record
from pipeprof.errors import NotSaved, UsageError, one_line, saving
from pipeprof.measure.loading import LoadingRecorder
from pipeprof.measure.probe_cache import cached_probe
from pipeprof.pipeline.derive import derived_files
from pipeprof.pipeline.progress import SILENT, Progress
from pipeprof.pipeline.ranks_run import run_ranks
from pipeprof.pipeline.recording import Recording, is_recording, scenario_record_to, start_recording, steps_kept
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
        return self.run.info.status


def run_scenario(scenario: Scenario, *, scenario_file: str, overrides: list[str], out: Path,
                 cache: Path | None = None, progress: Progress = SILENT) -> ScenarioRun:
    """Train ``scenario`` under measurement and save its run folder under ``out`` with its report.

    Raises UsageError for bad input (``out`` is a file, an unavailable device)
    before anything trains, and PreparationFailed when the workload cannot be
    built or started.
    """
    ensure_out_folder(out)  # a read-only or unwritable --out is refused before anything trains
    probe, why_not = cached_probe(cache)  # the machine's ceilings, if `pipeprof probe` ran here
    context: dict[str, Any] = {"scenario_file": scenario_file, "overrides": list(overrides), "probe": probe,
                               "track_record": track_record.current()}  # what the intervals' model error uses
    if probe is None:
        context["absences"] = {"probe": f"{why_not}: run pipeprof probe"}
    resolve_device(scenario.train.device)  # a usage error before any progress bar shows
    recorder = LoadingRecorder() if scenario.profile.loading else None
    folder = new_run_folder(out, scenario.name)
    recording = None
    if scenario.train.ranks == 1:  # the raw records go into the run folder from the start (pipeline.recording)
        try:
            recording = start_recording(folder)
        except OSError as e:
            raise UsageError(f"--out {out}: cannot create {folder.name} ({e.strerror or e})") from None
    try:
        with progress.showing():
            if recording is None:  # a DDP job: every rank a process (pipeline/ranks_run.py)
                run = run_ranks(scenario, context=context, cache=cache, progress=progress)
            else:
                work = build_workload(scenario, cache, recorder=recorder, progress=progress.building)
                task = progress.task(scenario.name, scenario.total_steps())
                run = profile_workload(work, recorder=recorder, context=context,
                                       record_to=scenario_record_to(recording),
                                       on_step=lambda done, total: progress.update(task, completed=done))
    except BaseException as e:
        if recording is not None:  # nothing trained (profile_workload keeps what did): nothing to keep
            shutil.rmtree(folder, ignore_errors=True)
        if isinstance(e, (OSError, RuntimeError)):
            raise PreparationFailed(f"preparing {scenario.name}: {' '.join(str(e).split())}") from e
        raise
    return _save(run, folder, recording)


def _save(run: Run, folder: Path, recording: Recording | None) -> ScenarioRun:
    with saving():  # a Ctrl-C or SIGTERM now (a sweep's child gets Ctrl-C twice) waits for the folder
        summary, files = derived_files(run, folder.name)
        try:
            save_run(run, folder, files)
        except OSError as e:  # a full disk: nothing half-written is left, and the message names the folder
            if recording is None or not is_recording(folder):  # no recording.json: nothing to rebuild from
                shutil.rmtree(folder, ignore_errors=True)
                raise NotSaved(f"could not write the run folder {folder} ({one_line(e)}); its records were in "
                               f"memory and are lost: make room in {folder.parent} and run again") from e
            kept, steps = steps_kept(recording), len(run.steps)
            if kept < steps:  # the disk filled while it trained: the spools held the rest in memory
                raise NotSaved(f"could not complete the run folder {folder} ({one_line(e)}); the disk filled while "
                               f"the run went on: the raw records kept in {recording.path} hold {kept:,} of its "
                               f"{steps:,} steps (the rest were in memory and are lost): `pipeprof report "
                               f"{folder}` rebuilds those once there is room") from e
            raise NotSaved(f"could not complete the run folder {folder} ({one_line(e)}); the raw records written "
                           f"so far are kept in {recording.path}: `pipeprof report {folder}` rebuilds the run "
                           "once there is room") from e
    return ScenarioRun(run, folder, summary)


def verify_run(saved: ScenarioRun, scenario: Scenario, *, cache: Path | None = None,
               progress: Progress = SILENT, repeats: int = VERIFY_REPEATS) -> ScenarioRun:
    """Re-run ``scenario`` with the top recommendation of ``saved`` applied; the run with its report
    derived again (``summary["verification"]``: predicted vs measured)."""
    record = verify(scenario, saved.summary, saved.folder, cache=cache, progress=progress, repeats=repeats)
    return ScenarioRun(saved.run, saved.folder, store(saved.run, saved.folder, record))
