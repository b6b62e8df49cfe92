"""The hooks in a process that ``pipeprof profile`` did not start itself: a rank of a multi-process job.

``pipeprof.script.startup``'s ``sitecustomize`` calls ``arm()`` at the
start-up of every Python process of the profiled command (the launcher,
torchrun's ranks, ``torch.multiprocessing.spawn``'s, any subprocess).
``arm()`` imports nothing heavy: it waits (a ``sys.meta_path`` finder,
``post_import.PostImport``) until the process imports torch, then installs
the hooks there, writing to ``events-<pid>.jsonl`` in the job's event
folder. A process that never imports torch costs a finder and nothing
else; one that imports torch but never iterates a DataLoader (the launcher)
writes its start and end, and is listed as such.

The process that ``pipeprof profile`` starts itself runs
``pipeprof.script.boot``, which installs its own hooks: ``arm()`` leaves
it alone. DataLoader workers forked from a rank carry the rank's hooks
(their batches' records ride back with the batches); a worker started with
the spawn method arms its own, which time its fetches and write no step.

How a rank ends is recorded at exit: its uncaught exception through
``sys.excepthook``, else a normal exit (``atexit``); a rank killed by a
signal (a launcher ending the others after one failed) leaves no end.

Standard library only until torch is imported.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from types import TracebackType
from typing import Any

from pipeprof.errors import one_line
from pipeprof.script import worker_start
from pipeprof.script.post_import import PostImport
from pipeprof.script.protocol import EVENTS_DIR_ENV, OVERRIDES_ENV, STEPS_ENV

BOOT_MODULE = "pipeprof.script.boot"
# The environment that says which rank a process is (launchers and schedulers set them): kept raw in the
# start event, read by pipeprof.measure.rank_env afterwards.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "ROLE_RANK",
                  "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_LOCALID",
                  "SLURM_NTASKS", "SLURM_NODEID", "SLURM_JOB_ID", "SLURMD_NODENAME")
_armed: list[Any] = []  # the finder, then the hooks: one arming per process


def events_path(folder: str, pid: int) -> str:
    return os.path.join(folder, f"events-{pid}.jsonl")


def rank_environment(environ: Any = os.environ) -> dict[str, str]:
    return {k: environ[k] for k in RANK_VARIABLES if k in environ}


def arm() -> None:
    """Install the hooks once torch is imported (at once if it is), unless this process is pipeprof's own boot."""
    if _armed or BOOT_MODULE in getattr(sys, "orig_argv", ()) or not os.environ.get(EVENTS_DIR_ENV):
        return
    if worker_start.is_spawned_child():  # a spawned DataLoader worker, perhaps: its main module's import timed
        worker_start.watch_prepare()
    if "torch" in sys.modules and hasattr(sys.modules["torch"], "Tensor"):
        _start()
        return
    finder = PostImport(["torch"], lambda module: _start(), once=True)
    sys.meta_path.insert(0, finder)
    _armed.append(finder)


def _record_spawned_failures(hooks: Any, clock: Any) -> None:
    """A rank started by ``torch.multiprocessing.spawn`` runs inside its ``_wrap``, which catches the rank's
    exception (to hand it to the parent) and exits with status 1: the excepthook never sees it. Patched here
    (the spawn child imports torch while unpickling ``_wrap``, so the patched one is what it runs), the
    exception is recorded as the rank's end before ``_wrap`` takes it."""
    spawn = sys.modules.get("torch.multiprocessing.spawn")
    if spawn is None or not callable(getattr(spawn, "_wrap", None)):
        return

    def make(original: Any) -> Any:
        def _wrap(fn: Any, i: int, args: Any, *rest: Any) -> Any:
            def recorded(*a: Any) -> Any:
                try:
                    return fn(*a)
                except Exception as e:
                    if hooks.live and not hooks.ended:
                        hooks.log.add(("X", clock(), "exception", one_line(e)), clock())
                        hooks.ended = True
                    raise
            return original(recorded, i, args, *rest)
        return _wrap

    hooks.patches.apply(spawn, "_wrap", make)


