"""Where batch-making time goes: fetch, prep and collate per DataLoader worker.

Pure functions over the ``loading`` table (``run.LOADING_COLUMNS``), one row
per batch as timed in the process that made it. A batch's *production time*
is ``t_end_s - t_start_s``: from its first fetch to the end of its collate.
The measured parts cover it all but the DataLoader's own few
microseconds of bookkeeping between samples:

* ``fetch``: reading the samples — for a script's ``__getitem__``, its time
  off the CPU (storage, sleep, locks) — *without* waiting for a core;
* ``core_wait``: the time the maker was runnable but waiting for a core (its
  thread's run-queue wait, ``measure.schedstat``), taken out of a script's
  off-CPU time, or out of a scenario worker's fetch first and prep for the
  rest (read once a batch). Unknown (NaN per batch, None in totals) where
  the wait could not be read and in run folders from before it: then
  ``fetch`` holds it, as it did before the split;
* ``prep``: decode and transform (a script's: its CPU time); ``collate``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pipeprof.numbers import finite as _finite
from pipeprof.run_folder import LOADING_PARTS as PARTS
from pipeprof.run_folder import MAIN_PROCESS
from pipeprof.run_meta import JsonObject, as_number, as_object

BREAKDOWN_COLUMNS = [
    "worker",  # DataLoader worker id; -1 = the training process
    "batches",
    "samples",
    "nbytes",  # bytes read from storage
    "fetch_s",  # totals over the worker's batches
    "core_wait_s",  # NaN unless every batch's core wait is known
    "prep_s",
    "collate_s",
    "production_s",  # sum of t_end_s - t_start_s
    "fetch_per_sample_s",  # means
    "core_wait_per_sample_s",
    "prep_per_sample_s",
    "collate_per_sample_s",
    "collate_per_batch_s",
    "batch_s",  # mean production time per batch
    "fetch_max_s",  # slowest single sample's fetch
    "span_s",  # first batch start to last batch end
    "busy_fraction",  # production_s / span_s: 1 = never idle
]

_NUMERIC = ["step", "worker", "t_start_s", "t_end_s", "fetch_s", "core_wait_s", "prep_s", "collate_s", "samples",
            "nbytes", "fetch_max_s"]
_OPTIONAL = {"core_wait_s"}  # added in issue 14: missing = unknown


CORE_WAIT_UNKNOWN = ("the threads' run-queue wait (/proc/thread-self/schedstat) could not be read where batches "
                     "were made: waiting for a core is counted in fetch")


def core_wait_absence(loading: pd.DataFrame) -> str | None:
    """Why the loading has no waiting-for-a-core split (run.json ``absences.core_wait``), or None when it has
    one or there is no loading: every batch made without a run-queue reading."""
    if loading.empty or "core_wait_s" not in loading:
        return None
    return CORE_WAIT_UNKNOWN if bool(pd.to_numeric(loading["core_wait_s"], errors="coerce").isna().all()) else None


@dataclass(frozen=True)
class WorkerLoading:
    """One process's loading times in summary.json's ``loading.by_worker`` (``loading_summary``'s keys)."""

    batches: int
    samples: int
    fetch_per_sample_s: float | None = None
    core_wait_per_sample_s: float | None = None
    prep_per_sample_s: float | None = None
    collate_per_batch_s: float | None = None
    collate_per_sample_s: float | None = None
    batch_s: float | None = None
    busy_fraction: float | None = None
    fetch_max_s: float | None = None

    def to_json(self) -> JsonObject:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> WorkerLoading:
        d = data if isinstance(data, dict) else {}
        return cls(batches=int(d.get("batches") or 0), samples=int(d.get("samples") or 0),
                   **{f.name: _finite(d.get(f.name)) for f in dataclasses.fields(cls)
                      if f.name not in ("batches", "samples")})


@dataclass(frozen=True)
class SampleSplit:
    """summary.json ``loading.split``: a sample's making in seconds per sample, fetch / waiting for a core /
    decode / transform / other (``analysis.transforms``; None: not known), summing to its ``__getitem__`` time."""

    fetch_per_sample_s: float | None = None
    core_wait_per_sample_s: float | None = None
    decode_per_sample_s: float | None = None
    transform_per_sample_s: float | None = None
    other_per_sample_s: float | None = None

    def to_json(self) -> JsonObject:
        return {"fetch_per_sample_s": self.fetch_per_sample_s, "core_wait_per_sample_s": self.core_wait_per_sample_s,
                "decode_per_sample_s": self.decode_per_sample_s, "transform_per_sample_s": self.transform_per_sample_s,
                "other_per_sample_s": self.other_per_sample_s}

    @classmethod
    def from_json(cls, data: Any) -> SampleSplit | None:
        if not isinstance(data, dict):
            return None
        return cls(fetch_per_sample_s=as_number(data.get("fetch_per_sample_s")),
                   core_wait_per_sample_s=as_number(data.get("core_wait_per_sample_s")),
                   decode_per_sample_s=as_number(data.get("decode_per_sample_s")),
                   transform_per_sample_s=as_number(data.get("transform_per_sample_s")),
                   other_per_sample_s=as_number(data.get("other_per_sample_s")))


@dataclass(frozen=True)
class LoadingSummary:
    """summary.json's ``loading`` (``loading_summary``'s keys), with ``split`` (``analysis.transforms``: fetch /
    core wait / decode / transform / other per sample, None where nothing inside the sample was timed) and a
    script's spawned workers' ``worker_start`` (``analysis.worker_start``; written only where there is one)."""

    batches: int
    samples: int
    workers: int
    fetch_per_sample_s: float | None
    core_wait_per_sample_s: float | None
    prep_per_sample_s: float | None
    collate_per_batch_s: float | None
    collate_per_sample_s: float | None
    batch_s: float | None
    fractions: dict[str, float | None]
    by_worker: dict[str, WorkerLoading]
    split: SampleSplit | None = None
    worker_start: JsonObject | None = None  # analysis.worker_start's record, as summary.json holds it

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "batches": self.batches, "samples": self.samples, "workers": self.workers,
            "fetch_per_sample_s": self.fetch_per_sample_s, "core_wait_per_sample_s": self.core_wait_per_sample_s,
            "prep_per_sample_s": self.prep_per_sample_s, "collate_per_batch_s": self.collate_per_batch_s,
            "collate_per_sample_s": self.collate_per_sample_s, "batch_s": self.batch_s,
            "fractions": dict(self.fractions), "by_worker": {k: w.to_json() for k, w in self.by_worker.items()},
            "split": self.split.to_json() if self.split is not None else None}
        if self.worker_start is not None:
            out["worker_start"] = self.worker_start
        return out

    @classmethod
    def from_json(cls, data: Any) -> LoadingSummary | None:
        """The inverse of ``to_json``; None for a summary without loading records (null)."""
        if not isinstance(data, dict):
            return None
        by_worker, fractions = as_object(data.get("by_worker")), as_object(data.get("fractions"))
        return cls(batches=int(data.get("batches") or 0), samples=int(data.get("samples") or 0),
                   workers=int(data.get("workers") or 0),
                   fetch_per_sample_s=_finite(data.get("fetch_per_sample_s")),
                   core_wait_per_sample_s=_finite(data.get("core_wait_per_sample_s")),
                   prep_per_sample_s=_finite(data.get("prep_per_sample_s")),
                   collate_per_batch_s=_finite(data.get("collate_per_batch_s")),
                   collate_per_sample_s=_finite(data.get("collate_per_sample_s")),
                   batch_s=_finite(data.get("batch_s")),
                   fractions={k: _finite(v) for k, v in fractions.items()},
                   by_worker={str(k): WorkerLoading.from_json(v) for k, v in by_worker.items()},
                   split=SampleSplit.from_json(data.get("split")), worker_start=data.get("worker_start"))


