"""The live view: one frame of a terminal dashboard per window, with rich's Live.

``live_frame(window)`` is a pure function of a ``LiveWindow`` (the aggregate of
the last window, built by whoever measured it: ``attach.live.attached_window``
from an attach's stacks); it only formats, and fits 80 columns (a panel of short
rows, bars of fixed width). ``LiveView`` owns the ``rich.live.Live`` and
shows each new frame; nothing here measures.
"""

from __future__ import annotations

import math

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pipeprof import format as fmt
from pipeprof.analysis.live_window import LiveWindow
from pipeprof.render.verdict_text import live_verdict_words

BAR_CELLS = 20
MAX_WORKERS_SHOWN = 8


def verdict_so_far(window: LiveWindow) -> str:
    """The window's verdict so far (``LiveWindow.verdict``: the verdict's thresholds on its shares), in words."""
    return live_verdict_words(window.verdict)


def _bar(fraction: float | None) -> Text:
    if fraction is None or math.isnan(fraction):
        return Text("·" * BAR_CELLS, style="dim")
    cells = round(max(0.0, min(1.0, fraction)) * BAR_CELLS)
    return Text("█" * cells + "·" * (BAR_CELLS - cells))


def _value(value: float | None, text: str, why: str | None) -> str:
    if value is None or math.isnan(value):
        return f"not measured: {why}" if why else "not measured"
    return text


def live_frame(window: LiveWindow) -> Panel:
    """One frame of the dashboard (see module docstring)."""
    kind = "sampled shares" if window.sampled else "timed steps"
    table = Table.grid(padding=(0, 1))
    table.add_column(width=16)
    table.add_column(width=BAR_CELLS)
    table.add_column()
    rate_why = window.absent.get("steps")
    table.add_row("steps/s", "", _value(window.steps_per_s, fmt.significant(window.steps_per_s, 3), rate_why))
    table.add_row("samples/s", "", _value(window.samples_per_s, fmt.rate(window.samples_per_s), rate_why))
    for label, value in (("data wait", window.data_wait_fraction), ("h2d", window.h2d_fraction),
                         ("compute", window.compute_fraction)):
        table.add_row(label, _bar(value), fmt.pct(value, 0) if value is not None else "not measured")
    queue = window.ready_batches_mean
    table.add_row("prefetch queue", _bar(queue / window.queue_capacity_batches
                                         if queue is not None and window.queue_capacity_batches else None),
                  _value(queue, f"{queue:.1f} of {window.queue_capacity_batches or '?'} batches ready"
                         if queue is not None else "", window.absent.get("queue")))
    workers = list(window.worker_busy_fraction.items())
    for label, busy in workers[:MAX_WORKERS_SHOWN]:
        table.add_row(f"worker {label}"[:16], _bar(busy), f"{fmt.pct(busy, 0)} busy")
    if len(workers) > MAX_WORKERS_SHOWN:
        rest = [b for _, b in workers[MAX_WORKERS_SHOWN:]]
        table.add_row(f"+{len(rest)} workers", _bar(sum(rest) / len(rest)), f"{fmt.pct(sum(rest) / len(rest), 0)} "
                                                                            "busy (mean)")
    if not workers:
        table.add_row("workers", "", "none seen")
    gpu_why = window.absent.get("gpu")
    table.add_row("GPU", _bar(None if window.gpu_util_pct is None else window.gpu_util_pct / 100),
                  _value(window.gpu_util_pct, f"{fmt.number(window.gpu_util_pct, 0)}% busy, "
                         f"{fmt.byte_size(window.gpu_mem_bytes)}", gpu_why))
    verdict = Text(f"verdict so far: {verdict_so_far(window)}")
    title = f"pipeprof · last {window.window_s:.0f} s ({kind}) · t = {window.t_end_s:.0f} s"
    return Panel(Group(table, verdict), title=title, title_align="left", width=80)


class LiveView:
    """rich's Live on ``console``, one frame per window."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._live = Live(console=console, refresh_per_second=1, transient=False, auto_refresh=False)
        self._live.start()

    def show(self, window: LiveWindow) -> None:
        self._live.update(live_frame(window), refresh=True)

    def close(self) -> None:
        self._live.stop()
        self._console.line()  # the last frame stays on screen; what follows starts on a line of its own
