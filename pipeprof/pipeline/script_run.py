"""``pipeprof profile``'s pipeline: run a training script under the hooks, sample it, save its run folder.

The script runs in its own process (``python -m pipeprof.script.boot``
installs the hooks, then runs it as ``python SCRIPT`` would); this process
samples its process tree (``pipeprof.script.session``), passes SIGTERM on,
and afterwards cuts the hooks' events into steps, derives the report and
saves the run folder. The hooks write their events into the run folder
from the start (``pipeline.recording``), and the script dies with pipeprof:
a killed pipeprof leaves what was recorded for ``pipeprof report``.
Nothing here prints.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof import adapters, track_record
from pipeprof.analysis.live_window import LiveWindow
from pipeprof.errors import Interrupts, NotSaved, UsageError, current_interrupts, one_line, saving
from pipeprof.pipeline.fresh_process import die_with_parent, stop_process
from pipeprof.pipeline.light_profile import LightProfile, keep_windows_only
from pipeprof.pipeline.live_profile import ProfileLive
from pipeprof.pipeline.recording import LIGHT, note_facts, start_recording
from pipeprof.run_folder import Run, ensure_out_folder, new_run_folder, save_run
from pipeprof.script import overrides as overrides_mod
from pipeprof.script.overrides import Overrides
from pipeprof.script.protocol import (
    CPROFILE_ENV,
    EVENTS_DIR_ENV,
    EVENTS_ENV,
    OVERRIDES_ENV,
    STARTUP_PACKAGE,
    STEPS_ENV,
    WHAT_IFS_ENV,
    WHAT_IFS_SECONDS_ENV,
)
from pipeprof.script.session import NO_STEPS, WHAT_IFS_OFF, Session

_PYTHON = re.compile(r"python[0-9.]*(\.exe)?$")
_OPTIONS_WITH_VALUE = {"-W", "-X", "-Q"}  # python's own options that take the next word
# Modules that launch a script given as an argument: the run is named after that script
LIVE_POLL_S = 0.25  # --live / --light: how often the wait for the script looks at the clock (ProfileLive decides to refresh)
_LAUNCHER_MODULES = {"torch.distributed.run", "torch.distributed.launch", *adapters.launchers()}


@dataclass(frozen=True)
class ScriptRun:
    """A profiled script's saved run: its raw records, folder, summary and the shell's exit status."""

    run: Run
    folder: Path
    summary: dict[str, Any]
    exit_status: int


def split_command(command: list[str], default_python: str = sys.executable) -> tuple[str, list[str], list[str]]:
    """``(python, python options, [SCRIPT | -m MODULE] + ARGS)`` from the words after ``--``."""
    words = command[1:] if command and command[0] == "--" else list(command)
    if not words:
        raise UsageError("pipeprof profile: no command: expected `-- python SCRIPT [ARGS]` "
                         "or `-- python -m MODULE [ARGS]` after the options")
    first = words[0]
    if first.endswith(".py") and not _PYTHON.search(Path(first).name):
        return default_python, [], words
    if not _PYTHON.search(Path(first).name):
        raise UsageError(f"pipeprof profile: {first!r} is not a Python interpreter or a .py script; "
                         "expected `-- python SCRIPT [ARGS]`, `-- python -m MODULE [ARGS]` or `-- SCRIPT.py [ARGS]`")
    # A bare `python` is the interpreter running pipeprof (which can import it, and torch); a path is used as given.
    python = default_python if os.sep not in first else shutil.which(first)
    if python is None:
        raise UsageError(f"pipeprof profile: {first!r}: no such interpreter (not found on PATH)")
    options, rest = [], words[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        option = rest.pop(0)
        if option in ("-c", "-") or option.startswith("-c"):
            raise UsageError("pipeprof profile: python -c and stdin are not supported: give a script "
                             "file or -m MODULE")
        options.append(option)
        if option in _OPTIONS_WITH_VALUE and rest:
            options.append(rest.pop(0))
    if not rest or rest == ["-m"]:
        raise UsageError(f"pipeprof profile: {' '.join(words)!r}: no script or -m MODULE to run")
    return python, options, rest


def launcher_command(command: list[str]) -> list[str] | None:
    """The command as it will run, when it is not ``python ...`` or a ``.py`` script: a launcher (torchrun,
    accelerate launch, deepspeed, srun, mpirun, a shell script...), run as it is, its first word found on PATH;
    its Python processes get the hooks through the start-up hook (``pipeprof.script.startup``). None for the
    Python forms."""
    words = command[1:] if command and command[0] == "--" else list(command)
    if not words:
        return None
    first = words[0]
    if _PYTHON.search(Path(first).name) or first.endswith(".py"):
        return None
    # on PATH, else beside the interpreter running pipeprof (its environment's torchrun, not activated)
    found = shutil.which(first) or (shutil.which(first, path=str(Path(sys.executable).parent))
                                    if os.sep not in first else None)
    if found is None:
        raise UsageError(f"pipeprof profile: {first!r}: no such command (not found on PATH); expected "
                         "`-- python SCRIPT [ARGS]`, `-- python -m MODULE [ARGS]`, `-- SCRIPT.py [ARGS]` or a "
                         "launcher such as `-- torchrun ... SCRIPT [ARGS]`")
    return [found, *words[1:]]


def launched_name(words: list[str]) -> str:
    """A launcher's run is named after the script it launches (its first ``.py`` word), else the launcher."""
    script = next((w for w in words[1:] if w.endswith(".py")), None)
    return Path(script).stem if script else Path(words[0]).name


