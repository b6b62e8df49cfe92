"""Numbers as text, in one style, for every renderer and the few sentences analysis writes.

One convention for each kind of quantity:

- fractions as percentages: ``pct(0.3) -> "30%"``, ``pct(0.045) -> "4.5%"``, ``pct(0.3, 1) -> "30.0%"``;
- plain numbers: ``number(1234.5) -> "1,234"``, ``number(0.01234) -> "0.0123"``;
- bytes in binary units (B, KiB, MiB, GiB, TiB): ``byte_size(2**29) -> "512 MiB"``;
  byte rates always in MiB/s: ``byte_rate(10 * 2**20) -> "10.0 MiB/s"``;
- changes of a share in percentage points: ``pp(-12.34) -> "-12.3 pp"``;
- other rates with their unit, to three significant figures: ``rate(1234.5, "samples/s") -> "1,234 samples/s"``,
  ``rate(4.3) -> "4.3 samples/s"``, ``rate(0.52) -> "0.52 samples/s"`` (``significant``); how far one is above
  another from the unrounded numbers: ``change_pct(4.3, 4.26) -> "0.9% above"``;
- durations in µs, ms, s or min: ``duration(0.0123) -> "12.3 ms"``;
- counts of things: ``plural(1, "worker") -> "1 worker"``;
- a scenario setting's value: ``setting([256, 128]) -> "256x128"``, ``setting(None) -> "unset"``.

A value that is missing or not finite (None, NaN, infinities, junk) prints as
``NOT_MEASURED`` unless the caller names other words (``missing=``), as a
sentence does ("an unknown share"). Every function returns plain ``str``; the
HTML renderer wraps the missing text in its own markup.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from pipeprof.numbers import finite

__all__ = ["NOT_MEASURED", "byte_rate", "byte_size", "change_pct", "duration", "finite", "number", "pct", "plural",
           "pp", "printable", "rate", "setting", "setting_arg", "setting_literal", "significant"]

NOT_MEASURED = "not measured"  # the one text for a missing or non-finite value

MIB = 2**20
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _no_negative_zero(text: str) -> str:
    """``-0``, ``-0.0``, ``-0%`` as their unsigned forms (a tiny negative rounds to zero, not to "-0")."""
    digits = text.lstrip("-")
    if text.startswith("-") and not any(c in "123456789" for c in digits.split(" ")[0]):
        return digits
    return text


def number(value: Any, digits: int | None = None, *, missing: str = NOT_MEASURED) -> str:
    """A number with three significant figures or thousands separators: 1234.5 → "1,234"; 12.34 → "12.3";
    1.234 → "1.23"; 0.01234 → "0.0123"; integers whole (7 → "7"). ``digits`` fixes the decimals instead."""
    v = finite(value)
    if v is None:
        return missing
    if digits is not None:
        return _no_negative_zero(f"{v:,.{digits}f}")
    a = abs(v)
    if round(a, 1) >= 100 or (isinstance(value, int) and not isinstance(value, bool)):
        text = f"{v:,.0f}"
    elif a >= 10:
        text = f"{v:.1f}"
    elif a >= 1:
        text = f"{v:.2f}"
    elif a == 0:
        text = "0"
    else:
        text = f"{v:.3g}"
    return _no_negative_zero(text)


def pct(fraction: Any, digits: int | None = None, *, missing: str = NOT_MEASURED) -> str:
    """A fraction as a percentage, whole from 10% up and with one decimal below: 0.3 → "30%"; 0.045 → "4.5%";
    0 → "0%"; 1.532 → "153%". ``digits`` fixes the decimals (``pct(0.3, 1)`` → "30.0%"). A value already in
    percent is passed as ``pct(value / 100)``."""
    v = finite(fraction)
    if v is None:
        return missing
    if digits is None:
        digits = 0 if v == 0 or abs(v) >= 0.1 else 1
    return _no_negative_zero(f"{100 * v:,.{digits}f}%")


def pp(points: Any, digits: int = 1, *, missing: str = NOT_MEASURED) -> str:
    """A change of a share in percentage points, always signed: 12.34 → "+12.3 pp"; -0.04 → "+0.0 pp"."""
    v = finite(points)
    if v is None:
        return missing
    return f"{round(v, digits) + 0.0:+.{digits}f} pp"  # + 0.0: a rounded -0.0 prints as +0.0


def byte_size(nbytes: Any, *, missing: str = NOT_MEASURED) -> str:
    """Bytes in binary units: 512 → "512 B"; 2**29 → "512 MiB"; 1.5 * 2**30 → "1.50 GiB"."""
    v = finite(nbytes)
    if v is None:
        return missing
    for unit in _BYTE_UNITS:
        if abs(v) < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{number(v, 0) if unit == 'B' else number(v)} {unit}"
        v /= 1024
    raise AssertionError("unreachable")


def byte_rate(bytes_per_s: Any, *, missing: str = NOT_MEASURED) -> str:
    """Bytes per second, always in MiB/s (rates compare at a glance): 10 * 2**20 → "10.0 MiB/s"."""
    v = finite(bytes_per_s)
    return missing if v is None else f"{number(v / MIB)} MiB/s"


def significant(value: Any, figures: int = 3, *, missing: str = NOT_MEASURED) -> str:
    """A number to ``figures`` significant figures, trailing zeros dropped, whole with thousands separators
    from 10 ** ``figures`` up: 4.3 → "4.3"; 0.5234 → "0.523"; 12.34 → "12.3"; 37176.4 → "37,176"; 2.0 → "2".
    A low rate never rounds to a whole number that hides it (0.52, not "1"; 4.3, not "4")."""
    v = finite(value)
    if v is None:
        return missing
    a = abs(v)
    if a == 0:
        return "0"
    decimals = max(0, figures - 1 - math.floor(math.log10(a)))
    text = f"{v:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return _no_negative_zero(text)


def rate(value: Any, unit: str = "samples/s", *, missing: str = NOT_MEASURED) -> str:
    """A rate with its unit, to three significant figures (``significant``): 37176.4 → "37,176 samples/s";
    4.3 → "4.3 samples/s"; 0.52 → "0.52 samples/s"; ``rate(3.5, "steps/s")`` → "3.5 steps/s"."""
    v = finite(value)
    return missing if v is None else f"{significant(v)} {unit}"


def change_pct(new: Any, old: Any, *, missing: str = NOT_MEASURED) -> str:
    """How far ``new`` is above (or below) ``old``, from the unrounded numbers: (4.3, 4.26) → "0.9% above";
    (4, 5) → "20% below"; equal → "the same". Never from two numbers already rounded for print."""
    n, o = finite(new), finite(old)
    if n is None or o is None or o == 0:
        return missing
    change = n / o - 1
    text = pct(abs(change))
    if text in ("0%", "0.0%"):
        return "the same"
    return f"{text} {'above' if change > 0 else 'below'}"


def duration(seconds: Any, *, missing: str = NOT_MEASURED) -> str:
    """Seconds for humans: 1.23e-05 → "12.3 µs"; 0.0123 → "12.3 ms"; 4.5 → "4.50 s"; 83 → "1 min 23 s"."""
    v = finite(seconds)
    if v is None:
        return missing
    a = abs(v)
    sign = "-" if v < 0 else ""
    if a == 0:
        return "0 s"
    # Each unit while its number stays below 1,000 once rounded (999.6 µs is "1.00 ms", not "1,000 µs").
    if a * 1e6 < 999.5:
        return _no_negative_zero(f"{sign}{number(a * 1e6)} µs")
    if a * 1e3 < 999.5:  # max(): 999.7 µs is "1.00 ms", as 1 ms is
        return f"{sign}{number(max(a * 1e3, 1.0))} ms"
    if a < 59.95:
        return f"{sign}{number(max(a, 1.0))} s"
    minutes, secs = divmod(round(a), 60)
    return f"{sign}{minutes:,} min {secs} s" if secs else f"{sign}{minutes:,} min"


def plural(count: Any, word: str, many: str | None = None) -> str:
    """A count and its noun: ``plural(1, "worker")`` → "1 worker"; 0 or 2 → "2 workers"; ``many`` for
    irregular plurals (``plural(2, "process", "processes")``); no count → "an unknown number of workers"."""
    many = many or word + "s"
    v = finite(count)
    if v is None:
        return f"an unknown number of {many}"
    text = f"{int(v):,}" if v.is_integer() else number(v)  # a count held as a float (2.0 cores) is whole
    return f"{text} {word if v == 1 else many}"


def setting(value: Any) -> str:
    """A scenario setting's value, short, for labels and table cells: ``true``/``false``, ``256x128`` for a
    list, ``unset`` for None, strings bare, a throttle by its preset or its two numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "unset"
    if isinstance(value, (list, tuple)):
        return "x".join(setting(v) for v in value)
    if isinstance(value, dict):  # a throttle: a preset, or its two numbers
        if value.get("preset"):
            return str(value["preset"])
        return " ".join(f"{k}={setting(v)}" for k, v in value.items())
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)
    return str(value)


