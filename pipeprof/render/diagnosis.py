"""Render a diagnosis (``diagnosis.json``'s dict): the terminal table and diagnosis.html.

Formatting only: every number comes from ``analysis.differential`` through the
diagnosis dict. The page is self-contained (inline CSS, no scripts) and all
text goes through Jinja2 autoescaping; the terminal table is built from
``rich.text.Text`` cells so names and errors are never read as markup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import ChainableUndefined, Environment, PackageLoader
from rich.console import Group, JustifyMethod
from rich.table import Table
from rich.text import Text

from pipeprof import format as fmt
from pipeprof.format import NOT_MEASURED
from pipeprof.numbers import finite as _value
from pipeprof.numbers import scaled as _scaled
from pipeprof.render.html import FILTERS, measured

CHECK_LABELS = {
    "data_wait": "data wait (share of step time)",
    "fetch_share": "fetch share of loading",
}
FRACTION_LABELS = {"fetch_stall": "fetch stall", "prep_stall": "prep stall", "compute": "compute"}
FRACTION_COLORS = {"fetch_stall": "#d9534f", "prep_stall": "#f0ad4e", "compute": "#3c8d5a"}

# ---- HTML ---------------------------------------------------------------------------------


def render_diagnosis_html(diagnosis: dict[str, Any], *, folder_name: str | None = None) -> str:
    """diagnosis.html as one string (UTF-8, no external resources)."""
    env = Environment(loader=PackageLoader("pipeprof", "render/templates"), autoescape=True,
                      undefined=ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(FILTERS, pp=_format_pp, flex=_flex)
    env.tests["measured"] = measured
    fractions = diagnosis.get("fractions") or {}
    segments = [{"key": k, "label": FRACTION_LABELS[k], "color": FRACTION_COLORS[k], "value": fractions.get(k)}
                for k in FRACTION_LABELS]
    check = diagnosis.get("cross_check") or {}
    checks = [dict(check.get(k) or {}, key=k, label=label) for k, label in CHECK_LABELS.items()]
    failed = [dict(r, role=role) for role, r in (diagnosis.get("runs") or {}).items()
              if r.get("status") != "complete"]
    return env.get_template("diagnosis.html.j2").render(
        d=diagnosis, folder_name=folder_name, segments=segments, checks=checks, failed=failed,
        tolerance=check.get("tolerance"),
    )


def _format_pp(value: Any) -> str:
    """A difference of fractions in percentage points: -0.123 → "-12.3 pp"."""
    return fmt.pp(_scaled(value, 100))


def _flex(value: Any) -> str:
    """A fraction as a CSS flex-grow factor (the bar's segments share its width in proportion)."""
    v = _value(value)
    return "0" if v is None or v < 0 else f"{v:.6f}"


# ---- terminal -----------------------------------------------------------------------------


def diagnosis_table(diagnosis: dict[str, Any], folder: str | Path) -> Group:
    """The runs, the stall fractions and the cross-check as compact rich tables."""
    d = diagnosis
    runs = Table(title=Text(f"pipeprof diagnose: {d.get('scenario')} ({d.get('steps_per_run')} steps per run)",
                            style="bold"), box=None, pad_edge=False, padding=(0, 2, 0, 0))
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("run", "left"), ("storage", "left"), ("workers", "right"), ("status", "left"), ("samples/s", "right"),
        ("per sample", "right"), ("data wait", "right"))
    for name, justify in columns:
        runs.add_column(name, justify=justify, no_wrap=True)
    per_sample = d.get("seconds_per_sample") or {}
    for role, r in (d.get("runs") or {}).items():
        status = str(r.get("status"))
        runs.add_row(Text(role), Text(str(r.get("storage"))), Text(str(r.get("num_workers"))),
                     Text(status, style="" if status == "complete" else "bold red"),
                     Text(fmt.number(r.get("samples_per_s"), 0)), Text(fmt.duration(per_sample.get(role))),
                     Text(fmt.pct(r.get("data_wait"), 1)))

    result = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2, 0, 0))
    result.add_column("measure", style="dim", no_wrap=True)
    result.add_column("value", overflow="fold")
    fractions = d.get("fractions") or {}
    clamped, nulls = d.get("clamped") or {}, d.get("null_reasons") or {}
    for key, label in (("fetch_stall", "fetch stall (share of real step time)"),
                       ("prep_stall", "prep stall (share of real step time)"),
                       ("compute", "compute (share of real step time)")):
        value = fractions.get(key)
        text = fmt.pct(value, 1) if value is not None else f"{NOT_MEASURED}: {nulls.get(key, '')}"
        if key in clamped:
            text += f" (clamped; unclamped {fmt.pct((d.get('unclamped') or {}).get(key), 1)})"
        result.add_row(Text(label), Text(text, style="" if value is not None and key not in clamped else "yellow"))
    check = d.get("cross_check") or {}
    tolerance = _value(check.get("tolerance"))
    for key, label in CHECK_LABELS.items():
        c = check.get(key) or {}
        if c.get("agree") is None:
            text, style = f"not checked: {c.get('reason')}", "dim"
        else:
            verdict = "agree" if c["agree"] else "DISAGREE"
            text = (f"direct {fmt.pct(c.get('direct'), 1)} vs differential {fmt.pct(c.get('differential'), 1)}: {verdict} "
                    f"(±{fmt.number(_scaled(tolerance, 100), 0)} pp)")
            style = "green" if c["agree"] else "bold red"
        result.add_row(Text(f"cross-check: {label}"), Text(text, style=style))
        if c.get("agree") is False:
            for note in c.get("notes") or []:
                result.add_row(Text(""), Text(f"note: {note}", style="dim"))
    result.add_row(Text("diagnosis folder"), Text(str(folder)))
    return Group(runs, Text(""), result)

