"""Inside the sample (issue 18): which transform and which decode call cost the time, per loader.

Pure functions over ``transforms.csv`` (``run_folder.TRANSFORM_COLUMNS``:
per batch consumed by a step, the wall and CPU time of each leaf
transform, of the decode calls, and of the batch's whole ``__getitem__``)
and run.json ``transform_pipelines`` (each loader's leaves in call order,
``{"name", "random"}``). The records of warm-up steps are left out, like
every other statistic (a row whose step is not a warm-up step is kept: a
loader whose batches no step consumed still counts its own).

Per loader, over its counted rows (``samples`` = the "batch" rows' calls,
else the loading table's samples for the training loader):

* a transform's ``per_sample_s`` = its wall seconds / samples (a call a random
  container skipped costs 0), ``cpu_per_sample_s`` likewise; ``share_of_prep``
  = its wall seconds / the samples' prep time, where prep is, for a scenario,
  loading.csv's ``prep_s`` (decode + transform) with the wait for a core taken
  out of it put back (``scenario_prep_s``: a transform's wall includes the
  waits during it) and, for a script (whose loading.csv ``prep_s`` is ``__getitem__``'s on-CPU
  time and ``fetch_s`` its off-CPU time), the whole ``__getitem__`` wall (the
  "batch" rows' ``wall_s``). ``random`` and ``order`` come from the pipeline
  (call order, not name order); the list is costliest first.
* ``decode``: the "decode" rows together; ``how`` their names, costliest first,
  joined by " + ".
* ``split`` (seconds per sample), parts summing to the ``__getitem__`` wall:

  - scenario: ``fetch`` from loading.csv, ``core_wait`` its wait outside
    prep (the rest is inside decode / transform / other, where it was
    measured), ``decode`` and ``transform`` measured, ``other = prep -
    decode - transform`` (>= 0) with prep as for the shares;
  - script: ``core_wait`` from loading.csv for the training loader where
    known (else None, and fetch keeps it), read over the whole
    ``__getitem__`` (``W``/``C`` its wall/CPU) and shared among its parts by
    their off-CPU time: with ``q = core_wait / (W - C)``, decode is
    ``Dw - q (Dw - Dc)``, transform ``Tw - q (Tw - Tc)`` (each transform's
    ``per_sample_s`` likewise, so the rows sum to the transform part), and
    ``fetch`` the off-CPU time outside them less its share,
    ``(1 - q) ((W - C) - (Dw - Dc) - (Tw - Tc))``; ``other`` = the rest of
    ``W`` (the CPU time outside decode and transforms). The parts sum to
    ``W``: a wait for a core is never counted inside a transform and again
    as waiting.

The typed records below are what summary.json, the verdict, the
recommendations and the renderers read; ``to_json`` belongs to the
summary writer only (``transforms_json``, ``decode_json``, ``split_json``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pipeprof.analysis.loading import SampleSplit, counted_batches
from pipeprof.run_folder import TRANSFORM_COLUMNS, Run
from pipeprof.run_meta import JsonObject, as_number, as_object

TRANSFORM, DECODE, BATCH = "transform", "decode", "batch"  # transforms.csv's kinds


@dataclass(frozen=True)
class TransformCost:
    """One leaf transform of a loader's pipeline, over the counted batches."""

    name: str  # unique in its pipeline: "RandomResizedCrop(size=224)", "Normalize #2"
    order: int  # position in the pipeline's call order (0 first)
    per_sample_s: float  # wall seconds per sample the loader made (a randomly skipped call counts 0)
    cpu_per_sample_s: float  # the calling thread's CPU seconds per sample
    calls: int
    share_of_prep: float | None  # its wall time over the samples' prep time (None: unknown or zero)
    random: bool | None  # a random transform (or inside a random container); None: not known


@dataclass(frozen=True)
class DecodeCost:
    """The common decode / read calls made in ``__getitem__`` outside any transform."""

    per_sample_s: float
    cpu_per_sample_s: float
    calls: int
    how: str  # the calls seen, costliest first: "PIL.Image.open+convert", "torchvision.io.decode_jpeg", ...


