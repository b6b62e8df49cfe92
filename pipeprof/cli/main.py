"""pipeprof: find what keeps your PyTorch training waiting for data.

Commands:
  run SCENARIO     profile a scenario: train it, time every step, sample the system, write a report
  report RUN...    (re)render report.html and summary.json of run folders
  export RUN --format FORMAT  a timeline for Perfetto (chrome-trace), or the run in tensorboard, mlflow, wandb
  list [DIR]       list the scenarios in a folder (default: scenarios/)
  diagnose SCENARIO  differential runs (data on the device, decoded in RAM, as given): fetch vs prep stalls
  probe            measure this machine's ceilings (memory, disk, matmul, GPU), cached per machine
  compare RUN_A RUN_B...  compare runs against the first: throughput ratio with its uncertainty, shares, settings;
                   --fail-if-slower PCT: a regression gate for CI
  sweep SCENARIO   run a grid of settings, each point in a fresh process; a sortable comparison page
  tune SCENARIO    search the fastest DataLoader and placement settings, seeded by the recommendations
  profile -- python train.py ARGS   profile your own training script, unmodified (same report)
  attach PID       sample a training process that is already running, from outside (py-spy): what it waits on
  merge FOLDER...  merge the parts of one distributed job (a run folder per node or rank) into one job run
"""

from __future__ import annotations

import argparse
import atexit
import gc
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from pipeprof import __version__
from pipeprof.cli import (
    attach_cmd,
    compare_cmd,
    diagnose_cmd,
    export_cmd,
    list_cmd,
    merge_cmd,
    probe_cmd,
    profile_cmd,
    report_cmd,
    run_cmd,
    sweep_cmd,
    tune_cmd,
)
from pipeprof.cli.output import stdout_closed
from pipeprof.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    NotSaved,
    Terminated,
    UsageError,
    ignore_until_exit,
    interrupt_reason,
    on_sigterm,
    one_line,
    restore,
)

COMMANDS = {"run": run_cmd, "report": report_cmd, "list": list_cmd, "probe": probe_cmd,
            "diagnose": diagnose_cmd, "compare": compare_cmd, "sweep": sweep_cmd, "tune": tune_cmd,
            "profile": profile_cmd, "export": export_cmd, "merge": merge_cmd,
            "attach": attach_cmd}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is ONE line and exit status 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pipeprof", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"pipeprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module in COMMANDS.items():
        doc = module.__doc__ or ""
        p = sub.add_parser(name, help=doc.splitlines()[0], description=doc,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(handler=module.execute)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pipeprof`` command; returns the exit status.

    Ctrl-C and SIGTERM both stop a command the same way (what was measured is
    saved, marked interrupted); the exit status tells them apart: 130 or 143.
    Only the first is raised; later ones wait for the save (``errors.Interrupts``).
    ``argv`` None (the ``pipeprof`` command, ``python -m pipeprof``) means the
    process is pipeprof's own: see ``_exit_fast``.
    """
    if argv is None:
        _exit_fast()
    interrupts, previous = on_sigterm()
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "handler", None):
            raise UsageError(f"pipeprof: a command is needed: {', '.join(COMMANDS)} (see pipeprof --help)")
        status = args.handler(args)
        rebuild_indexes(args)
        return EXIT_TERMINATED if interrupts.terminated and status == EXIT_INTERRUPTED else status
    except UsageError as e:
        print(f"pipeprof: error: {e}", file=sys.stderr)
        return e.exit_status
    except NotSaved as e:  # a folder not completed: where what was measured is
        print(f"pipeprof: error: {e}", file=sys.stderr)
        return e.exit_status
    except BrokenPipeError:  # the reader of stdout went away (| head): the exit status says so, quietly
        stdout_closed()
        return 1
    except OSError as e:  # a full disk, a folder that became unwritable: one line, never a traceback
        print(f"pipeprof: error: {one_line(e)}", file=sys.stderr)  # str(OSError) names the file
        return EXIT_FAILED
    except KeyboardInterrupt as e:  # commands that save partial results catch it themselves; this is the rest
        print(f"pipeprof: {interrupt_reason(e)}", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
    finally:
        if argv is None:  # the process exits with the status decided: a late signal must not change it
            ignore_until_exit()
        else:
            restore(previous)


def _exit_fast() -> None:
    """At the exit of a process that is pipeprof's own, freeze the garbage collector's objects (gc.freeze).

    They all die with the process; the interpreter's final collections would walk every one of them, which
    with torch loaded takes about half a second after the work is done. atexit handlers (registered later
    run first) and the flushing of output still happen; only cyclic garbage left at exit is not collected.
    Never for an in-process ``main([...])`` (tests, callers): their objects live on.
    """
    atexit.register(gc.freeze)


def rebuild_indexes(args: argparse.Namespace) -> None:
    """Rebuild index.html in the reports folders the command wrote into (``--out``; for ``report``, the
    runs' parent folders); a failure is a warning on stderr, never a changed exit status."""
    folders = [args.out] if getattr(args, "out", None) is not None else []
    if args.command == "report":
        folders += [Path(r).resolve().parent for r in args.runs]
    if not folders:
        return
    from pipeprof.render.index import is_reports_folder, rebuild_index  # pandas and jinja2: not for --help

    seen = set()
    for folder in folders:
        try:
            key = Path(folder).resolve()
            if key in seen:
                continue
            seen.add(key)
            if is_reports_folder(folder):
                rebuild_index(folder)
        except Exception as e:  # noqa: BLE001 - the index is a convenience: it never fails the command
            print(f"pipeprof: warning: could not rebuild {Path(folder) / 'index.html'}: "
                  f"{type(e).__name__}: {e}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
