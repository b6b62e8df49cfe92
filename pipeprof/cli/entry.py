"""The ``pipeprof`` command's entry point (and ``python -m pipeprof``'s).

The command's modules take a moment to load (argparse, then pandas or torch as a command needs them); a Ctrl-C
in that moment ends the command with one line and exit status 130, as one during the command does, never with a
traceback of the import it cut short. Nothing else is imported here before ``cli.main``.
"""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130  # errors.EXIT_INTERRUPTED, not imported from there: a Ctrl-C may come while it loads
INTERRUPTED = "pipeprof: interrupted by the user (Ctrl-C)"  # errors.interrupt_reason's words


def main() -> int:
    try:
        from pipeprof.cli.main import main as command
        return command()
    except KeyboardInterrupt:  # while the modules load (the command, once started, catches its own)
        print(INTERRUPTED, file=sys.stderr)
        return EXIT_INTERRUPTED