@dataclass(frozen=True)
class PrepSplit:
    """A sample's making split into fetch / decode / transform / other, seconds per sample (``core_wait_s``
    None where unknown); the parts sum to the samples' ``__getitem__`` time."""

    fetch_s: float
    core_wait_s: float | None
    decode_s: float
    transform_s: float
    other_s: float


@dataclass(frozen=True)
class LoaderTransforms:
    """What one loader's samples spent inside ``__getitem__``, over its counted batches."""

    loader: int
    samples: int
    transforms: tuple[TransformCost, ...]  # costliest first
    decode: DecodeCost | None  # None: no decode call seen
    split: PrepSplit | None  # None: neither a transform nor a decode call timed


def training_loader(run: Run) -> int | None:
    """The loader whose batches feed the training steps: a scenario's one loader (0); a script's first loader
    with role "train" in run.json ``loaders`` (else its first loader); None where a script recorded none."""
    if not run.info.is_script:
        return 0
    loaders = run.info.loaders
    chosen = next((d for d in loaders if d.get("role") == "train"), loaders[0] if loaders else None)
    number = as_object(chosen).get("number")
    return int(number) if isinstance(number, (int, float)) and not isinstance(number, bool) else None


def training_transforms(run: Run) -> LoaderTransforms | None:
    """The training loader's ``LoaderTransforms``; None when nothing was timed for it."""
    loader = training_loader(run)
    return loader_transforms(run).get(loader) if loader is not None else None


def loader_transforms(run: Run) -> dict[int, LoaderTransforms]:
    """Per loader number, what its samples spent inside ``__getitem__`` over the counted batches (module
    docstring); a loader with no counted transform, decode or batch row is left out."""
    rows = _counted_rows(run)
    if rows.empty:
        return {}
    pipelines = run.info.transform_pipelines
    train = training_loader(run)
    script = run.info.is_script
    out: dict[int, LoaderTransforms] = {}
    for loader, own in rows.groupby("loader", sort=True):
        number = int(float(str(loader)))
        loading = counted_batches(run.loading, run.steps) if number == train else None
        made = _loader(number, own, pipelines.get(str(number)), loading, script)
        if made is not None:
            out[number] = made
    return out


def _counted_rows(run: Run) -> pd.DataFrame:
    """transforms.csv without the rows of warm-up steps, its numbers as numbers."""
    df = run.transforms
    if df is None or df.empty:
        return pd.DataFrame(columns=TRANSFORM_COLUMNS)
    df = df.copy()
    for column in ("step", "loader", "worker", "calls", "wall_s", "cpu_s"):
        df[column] = pd.to_numeric(df[column], errors="coerce")
    df["name"] = df["name"].fillna("").astype(str)
    df = df.dropna(subset=["loader"])
    steps = run.steps
    if not steps.empty and "warmup" in steps:
        warm = pd.to_numeric(steps.loc[steps["warmup"].astype(bool), "step"], errors="coerce")
        df = df.loc[~df["step"].isin(warm)]
    return df


def _loader(number: int, rows: pd.DataFrame, pipeline: Any, loading: pd.DataFrame | None,
            script: bool) -> LoaderTransforms | None:
    batches = rows.loc[rows["kind"] == BATCH]
    timed = rows.loc[rows["kind"] == TRANSFORM]
    decoded = rows.loc[rows["kind"] == DECODE]
    has_loading = loading is not None and not loading.empty
    samples = int(batches["calls"].sum()) if not batches.empty else (
        int(loading["samples"].sum()) if loading is not None and has_loading else 0)
    if samples <= 0 or (timed.empty and decoded.empty):
        return None
    if not batches.empty:
        getitem_wall_s, getitem_cpu_s = _total(batches["wall_s"]), _total(batches["cpu_s"])
    elif loading is not None and has_loading:  # no batch rows: the loading table's own __getitem__ time
        getitem_wall_s = float(loading[["fetch_s", "core_wait_s", "prep_s"]].sum().sum())
        getitem_cpu_s = float(loading["prep_s"].sum()) if script else math.nan
    else:
        getitem_wall_s = getitem_cpu_s = math.nan
    if script:
        prep_s = getitem_wall_s
    else:
        prep_s = scenario_prep_s(loading) if loading is not None and has_loading else math.nan
    waiting = _core_wait_share(loading if has_loading else None, getitem_wall_s, getitem_cpu_s) if script else 0.0
    costs = _transform_costs(timed, pipeline, samples, prep_s, waiting)
    decode = _decode_cost(decoded, samples, waiting)
    split = _split(timed, decoded, samples, loading if has_loading else None, script,
                   prep_s, getitem_wall_s, getitem_cpu_s)
    return LoaderTransforms(loader=number, samples=samples, transforms=costs, decode=decode, split=split)


