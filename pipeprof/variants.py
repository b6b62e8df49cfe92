"""Scenario variants: a resolved scenario with some keys changed, validated, and written back as TOML.

``diagnose`` (its compute and prep runs), ``run --verify`` (the top
recommendation applied) and sweeps run a scenario with a few keys changed,
often in a fresh process that needs a scenario *file*. ``vary`` applies the
change to the resolved scenario and validates the result exactly like a
scenario file; ``to_toml`` writes it back.

A change that makes other keys meaningless drops them, and says so: moving
the data to ``device`` or ``ram`` drops the image format and quality, the
cold page cache and the storage throttle (in RAM or on the device there is
no disk to emulate); ``memmap`` and ``files`` drop the image keys;
``loader.num_workers = 0`` drops ``prefetch_factor`` and
``persistent_workers`` (PyTorch refuses them without workers); setting
``train.steps`` drops ``train.epochs`` and the other way round. A dropped
key the change itself names is kept (and then validated).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import tomli_w

from pipeprof.errors import UsageError
from pipeprof.format import printable, setting_literal
from pipeprof.loader_rules import NEED_WORKERS
from pipeprof.scenario import Scenario, scenario_from_dict

SECTIONS = ("data", "loader", "model", "train", "profile")

# Keys each storage kind has no use for (and the validator refuses), dropped when it is swapped in.
DROP_FOR_STORAGE = {
    "device": ("format", "quality", "cache", "throttle", "slow_ranks"),
    "ram": ("format", "quality", "cache", "throttle", "slow_ranks"),
    "memmap": ("format", "quality"),
    "files": ("format", "quality"),
    "images": (),
}
ONE_OF = {"steps": "epochs", "epochs": "steps"}


@dataclass(frozen=True)
class Variant:
    """A changed scenario, its raw TOML-ready dict, and what changed or was dropped, in words."""

    scenario: Scenario
    raw: dict[str, Any]
    changes: tuple[str, ...]  # "loader.num_workers = 2 (was 0)", ...
    dropped: tuple[str, ...]  # "data.format = 'jpeg' (not used with data.storage = 'ram')", ...


def scenario_dict(scenario: Scenario) -> dict[str, Any]:
    """The resolved scenario as a raw dict that ``scenario_from_dict`` accepts back unchanged.

    ``Scenario.to_dict()`` holds every key, defaults included; the validator
    refuses keys that do not apply (a JPEG quality for PNG), so those and the
    unset (None) ones are left out, and a throttle becomes its preset or table.
    """
    d = scenario.to_dict()
    data = d["data"]
    throttle = data.pop("throttle")
    if throttle is not None:
        data["throttle"] = throttle["preset"] or {"latency_ms": throttle["latency_ms"],
                                                  "bandwidth_mb_s": throttle["bandwidth_mb_s"]}
    if data["storage"] != "images":
        del data["format"], data["quality"]
    elif data["format"] != "jpeg":
        del data["quality"]
    if data["transform"] != "augment":
        del data["augment_passes"]
    if not data.get("slow_ranks", True):
        del data["slow_ranks"]  # none slow: the default, left out like the keys that do not apply
    for section in SECTIONS:
        d[section] = {k: v for k, v in d[section].items() if v is not None}
    return d


def vary(scenario: Scenario, change: Mapping[str, Any], where: str, *, name: str | None = None) -> Variant:
    """``scenario`` with ``change`` (``{"section.key": value}``) applied, validated; UsageError (one line) if not.

    ``where`` names the origin in error messages (the scenario file and what
    is being varied).
    """
    raw = scenario_dict(scenario)
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    if name is not None:
        raw["name"] = name
    keys = {}
    for dotted, value in change.items():
        section, _, key = dotted.partition(".")
        if section not in SECTIONS or not key:
            raise UsageError(f"{where}: {printable(dotted)} is not a scenario key; expected section.key with section "
                             f"one of {', '.join(SECTIONS)}")
        if value is None:
            raw[section].pop(key, None)  # unset: the default
        else:
            raw[section][key] = value
        keys[dotted] = value
    dropped = []
    storage = change.get("data.storage")
    if storage in DROP_FOR_STORAGE:
        dropped += _drop(raw, "data", DROP_FOR_STORAGE[storage], keys, f"not used with data.storage = {storage!r}")
    if change.get("loader.num_workers") == 0:
        dropped += _drop(raw, "loader", NEED_WORKERS, keys, "needs loader.num_workers >= 1")
    for key, other in ONE_OF.items():
        if f"train.{key}" in change:
            dropped += _drop(raw, "train", (other,), keys, f"train.{key} is set")
    varied = scenario_from_dict(raw, where)
    before, after = _flat(scenario.to_dict()), _flat(varied.to_dict())
    changes = tuple(f"{k} = {setting_literal(after.get(k))} (was {setting_literal(before.get(k))})"
                    for k in sorted(set(before) | set(after))
                    if k not in ("name", "description") and before.get(k) != after.get(k))
    return Variant(varied, raw, changes, tuple(dropped))


def to_toml(raw: Mapping[str, Any]) -> str:
    """A raw scenario dict as the text of a scenario file."""
    top = {k: v for k, v in raw.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in raw.items() if isinstance(v, dict) and v}
    return tomli_w.dumps({**top, **tables})


def _drop(raw: dict[str, Any], section: str, names: tuple[str, ...], kept: Mapping[str, Any],
          why: str) -> list[str]:
    out = []
    for name in names:
        if name in raw[section] and f"{section}.{name}" not in kept:
            value = raw[section].pop(name)
            if value is not False:  # a false flag is the default: dropping it changes nothing worth saying
                out.append(f"{section}.{name} = {setting_literal(value)} ({why})")
    return out


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and k != "throttle":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