def setting_arg(value: Any) -> str:
    """A setting's value as ``--set key=VALUE`` takes it: ``true``/``false``, a plain word bare (``ram``,
    ``cuda-0``), any other string quoted (``'a b'``), numbers and lists as Python writes them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value.replace("_", "").replace("-", "").isalnum() else repr(value)
    return str(value)


def setting_literal(value: Any, depth: int = 0) -> str:
    """A setting's value as TOML writes it, for messages that quote it: ``'ram'``, ``true``, ``[256, 128]``,
    ``unset`` for None, a throttle by its preset (``'nfs'``) or inline (``{latency_ms = 5, bandwidth_mb_s = 50}``),
    any other table as "a table". One printable line, bounded: lists cut after 8 items and 3 levels, huge
    integers by their size."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "unset"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        if value.get("preset"):
            return repr(value["preset"])
        if depth == 0 and 0 < len(value) <= 8 and not any(isinstance(v, (dict, list, tuple)) for v in value.values()):
            return "{" + ", ".join(f"{printable(str(k))} = {setting_literal(v, 1)}" for k, v in value.items()) + "}"
        return "a table"
    if isinstance(value, (list, tuple)):
        if depth >= 3:
            return "[...]"
        items = [setting_literal(v, depth + 1) for v in value[:8]] + (["..."] if len(value) > 8 else [])
        return "[" + ", ".join(items) + "]"
    if isinstance(value, int) and value.bit_length() > 256:
        return f"an integer of {value.bit_length()} bits"  # str() refuses ints of more than 4300 digits
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    return printable(str(value))


def printable(text: str) -> str:
    """``text`` with its non-printable characters escaped (a newline as ``\\n``, ESC as ``\\x1b``), so that a
    message quoting the user's input stays one printable line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