def scenario_prep_s(loading: pd.DataFrame) -> float:
    """A scenario's prep seconds over ``loading``'s batches with the wait for a core taken out of prep put back.

    The recorder takes a batch's core wait out of fetch first (``measure.loading``): where a batch's fetch kept
    time, none came out of prep; where it kept none, the rest of the wait did: counted whole, over by at most
    that batch's own fetch time (unknown once taken out), which is small beside a wait that swallowed it.
    """
    core = pd.to_numeric(loading["core_wait_s"], errors="coerce").fillna(0.0)
    fetch = pd.to_numeric(loading["fetch_s"], errors="coerce")
    prep = pd.to_numeric(loading["prep_s"], errors="coerce")
    return float((prep + core.where(fetch <= 0, 0.0)).sum())


def _total(values: pd.Series) -> float:
    """The sum of a column, NaN when any value is missing (unknown, never a partial sum)."""
    numbers = pd.to_numeric(values, errors="coerce")
    return math.nan if numbers.isna().any() else float(numbers.sum())


def _pipeline_leaves(pipeline: Any) -> dict[str, tuple[int, bool | None]]:
    """name -> (call order, random) from run.json ``transform_pipelines``' list for one loader."""
    leaves: dict[str, tuple[int, bool | None]] = {}
    for i, leaf in enumerate(pipeline if isinstance(pipeline, list) else []):
        leaf = as_object(leaf)
        name, random = leaf.get("name"), leaf.get("random")
        if isinstance(name, str) and name not in leaves:
            leaves[name] = (i, random if isinstance(random, bool) else None)
    return leaves


def _core_wait_share(loading: pd.DataFrame | None, getitem_wall_s: float, getitem_cpu_s: float) -> float:
    """A script's share of ``__getitem__``'s off-CPU time that was waiting for a core (0-1; 0 where unknown).

    The run-queue wait is read over the whole ``__getitem__``, not per call: it is shared among the calls in
    it by their off-CPU time, so that a transform's or decode call's time never holds the wait for a core
    that the split lists apart (the parts then sum to the ``__getitem__`` wall, not over it)."""
    core = _total(loading["core_wait_s"]) if loading is not None else math.nan
    off_s = getitem_wall_s - getitem_cpu_s
    if not (math.isfinite(core) and math.isfinite(off_s)) or off_s <= 0 or core <= 0:
        return 0.0
    return min(1.0, core / off_s)


def _less_waiting(wall_s: float, cpu_s: float, waiting: float) -> float:
    """Wall seconds less their share (``waiting``) of the off-CPU time that was waiting for a core."""
    return wall_s - waiting * max(0.0, wall_s - cpu_s)