def run_name(target: list[str]) -> str:
    """The script's file name without .py, or the module's last part."""
    if target[0] == "-m":
        script = next((w for w in target[2:] if w.endswith(".py")), None) if target[1] in _LAUNCHER_MODULES else None
        return Path(script).stem if script else target[1].rsplit(".", 1)[-1]
    return Path(target[0]).stem or "script"


def command_line(typed: str, python: str, options: list[str], target: list[str]) -> str:
    """The command as the user would type it again: their interpreter's word (``python``, not the
    ``python3.11`` it resolved to) and the script's path normalised (``a/../b.py`` -> ``b.py``)."""
    shown = list(target)
    script = 1 if shown[0] == "-m" else 0
    if script == 0:
        shown[0] = os.path.normpath(shown[0])
    words = [typed if python in (sys.executable, shutil.which(typed) or "") else python, *options, *shown]
    return " ".join(shlex.quote(w) for w in words)


class _Signals:
    """While the script runs: Ctrl-C is the script's (the terminal sends it to both); a second one kills it.

    SIGTERM sent to pipeprof is passed on to the script. Either way the run is saved afterwards, and a
    signal during the save (two Ctrl-C a second apart) waits for it (``errors.Interrupts``).
    """

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        # The command's handler learns of the script's signals before it is back: one arriving as it comes back
        # is then a later one, held for the save, never a first one raised before the run is saved.
        interrupts = current_interrupts() or Interrupts()  # none: a library caller's process, nothing to tell
        noted = len(self.received)
        for sig in self.received[:noted]:
            interrupts.note(sig)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        for sig in self.received[noted:]:  # came while handing back
            interrupts.note(sig)

    def _handle(self, signum: int, frame: Any) -> None:
        self.received.append(signum)
        if signum == signal.SIGTERM:
            self._send(signal.SIGTERM)
        elif self.received.count(signal.SIGINT) >= 2:
            self._send(signal.SIGKILL)

    def _send(self, sig: int) -> None:
        try:
            self.process.send_signal(sig)
        except ProcessLookupError:
            pass


def exit_status(returncode: int, received: list[int] | None = None) -> int:
    """The shell's view: a process killed by signal N exits 128 + N; so does a command that ended with
    another non-zero status after pipeprof got signal N (``torchrun`` exits 1 on Ctrl-C and SIGTERM)."""
    if returncode < 0:
        return 128 - returncode
    if returncode and received:
        return 128 + received[0]
    return returncode




def outcome(returncode: int, ended: dict[str, Any] | None, received: list[int]) -> tuple[str, str | None]:
    """(status, error) of the run from how the script ended."""
    how, detail = (ended or {}).get("how"), (ended or {}).get("detail")
    if how == "interrupted" or returncode in (-signal.SIGINT, 128 + signal.SIGINT) or signal.SIGINT in received:
        return "interrupted", "interrupted by the user (Ctrl-C)"
    if returncode == -signal.SIGTERM or signal.SIGTERM in received:
        return "interrupted", "terminated (SIGTERM)"
    if returncode == 0:
        return "complete", None
    if returncode < 0:
        return "failed", f"the script was killed by {signal.Signals(-returncode).name}"
    if how == "exception":
        return "failed", f"the script raised {detail}"
    return "failed", f"the script exited with status {returncode}"


