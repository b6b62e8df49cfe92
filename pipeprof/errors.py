"""Errors that reach the user as one line and exit status 2; the commands' other exit statuses; SIGTERM.

SIGTERM is turned into ``Terminated``, a ``KeyboardInterrupt``, while a
command runs (``on_sigterm``): every path that saves what was measured on
Ctrl-C saves it on SIGTERM too, and the command then exits 143 instead of 130.
Only the first of them is raised: a later one (a terminal's Ctrl-C reaches a
sweep's child twice) never aborts the save of what was measured (``Interrupts``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
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


class Interrupts:
    """Ctrl-C and SIGTERM during a command: the first raises where the command is; the later ones are held.

    A terminal sends Ctrl-C to the whole process group, so a child run gets
    it twice (from the terminal and from the sweep that passes it on), and
    users press Ctrl-C twice: a signal that aborted the save would lose what
    was measured. Once one has been raised, the command is saving what it
    measured and then exits; the later ones are counted (``hurried``: waits
    may be cut short) and never interrupt that.
    """

    def __init__(self) -> None:
        self.signals: list[int] = []
        self._holding = 0
        self._redelivering = False  # a swallowed signal is being sent again: it is raised, not held

    @property
    def received(self) -> int:
        return len(self.signals)

    @property
    def terminated(self) -> bool:
        """A SIGTERM came (the exit status is then 143)."""
        return signal.SIGTERM in self.signals

    @property
    def hurried(self) -> bool:
        """More than one came: the user wants out as soon as what was measured is saved."""
        return len(self.signals) > 1

    def handle(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)
        if (len(self.signals) == 1 or self._redelivering) and not self._holding:
            self._redelivering = False
            raise _interrupt(signum)

    def redeliver(self, signum: int) -> None:
        """Send ``signum`` again a moment later, from another thread: it was raised where Python swallowed it
        (raised here, inside the unraisable hook, it would be swallowed again). A signal that arrives while
        the timer starts is counted, not raised here, and the one sent again is raised all the same."""
        if self.signals:
            self.signals.pop()  # the same signal again, not a second one (which would be held)
        self._redelivering = True
        self._holding += 1
        try:
            threading.Timer(REDELIVER_AFTER_S, os.kill, (os.getpid(), signum)).start()
        finally:
            self._holding -= 1

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """While what was measured is saved: a first signal is raised when the block is done, not inside it."""
        before = len(self.signals)
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
        if not self._holding and before == 0 and self.signals:
            self._redelivering = False
            raise _interrupt(self.signals[0])

    def note(self, signum: int) -> None:
        """A signal handled elsewhere (the script under ``profile`` had it): later ones are held."""
        self.signals.append(signum)


def on_sigterm() -> tuple[Interrupts, Any]:
    """Install the SIGINT and SIGTERM handler (main thread only); returns the state and what it replaced.

    Also installs ``redeliver_swallowed`` as ``sys.unraisablehook`` (until
    ``restore``): an interrupt raised where Python cannot propagate it — in a
    ``__del__`` or an at-fork callback, such as the one ``logging`` registers —
    is otherwise printed as "Exception ignored" and lost, and the run goes on.
    """
    global _FORK_HOOKED
    if not _FORK_HOOKED and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_default_sigterm_in_child)
        _FORK_HOOKED = True
    state = Interrupts()
    previous = (signal.signal(signal.SIGTERM, state.handle), signal.signal(signal.SIGINT, state.handle))
    _HOOKS.append((sys.unraisablehook, state))
    sys.unraisablehook = _redeliver_swallowed
    return state, previous


def restore(previous: Any) -> None:
    """Undo ``on_sigterm``: the signal handlers and the unraisable hook it replaced."""
    sigterm, sigint = previous
    signal.signal(signal.SIGTERM, sigterm)
    signal.signal(signal.SIGINT, sigint)
    if _HOOKS:
        sys.unraisablehook = _HOOKS.pop()[0]


def ignore_until_exit() -> None:
    """Undo ``on_sigterm`` in a process that is pipeprof's own and about to exit with the status the command
    decided: a Ctrl-C or SIGTERM from here on is ignored. Restored, Python's default handler would raise
    ``KeyboardInterrupt`` outside the command (a second Ctrl-C a second after the first, arriving while the
    process exits) and the process would die by SIGINT, not exit 130 with its run saved."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _HOOKS:
        sys.unraisablehook = _HOOKS.pop()[0]


def current_interrupts() -> Interrupts | None:
    """The running command's state (None outside a command: a library caller's process)."""
    return _HOOKS[-1][1] if _HOOKS else None


@contextlib.contextmanager
def saving() -> Iterator[None]:
    """Around the save of what was measured: Ctrl-C and SIGTERM wait for it (``Interrupts.held``)."""
    state = current_interrupts()
    if state is None:
        yield
        return
    with state.held():
        yield


def _interrupt(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


_HOOKS: list[tuple[Any, Interrupts]] = []
REDELIVER_AFTER_S = 0.01


def raise_if_terminated() -> None:
    """Raise ``Terminated`` where a SIGTERM of this command was lost: the loop calling this is still going
    after it came (raised inside something that caught it, not only where ``sys.unraisablehook`` sees it:
    the run would otherwise go on until whoever sent it kills it, and keep nothing)."""
    if _HOOKS and _HOOKS[-1][1].signals[:1] == [signal.SIGTERM]:
        raise Terminated()


def _redeliver_swallowed(unraisable: Any) -> None:
    """Send a swallowed Ctrl-C or SIGTERM again, to be raised where it can propagate; anything else as usual."""
    exc = unraisable.exc_value
    if half_built_iterator(unraisable):
        return
    if not isinstance(exc, KeyboardInterrupt) or not _HOOKS:
        (_HOOKS[-1][0] if _HOOKS else sys.__unraisablehook__)(unraisable)
        return
    _HOOKS[-1][1].redeliver(signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


def half_built_iterator(unraisable: Any) -> bool:
    """torch's ``_MultiProcessingDataLoaderIter.__del__`` on an iterator whose ``__init__`` a Ctrl-C cut short:
    its attributes were never set, and the AttributeError would be printed as "Exception ignored" after the
    interrupt (which is reported already)."""
    return isinstance(unraisable.exc_value, AttributeError) and \
        getattr(unraisable.object, "__qualname__", "") == "_MultiProcessingDataLoaderIter.__del__"


_FORK_HOOKED = False


def _default_sigterm_in_child() -> None:
    # A forked DataLoader worker must not inherit the handler: when the loader ends a worker with SIGTERM it
    # would raise Terminated there, and the worker's clean-up after it prints tracebacks (resource_sharer).
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # nor the command's Ctrl-C state
    except ValueError:  # forked from a thread other than the main one: it has no handler to reset
        pass


class UsageError(Exception):
    """Bad input from the user (scenario file, --set value, run folder).

    The message is one line: what is wrong, where, and what is allowed.
    The CLI prints it and exits with status 2, never with a traceback.
    """

    exit_status = 2


class NotSaved(Exception):
    """A run folder could not be completed (a full disk); its message names it, and where the raw records
    were kept, if anywhere.

    The CLI prints it as one line and exits with status 1.
    """

    exit_status = EXIT_FAILED
