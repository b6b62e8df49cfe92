"""This machine's track record: every prediction pipeprof checked against a measurement made here.

``pipeprof run --verify`` / ``profile --verify`` (the top recommendation re-run), every ``tune`` (its trials
against the predictions that led to them) and every ``sweep`` (one point's recommendations against the point
measured with that change) append what they checked to one small file, a JSON line a check:
``$PIPEPROF_TRACK_RECORD``, else ``track-record.jsonl`` in the cache folder (``$PIPEPROF_CACHE`` or
``~/.cache/pipeprof``). Delete the file to start it again.

What it is for: the model's own error, the one term of a recommendation's interval that no resample of a run
shows (``analysis.intervals``). Until a tier of prediction (``measured``, ``estimated``) has ``MIN_CHECKS``
checks here, that term is the yardstick's typical error (``intervals.MODEL_ERROR``, measured on the development
machine); from then on it is the median |predicted / measured - 1| of this machine's last ``KEEP`` checks of
that tier. A run records the record's state when it starts (run.json ``track_record``), so deriving its
summary again later gives the same intervals. ``pipeprof probe`` prints the record's summary.

Standard library only; a record that cannot be read or written is said, never fatal.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ENV = "PIPEPROF_TRACK_RECORD"
FILE = "track-record.jsonl"
MIN_CHECKS = 8  # a tier's checks before its median replaces the yardstick's typical error
KEEP = 200  # the latest checks of a tier that count (the machine, torch and the model change over time)
TIERS = ("measured", "estimated")
SOURCES = ("verify", "tune", "sweep")


def record_path() -> Path:
    """Where this machine's track record is kept (``$PIPEPROF_TRACK_RECORD``, else in the cache folder)."""
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    cache = os.environ.get("PIPEPROF_CACHE")
    return (Path(cache) if cache else Path.home() / ".cache" / "pipeprof") / FILE


def check_row(source: str, tier: Any, predicted: Any, measured: Any, inside: Any, change: Any) -> dict[str, Any] | None:
    """One check as the file keeps it; None where it checked nothing (a number missing, not positive)."""
    p, m = _positive(predicted), _positive(measured)
    if p is None or m is None or tier not in TIERS:
        return None
    return {"at_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "source": source,
            "tier": tier, "predicted_samples_per_s": p, "measured_samples_per_s": m, "error": p / m - 1,
            "inside": inside if isinstance(inside, bool) else None,
            "change": change if isinstance(change, dict) else {}}


def append(rows: Iterable[dict[str, Any] | None], path: Path | None = None) -> str | None:
    """Add the checks to the record; None when written (or nothing to write), else why not (one line)."""
    lines = [json.dumps(r, sort_keys=True) + "\n" for r in rows if r is not None]
    if not lines:
        return None
    where = path if path is not None else record_path()
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        with open(where, "a", encoding="utf-8") as f:
            f.write("".join(lines))
    except OSError as e:
        return f"the track record {where} was not written ({e.strerror or e})"
    return None


def read(path: Path | None = None) -> list[dict[str, Any]]:
    """The checks kept, oldest first; a line that is not a check (cut short, edited) is left out."""
    where = path if path is not None else record_path()
    try:
        text = where.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("tier") in TIERS and _finite(row.get("error")) is not None:
            rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]], path: Path | None = None) -> dict[str, Any]:
    """run.json's ``track_record`` (what a run's intervals use): the path, and by tier the checks counted (the
    latest ``KEEP``), their median and worst |error|, the share inside the interval (None: none with bounds) and
    whether they are enough (``MIN_CHECKS``) to replace the yardstick's typical error."""
    tiers: dict[str, Any] = {}
    for tier in TIERS:
        mine = [r for r in rows if r["tier"] == tier][-KEEP:]
        errors = [abs(float(r["error"])) for r in mine]
        bounded = [r["inside"] for r in mine if isinstance(r.get("inside"), bool)]
        tiers[tier] = {"checks": len(mine),
                       "median_abs_error": statistics.median(errors) if errors else None,
                       "worst_abs_error": max(errors) if errors else None,
                       "inside_share": sum(bounded) / len(bounded) if bounded else None,
                       "used": len(mine) >= MIN_CHECKS}
    return {"path": str(path if path is not None else record_path()), "min_checks": MIN_CHECKS, "tiers": tiers}


def current() -> dict[str, Any]:
    """This machine's record now, summarised (``summary``)."""
    return summary(read())


def model_error(record: Any, tier: str) -> tuple[float, int] | None:
    """(median |error|, checks) of ``tier`` in a run's ``track_record`` where it has enough checks; else None."""
    if not isinstance(record, dict) or not isinstance(record.get("tiers"), dict):
        return None
    entry = record["tiers"].get(tier)
    if not isinstance(entry, dict) or entry.get("used") is not True:
        return None
    error, checks = _finite(entry.get("median_abs_error")), entry.get("checks")
    if error is None or not isinstance(checks, int) or isinstance(checks, bool) or checks < 1:
        return None
    return error, checks


def prediction_check_rows(source: str, check: Any) -> list[dict[str, Any] | None]:
    """The rows of a sweep's or tune's ``prediction_check`` (its JSON) as checks."""
    rows = (check or {}).get("rows") if isinstance(check, dict) else None
    return [check_row(source, r.get("tier"), r.get("predicted"), r.get("measured"), r.get("inside"), r.get("change"))
            for r in rows or [] if isinstance(r, dict)]


def verification_row(summary: Any) -> dict[str, Any] | None:
    """A summary's ``--verify`` re-run as a check (None where it measured nothing): the top recommendation's
    prediction against the re-run's median samples/s."""
    v = summary.get("verification") if isinstance(summary, dict) else None
    if not isinstance(v, dict) or v.get("status") != "complete":
        return None
    rec = next((r for r in summary.get("recommendations") or [] if isinstance(r, dict)
                and r.get("change") == v.get("change")), None)
    return check_row("verify", (rec or {}).get("tier"), v.get("predicted_samples_per_s"),
                     v.get("measured_samples_per_s"), v.get("within_interval"), v.get("change"))


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _positive(value: Any) -> float | None:
    v = _finite(value)
    return v if v is not None and v > 0 else None
