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
from pipeprof.analysis.differential import CrossCheck, Diagnosis
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
    read = Diagnosis.from_json(diagnosis)  # read once, typed; the page shows the document as written
    segments = [{"key": k, "label": FRACTION_LABELS[k], "color": FRACTION_COLORS[k], "value": read.fractions.get(k)}
                for k in FRACTION_LABELS]
    checks = [_check_row(read.checks.get(k) or CrossCheck(), k, label) for k, label in CHECK_LABELS.items()]
    failed = [{"role": role, "title": r.title, "status": r.status, "error": r.error}
              for role, r in read.runs.items() if r.status != "complete"]
    return env.get_template("diagnosis.html.j2").render(
        d=diagnosis, folder_name=folder_name, segments=segments, checks=checks, failed=failed,
        tolerance=read.tolerance,
    )


def _check_row(c: CrossCheck, key: str, label: str) -> dict[str, Any]:
    return {"key": key, "label": label, "direct": c.direct, "differential": c.differential,
            "difference": c.difference, "agree": c.agree, "reason": c.reason, "notes": list(c.notes)}


def _format_pp(value: Any) -> str:
    """A difference of fractions in percentage points: -0.123 → "-12.3 pp"."""
    return fmt.pp(_scaled(value, 100))


def _flex(value: Any) -> str:
    """A fraction as a CSS flex-grow factor (the bar's segments share its width in proportion)."""
    v = _value(value)
    return "0" if v is None or v < 0 else f"{v:.6f}"


# ---- terminal -----------------------------------------------------------------------------


def diagnosis_table(diagnosis: Diagnosis | dict[str, Any], folder: str | Path) -> Group:
    """The runs, the stall fractions and the cross-check as compact rich tables."""
    d = diagnosis if isinstance(diagnosis, Diagnosis) else Diagnosis.from_json(diagnosis)  # read once, typed
    runs = Table(title=Text(f"pipeprof diagnose: {d.scenario} ({d.steps_per_run} steps per run)",
                            style="bold"), box=None, pad_edge=False, padding=(0, 2, 0, 0))
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("run", "left"), ("storage", "left"), ("workers", "right"), ("status", "left"), ("samples/s", "right"),
        ("per sample", "right"), ("data wait", "right"))
    for name, justify in columns:
        runs.add_column(name, justify=justify, no_wrap=True)
    for role, r in d.runs.items():
        status = str(r.status)
        runs.add_row(Text(role), Text(str(r.storage)), Text(str(r.num_workers)),
                     Text(status, style="" if status == "complete" else "bold red"),
                     Text(fmt.number(r.samples_per_s, 0)), Text(fmt.duration(d.seconds_per_sample.get(role))),
                     Text(fmt.pct(r.data_wait, 1)))

    result = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2, 0, 0))
    result.add_column("measure", style="dim", no_wrap=True)
    result.add_column("value", overflow="fold")
    for key, label in (("fetch_stall", "fetch stall (share of real step time)"),
                       ("prep_stall", "prep stall (share of real step time)"),
                       ("compute", "compute (share of real step time)")):
        value = d.fractions.get(key)
        text = fmt.pct(value, 1) if value is not None else f"{NOT_MEASURED}: {d.null_reasons.get(key, '')}"
        if key in d.clamped:
            text += f" (clamped; unclamped {fmt.pct(d.unclamped.get(key), 1)})"
        result.add_row(Text(label), Text(text, style="" if value is not None and key not in d.clamped else "yellow"))
    for key, label in CHECK_LABELS.items():
        c = d.checks.get(key) or CrossCheck()
        if c.agree is None:
            text, style = f"not checked: {c.reason}", "dim"
        else:
            verdict = "agree" if c.agree else "DISAGREE"
            text = (f"direct {fmt.pct(c.direct, 1)} vs differential {fmt.pct(c.differential, 1)}: {verdict} "
                    f"(±{fmt.number(_scaled(d.tolerance, 100), 0)} pp)")
            style = "green" if c.agree else "bold red"
        result.add_row(Text(f"cross-check: {label}"), Text(text, style=style))
        if c.agree is False:
            for note in c.notes:
                result.add_row(Text(""), Text(f"note: {note}", style="dim"))
    result.add_row(Text("diagnosis folder"), Text(str(folder)))
    return Group(runs, Text(""), result)

