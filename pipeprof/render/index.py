"""The reports folder's table of contents: ``reports/index.html``, rebuilt after every command that writes there.

Lists every folder in the reports folder, newest first, by what it holds:

* ``run`` — ``run.json`` (+ ``summary.json``): scenario, created time,
  status, samples/s, data wait, verdict class, link to ``report.html``;
* ``diagnosis`` — ``diagnosis.json``: fetch and prep stall fractions, link to
  ``diagnosis.html``;
* ``compare`` — ``compare.json``: the runs compared and their throughput
  ratios, link to ``compare.html``;
* ``sweep`` / ``tune`` — ``sweep.json`` / ``tune.json`` (``{"kind",
  "scenario", "created_utc", "status", "best": {"settings",
  "samples_per_s"} | null, "points"}``): the best samples/s and its
  settings, link to ``sweep.html`` / ``tune.html``;
* anything else as ``unknown``, a folder whose JSON cannot be read as
  ``unreadable`` (with the reason), a symbolic link leading out of the
  reports folder as ``outside`` — never followed.

Reads only the small JSON files (summaries are not re-derived: the index must
stay quick with hundreds of runs); hidden folders (temporary ones being
written) and plain files are skipped. Newest first by the created time in
the JSON, else the UTC timestamp that starts the folder name, else the
folder's modification time. All text is autoescaped.
"""

from __future__ import annotations

import collections
import datetime as dt
import functools
import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

from jinja2 import ChainableUndefined, Environment, PackageLoader

from pipeprof import format as fmt
from pipeprof.analysis.compare import Comparison
from pipeprof.analysis.differential import Diagnosis
from pipeprof.analysis.summary import as_summary
from pipeprof.analysis.sweep import Sweep
from pipeprof.numbers import finite
from pipeprof.run_folder import FolderHead, write_text
from pipeprof.run_meta import JsonObject

INDEX_NAME = "index.html"
MAX_JSON_BYTES = 20 * 1024 * 1024  # a summary is tens of kB; anything this big is not ours
# The file that makes a folder each kind, checked in this order, and the page to link to.
KINDS = (("sweep", "sweep.json", "sweep.html"), ("tune", "tune.json", "tune.html"),
         ("compare", "compare.json", "compare.html"), ("diagnosis", "diagnosis.json", "diagnosis.html"),
         ("run", "run.json", "report.html"))
MARKERS = tuple(marker for _, marker, _ in KINDS) + ("summary.json",)
_STAMP = re.compile(r"^(\d{8}T\d{6}Z)")


# Every entry has every field, None where its kind has no such number.
_EMPTY: dict[str, Any] = {"problem": None, "samples_per_s": None, "data_wait": None, "verdict": None, "fetch_stall": None,
          "prep_stall": None, "runs": [], "ratios": [], "best_settings": {}, "points": None}


class _Unreadable(Exception):
    """A file that is there but cannot be read as a JSON object (the message says why)."""


