"""``pipeprof profile --light N``: the script's window aggregates every N seconds (``measure.light``).

``LightProfile.tick`` is called while the profiling process waits for the
script; at each window it reads the events written since the last one, cuts
them into steps, and writes the window's aggregate (the sampler's rows of the
window give its GPU use). The records that are not per step (the script's
start and end, its loaders) are kept as they come in ``context.jsonl`` beside
the windows: the event file's disk is given back as it is read, and a
pipeprof killed mid-job leaves a recording that ``pipeprof report`` rebuilds
from the two (``rebuilt_light``). ``finish`` takes the last window once the
script has ended and leaves in the event file only those records, so the run
keeps no step of its own: only the windows.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from pipeprof.measure.light import (
    MAX_BYTES,
    OLDER_WINDOWS_FILE,
    WINDOWS_FILE,
    EventTail,
    LightWindows,
    RotatingWindows,
    read_windows,
    window_aggregate,
)
from pipeprof.run_folder import LOADING_COLUMNS, STEP_COLUMNS, TRANSFORM_COLUMNS, Run
from pipeprof.script.session import Session

CONTEXT_FILE = "context.jsonl"  # the records that are not per step, as they came


class LightProfile:
    """Window aggregates of ``session``'s script into ``folder`` every ``window_s`` seconds."""

    def __init__(self, session: Session, folder: Path, window_s: float, *,
                 clock: Callable[[], float] = time.monotonic, max_bytes: int | None = None) -> None:
        self.session, self.window_s, self.clock = session, window_s, clock
        self.tail = EventTail(session.events_path)
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.writer = RotatingWindows(folder, **({"max_bytes": max_bytes} if max_bytes else {}))
        self.cutter: LightWindows | None = None
        self._last_s = 0.0
        self.windows = 0
        self._context_kept = 0

    def tick(self) -> None:
        now_s = self.clock() - self.session.t0_s
        if now_s - self._last_s >= self.window_s:
            self._window(now_s)

    def _window(self, now_s: float) -> None:
        s = self.session
        if self.cutter is None:
            self.cutter = LightWindows(s.t0_s, s.warmup_steps)
        steps, loading = self.cutter.steps(self.tail.read_new())
        self._keep_context(self.cutter.context)
        # the window's ticks and a margin, from those in memory (never the whole run's)
        rows = s.sampler.recent_sample_rows(int(2 * self.window_s * s.sample_hz) + 2) if s.sampler is not None else []
        gpu = [r for r in rows if self._last_s <= float(r.get("t_s", -1.0)) < now_s]
        self.writer.write(window_aggregate(steps, loading, t_start_s=self._last_s, t_end_s=now_s, gpu_rows=gpu))
        self.windows += 1
        self._last_s = now_s

    def finish(self) -> None:
        """The last window (after the script ended), then the event file reduced to its records that are not
        per step (for the run's metadata: the script's start and end, its loaders)."""
        self._window(self.clock() - self.session.t0_s)
        assert self.cutter is not None
        with open(self.session.events_path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(e) + "\n" for e in self.cutter.context)

    def given_back_context(self) -> list[list]:
        """The records that are not per step, once the event file's start (where they were) has been given back:
        for a reader of the whole file (``--live``); none before."""
        return list(self.cutter.context) if self.cutter is not None and self.tail.trimmed else []

    def _keep_context(self, context: list[list]) -> None:
        if len(context) > self._context_kept:
            with open(self.folder / CONTEXT_FILE, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(e) + "\n" for e in context[self._context_kept:])
            self._context_kept = len(context)


def keep_windows_only(run: Run, light: LightProfile) -> None:
    """The run of a light profile: its windows (attached as recorded), no step, batch or transform table."""
    _windows_only(run, light.folder, {"window_s": light.window_s, "windows": light.windows,
                                      "max_bytes": light.writer.max_bytes, "unreadable_events": light.tail.unreadable,
                                      "events_untrimmed": light.tail.untrimmable})
    if light.cutter is not None and light.cutter.step_source is not None:
        # the run's own cut saw only the records that are not per step: the loaders as the windows saw them
        run.meta["loaders"], run.meta["step_source"] = light.cutter.loaders, light.cutter.step_source
        run.meta["absences"].pop("steps", None)
    run.meta["notes"].append(f"--light {light.window_s:g}: only window aggregates were kept ({light.windows} "
                             f"windows of {light.window_s:g} s, windows.jsonl); no step of the run's own")


def rebuilt_light(run: Run, folder: Path, window_s: float) -> None:
    """A light run whose pipeprof ended before it saved it (``recording.rebuilt_run``): every window written
    until then, from ``folder``, and what the last one after it would have held said to be lost."""
    windows, _ = read_windows(folder)
    _windows_only(run, folder, {"window_s": window_s, "windows": len(windows), "max_bytes": MAX_BYTES,
                                "unreadable_events": None, "events_untrimmed": None})
    last = max((float(w["t_end_s"]) for w in windows if isinstance(w.get("t_end_s"), (int, float))), default=0.0)
    run.meta["notes"].append(f"--light {window_s:g}: the {len(windows)} windows written before pipeprof ended were "
                             f"kept (until {last:.1f} s); what the script did after the last of them was not "
                             "recorded")


def _windows_only(run: Run, folder: Path, light: dict[str, object]) -> None:
    run.steps = pd.DataFrame(columns=STEP_COLUMNS)
    run.loading = pd.DataFrame(columns=LOADING_COLUMNS)
    run.transforms = pd.DataFrame(columns=TRANSFORM_COLUMNS)
    for name in (OLDER_WINDOWS_FILE, WINDOWS_FILE):
        path = folder / name
        if path.is_file():
            run.attachments[name] = path.read_bytes()
    run.meta["light"] = light


class LightThread:
    """A LightProfile ticked by a daemon thread (the API's light mode: no process waits for the script)."""

    def __init__(self, profile: LightProfile, poll_s: float = 0.25) -> None:
        self.profile = profile
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(poll_s,), name="pipeprof-light", daemon=True)
        self._thread.start()

    def _run(self, poll_s: float) -> None:
        while not self._stop.wait(poll_s):
            self.profile.tick()

    def stop(self) -> None:
        """Stop the thread and take the last window (after the hooks' last flush)."""
        self._stop.set()
        self._thread.join()
        self.profile.finish()
