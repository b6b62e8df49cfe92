"""``pipeprof profile --live``: while the script runs, its events so far become a ``LiveWindow`` every second.

The event file is read again whole at each refresh (steps are cut from all of
it: a window's steps need the loaders' and the markers' events from the
start), so a refresh costs more as the run grows; the next refresh waits at
least ``COST_FACTOR`` times what the last one took, so the view never takes
more than about 1/COST_FACTOR of a core from the machine it watches.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from pipeprof.analysis.live_window import LiveWindow, timed_window
from pipeprof.script.event_file import read_events
from pipeprof.script.event_steps import script_steps
from pipeprof.script.session import Session

COST_FACTOR = 10


class ProfileLive:
    """Calls ``show`` with the last window of ``session``'s script at most once per ``window_s``."""

    def __init__(self, session: Session, show: Callable[[LiveWindow], None], window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic,
                 context: Callable[[], Sequence[list]] = tuple) -> None:
        self.session, self.show, self.window_s, self.clock = session, show, window_s, clock
        self.context = context  # with --light: the records whose part of the event file was given back
        self._next_s = 0.0

    def tick(self) -> None:
        began = self.clock()
        if began < self._next_s:
            return
        s = self.session
        cut = script_steps(read_events(s.events_path, before=self.context()), s.t0_s, s.warmup_steps)
        training = next((lo for lo in cut.loaders if lo.get("role") == "train"), cut.loaders[0] if cut.loaders else {})
        rows = s.sampler.recent_sample_rows(1) if s.sampler is not None else []
        self.show(timed_window(cut.steps, cut.loading, now_s=self.clock() - s.t0_s, window_s=self.window_s,
                               num_workers=training.get("num_workers"), prefetch_factor=training.get("prefetch_factor"),
                               gpu=rows[-1] if rows else None, gpu_absent=s.absences.get("gpu")))
        self._next_s = began + max(self.window_s, COST_FACTOR * (self.clock() - began))