def _start() -> None:
    try:
        _install()
    except Exception as e:  # noqa: BLE001 - the rank runs on unprofiled; the reason is said once
        print(f"pipeprof: warning: could not profile pid {os.getpid()}: {type(e).__name__}: {e}", file=sys.stderr)


def _install() -> None:
    from pipeprof.script import code_profile, overrides  # --loader / --threads, --cprofile: in every rank too
    from pipeprof.script.hooks import EventLog, Hooks, clock, started_facts

    steps = os.environ.get(STEPS_ENV)
    hooks = Hooks(EventLog(events_path(os.environ[EVENTS_DIR_ENV], os.getpid())), int(steps) if steps else None)
    hooks.log.add(("S", clock(), {**started_facts(), "ppid": os.getppid(), "argv": list(sys.argv),
                                  "orig_argv": list(getattr(sys, "orig_argv", [])), "env": rank_environment()}),
                  clock())
    hooks.install()
    _armed.append(hooks)
    overrides.arm(hooks, overrides.from_environment(os.environ.get(OVERRIDES_ENV)),
                  overrides.record_path(os.environ[EVENTS_DIR_ENV], os.getpid()))
    code_profile.arm(hooks)
    _record_spawned_failures(hooks, clock)
    previous_hook = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if hooks.live and not issubclass(kind, SystemExit):
            how = "interrupted" if issubclass(kind, KeyboardInterrupt) else "exception"
            hooks.log.add(("X", clock(), how, one_line(value)), clock())
            hooks.ended = True
        previous_hook(kind, value, tb)

    sys.excepthook = excepthook

    def at_exit() -> None:
        if os.getpid() != hooks.log.pid or not hooks.live:  # a forked child, or already taken back
            return
        if not hooks.ended:
            how, detail = ("stopped", hooks.stop_after_steps) if hooks.stopping else ("exit", None)
            hooks.log.add(("X", clock(), how, detail), clock())
        grouped = hooks.stopping and _in_process_group()
        try:
            hooks.uninstall()
        except Exception as e:  # noqa: BLE001 - the process's own exit goes on
            print(f"pipeprof: warning: could not take the hooks back: {type(e).__name__}: {e}", file=sys.stderr)
        if grouped:
            _exit_stopped_rank()

    atexit.register(at_exit)  # after the hooks' own flush: runs before it (last registered, first run)
    _flush_on_sigterm(hooks)


def _in_process_group() -> bool:
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without c10d: no group
        return False


def _exit_stopped_rank() -> None:
    """End a rank that ``--steps`` stopped now, its records written and its streams flushed, with status 0:
    the interpreter's teardown of a rank that was in a gloo group can abort it (SIGABRT, "terminate called
    without an active exception": the group's C++ threads outlive the objects they use, pytorch#190489),
    even after ``destroy_process_group`` (CI aborted a stopped rank so once; the model's DDP reducer may still
    hold the group). Measured here on a minimal 2-rank ``mp.spawn`` DDP job ending with SystemExit after 9
    steps, 30 interleaved rounds of each: left to teardown, 2 aborted; group destroyed at exit, 1; this
    way, 0. Runs last of the atexit handlers the script and its libraries registered after the hooks
    (those ran already); what torch registered on import, before the hooks, is skipped with the teardown."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed stream: nothing left to write
            pass
    os._exit(0)


def _flush_on_sigterm(hooks: Any) -> None:
    """A rank that a launcher ends with SIGTERM (torchrun does, when another rank fails) keeps what it recorded:
    its event log is written, then the signal takes its default course (the exit status says SIGTERM, and
    the rank "ended without an end record"). Only where SIGTERM has its default action: a script's own
    handler, or one set later, is left alone."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_term(signum: int, frame: Any) -> None:
        try:
            hooks.log.flush(final=True, wait=False)
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
