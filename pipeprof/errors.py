"""Errors that reach the user as one line and exit status 2; the commands' other exit statuses; SIGTERM.

SIGTERM is turned into ``Terminated``, a ``KeyboardInterrupt``, while a
command runs (``on_sigterm``): every path that saves what was measured on
Ctrl-C saves it on SIGTERM too, and the command then exits 143 instead of 130.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

EXIT_FAILED = 1  # training (or every point of a sweep) failed; what was measured is saved
EXIT_INTERRUPTED = 130  # Ctrl-C; what was measured is saved
EXIT_TERMINATED = 143  # SIGTERM; what was measured is saved


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised where a Ctrl-C would be, so it is handled (and saved) the same way."""


def one_line(e: BaseException) -> str:
    """``Type: message`` on one line. A DataLoader worker's exception arrives with the worker's whole traceback
    in its message ("Caught X in DataLoader worker process 0. Original Traceback ..."): its first and last
    lines are kept, the frames between them dropped."""
    text = str(e)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "Original Traceback" in text and len(lines) > 1:
        message = f"{lines[0]} ... {lines[-1]}"
    else:
        message = " ".join(text.split())
    return f"{type(e).__name__}: {message}" if message else type(e).__name__


def interrupt_reason(e: BaseException) -> str:
    """The words for why a run stopped early, as run.json's ``error``."""
    return "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted by the user (Ctrl-C)"


class SigtermState:
    """Whether SIGTERM came during this command; a second one ends the process at once."""

    def __init__(self) -> None:
        self.received = 0

    def handle(self, signum: int, frame: Any) -> None:
        self.received += 1
        if self.received > 1:
            os._exit(EXIT_TERMINATED)  # the first is still saving: the user wants out now
        raise Terminated()


def on_sigterm() -> tuple[SigtermState, Any]:
    """Install the SIGTERM handler (main thread only); returns the state and the handler it replaced.

    Also installs ``redeliver_swallowed`` as ``sys.unraisablehook`` (until
    ``restore``): an interrupt raised where Python cannot propagate it — in a
    ``__del__`` or an at-fork callback, such as the one ``logging`` registers —
    is otherwise printed as "Exception ignored" and lost, and the run goes on.
    """
    global _FORK_HOOKED
    if not _FORK_HOOKED and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_default_sigterm_in_child)
        _FORK_HOOKED = True
    state = SigtermState()
    previous = signal.signal(signal.SIGTERM, state.handle)
    _HOOKS.append((sys.unraisablehook, state))
    sys.unraisablehook = _redeliver_swallowed
    return state, previous


def restore(previous: Any) -> None:
    """Undo ``on_sigterm``: the SIGTERM handler and the unraisable hook it replaced."""
    signal.signal(signal.SIGTERM, previous)
    if _HOOKS:
        sys.unraisablehook = _HOOKS.pop()[0]


_HOOKS: list[tuple[Any, SigtermState]] = []
REDELIVER_AFTER_S = 0.01


def raise_if_terminated() -> None:
    """Raise ``Terminated`` where a SIGTERM of this command was lost: the loop calling this is still going
    after it came (raised inside something that caught it, not only where ``sys.unraisablehook`` sees it:
    the run would otherwise go on until whoever sent it kills it, and keep nothing)."""
    if _HOOKS and _HOOKS[-1][1].received:
        raise Terminated()


def _redeliver_swallowed(unraisable: Any) -> None:
    """Send a swallowed Ctrl-C or SIGTERM again, to be raised where it can propagate; anything else as usual."""
    exc = unraisable.exc_value
    if not isinstance(exc, KeyboardInterrupt) or not _HOOKS:
        (_HOOKS[-1][0] if _HOOKS else sys.__unraisablehook__)(unraisable)
        return
    if isinstance(exc, Terminated):
        _HOOKS[-1][1].received -= 1  # the same SIGTERM, not a second one
    # Sent from another thread a moment later: raised here, inside the hook, it would be swallowed again.
    sig = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
    threading.Timer(REDELIVER_AFTER_S, os.kill, (os.getpid(), sig)).start()


_FORK_HOOKED = False


def _default_sigterm_in_child() -> None:
    # A forked DataLoader worker must not inherit the handler: when the loader ends a worker with SIGTERM it
    # would raise Terminated there, and the worker's clean-up after it prints tracebacks (resource_sharer).
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # forked from a thread other than the main one: it has no handler to reset
        pass


class UsageError(Exception):
    """Bad input from the user (scenario file, --set value, run folder).

    The message is one line: what is wrong, where, and what is allowed.
    The CLI prints it and exits with status 2, never with a traceback.
    """

    exit_status = 2