def is_reports_folder(folder: Path) -> bool:
    """Whether ``folder`` is a reports folder an index belongs in.

    True for an existing folder that is not itself a pipeprof folder and does
    not sit directly in one — neither it nor its parent holds run.json,
    summary.json, diagnosis.json, compare.json, sweep.json or tune.json, or
    has a name that starts with a UTC timestamp as pipeprof names its folders
    (``20261130T010018Z-...``: a sweep's ``points/`` before its sweep.json is
    first saved). So a run's ``verify/`` re-runs, a sweep's points and the
    runs of a diagnosis get no index of their own.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return False
    places = (folder.resolve(), folder.resolve().parent)
    if any(_stamp(place.name) for place in places):
        return False
    return not any((place / marker).exists() for place in places for marker in MARKERS)


def rebuild_index(reports_dir: Path) -> Path:
    """Write ``reports_dir/index.html`` (atomically) listing its folders; returns its path."""
    reports_dir = Path(reports_dir)
    path = reports_dir / INDEX_NAME
    write_text(path, render_index(index_entries(reports_dir), title=reports_dir.resolve().name))
    return path


def index_entries(reports_dir: Path) -> list[dict[str, Any]]:
    """One dict per folder in ``reports_dir``, newest first (see the module docstring for the kinds)."""
    root = Path(reports_dir).resolve()
    entries = []
    for path in Path(reports_dir).iterdir():
        if path.name.startswith("."):
            continue
        try:
            if path.is_symlink() and not _inside(path.resolve(), root):
                entries.append(_entry(path, "outside",
                                      problem="a symbolic link out of the reports folder: not followed"))
            elif path.is_dir():
                entries.append(describe_folder(path, root))
        except OSError as e:  # a folder we may not even stat: listed, never a crash
            entries.append(_entry(path, "unreadable", problem=str(e.strerror or e)))
    return sorted(entries, key=lambda e: (e["sort_key"], e["name"]), reverse=True)


def describe_folder(path: Path, root: Path) -> dict[str, Any]:
    """What one folder is, with the few numbers the index shows for its kind."""
    for kind, marker, page in KINDS:
        try:
            data = _read_json(path / marker, root)
        except _Unreadable as e:
            return _entry(path, "unreadable", problem=f"{marker}: {e}")
        if data is None:
            continue
        link = _link(path, page, root)
        try:
            if kind == "run":
                return _run_entry(path, data, link, root)
            head = FolderHead.from_json(data)
            if kind == "diagnosis":
                stalls = Diagnosis.from_json(data).fractions  # read once, typed
                return _entry(path, kind, head, link, fetch_stall=stalls.get("fetch_stall"),
                              prep_stall=stalls.get("prep_stall"))
            if kind == "compare":
                return _compare_entry(path, data, head, link)
            sweep = Sweep.from_json(data)  # read once, typed (a script's tune counts its trials)
            return _entry(path, kind, head, link, samples_per_s=sweep.best_samples_per_s,
                          best_settings=sweep.best_settings, points=sweep.point_count)
        except _Unreadable as e:
            return _entry(path, "unreadable", problem=str(e))
    try:
        next(path.iterdir(), None)
    except OSError as e:
        return _entry(path, "unreadable", problem=f"cannot list the folder ({e.strerror or e})")
    return _entry(path, "unknown", problem="not a pipeprof folder (no run.json, diagnosis.json, compare.json, "
                                           "sweep.json or tune.json)")


def _run_entry(path: Path, meta: dict[str, Any], link: str | None, root: Path) -> dict[str, Any]:
    summary = _read_json(path / "summary.json", root)
    head = FolderHead.from_json(meta)
    scenario = head.scenario
    if summary is None:
        return _entry(path, "run", head, link, scenario=scenario, problem="no summary.json: run pipeprof report")
    try:
        s = as_summary(summary)  # read once, typed
    except (TypeError, ValueError) as e:  # not a summary pipeprof wrote: listed, never a crash
        raise _Unreadable(f"summary.json: {e}") from e
    # an older summary.json (schema 1) has no verdict: listed by its bottleneck
    verdict = s.verdict.klass if "verdict" in summary else summary.get("bottleneck")
    return _entry(path, "run", head, link, scenario=s.scenario or scenario, samples_per_s=finite(s.samples_per_s),
                  data_wait=finite(s.fractions.get("data_wait")), verdict=verdict)


def _compare_entry(path: Path, data: dict[str, Any], head: FolderHead, link: str | None) -> dict[str, Any]:
    compare = Comparison.from_json(data)  # read once, typed
    ratios = [c.throughput_ratio.ratio for c in compare.comparisons]
    scenarios = sorted({r.scenario for r in compare.runs if r.scenario is not None})
    return _entry(path, "compare", head, link, scenario=", ".join(scenarios) or None,
                  runs=[r.label or r.folder or "?" for r in compare.runs],
                  ratios=[r for r in ratios if r is not None])


def _entry(path: Path, kind: str, head: FolderHead | None = None, link: str | None = None,
           **fields: Any) -> dict[str, Any]:
    head = head or FolderHead()
    scenario = fields.pop("scenario", head.scenario)
    return {"name": path.name, "kind": kind, "link": link, "created_utc": head.created_utc,
            "scenario": None if scenario is None else str(scenario), "status": head.status,
            "sort_key": _sort_key(path, head.created_utc), **_EMPTY, **fields}


def _read_json(path: Path, root: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when there is no such file; _Unreadable when it cannot be used."""
    if not path.exists() and not path.is_symlink():
        return None
    if not _inside(path.resolve(), root):
        raise _Unreadable(f"{path.name} links out of the reports folder: not followed")
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise _Unreadable(f"larger than {MAX_JSON_BYTES // 2**20} MiB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise _Unreadable(" ".join(str(e).split()) or type(e).__name__) from None
    if not isinstance(data, dict):
        raise _Unreadable("not a JSON object")
    return data


def _link(folder: Path, page: str, root: Path) -> str | None:
    target = folder / page
    if not target.is_file() or not _inside(target.resolve(), root):
        return None
    return urllib.parse.quote(f"{folder.name}/{page}")


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _sort_key(path: Path, created: str | None) -> str:
    """An ISO UTC time string (they sort as text): the JSON's, the folder name's, or the modification time."""
    for text, pattern in ((created, "%Y-%m-%dT%H:%M:%SZ"), (_stamp(path.name), "%Y%m%dT%H%M%SZ")):
        if text:
            try:
                return dt.datetime.strptime(text, pattern).strftime("%Y-%m-%dT%H:%M:%SZ")
            except ValueError:
                pass
    try:
        mtime = path.lstat().st_mtime
    except OSError:
        return ""
    return dt.datetime.fromtimestamp(mtime, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stamp(name: str) -> str | None:
    m = _STAMP.match(name)
    return m.group(1) if m else None



# ---- HTML -----------------------------------------------------------------------------------


def render_index(entries: list[dict[str, Any]], *, title: str = "reports") -> str:
    """index.html as one string (UTF-8, inline CSS, no scripts, nothing fetched)."""
    env = Environment(loader=PackageLoader("pipeprof", "render/templates"), autoescape=True,
                      undefined=ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(rate=_rate, pct=functools.partial(fmt.pct, digits=1), ratio=_ratio, settings=_settings)
    counts = collections.Counter(e["kind"] for e in entries)
    return env.get_template("index.html.j2").render(
        entries=entries, title=title, counts=sorted(counts.items()),
        generated_utc=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def _rate(value: Any) -> str:
    return fmt.number(value, missing="")


def _ratio(value: Any) -> str:
    return "" if finite(value) is None else f"×{fmt.number(value, 2)}"


def _settings(settings: JsonObject | None) -> str:
    """A sweep's best settings as read (``Sweep.best_settings``), ``{"loader.num_workers": 2}``, as
    ``loader.num_workers=2`` (each value as ``pipeprof.format.setting``)."""
    return ", ".join(f"{k}={fmt.setting(v)}" for k, v in (settings or {}).items())
