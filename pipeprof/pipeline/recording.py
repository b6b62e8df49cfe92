"""A profiled script's raw records in its run folder from its first moment, and the run rebuilt from them.

``pipeprof profile`` creates the run folder before the script starts and
has the hooks write their events into its ``recording/`` folder
(``recording.json`` says what was being run). A complete save replaces the
folder with the finished run (``run_folder.save_run``). When pipeprof is
killed (kill -9, an out-of-memory kill) or cannot finish the folder (a
full disk), the recording stays, and ``pipeprof report FOLDER`` rebuilds
the run from it, marked interrupted and cut short: the steps and loading
records the hooks wrote, without the system samples, which were in the
killed process's memory.

``pipeprof run`` records the same way: its step timer, loading recorder and
sampler stream their rows (``measure.spool``) into ``recording/``, every
``FLUSH_STEPS`` steps and every ``FLUSH_TICKS`` sampler ticks, and
``recording.json`` holds run.json's start (``kind`` "scenario"). A rebuild
keeps every row written, the system samples included.

One rule for a folder in use: recording.json names the pipeprof process that
records (``recorder``: its pid and start time). While that process is alive
the folder is read, never rewritten: ``rebuilt_run`` refuses it, in one line.
A ``--light`` recording is rebuilt from its windows (``light_profile``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import psutil

from pipeprof.errors import UsageError, one_line
from pipeprof.measure.spool import spooled
from pipeprof.pipeline.light_profile import CONTEXT_FILE, rebuilt_light
from pipeprof.run_folder import (
    LOADING_COLUMNS,
    PROCESS_COLUMNS,
    SAMPLE_COLUMNS,
    STEP_COLUMNS,
    TRANSFORM_COLUMNS,
    Run,
    sample_tables,
    write_json,
)
from pipeprof.script.session import Session

RECORDING = "recording"  # the run folder's sub-folder with the hooks' event files
FACTS = "recording.json"
EVENTS = "events.jsonl"
LIGHT = "light"  # a --light recording's windows and context (pipeline.light_profile)
CUT_SHORT = ("cut short: pipeprof ended before it saved the run (killed, or the disk was full); rebuilt by "
             "pipeprof report from the raw records it kept")
SCENARIO = "scenario"  # recording.json's kind for a `pipeprof run`; none: a profiled script's
# Rows held in memory before a write: a kill -9 loses at most these (and the step it was in). A write is one open
# and append of a few KB shared by its rows, between two steps: outside the data wait, copy and compute it times.
FLUSH_STEPS = 16
FLUSH_TICKS = 8  # sampler ticks: under a second at the default 10 Hz
NO_SAMPLES = ("the system samples were in the memory of the pipeprof process that ended before it saved them "
              "(the run was rebuilt from the hooks' raw records)")


@dataclass(frozen=True)
class Recording:
    """A run folder being recorded: the hooks' events go to ``events`` and the other files in ``path``."""

    folder: Path

    @property
    def path(self) -> Path:
        return self.folder / RECORDING

    @property
    def events(self) -> Path:
        return self.path / EVENTS


@dataclass(frozen=True)
class RecordTo:
    """Where a run's raw records stream while it trains (``pipeline.recording``): ``folder``; ``note_start`` is
    given run.json's start (what is known before the first step) and the clock's origin; the steps and loading
    records are written every ``step_rows`` steps (between two steps), the sampler's every ``tick_rows`` ticks."""

    folder: Path
    note_start: Callable[[dict[str, Any]], None]
    step_rows: int
    tick_rows: int


