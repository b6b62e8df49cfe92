"""Sweep grids: ``--grid KEY=V1,V2,...`` and a scenario's ``[sweep]`` table, checked before anything runs.

A grid is an ordered list of axes, each a scenario key (``section.key``) and
its values; the points are every combination (first axis slowest). Each
value is read like ``--set`` (TOML: ``4``, ``true``, ``[256,128]``; a bare
word is a string), and checked alone against the scenario schema: an
unknown key, a value of the wrong type, an impossible value, a repeated
value or an axis without values is a usage error (one line, exit 2) before
the first point runs. A combination that is invalid *together* (an explicit
``prefetch_factor`` with 0 workers, workers for on-device data) is not an
error: its point is skipped with the validator's reason.

In a scenario file::

    [sweep]
    loader.num_workers = [0, 1, 2]
    data.storage = ["ram", "memmap"]

``pipeprof run`` ignores the table; ``--grid KEY=...`` replaces the table's
axis for that key and adds new axes after the table's.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof.errors import UsageError
from pipeprof.format import printable, setting, setting_literal
from pipeprof.scenario import Scenario, check_key, read_toml, toml_value
from pipeprof.variants import Variant, vary

MAX_POINTS = 1000


@dataclass(frozen=True)
class Point:
    """One combination: its change to the scenario, a short label, and the variant or why it is skipped."""

    index: int
    change: dict[str, Any]
    label: str
    variant: Variant | None
    skipped: str | None = None


def parse_axis(text: str) -> tuple[str, list[Any]]:
    """``loader.num_workers=0,1,2`` -> ("loader.num_workers", [0, 1, 2]); values read as TOML or bare words."""
    where = f"--grid {printable(text)}"
    key, sep, rhs = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"{where}: expected section.key=value,value,..., e.g. loader.num_workers=0,1,2")
    values = [_value(part) for part in _split(rhs)]
    if not values:
        raise UsageError(f"{where}: no values: expected section.key=value,value,...")
    return key, values


def axes_from_table(table: Any, where: str) -> list[tuple[str, list[Any]]]:
    """The ``[sweep]`` table of a scenario file as axes (dotted or nested keys, list values)."""
    if table is None:
        return []
    where = printable(where)
    if not isinstance(table, dict):
        raise UsageError(f"{where}: sweep must be a table of section.key = [values], e.g. "
                         f"[sweep] loader.num_workers = [0, 1, 2]")
    out = []
    for key, values in _flatten(table):
        if not isinstance(values, list):
            raise UsageError(f"{where}: sweep.{printable(key)} = {values!r} is not allowed: expected a list of values, "
                             f"e.g. [0, 1, 2]")
        out.append((key, values))
    return out


def read_sweep_table(path: str | Path) -> Any:
    """The raw ``[sweep]`` table of a scenario file (None when absent); the file itself is validated elsewhere."""
    try:
        return read_toml(path).get("sweep")
    except UsageError:
        return None  # load_scenario reports the file's own problem


def build_axes(table_axes: Sequence[tuple[str, list[Any]]], cli_axes: Sequence[tuple[str, list[Any]]],
               where: str) -> list[tuple[str, list[Any]]]:
    """The grid's axes, each key and value checked alone; ``--grid`` replaces the table's axis of the same key."""
    where = printable(where)
    axes: dict[str, tuple[list[Any], str]] = {k: (v, f"{where} [sweep] {printable(k)}") for k, v in table_axes}
    for key, values in cli_axes:
        axes[key] = (values, f"--grid {printable(key)}")
    if not axes:
        raise UsageError(f"{where}: empty grid: give --grid section.key=v1,v2,... or a [sweep] table")
    out = []
    for key, (values, origin) in axes.items():
        if not values:
            raise UsageError(f"{origin}: no values")
        if len(values) > MAX_POINTS:  # before the repeat check below, which compares every pair
            raise UsageError(f"{origin}: {len(values)} values; a grid has at most {MAX_POINTS} points")
        for value in values:
            check_key(origin, key, value)
        repeated = [setting_literal(v) for i, v in enumerate(values) if v in values[:i]]
        if repeated:
            raise UsageError(f"{origin}: value {repeated[0]} is repeated; each value once")
        out.append((key, list(values)))
    total = 1
    for _, values in out:
        total *= len(values)
    if total > MAX_POINTS:
        raise UsageError(f"{where}: the grid has {total} points; at most {MAX_POINTS} are allowed")
    return out


def plan(base: Scenario, axes: Sequence[tuple[str, list[Any]]], where: str,
         fixed: Mapping[str, Any] | None = None) -> list[Point]:
    """Every combination as a Point: validated with ``fixed`` (e.g. a step budget) added, or skipped with the reason."""
    keys = [k for k, _ in axes]
    where = printable(where)
    points = []
    for i, combo in enumerate(itertools.product(*(values for _, values in axes))):
        change = dict(zip(keys, combo))
        label = " ".join(f"{k.rpartition('.')[2]}={setting(v)}" for k, v in change.items())
        try:
            variant = vary(base, {**change, **(fixed or {})}, f"{where} (point {label})",
                           name=f"{base.name}-{i:02d}")
        except UsageError as e:
            points.append(Point(i, change, label, None, str(e).split("): ", 1)[-1]))
            continue
        points.append(Point(i, change, label, variant))
    return points


def _split(text: str) -> list[str]:
    """Split at commas outside brackets and quotes: ``[256,128],[64]`` -> two values."""
    parts: list[str] = []
    current: list[str] = []
    depth, quote, escaped = 0, "", False
    for ch in text:
        if escaped:  # the character after a backslash in a "basic string": \" does not end it
            escaped = False
        elif quote == '"' and ch == "\\":
            escaped = True
        elif quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _value(text: str) -> Any:
    return toml_value(text)  # a bare word stays a string: data.storage=ram,memmap


def _flatten(table: dict[str, Any]) -> list[tuple[str, Any]]:
    """Nested tables as dotted keys, in order; a loop, not recursion (``a.a.a...`` may be thousands deep)."""
    out = []
    stack = [iter(table.items())]
    prefixes = [""]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            prefixes.pop()
            continue
        key, value = item
        if isinstance(value, dict):
            stack.append(iter(value.items()))
            prefixes.append(f"{prefixes[-1]}{key}.")
        else:
            out.append((f"{prefixes[-1]}{key}", value))
    return out

