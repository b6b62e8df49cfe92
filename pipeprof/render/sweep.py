"""Render a sweep (``sweep.json``'s dict): the terminal table and sweep.html.

Formatting only; every number comes from ``analysis.sweep`` through the
sweep dict. The page is self-contained: inline CSS, inline SVG plots and a
few lines of inline JavaScript that sort the table when a header is
clicked (the page reads fine without it). All text goes through Jinja2
autoescaping; terminal cells are ``rich.text.Text`` (never markup).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import ChainableUndefined, Environment, PackageLoader
from matplotlib import rc_context
from rich.table import Table
from rich.text import Text

from pipeprof import format as fmt
from pipeprof.analysis.prediction_check import Disturbance, PredictionCheck
from pipeprof.analysis.sweep import Sweep, SweepPoint
from pipeprof.numbers import finite
from pipeprof.render import plots
from pipeprof.render.html import FILTERS, measured

PHASES = tuple(plots.PHASE_COLORS)  # summary.json's fractions, in the order drawn


def render_sweep_html(doc: dict[str, Any], *, folder_name: str | None = None) -> str:
    """sweep.html (or tune.html: the same page with ``doc["kind"] == "tune"``) as one string; the document is
    read once (``analysis.sweep.Sweep``) for what is computed here, and shown as written."""
    env = Environment(loader=PackageLoader("pipeprof", "render/templates"), autoescape=True,
                      undefined=ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(FILTERS)
    env.tests["measured"] = measured
    sweep = Sweep.from_json(doc)
    points = [dict(raw, stack_title=_stack_title(p)) for raw, p in zip(doc.get("points") or [], sweep.points)]
    axes = [a.key for a in sweep.axes]
    return env.get_template("sweep.html.j2").render(
        d=doc, folder_name=folder_name, points=points, best_index=sweep.best_index,
        axes=axes, numeric_axes={a.key for a in sweep.axes if a.numeric},
        near_best=set(sweep.near_best),
        phases=[{"key": k, "label": plots.PHASE_LABELS[k], "color": plots.PHASE_COLORS[k]}
                for k in shown_phases(sweep.points)],
        workers_plot=workers_svg(sweep.points, axes),
        max_rate=max([p.samples_per_s_high or p.samples_per_s or 0 for p in sweep.points] or [0]),
        check=_check(sweep.prediction_check),
    )


def _check(check: PredictionCheck | None) -> dict[str, Any] | None:
    """sweep.json's ``prediction_check`` with each row's change and error written out; None where absent."""
    if check is None:
        return None
    rows = [{"from": r.source, "to": r.target, "predicted": r.predicted, "measured": r.measured, "inside": r.inside,
             "tier": r.tier, "change_text": ", ".join(f"{k}={fmt.setting_arg(v)}" for k, v in r.change.items()),
             "error_text": f"{100 * r.error:+.0f}%", "disturbed_text": "; ".join(disturbed_words(d) for d in r.disturbed)}
            for r in check.rows]
    return {"rows": rows, "summary": check.summary}


def disturbed_words(d: Disturbance) -> str:
    """How one end of a checked pair was disturbed (``analysis.prediction_check.disturbance``), in words."""
    why = []
    if d.never_settled:
        why.append(f"never settled (cv {100 * d.cv:.0f}%)" if d.cv is not None else "never settled (too few windows)")
    if d.outside_share is not None:
        why.append(f"processes outside the job kept {100 * d.outside_share:.0f}% of the cores busy")
    return f"{d.point}: {', '.join(why)}"


def series(points: Sequence[SweepPoint], x_key: str, group_key: str | None) -> dict[str, list[tuple]]:
    """samples/s against ``x_key`` for each value of ``group_key``: {group: [(x, rate, low, high), ...]}."""
    out: dict[str, list[tuple]] = {}
    for p in points:
        if p.status != "complete" or p.samples_per_s is None or x_key not in p.change:
            continue
        group = str(p.change.get(group_key, "")) if group_key else ""
        out.setdefault(group, []).append((p.change[x_key], p.samples_per_s, p.samples_per_s_low,
                                          p.samples_per_s_high))
    return {g: sorted(v, key=lambda t: t[0]) for g, v in out.items()}


def workers_svg(points: Sequence[SweepPoint], axes: list[str]) -> str | None:
    """samples/s against num_workers, one line per storage kind (or per other axis), with the uncertainty."""
    if "loader.num_workers" not in axes:
        return None
    group = "data.storage" if "data.storage" in axes else next((a for a in axes if a != "loader.num_workers"),
                                                               None)
    lines = series(points, "loader.num_workers", group)
    if not any(lines.values()):
        return None
    with rc_context({"font.size": 9, "svg.fonttype": "none"}):
        fig, ax = plots.new_figure()
        for name, rows in lines.items():
            x = [r[0] for r in rows]
            y = [r[1] for r in rows]
            label = f"{group.rpartition('.')[2]} = {name}" if group else "samples/s"
            line, = ax.plot(x, y, marker="o", linewidth=1.5, label=label)
            lows = [r[2] if r[2] is not None else r[1] for r in rows]
            highs = [r[3] if r[3] is not None else r[1] for r in rows]
            ax.fill_between(x, lows, highs, color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_xlabel("num_workers")
        ax.set_ylabel("samples/s")
        ax.set_ylim(bottom=0)
        ax.set_xticks(sorted({r[0] for rows in lines.values() for r in rows}))
        ax.grid(alpha=0.3)
        plots._legend(ax)
        return plots.svg_element(fig, "workers")


def sweep_table(doc: dict[str, Any], folder: Path) -> Table:
    """The terminal table: points by samples/s, the best first, failures and skips last."""
    sweep = Sweep.from_json(doc)  # read once, typed
    axes = [a.key for a in sweep.axes]
    table = Table(title=f"{sweep.kind} {sweep.scenario}: {len(sweep.points)} points", title_justify="left")
    for key in axes:
        table.add_column(key.rpartition(".")[2])
    for name in ("samples/s", "±", "data wait", "verdict", "status"):
        table.add_column(name, justify="right" if name in ("samples/s", "±", "data wait") else "left")
    points = sorted(sweep.points, key=lambda p: -(p.samples_per_s or -1))
    for p in points:
        rate = finite(p.samples_per_s)
        low, high = finite(p.samples_per_s_low), finite(p.samples_per_s_high)
        spread = fmt.number((high - low) / 2, 0) if low is not None and high is not None else ""
        wait = p.fractions.get("data_wait")
        status = p.status or ""
        if p.reason and status not in ("complete", "skipped"):
            status += f": {p.reason[:60]}"
        cells = [Text(fmt.setting(p.change.get(k))) for k in axes]
        cells += [Text(fmt.number(rate, 0, missing=""), style="bold" if p.index == sweep.best_index else ""),
                  Text(spread), Text(fmt.pct(wait, 1, missing="")), Text(p.verdict or ""),
                  Text(status, style="red" if p.status in ("failed", "invalid", "interrupted") else "")]
        table.add_row(*cells)
    skipped = sum(p.status == "skipped" for p in points)
    table.caption = (f"{fmt.plural(skipped, 'point')} skipped: invalid together (reasons in the page); "
                     if skipped else "") \
        + str(folder)
    return table


def shown_phases(points: Sequence[SweepPoint]) -> list[str]:
    """``PHASES`` to list: collective wait only when some point waited in collectives (a job of ranks)."""
    waited = any((p.fractions.get("collective_wait") or 0.0) > 0 for p in points)
    return [k for k in PHASES if k != "collective_wait" or waited]


def _stack_title(point: SweepPoint) -> str:
    return ", ".join(f"{plots.PHASE_LABELS[k]} {fmt.pct(v, 1)}" for k in PHASES
                     if (v := point.fractions.get(k)) is not None and (k != "collective_wait" or v > 0))

