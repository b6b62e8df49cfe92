"""cProfile inside a profiled script's processes (``pipeprof profile --cprofile [STEPS]``).

``arm(hooks)`` runs in every process that gets the hooks (``script.boot``,
``script.rank_boot``) when ``PIPEPROF_CPROFILE`` holds the setting
(``{"first_step", "steps", "folder"}``, written by
``pipeline.script_code_profile``):

* **The training process.** The hooks call ``on_step(n)`` each time a step
  ends (``Hooks.step_listeners``: at optimizer steps, ``prof.step()`` marks,
  backward passes or batches, whichever the hooks count steps by), ``n``
  steps having ended. A ``measure.codeprofile.CProfileWindow`` is enabled
  when ``first_step`` steps have ended, in the thread that ends them (the
  training thread), and disabled when ``first_step + steps`` have: the
  window is steps ``[first_step, first_step + steps)`` as the step cut
  numbers them, give or take the step a framework's own bookkeeping moves a
  boundary by. Step 0 begins before any boundary is seen, so the window
  starts at step 1 at the earliest. The stats are dumped when the hooks are
  taken back (``main-<pid>.prof`` and ``main-<pid>.json``, the window's
  record, written even when the window never began).
* **DataLoader workers.** ``torch.utils.data._utils.worker._worker_loop``,
  the target every DataLoader gives its worker processes, is replaced by
  ``script.worker_profile.profiled_worker_loop`` (a module-level function: a
  spawned worker unpickles it by name, a forked one inherits it). It runs
  ``measure.codeprofile.WorkerProfiler`` (a marker at start, cProfile for
  the worker's whole life, a dump at its normal exit) into
  ``workers-<parent pid>/``, then torch's own loop. Every loader's workers
  are profiled, evaluation loaders' too: a worker cannot tell which loader
  trains.

Every process of a multi-process job (torchrun's ranks, ``mp.spawn``'s)
profiles itself; ``pipeline.script_code_profile`` keeps the one whose steps
the run shows. Standard library and torch only (the script's processes).
"""

from __future__ import annotations

import cProfile
import json
import marshal
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.utils.data._utils import worker as _worker

from pipeprof.measure.codeprofile import CProfileWindow
from pipeprof.script.worker_profile import replacing, setting


def main_files(pid: int) -> tuple[str, str]:
    """The names of a process's window dump (pstats' raw table, marshalled) and its record (JSON)."""
    return f"main-{pid}.prof", f"main-{pid}.json"


class StepWindow:
    """The training process's window, driven by the hooks' step ends (see module docstring)."""

    def __init__(self, first_step: int, steps: int, folder: str,
                 profiler_factory: Callable[[], Any] = cProfile.Profile) -> None:
        self.window = CProfileWindow(max(1, first_step), steps, profiler_factory)
        self.folder = folder
        self.pid = os.getpid()
        self._ended = 0  # the most steps seen ended (the hooks may count the same boundary twice)

    def on_step(self, ended: int) -> None:
        """``ended`` steps have ended: step number ``ended`` begins."""
        if ended <= self._ended:
            return
        self._ended = ended
        self.window.before_step(ended)

    def dump(self) -> None:
        """Write the window's stats and record (once, in the process that armed it; a forked child skips)."""
        if os.getpid() != self.pid:
            return
        stats = self.window.stats()
        prof, record = main_files(self.pid)
        if stats:
            _write(Path(self.folder, prof), marshal.dumps(stats))
        window = self.window
        _write(Path(self.folder, record), json.dumps({
            "pid": self.pid, "first_step": window.first_step, "steps": window.steps,
            "profiled_steps": window.profiled_steps, "refused": window.refused, "steps_ended": self._ended,
        }).encode())


def _write(path: Path, content: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(content)
    os.replace(tmp, path)


def arm(hooks: Any, environ: Any = os.environ) -> StepWindow | None:
    """Profile this process's window and its DataLoader workers, if ``PIPEPROF_CPROFILE`` asks for it."""
    found = setting(environ)
    if found is None:
        return None
    window = StepWindow(int(found["first_step"]), int(found["steps"]), str(found["folder"]))
    hooks.patches.apply(_worker, "_worker_loop", replacing)
    hooks.step_listeners.append(window.on_step)
    hooks.patches.on_undo(window.dump)  # at uninstall: the window's end, and its stats written
    return window
