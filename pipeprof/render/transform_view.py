"""Inside the sample (issue 18) for the reader: per loader, its transforms and decode calls ranked by time per
sample — a bar chart (wall, with the CPU marked), a small table, the fetch / decode / transform / other split —
and one terminal line of the top ones.

Formats what summary.json holds (``transforms``, ``decode``, ``loading.split``; a script's ``loaders`` each with
their own ``transforms`` and ``decode``), computing nothing: the order is summary.json's (costliest first), the
decode calls placed among the transforms by their time per sample. No loader with nothing timed is shown; a run
with none renders nothing at all. No matplotlib here (the console imports it): the chart is ``transform_plot``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.loading import SampleSplit
from pipeprof.analysis.summary import Summary, as_summary
from pipeprof.analysis.transforms import DecodeRow, TransformRow
from pipeprof.numbers import finite
from pipeprof.run_meta import LoaderInfo

TOP_IN_LINE = 3  # transforms named on the terminal's line


@dataclass(frozen=True)
class Part:
    """One bar: a transform, or the decode calls (``decode``)."""

    name: str
    per_sample_s: float
    cpu_per_sample_s: float | None
    calls: int | None
    share_of_prep: float | None
    random: bool | None
    decode: bool = False


@dataclass(frozen=True)
class LoaderView:
    """What the report shows for one loader: its title, its parts ranked (as summary.json orders them), and
    the split of a sample's making where known (the training loader's)."""

    title: str
    parts: tuple[Part, ...]
    split: SampleSplit | None


def _part(row: TransformRow) -> Part | None:
    per_sample = finite(row.per_sample_s)
    if per_sample is None:
        return None
    return Part(row.name, per_sample, finite(row.cpu_per_sample_s), row.calls, finite(row.share_of_prep), row.random)


def _decode_part(row: DecodeRow) -> Part | None:
    per_sample = finite(row.per_sample_s)
    if per_sample is None:
        return None
    return Part(f"decode ({row.how})" if row.how else "decode", per_sample, finite(row.cpu_per_sample_s), row.calls,
                None, None, decode=True)


def ranked_parts(transforms: Sequence[TransformRow] | None, decode: DecodeRow | None) -> tuple[Part, ...]:
    """summary.json's ``transforms`` (costliest first) with ``decode`` placed before the first transform that
    costs less per sample."""
    parts = [p for p in (_part(t) for t in transforms or ()) if p is not None]
    decoded = _decode_part(decode) if decode is not None else None
    if decoded is not None:
        at = next((i for i, p in enumerate(parts) if p.per_sample_s < decoded.per_sample_s), len(parts))
        parts.insert(at, decoded)
    return tuple(parts)


def loader_views(summary: Summary | Mapping[str, Any]) -> list[LoaderView]:
    """One view per loader with transforms or decode timed: a script's ``loaders`` (loaders re-created with the
    same name and role: the first that has any), else the run's training loader; [] when none."""
    views: list[LoaderView] = []
    seen: set[tuple[str, str]] = set()
    record = as_summary(summary)
    loaders = LoaderInfo.parse_all(record.script.loaders if record.script else None)
    train_split = (record.loading.split if record.loading is not None else None) or None
    first_train = next((d for d in loaders if d.role == "train"), None)
    for loader in loaders:
        parts = ranked_parts(*_loader_rows(loader))
        key = (str(loader.name), str(loader.role))
        if not parts or key in seen:
            continue
        seen.add(key)
        same = sum(1 for d in loaders if (str(d.name), str(d.role)) == key)
        title = f"{loader.name or 'loader'} ({loader.role or 'role unknown'}"
        title += f", the first of {same} loaders of that name)" if same > 1 else ")"
        views.append(LoaderView(title, parts, train_split if loader is first_train else None))
    if not views:
        parts = ranked_parts(record.transforms, record.decode)
        if parts:
            views.append(LoaderView("training loader", parts, train_split))
    return views


# -- the terminal ---------------------------------------------------------------------------------------------------


def transforms_line(summary: Summary | Mapping[str, Any]) -> str | None:
    """"RandomAffine 1.20 ms/sample (78% of prep), Normalize 50.0 µs; decode (PIL.Image.open+convert) 2.10 ms/sample"
    for the training loader; None when nothing was timed."""
    record = as_summary(summary)
    return _parts_line(record.transforms, record.decode)


def _loader_rows(loader: LoaderInfo) -> tuple[tuple[TransformRow, ...] | None, DecodeRow | None]:
    """A script's loader's ``transforms`` and ``decode`` (its summary.json entry's, as written) read as rows."""
    transforms = loader.transforms
    return (tuple(TransformRow.from_json(t) for t in transforms) if isinstance(transforms, list) else None,
            DecodeRow.from_json(loader.decode))


def _parts_line(transforms: Sequence[TransformRow] | None, decode_cost: DecodeRow | None) -> str | None:
    """One loader's transforms and decode as ``transforms_line`` writes them."""
    parts = ranked_parts(transforms, decode_cost)
    if not parts:
        return None
    shown = [p for p in parts if not p.decode][:TOP_IN_LINE]
    words = []
    for i, p in enumerate(shown):
        share = f" ({fmt.pct(p.share_of_prep)} of prep)" if p.share_of_prep is not None else ""
        words.append(f"{p.name} {fmt.duration(p.per_sample_s)}{'/sample' if i == 0 else ''}{share if i == 0 else ''}")
    rest = len([p for p in parts if not p.decode]) - len(shown)
    line = ", ".join(words) + (f" (+{rest} more)" if rest > 0 else "")
    decode = next((p for p in parts if p.decode), None)
    if decode is not None:
        line = (line + "; " if line else "") + f"{decode.name} {fmt.duration(decode.per_sample_s)}/sample"
    return line


def eval_transforms_lines(summary: Summary | Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(name, line)`` of each evaluation loader of a script with transforms or decode timed, apart from the
    training loader's line (loaders re-created under one name: the first that has any)."""
    record = as_summary(summary)
    lines: list[tuple[str, str]] = []
    for loader in LoaderInfo.parse_all(record.script.loaders if record.script else None):
        name = str(loader.name or "loader")
        line = _parts_line(*_loader_rows(loader)) if loader.role == "eval" else None
        if line and name not in {n for n, _ in lines}:
            lines.append((name, line))
    return lines


# -- the report ------------------------------------------------------------------------------------------------------


def table_rows(view: LoaderView) -> list[dict[str, str]]:
    """The view's table: name, per sample, CPU per sample, calls, share of prep, random; formatted."""
    return [{"name": p.name, "per_sample": fmt.duration(p.per_sample_s), "cpu_per_sample": fmt.duration(p.cpu_per_sample_s),
             "calls": fmt.number(p.calls, 0), "share_of_prep": fmt.pct(p.share_of_prep, missing="—"),
             "random": "decode" if p.decode else {True: "yes", False: "no", None: "unknown"}[p.random]}
            for p in view.parts]


def split_text(split: SampleSplit | None) -> str | None:
    """"fetch 20.0 µs · decode 150 µs · transform 30.0 µs · other 15.0 µs per sample" (waiting for a core where
    known); None without a split."""
    if split is None:
        return None
    parts = ((split.fetch_per_sample_s, "fetch"), (split.core_wait_per_sample_s, "waiting for a core"),
             (split.decode_per_sample_s, "decode"), (split.transform_per_sample_s, "transform"),
             (split.other_per_sample_s, "other"))
    words = [f"{label} {fmt.duration(value)}" for value, label in parts if finite(value) is not None]
    return " · ".join(words) + " per sample" if words else None