def scenario_record_to(recording: Recording) -> RecordTo:
    """Where ``pipeline.train.profile_workload`` streams a scenario run's rows: ``recording``; recording.json
    (kind "scenario") gets run.json's start. A disk already full leaves none: the run goes on, its rows held in
    memory (``measure.spool``), and there is nothing to rebuild from (``is_recording`` is False)."""
    def note_start(start: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            note_facts(recording, {"kind": SCENARIO, **start})

    return RecordTo(recording.path, note_start, FLUSH_STEPS, FLUSH_TICKS)


def start_recording(folder: Path) -> Recording:
    """Create ``folder`` and its ``recording/`` (an ``OSError`` if it cannot be: before anything runs)."""
    folder.mkdir()
    recording = Recording(folder)
    recording.path.mkdir()
    return recording


def note_facts(recording: Recording, facts: dict[str, Any]) -> None:
    """What a rebuild needs that the events do not say: the name, warm-up, the clock's origin (``t0_s``), the
    command (``script``)..., and which process records (``recorder``: this one)."""
    me = psutil.Process()
    write_json(recording.path / FACTS, {**facts, "recorder": {"pid": me.pid, "started_s": me.create_time()}})


def live_recorder(folder: Path) -> int | None:
    """The pid of the pipeprof process still recording ``folder``, if it is alive (the same process: its start
    time is the one recorded, so a pid used again by another process is not taken for it)."""
    try:
        recorder = json.loads((Recording(folder).path / FACTS).read_text(encoding="utf-8"))["recorder"]
        process = psutil.Process(int(recorder["pid"]))
        alive = (abs(process.create_time() - float(recorder["started_s"])) < 1.0
                 and process.status() != psutil.STATUS_ZOMBIE)
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return None
    return process.pid if alive and process.pid != os.getpid() else None


def steps_kept(recording: Recording) -> int:
    """The step rows a ``pipeprof run``'s spools wrote into ``recording`` (what a rebuild keeps)."""
    steps = spooled(recording.path, "steps")
    return 0 if steps is None else len(steps)


def is_recording(folder: Path) -> bool:
    """A run folder that holds a recording and no saved run: pipeprof ended before it saved it."""
    return (folder / RECORDING / FACTS).is_file() and not (folder / "run.json").exists()


def rebuilt_run(folder: Path) -> Run:
    """The run recorded in ``folder``, from its raw records, marked interrupted and cut short."""
    recording = Recording(folder)
    pid = live_recorder(folder)
    if pid is not None:
        raise UsageError(f"{folder}: still being recorded by pipeprof (pid {pid}); a run folder in use is read, "
                         "never rewritten: run pipeprof report on it once that process has ended")
    try:
        facts = json.loads((recording.path / FACTS).read_text(encoding="utf-8"))
        if facts.get("kind") == SCENARIO:
            return _rebuilt_scenario_run(recording, dict(facts["meta"]), float(facts["t0_s"]))
        light_s = float(facts["light_s"]) if facts.get("light_s") is not None else None
        light = recording.path / LIGHT
        events = light / CONTEXT_FILE if light_s is not None else recording.events  # a light job's: per step, none
        session = Session(str(facts["name"]), events, warmup_steps=int(facts["warmup_steps"]),
                          sample_hz=float(facts["sample_hz"]), events_dir=recording.path,
                          what_ifs_absent=facts.get("what_ifs_absent"), cuda_available=False)
        session.t0_s = float(facts["t0_s"])
        session.root_pid = int(facts["pid"])
        script = dict(facts["script"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"{recording.path / FACTS}: unreadable recording ({one_line(e)})") from None
    session.absences["samples"] = NO_SAMPLES
    session.absences["gpu"] = "not sampled: " + NO_SAMPLES
    script["ended"] = {"how": "cut short", "detail": CUT_SHORT, "recorded_by": "pipeprof report"}
    run = session.finish("interrupted", CUT_SHORT, script)
    run.meta["cut_short"] = True
    if light_s is not None:
        rebuilt_light(run, light, light_s)
    return run


def _rebuilt_scenario_run(recording: Recording, meta: dict[str, Any], t0_s: float) -> Run:
    """A `pipeprof run` cut short: run.json's start and every row its spools wrote."""
    tables = {name: spooled(recording.path, name) for name in ("steps", "loading", "transforms", "samples",
                                                                 "processes")}
    steps = tables["steps"] if tables["steps"] is not None else pd.DataFrame(columns=STEP_COLUMNS)
    loading = tables["loading"] if tables["loading"] is not None else pd.DataFrame(columns=LOADING_COLUMNS)
    loading[["t_start_s", "t_end_s"]] -= t0_s  # the recorder keeps raw clock readings
    samples, processes = sample_tables(
        tables["samples"] if tables["samples"] is not None else pd.DataFrame(columns=SAMPLE_COLUMNS),
        tables["processes"] if tables["processes"] is not None else pd.DataFrame(columns=PROCESS_COLUMNS),
        bool((meta.get("gpu") or {}).get("available")))
    transforms = tables["transforms"] if tables["transforms"] is not None else pd.DataFrame(columns=TRANSFORM_COLUMNS)
    if tables["samples"] is None:
        meta["absences"] = {**meta.get("absences", {}), "samples": "no sampler tick was written before pipeprof "
                            "ended (the run was rebuilt from its raw records)"}
    meta.update(status="interrupted", error=CUT_SHORT, cut_short=True, compute_ceiling=None,
                what_ifs={"absent": "the run was cut short: no probe after it"})
    return Run(meta=meta, steps=steps, samples=samples, processes=processes, loading=loading, transforms=transforms)