def _transform_costs(timed: pd.DataFrame, pipeline: Any, samples: int, prep_s: float,
                     waiting: float = 0.0) -> tuple[TransformCost, ...]:
    leaves = _pipeline_leaves(pipeline)
    if timed.empty:
        return ()
    sums = timed.groupby("name", sort=False)[["calls", "wall_s", "cpu_s"]].sum()
    unknown = len(leaves)  # a name the pipeline does not list goes after its leaves, as first seen
    costs = []
    for name, row in sums.iterrows():
        order, random = leaves.get(str(name), (None, None))
        if order is None:
            order, unknown = unknown, unknown + 1
        wall_s = _less_waiting(float(row["wall_s"]), float(row["cpu_s"]), waiting)
        costs.append(TransformCost(
            name=str(name), order=order, per_sample_s=wall_s / samples,
            cpu_per_sample_s=float(row["cpu_s"]) / samples, calls=int(row["calls"]),
            share_of_prep=wall_s / prep_s if math.isfinite(prep_s) and prep_s > 0 else None, random=random))
    return tuple(sorted(costs, key=lambda c: (-c.per_sample_s, c.order)))


def _decode_cost(decoded: pd.DataFrame, samples: int, waiting: float = 0.0) -> DecodeCost | None:
    if decoded.empty:
        return None
    sums = decoded.groupby("name", sort=False)[["calls", "wall_s", "cpu_s"]].sum()
    ranked = sums.sort_values("wall_s", ascending=False, kind="stable")
    wall_s = _less_waiting(float(sums["wall_s"].sum()), float(sums["cpu_s"].sum()), waiting)
    return DecodeCost(per_sample_s=wall_s / samples,
                      cpu_per_sample_s=float(sums["cpu_s"].sum()) / samples, calls=int(sums["calls"].sum()),
                      how=" + ".join(str(n) for n in ranked.index))


def _split(timed: pd.DataFrame, decoded: pd.DataFrame, samples: int, loading: pd.DataFrame | None, script: bool,
           prep_s: float, getitem_wall_s: float, getitem_cpu_s: float) -> PrepSplit | None:
    decode_wall_s, decode_cpu_s = float(decoded["wall_s"].sum()), float(decoded["cpu_s"].sum())
    transform_wall_s, transform_cpu_s = float(timed["wall_s"].sum()), float(timed["cpu_s"].sum())
    core_wait_s = _total(loading["core_wait_s"]) if loading is not None else math.nan
    core = core_wait_s if math.isfinite(core_wait_s) else None
    if not script:
        if loading is None or not math.isfinite(prep_s):
            return None  # no loading records: fetch and prep unknown
        fetch_s = float(loading["fetch_s"].sum())
        if core is not None:  # the wait during prep is in prep_s (and in decode / transform / other) now
            core = max(0.0, core - (prep_s - float(loading["prep_s"].sum())))
        other_s = max(0.0, prep_s - decode_wall_s - transform_wall_s)
    else:
        if not (math.isfinite(getitem_wall_s) and math.isfinite(getitem_cpu_s)):
            return None
        # The wait for a core inside decode and transform calls is taken out of them (shared by off-CPU time,
        # _core_wait_share) and listed once, as core_wait: the parts sum to the __getitem__ wall.
        waiting = _core_wait_share(loading, getitem_wall_s, getitem_cpu_s)
        decode_off_s, transform_off_s = max(0.0, decode_wall_s - decode_cpu_s), max(0.0, transform_wall_s - transform_cpu_s)
        off_cpu_s = (getitem_wall_s - getitem_cpu_s) - decode_off_s - transform_off_s  # outside decode, transforms
        fetch_s = max(0.0, off_cpu_s * (1.0 - waiting))
        decode_wall_s = _less_waiting(decode_wall_s, decode_cpu_s, waiting)
        transform_wall_s = _less_waiting(transform_wall_s, transform_cpu_s, waiting)
        other_s = max(0.0, getitem_wall_s - fetch_s - (core or 0.0) - decode_wall_s - transform_wall_s)
    return PrepSplit(fetch_s=fetch_s / samples, core_wait_s=core / samples if core is not None else None,
                     decode_s=decode_wall_s / samples, transform_s=transform_wall_s / samples,
                     other_s=other_s / samples)


