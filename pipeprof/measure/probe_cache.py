"""Where the machine probe is kept: one JSON file per machine in the cache folder, checked before reuse.

``pipeprof.measure.probe`` measures the ceilings (``run_probe``, ~10-20 s);
this module keeps the result as ``probe-<machine key>.json`` in the cache
folder ($PIPEPROF_CACHE or ~/.cache/pipeprof), so the diagnosis can compare
a run against its ceilings without measuring every time. ``load_or_probe``
reuses the cached file or measures and writes it (``pipeprof probe``);
``cached_probe`` only reads it (``pipeprof run``). A cached file is used only
when it is a whole probe of this format version, measured on this machine
(its ``machine.key``, hashed from the hostname, CPU, cores, RAM and GPUs),
with a readable ``measured_at_utc``, and not a quick one standing in for a
full one; anything else is measured again, with the reason.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeprof.measure.probe import PROBE_FORMAT_VERSION, TIME_FORMAT, Now, machine_facts, run_probe, utc_now
from pipeprof.run_folder import write_json
from pipeprof.storage.materialize import not_writable
from pipeprof.storage.synthetic import default_cache_root

_SECTIONS = ("memory_bandwidth", "disk", "h2d", "matmul", "cpu", "gpu", "machine")  # a whole probe has each


def probe_path(cache_root: Path, facts: dict[str, Any]) -> Path:
    return Path(cache_root) / f"probe-{facts['key']}.json"


def read_cached(path: Path, key: str, quick: bool) -> tuple[dict[str, Any] | None, str]:
    """``(probe, "")`` if ``path`` holds a usable probe of this machine, else ``(None, why not)``."""
    try:
        probe = json.loads(path.read_text())
    except FileNotFoundError:
        return None, "no cached probe of this machine"
    except (OSError, ValueError) as e:
        return None, f"corrupt cache file {path} ({' '.join(str(e).split())})"
    if not isinstance(probe, dict) or probe.get("format_version") != PROBE_FORMAT_VERSION:
        return None, f"cache file {path} is not a probe of format version {PROBE_FORMAT_VERSION}"
    missing = [s for s in _SECTIONS if not isinstance(probe.get(s), dict)]
    if missing:
        return None, f"corrupt cache file {path} (missing {', '.join(missing)})"
    if probe["machine"].get("key") != key:
        return None, f"cache file {path} was measured on another machine"
    try:
        dt.datetime.strptime(str(probe.get("measured_at_utc")), TIME_FORMAT)
    except ValueError:
        return None, f"corrupt cache file {path} (bad measured_at_utc)"
    if probe.get("quick") and not quick:
        return None, "the cached probe is a quick one and a full one was asked for"
    return probe, ""


def cached_probe(cache_root: Path | str | None = None) -> tuple[dict[str, Any] | None, str]:
    """This machine's cached probe (quick or full) without measuring, or ``(None, why not)``."""
    facts = machine_facts()
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    return read_cached(probe_path(root, facts), facts["key"], quick=True)


def _ensure_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=folder, prefix=".probe-check-")
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        raise not_writable(folder, e) from None


def load_or_probe(cache_root: Path | str | None = None, refresh: bool = False, quick: bool = False, *,
                  measure: Callable[..., dict[str, Any]] | None = None, machine: dict[str, Any] | None = None,
                  now: Now = utc_now, on_stage: Callable[[str], None] | None = None) -> dict[str, Any]:
    """This machine's probe: the cached one, or measured now (``refresh``, none, or an unusable one) and cached.

    The result carries ``cache``: ``path``, ``reused``, ``age_s`` (since it was
    measured) and ``reason`` (why it was measured now; None when reused).
    Raises UsageError (one line) when the cache folder cannot be written.
    """
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    facts = machine if machine is not None else machine_facts()
    path = probe_path(root, facts)
    if refresh:
        cached, why = None, "a new measurement was asked for (--refresh)"
    else:
        cached, why = read_cached(path, facts["key"], quick)
    if cached is not None:
        measured = dt.datetime.strptime(cached["measured_at_utc"], TIME_FORMAT).replace(tzinfo=dt.timezone.utc)
        age_s = (now() - measured).total_seconds()
        return {**cached, "cache": {"path": str(path), "reused": True, "age_s": age_s, "reason": None}}
    _ensure_writable(root)  # before measuring for seconds, not after
    probe = (measure or run_probe)(quick=quick, scratch_dir=root, machine=facts, on_stage=on_stage)
    try:
        write_json(path, probe)
    except OSError as e:
        raise not_writable(root, e) from None
    return {**probe, "cache": {"path": str(path), "reused": False, "age_s": 0.0, "reason": why}}
