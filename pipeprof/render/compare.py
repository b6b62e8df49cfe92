"""Render a comparison (compare.json, read once into ``analysis.compare.Comparison``): the terminal table and
compare.html.

Formatting only: every number comes from ``analysis.compare`` through the
comparison's records. The page is self-contained (inline CSS bars, no scripts, nothing
fetched) and all text goes through Jinja2 autoescaping; the terminal tables
are built from ``rich.text.Text`` cells so names are never read as markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jinja2 import ChainableUndefined, Environment, PackageLoader
from rich.console import Group, JustifyMethod
from rich.table import Table
from rich.text import Text

from pipeprof import format as fmt
from pipeprof.analysis.compare import Comparison, FractionChange, ThroughputRatio, as_comparison
from pipeprof.analysis.windows import Throughput
from pipeprof.format import NOT_MEASURED, finite
from pipeprof.render.plots import PHASE_COLORS, PHASE_LABELS

ABSENT = "(absent)"


# ---- what both show -------------------------------------------------------------------------


def shown_phases(compare: Comparison | Mapping[str, Any]) -> list[str]:
    """The phases of ``PHASE_COLORS`` to list: collective wait only when some run waited in collectives
    (a job of ranks); runs of one process never do, and get no column of zeros."""
    waited = any((r.fractions.get("collective_wait") or 0.0) > 0 for r in as_comparison(compare).runs)
    return [p for p in PHASE_COLORS if p != "collective_wait" or waited]


def run_rows(compare: Comparison | Mapping[str, Any]) -> list[dict[str, Any]]:
    """One formatted row per run: throughput ± half-width, ratio with interval, fractions with deltas."""
    c = as_comparison(compare)
    phases = shown_phases(c)
    rows = []
    for i, r in enumerate(c.runs):
        compared = c.comparison_of(i)
        t = r.throughput
        ratio = compared.throughput_ratio if compared is not None else ThroughputRatio()
        deltas = compared.fractions if compared is not None else {}
        rows.append({
            "index": i,
            "label": r.label or f"run {i}",
            "scenario": r.scenario or "",
            "status": r.status or "unknown",
            "report": r.report,
            "overrides": list(r.overrides),
            "samples_per_s": _num(r.samples_per_s),
            "uncertainty": _uncertainty(t),
            "windows": t.windows if t is not None else 0,
            "ratio": "baseline" if i == 0 else _ratio(ratio),
            "ratio_noise": None if i == 0 else ratio.within_noise,
            "ratio_reason": ratio.reason,
            "phases": [{"key": p, "label": PHASE_LABELS[p], "color": PHASE_COLORS[p],
                        "value": r.fractions.get(p), "pct": fmt.pct(r.fractions.get(p), 1),
                        "delta": None if i == 0 else _pp(_change(deltas, p).delta_pp),
                        "noise": None if i == 0 else _change(deltas, p).within_noise}
                       for p in phases],
            "verdict": r.verdict_class or NOT_MEASURED,
            "verdict_sentence": r.verdict_sentence or "",
            "verdict_changed": compared is not None and compared.verdict_changed,
        })
    return rows


def _change(deltas: Mapping[str, FractionChange], phase: str) -> FractionChange:
    return deltas.get(phase) or FractionChange()


def setting_rows(compare: Comparison | Mapping[str, Any]) -> list[dict[str, Any]]:
    """The differing settings: key, then one display value per run, and whether it differs from the baseline."""
    rows = []
    for s in as_comparison(compare).settings:
        shown = [ABSENT if i in s.absent_in else fmt.setting(v) for i, v in enumerate(s.values)]
        rows.append({"key": s.key,
                     "values": [{"text": t, "differs": i > 0 and t != shown[0]} for i, t in enumerate(shown)]})
    return rows


def _uncertainty(t: Throughput | None) -> str:
    low, high = (finite(t.ci95_low), finite(t.ci95_high)) if t is not None else (None, None)
    if low is None or high is None:
        return f"no interval: {t.reason}" if t is not None and t.reason else "no interval"
    return f"± {_num((high - low) / 2)}"


def _ratio(ratio: ThroughputRatio) -> str:
    r, low, high = ratio.ratio, ratio.low, ratio.high
    if r is None:
        return NOT_MEASURED
    return f"×{fmt.number(r, 3)}" + (f" ({fmt.number(low, 3)}–{fmt.number(high, 3)})"
                                     if low is not None and high is not None else "")


def _num(value: Any) -> str:
    return fmt.number(value)


def _pp(delta_pp: Any) -> str | None:
    return None if finite(delta_pp) is None else fmt.pp(delta_pp)


def _noise_word(within: Any) -> str:
    return {True: "within noise", False: "beyond noise"}.get(within, "noise unknown")


# ---- HTML -----------------------------------------------------------------------------------


def render_compare_html(compare: Comparison | Mapping[str, Any], *, folder_name: str | None = None) -> str:
    """compare.html as one string (UTF-8, no external resources)."""
    env = Environment(loader=PackageLoader("pipeprof", "render/templates"), autoescape=True,
                      undefined=ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(noise=_noise_word, flex=_flex)
    c = as_comparison(compare)
    rows = run_rows(c)
    return env.get_template("compare.html.j2").render(
        c=c, folder_name=folder_name, rows=rows, settings=setting_rows(c),
        labels=[r["label"] for r in rows],
        legend=[{"label": PHASE_LABELS[p], "color": PHASE_COLORS[p]} for p in shown_phases(c)],
        rules=c.rules,
    )


def _flex(value: Any) -> str:
    """A fraction as a CSS flex-grow factor (segments share the bar's width in proportion)."""
    v = finite(value)
    return "0" if v is None or v < 0 else f"{v:.6f}"


# ---- terminal -------------------------------------------------------------------------------


def run_id(index: int) -> str:
    """The short name of a run in the terminal tables: A (the baseline), B, C, ... then R27, R28, ..."""
    return chr(ord("A") + index) if index < 26 else f"R{index + 1}"


def compare_table(compare: Comparison | Mapping[str, Any], folder: str | Path) -> Group:
    """The runs (as A, B, ...), throughput against A, shares of step time, differing settings: rich tables."""
    compare = as_comparison(compare)
    rows = run_rows(compare)

    def table(title: str) -> Table:
        return Table(title=Text(title, style="bold"), title_justify="left", box=None, pad_edge=False,
                     padding=(0, 2, 0, 0))

    runs = table("pipeprof compare: runs (A is the baseline)")
    for name in ("", "folder", "status", "scenario"):
        runs.add_column(name, overflow="fold")
    for r in rows:
        runs.add_row(Text(run_id(r["index"]), style="bold"), Text(r["label"]),
                     Text(r["status"], style="" if r["status"] == "complete" else "bold red"),
                     Text(r["scenario"] + "".join(f"\n--set {o}" for o in r["overrides"])))

    speed = table("throughput in samples/s (± half the 95% interval)")
    speed_columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("", "left"), ("samples/s", "right"), ("±", "right"), ("ratio to A", "right"), ("interval", "left"),
        ("", "left"))
    for name, justify in speed_columns:
        speed.add_column(name, justify=justify, no_wrap=True)
    for r in rows:
        ratio, _, interval = r["ratio"].partition(" ")
        noise = "" if r["ratio_noise"] is None else _noise_word(r["ratio_noise"])
        speed.add_row(Text(run_id(r["index"]), style="bold"), Text(r["samples_per_s"], style="bold"),
                      Text(r["uncertainty"].removeprefix("± ") if r["uncertainty"].startswith("±") else "none",
                           style="dim"),
                      Text(ratio), Text(interval.strip("()")), Text(noise, style="dim" if r["ratio_noise"] else "bold"))

    shares = table("share of step time (change against A in percentage points)")
    shares.add_column("")
    for p in shown_phases(compare):
        shares.add_column(PHASE_LABELS[p], justify="right", no_wrap=True)
    shares.add_column("verdict", overflow="fold")
    for r in rows:
        cells = []
        for p in r["phases"]:
            cell = Text(p["pct"])
            if p["delta"]:
                cell.append(f" {p['delta'].removesuffix(' pp')}", style="dim" if p["noise"] else "bold")
            cells.append(cell)
        shares.add_row(Text(run_id(r["index"]), style="bold"), *cells,
                       Text(r["verdict"] + (" (changed)" if r["verdict_changed"] else ""),
                            style="bold" if r["verdict_changed"] else ""))

    settings = setting_rows(compare)
    differ = table("settings that differ")
    differ.add_column("key", no_wrap=True)
    for r in rows:
        differ.add_column(run_id(r["index"]), overflow="fold")
    for s in settings:
        differ.add_row(Text(s["key"]), *(Text(v["text"], style="bold" if v["differs"] else "") for v in s["values"]))
    fraction_pp = compare.fraction_pp
    parts: list[Any] = [runs, Text(""), speed, Text(""), shares, Text("")]
    parts.append(differ if settings else Text("settings: every run has the same scenario settings", style="dim"))
    parts += [Text(""),
              Text(f"noise: a ratio is within noise when its 95% interval contains 1, a share when it moved less "
                   f"than {fraction_pp:g} pp; the interval covers variation within each run only, not between "
                   f"re-runs.", style="dim"),
              Text(f"compare folder: {folder}")]
    return Group(*parts)