# -- summary.json -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TransformRow:
    """One row of summary.json ``transforms`` (a loader's leaf transform, costliest first): seconds per sample
    of wall and CPU time, its calls, its share of the samples' prep time and whether it is random."""

    name: str
    per_sample_s: float | None
    cpu_per_sample_s: float | None
    calls: int | None
    share_of_prep: float | None
    random: bool | None

    @classmethod
    def of(cls, cost: TransformCost) -> TransformRow:
        return cls(cost.name, cost.per_sample_s, cost.cpu_per_sample_s, cost.calls, cost.share_of_prep, cost.random)

    def to_json(self) -> JsonObject:
        return {"name": self.name, "per_sample_s": self.per_sample_s, "cpu_per_sample_s": self.cpu_per_sample_s,
                "calls": self.calls, "share_of_prep": self.share_of_prep, "random": self.random}

    @classmethod
    def from_json(cls, data: Any) -> TransformRow:
        d = as_object(data)
        random, calls = d.get("random"), as_number(d.get("calls"))
        return cls(name=str(d.get("name")), per_sample_s=as_number(d.get("per_sample_s")),
                   cpu_per_sample_s=as_number(d.get("cpu_per_sample_s")),
                   calls=int(calls) if calls is not None else None, share_of_prep=as_number(d.get("share_of_prep")),
                   random=random if isinstance(random, bool) else None)


@dataclass(frozen=True)
class DecodeRow:
    """summary.json ``decode``: the decode calls together, seconds per sample, and ``how`` (their names)."""

    per_sample_s: float | None
    cpu_per_sample_s: float | None
    calls: int | None
    how: str | None

    @classmethod
    def of(cls, cost: DecodeCost) -> DecodeRow:
        return cls(cost.per_sample_s, cost.cpu_per_sample_s, cost.calls, cost.how)

    def to_json(self) -> JsonObject:
        return {"per_sample_s": self.per_sample_s, "cpu_per_sample_s": self.cpu_per_sample_s,
                "calls": self.calls, "how": self.how}

    @classmethod
    def from_json(cls, data: Any) -> DecodeRow | None:
        if not isinstance(data, dict):
            return None
        calls, how = as_number(data.get("calls")), data.get("how")
        return cls(per_sample_s=as_number(data.get("per_sample_s")),
                   cpu_per_sample_s=as_number(data.get("cpu_per_sample_s")),
                   calls=int(calls) if calls is not None else None, how=how if isinstance(how, str) else None)


def transform_rows(lt: LoaderTransforms | None) -> tuple[TransformRow, ...] | None:
    """summary.json ``transforms``: the loader's leaf transforms costliest first; None when nothing was timed."""
    return None if lt is None else tuple(TransformRow.of(c) for c in lt.transforms)


def decode_row(decode: DecodeCost | None) -> DecodeRow | None:
    """summary.json ``decode``; None: no decode seen."""
    return None if decode is None else DecodeRow.of(decode)


def transforms_json(lt: LoaderTransforms | None) -> list[JsonObject] | None:
    """summary.json ``transforms``: ``[{"name", "per_sample_s", "cpu_per_sample_s", "calls", "share_of_prep",
    "random"}]`` costliest first; None when nothing was timed."""
    rows = transform_rows(lt)
    return None if rows is None else [r.to_json() for r in rows]


def decode_json(decode: DecodeCost | None) -> JsonObject | None:
    """summary.json ``decode``: ``{"per_sample_s", "cpu_per_sample_s", "calls", "how"}``; None: no decode seen."""
    row = decode_row(decode)
    return None if row is None else row.to_json()


def split_row(split: PrepSplit | None) -> SampleSplit | None:
    """summary.json ``loading.split`` (``loading.SampleSplit``); None where neither a transform nor a decode call
    was timed."""
    if split is None:
        return None
    return SampleSplit(fetch_per_sample_s=split.fetch_s, core_wait_per_sample_s=split.core_wait_s,
                       decode_per_sample_s=split.decode_s, transform_per_sample_s=split.transform_s,
                       other_per_sample_s=split.other_s)


def split_json(split: PrepSplit | None) -> JsonObject | None:
    """summary.json ``loading.split``: seconds per sample of fetch / core_wait / decode / transform / other."""
    row = split_row(split)
    return None if row is None else row.to_json()
