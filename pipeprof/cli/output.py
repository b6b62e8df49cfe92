"""Standard output that a reader closed early (``pipeprof list | head -1``): end quietly, never a traceback."""

from __future__ import annotations

import contextlib
import errno
import os
import sys

from rich.console import Console


def stdout_closed() -> None:
    """Call on the BrokenPipeError of a write to stdout: points stdout at /dev/null, so that what is still
    buffered, and the interpreter's flush at exit, go nowhere instead of raising again ("Exception ignored
    ... BrokenPipeError"). What is written to stderr afterwards still reaches the terminal."""
    with contextlib.suppress(OSError, ValueError):  # no file descriptor (a caller's StringIO): nothing to redirect
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class _StdoutConsole(Console):
    def on_broken_pipe(self) -> None:
        """rich's own answer is SystemExit(1), which would skip what a command still has to say on stderr
        (and end a caller's process that runs ``main([...])``): the BrokenPipeError goes on instead."""
        self.quiet = True
        stdout_closed()
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def stdout_console() -> Console:
    """A rich Console on stdout whose closed pipe raises BrokenPipeError, as print() does (see main)."""
    return _StdoutConsole()
