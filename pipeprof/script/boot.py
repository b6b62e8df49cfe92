"""``python -m pipeprof.script.boot SCRIPT ARGS`` / ``... -m MODULE ARGS``: run a script with the hooks installed.

``pipeprof profile`` starts the user's interpreter with this module in front
of the script. The script runs as ``__main__`` with its own ``sys.argv`` and
``sys.path[0]`` (its folder, or the working folder for ``-m``), exactly as
``python SCRIPT`` would run it; its exceptions and exit status pass through
unchanged. When it ends, the hooks are taken back (``Hooks.uninstall``)
before the interpreter runs its exit handlers. The environment names the
event file (``PIPEPROF_EVENTS``), an optional number of steps after
which to stop (``PIPEPROF_STEPS``) and optional settings to change from
outside (``PIPEPROF_OVERRIDES``: ``pipeprof.script.overrides``).
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
from typing import TYPE_CHECKING, Any

from pipeprof.errors import half_built_iterator, one_line
from pipeprof.script.own_frames import trimming
from pipeprof.script.protocol import (
    EVENTS_DIR_ENV,
    EVENTS_ENV,
    OVERRIDES_ENV,
    STEPS_ENV,
    WHAT_IFS_ENV,
    WHAT_IFS_SECONDS_ENV,
)

if TYPE_CHECKING:
    from pipeprof.script.hooks import Hooks


def main(argv: list[str]) -> None:
    # numpy first, in Python: torch imports it from C and clears whatever that import raised, a Ctrl-C's
    # KeyboardInterrupt included, and the script would train on with the interrupt lost (6 of 60 Ctrl-Cs sent
    # while `import torch` ran; 0 of 60 with numpy loaded first). A numpy that fails to import is torch's to
    # meet (it goes on without numpy, with a warning): never the script's end here.
    with contextlib.suppress(Exception):
        import numpy  # noqa: F401
    # torch loads here, after the excepthook that leaves pipeprof's frames out (a Ctrl-C while it loads)
    from pipeprof.script import code_profile
    from pipeprof.script.hooks import EventLog, Hooks, clock, started_facts
    from pipeprof.script.segments import WhatIfSegments

    steps = os.environ.get(STEPS_ENV)
    hooks = Hooks(EventLog(os.environ[EVENTS_ENV]), int(steps) if steps else None)
    if steps and os.environ.get(WHAT_IFS_ENV, "1") != "0":  # after --steps, the loop fed by variants
        budget_s = os.environ.get(WHAT_IFS_SECONDS_ENV)
        hooks.segments = WhatIfSegments(hooks.log, hooks.clock, total_budget_s=float(budget_s) if budget_s else None)
    log = hooks.log
    log.add(("S", clock(), {**started_facts(), "argv": argv}), clock())
    if argv[0] == "-m":
        target, run = argv[1], lambda: runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        sys.argv = [argv[1], *argv[2:]]  # run_module puts the module's file name in argv[0]
    else:
        target = argv[0]
        if not os.path.isfile(target):
            log.add(("X", clock(), "exception", f"FileNotFoundError: no such script: {target}"), clock())
            log.flush(final=True)
            print(f"{sys.executable}: can't open file {os.path.abspath(target)!r}: no such file", file=sys.stderr)
            sys.exit(2)  # what python itself does
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        run = lambda: runpy.run_path(target, run_name="__main__")  # noqa: E731
    hooks.install()
    _quiet_half_built_iterators()
    _arm_overrides(hooks)
    code_profile.arm(hooks)  # --cprofile (PIPEPROF_CPROFILE): the window and the DataLoader workers
    try:
        try:
            run()
        finally:
            hooks.end_segments("the script ended during the what-if segments")
            hooks.read_threads("end")  # what the script trained with, written before its end (X)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) or e.code is None else 1
        how = "stopped" if hooks.stopping else "exit"
        log.add(("X", clock(), how, code or 0 if how == "exit" else hooks.stop_after_steps), clock())
        raise
    except KeyboardInterrupt:
        log.add(("X", clock(), "interrupted", "KeyboardInterrupt"), clock())
        _trim_own_frames_from_traceback()
        raise
    except BaseException as e:
        log.add(("X", clock(), "exception", one_line(e)), clock())
        _trim_own_frames_from_traceback()
        raise
    else:  # a framework's loop that --steps ended as at its own stop request: the script then ended by itself
        log.add(("X", clock(), "stopped", hooks.stop_after_steps) if hooks.stopping else ("X", clock(), "exit", 0),
                clock())
    finally:
        try:  # the last events written; torch as it was for the exit handlers
            hooks.uninstall()
        except Exception as e:  # noqa: BLE001 - the script's own exit status and exception go on unchanged
            print(f"pipeprof: warning: could not take the hooks back: {type(e).__name__}: {e}", file=sys.stderr)


def _arm_overrides(hooks: Hooks) -> None:
    """``--loader`` / ``--threads`` (``PIPEPROF_OVERRIDES``), applied in this process (``script.overrides``)."""
    from pipeprof.script import overrides

    folder = os.environ.get(EVENTS_DIR_ENV)
    record = overrides.record_path(folder, os.getpid()) if folder else None
    overrides.arm(hooks, overrides.from_environment(os.environ.get(OVERRIDES_ENV)), record)


def _quiet_half_built_iterators() -> None:
    """No "Exception ignored ... AttributeError" from torch for an iterator whose making a Ctrl-C cut short
    (the what-if segments make one at every segment: ``errors.half_built_iterator``); anything else as before."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not half_built_iterator(unraisable):
            previous(unraisable)

    sys.unraisablehook = hook


def _trim_own_frames_from_traceback() -> None:
    """Have the interpreter print the script's uncaught exception from the script's own first frame, as
    ``python SCRIPT`` would: this module's and runpy's frames in front of it are pipeprof's, not the user's.

    Wraps the excepthook in place when the exception leaves the script (one the script set stays in charge).
    """
    sys.excepthook = trimming(sys.excepthook)


if __name__ == "__main__":
    if len(sys.argv) < 2 or (sys.argv[1] == "-m" and len(sys.argv) < 3):
        sys.exit("usage: python -m pipeprof.script.boot SCRIPT [ARGS] | -m MODULE [ARGS]")
    _trim_own_frames_from_traceback()  # from the start: a Ctrl-C while torch loads shows none of pipeprof's frames
    main(sys.argv[1:])
