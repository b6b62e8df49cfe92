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
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof.errors import UsageError, one_line
from pipeprof.run_folder import Run, write_json
from pipeprof.script.session import Session

RECORDING = "recording"  # the run folder's sub-folder with the hooks' event files
FACTS = "recording.json"
EVENTS = "events.jsonl"
CUT_SHORT = ("cut short: pipeprof ended before it saved the run (killed, or the disk was full); rebuilt by "
             "pipeprof report from the raw records it kept")
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


def start_recording(folder: Path) -> Recording:
    """Create ``folder`` and its ``recording/`` (an ``OSError`` if it cannot be: before anything runs)."""
    folder.mkdir()
    recording = Recording(folder)
    recording.path.mkdir()
    return recording


def note_facts(recording: Recording, facts: dict[str, Any]) -> None:
    """What a rebuild needs that the events do not say: the name, warm-up, the clock's origin (``t0_s``), the
    command (``script``)..."""
    write_json(recording.path / FACTS, facts)


def is_recording(folder: Path) -> bool:
    """A run folder that holds a recording and no saved run: pipeprof ended before it saved it."""
    return (folder / RECORDING / FACTS).is_file() and not (folder / "run.json").exists()


def rebuilt_run(folder: Path) -> Run:
    """The run recorded in ``folder``, from its raw records, marked interrupted and cut short."""
    recording = Recording(folder)
    try:
        facts = json.loads((recording.path / FACTS).read_text(encoding="utf-8"))
        session = Session(str(facts["name"]), recording.events, warmup_steps=int(facts["warmup_steps"]),
                          sample_hz=float(facts["sample_hz"]), events_dir=recording.path,
                          what_ifs_absent=facts.get("what_ifs_absent"), cuda_available=False)
        session.t0_s = float(facts["t0_s"])
        session.root_pid = int(facts["pid"])
        script = dict(facts["script"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{recording.path / FACTS}: unreadable recording ({one_line(e)})") from None
    session.absences["samples"] = NO_SAMPLES
    session.absences["gpu"] = "not sampled: " + NO_SAMPLES
    script["ended"] = {"how": "cut short", "detail": CUT_SHORT, "recorded_by": "pipeprof report"}
    run = session.finish("interrupted", CUT_SHORT, script)
    run.meta["cut_short"] = True
    return run