def worker_label(worker: Any) -> str:
    """``"main"`` for the training process, else the worker id as text (summary.json's keys)."""
    return "main" if int(worker) == MAIN_PROCESS else str(int(worker))


def counted_batches(loading: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Batches consumed by counted (non-warm-up) steps: the ones statistics cover."""
    df = _numeric(loading)
    if df.empty or steps.empty:
        return df.iloc[0:0]
    counted = steps.loc[~steps["warmup"].astype(bool), "step"]
    return df.loc[df["step"].isin(counted)]


def loading_breakdown(loading: pd.DataFrame) -> pd.DataFrame:
    """One row per worker (``BREAKDOWN_COLUMNS``), the training process (-1) first.

    Pass ``counted_batches(...)`` for statistics over counted steps only.
    """
    df = _numeric(loading)
    if df.empty:
        return pd.DataFrame(columns=BREAKDOWN_COLUMNS)
    df = df.assign(production_s=df["t_end_s"] - df["t_start_s"])
    g = df.groupby("worker", sort=True)
    out = pd.DataFrame({
        "batches": g.size(),
        "samples": g["samples"].sum(),
        "nbytes": g["nbytes"].sum(),
        "fetch_s": g["fetch_s"].sum(),
        "core_wait_s": g["core_wait_s"].sum().where(g["core_wait_s"].count() == g.size()),
        "prep_s": g["prep_s"].sum(),
        "collate_s": g["collate_s"].sum(),
        "production_s": g["production_s"].sum(),
        "fetch_max_s": g["fetch_max_s"].max(),
        "span_s": g["t_end_s"].max() - g["t_start_s"].min(),
    })
    samples = out["samples"].where(out["samples"] > 0)
    out["fetch_per_sample_s"] = out["fetch_s"] / samples
    out["core_wait_per_sample_s"] = out["core_wait_s"] / samples
    out["prep_per_sample_s"] = out["prep_s"] / samples
    out["collate_per_sample_s"] = out["collate_s"] / samples
    out["collate_per_batch_s"] = out["collate_s"] / out["batches"]
    out["batch_s"] = out["production_s"] / out["batches"]
    out["busy_fraction"] = out["production_s"] / out["span_s"].where(out["span_s"] > 0)
    out = out.reset_index()
    out["worker"] = out["worker"].astype(int)
    out[["batches", "samples"]] = out[["batches", "samples"]].astype(int)
    return out[BREAKDOWN_COLUMNS]


def loading_summary(loading: pd.DataFrame) -> LoadingSummary | None:
    """summary.json's ``loading`` (``LoadingSummary.to_json()``); None when there are no loading records.

    Pass ``counted_batches(...)``. Keys (times in seconds):

    * ``batches``, ``samples``: batches and samples made.
    * ``workers``: distinct DataLoader workers that made them (0 when the
      training process made every batch, ``num_workers = 0``).
    * ``fetch_per_sample_s``, ``prep_per_sample_s``: mean per sample; fetch
      without waiting for a core where that is known.
    * ``core_wait_per_sample_s``: mean per sample waiting for a core; None
      when unknown for any batch (then fetch includes it).
    * ``collate_per_batch_s``: mean per batch; ``collate_per_sample_s``: the same per sample.
      (Named as in ``BREAKDOWN_COLUMNS`` and the attribution; summary.json
      called them ``fetch_s``, ``prep_s`` and ``collate_s`` before issue 13, the
      loading table's names for per-batch totals.)
    * ``batch_s``: mean production time per batch (first fetch to end of collate).
    * ``fractions``: ``fetch`` / ``core_wait`` / ``prep`` / ``collate`` shares
      of the measured time (their sum), summing to 1; ``core_wait`` None when
      unknown.
    * ``by_worker``: per worker (key ``"main"`` for the training process, else
      the worker id as text), ``batches``, ``samples``, ``fetch_per_sample_s``,
      ``core_wait_per_sample_s``, ``prep_per_sample_s``, ``collate_per_batch_s``,
      ``collate_per_sample_s``, ``batch_s`` as above, and
      ``busy_fraction``: production time over the worker's span from first
      batch start to last batch end (1 = never idle), and ``fetch_max_s``: the
      slowest single sample's fetch (None where it was not timed).
    """
    df = _numeric(loading)
    if df.empty:
        return None
    totals: dict[str, float | None] = {p: float(df[f"{p}_s"].sum()) for p in PARTS}
    if df["core_wait_s"].isna().any():
        totals["core_wait"] = None  # unknown: fetch holds it
    batches, samples = len(df), int(df["samples"].sum())
    measured_s = sum(v for v in totals.values() if v is not None)
    workers = df["worker"].astype(int)
    return LoadingSummary(
        batches=batches, samples=samples, workers=int(workers[workers != MAIN_PROCESS].nunique()),
        fetch_per_sample_s=_ratio(totals["fetch"], samples),
        core_wait_per_sample_s=_ratio(totals["core_wait"], samples),
        prep_per_sample_s=_ratio(totals["prep"], samples),
        collate_per_batch_s=_ratio(totals["collate"], batches),
        collate_per_sample_s=_ratio(totals["collate"], samples),
        batch_s=float((df["t_end_s"] - df["t_start_s"]).mean()),
        fractions={p: _ratio(v, measured_s) for p, v in totals.items()},
        by_worker={worker_label(row["worker"]): WorkerLoading(
            batches=int(row["batches"]), samples=int(row["samples"]),
            fetch_per_sample_s=_finite(row["fetch_per_sample_s"]),
            core_wait_per_sample_s=_finite(row["core_wait_per_sample_s"]),
            prep_per_sample_s=_finite(row["prep_per_sample_s"]),
            collate_per_batch_s=_finite(row["collate_per_batch_s"]),
            collate_per_sample_s=_finite(row["collate_per_sample_s"]),
            batch_s=_finite(row["batch_s"]), busy_fraction=_finite(row["busy_fraction"]),
            fetch_max_s=_finite(row["fetch_max_s"])) for row in loading_breakdown(df).to_dict("records")},
    )


def _numeric(loading: pd.DataFrame | None) -> pd.DataFrame:
    """The table's numeric columns as numbers, rows without times dropped."""
    if loading is None or loading.empty:
        return pd.DataFrame(columns=_NUMERIC)
    missing = [c for c in _NUMERIC if c not in loading and c not in _OPTIONAL]
    if missing:
        raise ValueError(f"loading table lacks columns: {', '.join(missing)}")
    df = loading.reindex(columns=_NUMERIC)
    text = [c for c in _NUMERIC if not pd.api.types.is_numeric_dtype(df[c])]
    if text:  # only columns read as text need converting (each attribution reads the table three times)
        df[text] = df[text].apply(pd.to_numeric, errors="coerce")
    timed = ["worker", "t_start_s", "t_end_s"]
    return df.dropna(subset=timed) if df[timed].isna().to_numpy().any() else df


def _ratio(num: float | None, den: float) -> float | None:
    return float(num) / den if den and num is not None else None
