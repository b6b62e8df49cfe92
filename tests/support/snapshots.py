"""Snapshots of what a report shows: the page's HTML in a normalised text form, and the terminal summary.

A report page is mostly matplotlib's SVG, whose bytes change with matplotlib's version (it is ``>=3.7``), not
with pipeprof. The normalised form keeps everything else exactly: every line of the page's markup outside
the charts, and, for each chart, the data its plotting function was given (``recording_charts``: shapes,
columns and per-column statistics to six significant digits) and the text it shows (title, axis labels,
ticks, legend). The stylesheet is a hash: the template's diff shows a change to it. Nothing the page holds
varies from one checkout or one day to the next (the dates and paths on it are the run's, recorded in
run.json); so nothing else is normalised.

``assert_matches`` compares a text with its committed snapshot; ``PIPEPROF_UPDATE_SNAPSHOTS=1`` rewrites the
snapshot instead, on purpose, for the change to be read in the commit.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import html
import inspect
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

UPDATE_ENV = "PIPEPROF_UPDATE_SNAPSHOTS"
SNAPSHOTS = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots"
UNRECORDED = "chart (its data not recorded)"
DIFF_LINES = 40  # of the unified diff shown when a snapshot differs
_DIGITS = 6  # significant digits of a number in a chart's data: floating-point noise of other platforms stays out

_SVG = re.compile(r"<svg\b.*?</svg>", re.S)
_STYLE = re.compile(r"<style>.*?</style>", re.S)
_TEXT = re.compile(r"<text\b[^>]*>(.*?)</text>", re.S)
_VIEWBOX = re.compile(r'viewBox="([^"]*)"')


def _number(x: float) -> str:
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return "nan" if math.isnan(x) else f"{float(x):.{_DIGITS}g}"


def _column(name: str, series: pd.Series) -> str:
    numeric = pd.to_numeric(series, errors="coerce")
    if len(series) and numeric.notna().sum() == series.notna().sum():
        values = numeric.dropna().to_numpy(dtype=float)
        if not len(values):
            return f"{name}: all missing"
        missing = f", {len(series) - len(values)} missing" if len(values) < len(series) else ""
        return (f"{name}: min {_number(values.min())}, max {_number(values.max())}, "
                f"sum {_number(values.sum())}{missing}")
    distinct = sorted({str(v) for v in series.dropna()})
    shown = ", ".join(distinct[:6]) + (", ..." if len(distinct) > 6 else "")
    return f"{name}: {len(distinct)} distinct ({shown})"


def describe(value: Any, indent: str = "") -> list[str]:
    """``value`` as stable lines of text: tables by shape and per-column statistics, everything else in full."""
    if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        value = pd.DataFrame(list(value))
    if isinstance(value, np.ndarray):
        value = pd.DataFrame({"values": value.ravel()})
    if isinstance(value, pd.Series):
        value = value.to_frame(name=str(value.name))
    if isinstance(value, pd.DataFrame):
        lines = [f"{indent}table: {len(value)} rows"]  # its columns by name: their order draws nothing
        return lines + [f"{indent}  {_column(str(c), value[c])}" for c in sorted(value.columns, key=str)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        lines = [f"{indent}{type(value).__name__}:"]
        for field in dataclasses.fields(value):
            lines += _entry(field.name, getattr(value, field.name), indent + "  ")
        return lines
    if isinstance(value, Mapping):
        return [line for k, v in value.items() for line in _entry(str(k), v, indent)]
    if isinstance(value, (list, tuple)):
        if all(_is_scalar(v) for v in value):
            return [f"{indent}[{', '.join(_scalar(v) for v in value)}]"]
        return [line for i, v in enumerate(value) for line in _entry(f"[{i}]", v, indent)]
    return [f"{indent}{_scalar(value)}"]


def _entry(name: str, value: Any, indent: str) -> list[str]:
    if _is_scalar(value):
        return [f"{indent}{name}: {_scalar(value)}"]
    return [f"{indent}{name}:", *describe(value, indent + "  ")]


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, np.number, np.bool_))


def _scalar(value: Any) -> str:
    if isinstance(value, (int, float, np.number, np.bool_)):
        return _number(value)
    return repr(value)


@contextmanager
def recording_charts() -> Iterator[dict[str, list[str]]]:
    """While open, every ``*_svg`` function of ``pipeprof.render`` records its result: SVG text -> the
    description of the arguments it was drawn from (its name first)."""
    import pipeprof.pipeline.derive  # noqa: F401  (every renderer the report uses is imported)

    charts: dict[str, list[str]] = {}

    def recorded(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            svg = fn(*args, **kwargs)
            if isinstance(svg, str):
                given = inspect.signature(fn).bind(*args, **kwargs).arguments
                charts[svg.strip()] = [f"chart {fn.__name__}", *describe(dict(given), "  ")]
            return svg
        return wrapper

    with pytest.MonkeyPatch.context() as patch:
        for name, module in sorted(sys.modules.items()):
            if module is None or not name.startswith("pipeprof.render"):
                continue
            for attr, fn in sorted(vars(module).items()):
                public = not attr.startswith("_") and attr.endswith("_svg")
                if public and callable(fn) and getattr(fn, "__module__", "").startswith("pipeprof"):
                    patch.setattr(module, attr, recorded(fn))
        yield charts


def normalised_html(page: str, charts: Mapping[str, list[str]]) -> str:
    """The page with each chart replaced by its data and its visible text, the stylesheet by its hash."""
    def chart(match: re.Match[str]) -> str:
        svg = match.group(0)
        box = _VIEWBOX.search(svg)
        head = charts.get(svg.strip()) or [f"{UNRECORDED} sha256 {_sha(svg)}"]
        texts = [html.unescape(t).strip() for t in _TEXT.findall(svg)]
        return "\n".join([f"<svg viewBox={box.group(1) if box else '?'}>", *head,
                          "  shows: " + " | ".join(t for t in texts if t), "</svg>"])

    def style(match: re.Match[str]) -> str:
        return f"<style>sha256 {_sha(match.group(0))}, {len(match.group(0))} characters</style>"

    text = _SVG.sub(chart, _STYLE.sub(style, page))
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def assert_matches(path: Path, text: str, what: str) -> None:
    """``text`` equals the snapshot at ``path``; with ``PIPEPROF_UPDATE_SNAPSHOTS=1`` the snapshot becomes it."""
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"{what}: no snapshot {path}; write it with {UPDATE_ENV}=1 and review it in the commit")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = list(difflib.unified_diff(expected.splitlines(), text.splitlines(), "snapshot", "rendered now",
                                         n=2, lineterm=""))
        more = f"\n... {len(diff) - DIFF_LINES} more lines" if len(diff) > DIFF_LINES else ""
        pytest.fail(f"{what} differs from its snapshot {path.name} (first differences below); if the change is "
                    f"intended, rerun with {UPDATE_ENV}=1 and review the snapshot's diff in the commit\n"
                    + "\n".join(diff[:DIFF_LINES]) + more, pytrace=False)
