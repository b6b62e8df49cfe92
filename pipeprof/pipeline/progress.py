"""What the pipeline tells whoever watches it: bars, progress lines, a wait. Silent by default.

Pipeline functions take a ``Progress`` and never print: the CLI passes one
that draws with rich (``pipeprof.cli.progress``), the Python API and the
tests pass this silent base (or a recorder of their own). A task is whatever
``task()`` returned; only the object that made it reads it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

OK, WARN, BAD = "", "warn", "bad"  # tones of a task's text: as usual, interrupted, failed


class Progress:
    """The silent progress: every method does nothing (quiet commands, the API, tests)."""

    @contextlib.contextmanager
    def showing(self) -> Iterator[None]:
        """While this block runs the bars are on screen (nothing else may draw live meanwhile)."""
        yield

    def building(self, what: str, done: int, total: int) -> None:
        """``done`` of ``total`` parts of ``what`` (data on first use) are built."""

    def task(self, title: str, total: int | None) -> Any:
        """A new bar of ``total`` steps; returns its handle."""
        return None

    def update(self, task: Any, *, completed: int | None = None, title: str | None = None,
               tone: str = OK) -> None:
        """Move a bar to ``completed`` steps and/or retitle it (``tone``: OK, WARN or BAD)."""

    def advance(self, task: Any) -> None:
        """One step more on a bar."""

    def line(self, text: str, *, end: str = "\n") -> None:
        """A line of progress text (plain: never markup); ``end=""`` continues it with the next."""

    @contextlib.contextmanager
    def waiting(self, text: str) -> Iterator[None]:
        """While this block runs, ``text`` says what is being waited for (a spinner in a terminal)."""
        yield


SILENT = Progress()
