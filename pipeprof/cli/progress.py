"""The pipeline's progress drawn on the terminal's stderr with rich: lines, or bars and lines.

``Lines`` prints progress lines and waits (tune's trials); ``Bars`` adds a
bar per task and per thing being built (run, sweep, diagnose). A quiet
command passes ``pipeprof.pipeline.progress.SILENT`` instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress
from rich.text import Text

from pipeprof.pipeline.progress import BAD, OK, WARN, Progress

_TONE_STYLE = {OK: "", WARN: "yellow", BAD: "red"}


class Lines(Progress):
    """Progress lines and waits on ``console`` (stderr), no bars."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def line(self, text: str, *, end: str = "\n") -> None:
        self.console.print(text, end=end, markup=False, highlight=False)

    @contextlib.contextmanager
    def waiting(self, text: str) -> Iterator[None]:
        with self.console.status(text):
            yield


def columns(*, remaining: bool = True, eta_label: bool = False) -> tuple[ProgressColumn, ...]:
    """Title, bar, done/total, elapsed, and (``remaining``) the time left, labelled ETA if ``eta_label``."""
    out: list[ProgressColumn] = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn()]
    if eta_label:
        out.append(TextColumn("ETA"))
    if remaining:
        out.append(TimeRemainingColumn())
    return tuple(out)


class Bars(Lines):
    """A rich bar per task and per thing being built, lines printed above them."""

    def __init__(self, console: Console, cols: tuple[ProgressColumn, ...]) -> None:
        super().__init__(console)
        self.bars = RichProgress(*cols, console=console, refresh_per_second=4)
        self._building: dict[str, Any] = {}

    @contextlib.contextmanager
    def showing(self) -> Iterator[None]:
        with self.bars:
            yield

    def building(self, what: str, done: int, total: int) -> None:
        if what not in self._building:
            self._building[what] = self.bars.add_task(f"building {what}", total=total)
        self.bars.update(self._building[what], completed=done, total=total)

    def task(self, title: str, total: int | None) -> Any:
        return self.bars.add_task(_plain(title), total=total)

    def update(self, task: Any, *, completed: int | None = None, title: str | None = None,
               tone: str = OK) -> None:
        if title is not None:
            self.bars.update(task, description=_plain(title, tone))
        if completed is not None:
            self.bars.update(task, completed=completed)

    def advance(self, task: Any) -> None:
        self.bars.advance(task)

    def line(self, text: str, *, end: str = "\n") -> None:
        self.bars.console.print(text, end=end, markup=False, highlight=False)


def _plain(text: str, tone: str = OK) -> str:
    """``text`` as rich markup that shows it as given (a name with brackets stays as written)."""
    style = _TONE_STYLE.get(tone, "")
    escaped = Text(text).markup
    return f"[{style}]{escaped}[/{style}]" if style else escaped