def profile_script(command: list[str], *, out: Path, name: str | None = None, steps: int | None = None,
                   warmup_steps: int = 5, sample_hz: float = 10.0, overrides: Overrides | None = None,
                   cprofile_steps: int = 0, pyspy_hz: int = 0, what_ifs: bool | None = None,
                   what_ifs_s: float | None = None, live: Callable[[LiveWindow], None] | None = None,
                   light_s: float | None = None) -> ScriptRun:
    """Run ``command`` (``python SCRIPT ARGS``, ``python -m MODULE ARGS`` or ``SCRIPT.py ARGS``) under the
    hooks, sampling its process tree at ``sample_hz``; ``steps``: end it after that many training steps;
    ``overrides``: loader settings and threads changed from outside (``script.overrides``);
    ``cprofile_steps`` / ``pyspy_hz``: the code-level view (``pipeline.script_code_profile``; 0: off);
    ``what_ifs``: after ``steps``, the script's loop fed by variants of its training loader (``script.segments``;
    None: unless ``PIPEPROF_WHAT_IFS=0`` in the environment); ``what_ifs_s``: their total budget in seconds
    (None: the larger of 3 s and 10 % of the run's training); ``live``: shown the last second of the script
    about once a second while it runs (``pipeline.live_profile``); ``light_s``: keep only window aggregates,
    one every ``light_s`` seconds (``pipeline.light_profile``), and no step of the run's own.
    The run folder is saved under ``out`` however the script ended."""
    words = command[1:] if command and command[0] == "--" else list(command)
    launched = launcher_command(command)
    if launched is None:
        python, options, target = split_command(command)
        name = name or run_name(target)
        typed = "python" if words[0] == target[0] else words[0]  # `-- train.py ARGS`: run by `python`
        shown = command_line(typed, python, options, target)
        argv = [python, *options, "-m", "pipeprof.script.boot", *target]
        recorded = [python, *options, *target]
    else:
        name = name or launched_name(words)
        shown = " ".join(shlex.quote(w) for w in words)
        argv = recorded = launched
    ensure_out_folder(out)
    folder = new_run_folder(out, name)
    try:  # the raw records go into the run folder from the start: a killed pipeprof leaves them there
        recording = start_recording(folder)
    except OSError as e:
        raise UsageError(f"--out {out}: cannot create {folder.name} ({e.strerror or e})") from None
    tmp = recording.path
    events = recording.events
    env = dict(os.environ, **{EVENTS_ENV: str(events), EVENTS_DIR_ENV: str(tmp)})
    if steps:
        env[STEPS_ENV] = str(steps)
    if what_ifs is None:
        what_ifs = os.environ.get(WHAT_IFS_ENV, "1") != "0"
    env[WHAT_IFS_ENV] = "1" if what_ifs else "0"
    env.pop(WHAT_IFS_SECONDS_ENV, None)  # a profiled script's own pipeprof profile child: not the parent's
    if what_ifs_s is not None:
        env[WHAT_IFS_SECONDS_ENV] = repr(float(what_ifs_s))
    env.pop(OVERRIDES_ENV, None)  # a profiled script's own pipeprof profile child: not the parent's
    if overrides:
        env[OVERRIDES_ENV] = json.dumps(overrides.to_json())
    env.pop(CPROFILE_ENV, None)  # likewise
    code = None
    if cprofile_steps or pyspy_hz:  # loads torch: only when asked (the script starts without waiting for it)
        from pipeprof.pipeline.script_code_profile import ScriptCodeProfile
        code = ScriptCodeProfile(cprofile_steps, pyspy_hz, warmup_steps, tmp / "cprofile")
        env.update(code.environment())
    root = Path(__file__).resolve().parents[1]  # the pipeprof package
    # the start-up hook first: every Python process the command starts arms the hooks (rank_boot)
    env["PYTHONPATH"] = os.pathsep.join([str(root / "script" / STARTUP_PACKAGE), str(root.parent),
                                         *filter(None, [os.environ.get("PYTHONPATH")])])
    what_ifs_absent = None if what_ifs and steps else NO_STEPS if what_ifs else WHAT_IFS_OFF
    spool = tmp / "spool" if light_s else None  # a job of days: the sampler's rows on disk, not in memory
    if spool is not None:
        spool.mkdir()
    session = Session(name, events, warmup_steps=warmup_steps, sample_hz=sample_hz, events_dir=tmp,
                      what_ifs_absent=what_ifs_absent, spool_dir=spool)
    checks = track_record.current()  # this machine's record of checked predictions: the intervals' model error
    try:
        process = subprocess.Popen(argv, env=env, preexec_fn=die_with_parent())  # noqa: PLW1509 - see there
        started_s = time.monotonic()
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise UsageError(f"pipeprof profile: cannot start {argv[0]}: {e.strerror or e}") from None
    script: dict[str, Any] = {"command": recorded, "command_line": shown, "cwd": os.getcwd()}
    with _Signals(process) as signals:
        unrecordable: OSError | None = None
        try:
            session.start(process.pid)
            try:
                note_facts(recording, {"name": name, "warmup_steps": warmup_steps, "sample_hz": sample_hz,
                                       "what_ifs_absent": what_ifs_absent, "t0_s": session.t0_s,
                                       "pid": process.pid, "script": script, "light_s": light_s})
            except OSError as e:  # a disk full from the start: nothing the script does could be kept
                unrecordable = e
                raise
        except BaseException:  # the sampler could not start: the script must not go on unwatched
            stop_process(process, signal.SIGTERM, wait_s=5.0)
            if unrecordable is None:
                raise
            session.stop_sampling()
            shutil.rmtree(folder, ignore_errors=True)  # empty: the script was stopped as it started
            raise UsageError(f"--out {out}: cannot write in the folder ({unrecordable.strerror or unrecordable}); "
                             "the script was stopped as it started: make room or give another folder") from None
        if code is not None:
            code.start(process.pid)
        # The report's modules (matplotlib, jinja2: half a second) load while the script runs, not
        # before it starts.
        from pipeprof.pipeline.derive import derived_files
        light = LightProfile(session, tmp / LIGHT, light_s) if light_s else None
        live_view = ProfileLive(session, live, context=light.given_back_context if light is not None else tuple) \
            if live is not None else None
        ticks = [t for t in (live_view.tick if live_view is not None else None,
                             light.tick if light is not None else None) if t is not None]
        returncode = _wait(process, ticks)
        if light is not None:
            light.finish()
        wall_s = time.monotonic() - started_s
        if code is not None:
            code.stop()  # py-spy writes its file now the script has ended
    with saving():  # a Ctrl-C or SIGTERM now waits for the run folder (errors.Interrupts)
        status, error = outcome(returncode, session.records().end, signals.received)
        shell_status = exit_status(returncode, signals.received)
        script.update({"returncode": returncode, "exit_status": shell_status, "wall_s": wall_s,
                       # read when the hooks wrote no end (a signal ended the script): what this process saw
                       "ended": {"how": "signal" if returncode < 0 else status, "detail": error,
                                 "recorded_by": "pipeprof profile"}})
        run = session.finish(status, error, script)
        run.meta["track_record"] = checks
        if light is not None:
            keep_windows_only(run, light)
        if code is not None:
            code.attach(run)
        if overrides:
            _record_overrides(run, overrides, tmp)
        if steps and run.info.step_source is None:
            run.meta["notes"].append(f"--steps {steps} was not applied: no training step ran in the process "
                                     "pipeprof instrumented")
        summary, files = derived_files(run, folder.name)
        try:
            save_run(run, folder, files)
        except OSError as e:  # a full disk: the raw records stay in the folder, and the message says where
            raise NotSaved(f"could not complete the run folder {folder} ({one_line(e)}); the raw records "
                              f"are kept in {recording.path}: `pipeprof report {folder}` rebuilds the run "
                              "once there is room") from e
    return ScriptRun(run, folder, summary, shell_status)


def _record_overrides(run: Run, overrides: Overrides, events_dir: Path) -> None:
    """run.json's ``overrides``: what was asked, what each process applied to which loader; notes for the report."""
    script = run.info.script
    record, notes = overrides_mod.outcome(overrides.to_json(), overrides_mod.read_records(events_dir),
                                          list(run.info.loaders), script.started_pid if script is not None else None)
    run.meta["overrides"] = record
    run.meta["notes"].extend(notes)


def _wait(process: subprocess.Popen, ticks: list[Callable[[], None]] | None = None) -> int:
    while True:
        try:
            if not ticks:
                return process.wait()
            try:
                return process.wait(LIVE_POLL_S)
            except subprocess.TimeoutExpired:
                for tick in ticks:
                    tick()
        except KeyboardInterrupt:  # pragma: no cover - the handler above catches SIGINT; belt and braces
            continue
