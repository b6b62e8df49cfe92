"""Recommendations: what to change, ranked measured first, each with its prediction's tier.

Pure functions over one run's records, its ``attribution`` and its ``verdict`` (no torch). Every
recommendation is ``{"change", "predicted_samples_per_s", "predicted_speedup", "tier", "reason", "model"}``:
``change`` holds scenario keys as ``--set`` takes them (``{"loader.num_workers": 2}``), or is empty for a code
change (``code_change`` says what to write) and for the honest negative; ``tier`` is ``measured``,
``estimated`` or ``not_predicted`` (``analysis.prediction``, and docs/predictions.md).
A predicted change is listed when it gains at least ``MIN_GAIN``, never one equal to the run's settings
(``is_no_op``); a change worth trying that nothing measured carries is listed as ``not_predicted``. When none
is, the list holds one entry with an empty change and the reason.

``predict_change(run, attribution, verdict, change)`` predicts any change of ``PREDICTABLE_KEYS``
(``{WHOLE_BATCHES: True}`` for taking whole batches), recommended or not, with the same arithmetic.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from pipeprof.analysis.attribution import Attribution
from pipeprof.analysis.change_model import WHOLE_BATCHES, Change, ChangeModel, ModelCheck
from pipeprof.analysis.prediction import (
    ESTIMATED,
    MEASURED,
    NOT_PREDICTED,
    Prediction,
    rank_key,
    ratio,
)
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.steps import counted_steps
from pipeprof.analysis.thresholds import (
    BURSTY_EMPTY_FRACTION,
    COMPUTE_BOUND_FRACTION,
    MIN_COUNTED_STEPS,
    MIN_GAIN,
    NEAR_BEST,
    OTHER_LOAD_WORTH_SAYING,
    PIN_MEMORY_H2D,
    SATURATED_FRACTION,
    SHARE_DOMINATES,
    WORKERS_BUSY,
)
from pipeprof.analysis.transform_advice import DECODE_IN_RAM, PrepSaving, decode_reason, decode_share, prep_savings
from pipeprof.analysis.verdict import Verdict
from pipeprof.loader_rules import pins_memory, prefetch_factor, worker_only_conflicts
from pipeprof.numbers import finite
from pipeprof.run_folder import Run
from pipeprof.run_meta import JsonObject, LoaderInfo, as_object
from pipeprof.scenario import ON_DISK, SAMPLE_BYTES

DEVICE_DATA_MAX_BYTES = 2 * 1024**3
# The code changes no setting makes (written by render.advice_text.code_text).
WHOLE_BATCHES_CODE = Reason("whole_batches_code")
RECREATED_LOADERS_CODE = Reason("reuse_loader_code")


@dataclass(frozen=True)
class Recommendation:
    """One change, the throughput predicted for it and the prediction's ``tier``; summary.json's entry is
    ``to_json()`` with the words written at the edge (``pipeline.derive.summary_document``: ``reason``, ``model``
    and ``note`` by ``render.advice_text``). ``predicted_speedup`` is ``predicted_samples_per_s`` over the run's
    measured samples/s (both None: not predicted). ``reason`` says why, ``model`` the prediction's arithmetic,
    ``note`` the risks (joined by "; "), each a ``Reason`` (a summary.json read back: the words, ``reasons.WRITTEN``).
    Optional: ``code_change`` (a change no setting makes, a ``Reason`` worded by ``render.advice_text.code_text``)
    and, for a profiled script, ``script_text`` (the Python
    to change where it builds its loader: kind ``script_text``, the change and the loader's description, written
    by ``render.script_text``)."""

    change: Change
    predicted_samples_per_s: float | None
    predicted_speedup: float | None
    reason: Reason
    model: Reason
    note: tuple[Reason, ...] = ()
    code_change: Reason | None = None
    script_text: Reason | None = None
    tier: str = ESTIMATED

    def to_json(self) -> JsonObject:
        """summary.json's entry but its words (``reason``, ``model``, ``note``, ``code_change``, ``script_text``:
        written at the edge)."""
        return {"change": dict(self.change), "predicted_samples_per_s": self.predicted_samples_per_s,
                "predicted_speedup": self.predicted_speedup, "tier": self.tier}

    @classmethod
    def from_json(cls, data: Any) -> Recommendation:
        """A summary.json entry read back (its ``interval`` is ``intervals.Interval.from_json``'s): its words as
        written (``reasons.WRITTEN``)."""
        d = as_object(data)
        note = d.get("note")
        return cls(change=dict(as_object(d.get("change"))), predicted_samples_per_s=finite(d.get("predicted_samples_per_s")),
                   predicted_speedup=finite(d.get("predicted_speedup")),
                   reason=Reason.written(str(d.get("reason") or "")), model=Reason.written(str(d.get("model") or "")),
                   note=(Reason.written(str(note)),) if note is not None else (),
                   code_change=Reason.written(str(d["code_change"])) if d.get("code_change") is not None else None,
                   script_text=Reason.written(str(d["script_text"])) if d.get("script_text") is not None else None,
                   tier=str(d.get("tier") or ESTIMATED))

    def with_note(self, note: Reason) -> Recommendation:
        """This recommendation with ``note`` said after its own."""
        return dataclasses.replace(self, note=(*self.note, note))


def recommend(run: Run, attribution: Attribution, verdict: Verdict) -> list[Recommendation]:
    """Recommendations, measured first, then estimated, then not predicted; by predicted speed-up within a tier.

    Empty for a run with fewer than ``MIN_COUNTED_STEPS`` counted steps. Otherwise never empty: without a
    change worth making, one entry with ``change = {}``, ``predicted_speedup = 1.0`` and the reason. Every
    recommendation of a failed or interrupted run carries ``ended_early_caveat`` in its ``note``."""
    m = _Model(run, attribution)
    if m.current is None or len(m.counted) < MIN_COUNTED_STEPS:
        return []
    recs = [r for r in (m.workers(), m.prefetch(), m.persistent(), m.batch_fetch(), m.cache_in_ram(),
                        m.on_device(), m.pin_memory(), m.fewer_threads(), *m.transform_changes()) if r is not None]
    current = m.current_settings()
    recs = [r for r in recs if (r.tier == NOT_PREDICTED or (r.predicted_speedup or 0.0) >= MIN_GAIN)
            and not is_no_op(r.change, current)]
    recs.sort(key=lambda r: rank_key(r.tier, r.predicted_speedup))
    if m.script:
        recs = _for_script(recs, (LoaderInfo.parse(m.train_loaders[0]) if m.train_loaders else None) or LoaderInfo())
    recs = recs or [m.negative(verdict)]
    caveat = ended_early_caveat(run)
    if caveat:
        recs = [r.with_note(caveat) for r in recs]
    return recs


def predict_change(run: Run, attribution: Attribution, verdict: Verdict,
                   change: Change) -> Recommendation | None:
    """The prediction for ``change`` (``PREDICTABLE_KEYS``; ``{WHOLE_BATCHES: True}`` for taking whole batches),
    recommended or not, by the arithmetic of ``recommend``'s candidates; None where it is not predicted (too
    few counted steps, a key outside ``PREDICTABLE_KEYS``, nothing measured carries it)."""
    del verdict  # the model reads the attribution; the verdict's class is not an input
    m = _Model(run, attribution)
    if m.current is None or len(m.counted) < MIN_COUNTED_STEPS:
        return None
    p = m.predict(change)
    if p.samples_per_s is None:
        return None
    code = bool(change.get(WHOLE_BATCHES))
    settings = {key: value for key, value in change.items() if key != WHOLE_BATCHES}
    return m._rec(settings, p, Reason("predicted_change", {"whole_batches": code, "settings": dict(settings)}),
                  code_change=WHOLE_BATCHES_CODE if code else None)


def model_check(run: Run, attribution: Attribution) -> ModelCheck:
    """The model checked against this run's own measurements (``change_model.ModelCheck``)."""
    return _Model(run, attribution).self_check()


def is_no_op(change: Change, current: Change) -> bool:
    """A change whose every key equals the run's current setting: it would change nothing. An empty change (a
    code change, the negative) is not one; a key whose current value is unknown is a change."""
    return bool(change) and all(key in current and current[key] == value for key, value in change.items())


def ended_early_caveat(run: Run) -> Reason | None:
    """The caveat on every recommendation of a run that failed or was interrupted: it ended after N steps."""
    status = run.info.status
    if status not in ("failed", "interrupted"):
        return None
    return Reason("ended_early", {"status": status, "steps": len(run.steps), "counted": len(counted_steps(run.steps))})


def _for_script(recs: list[Recommendation], loader: LoaderInfo) -> list[Recommendation]:
    """A script's recommendations: only settings its code can change where it builds the training loader
    (placement is the script's design), each with the Python to write (``script_text``: the change and the loader
    it is written for)."""
    out = []
    for rec in recs:
        if any(key.startswith("data.") for key in rec.change):
            continue
        out.append(dataclasses.replace(rec, script_text=script_change(rec.change, loader)) if rec.change else rec)
    return out

def script_change(change: Change, loader: LoaderInfo) -> Reason:
    """The Python a script's author writes for ``change`` where their code builds ``loader`` (its description in
    run.json's ``loaders``), as a Reason (kind ``script_text``, written by ``render.script_text``)."""
    return Reason("script_text", {"change": dict(change), "loader": loader})


class _Model(ChangeModel):
    """The candidates of ``recommend``, each with its reason (``render.advice_text`` words it) and prediction."""

    # -- reasons -------------------------------------------------------------------------

    def _rec(self, change: Change, p: Prediction, why: Reason, *, note: tuple[Reason, ...] = (),
             code_change: Reason | None = None) -> Recommendation:
        """A recommendation from prediction ``p``: its number and tier beside the reason."""
        assert self.current is not None
        if p.samples_per_s is None:
            return Recommendation(change, None, None, Reason("not_predicted_change", {"why": why}), p.model, note=note,
                                  code_change=code_change, tier=NOT_PREDICTED)
        x = float(p.samples_per_s)
        return Recommendation(change, x, x / self.current,
                              Reason("predicted", {"why": why, "x": x, "tier": p.tier, "current": self.current}), p.model,
                              note=note, code_change=code_change, tier=p.tier)

    def _drop_worker_only(self, change: Change) -> list[Reason]:
        """Going to 0 workers: the settings that need workers reset in ``change`` where ``--set`` can reset them
        (``persistent_workers = false``), else a note to remove them, in the script's terms for a script."""
        notes = []
        for key in worker_only_conflicts(0, self.loader.settings_json()):
            if key == "persistent_workers" and not self.script:
                change[f"loader.{key}"] = False
            else:
                notes.append(Reason("needs_workers", {"key": key, "script": self.script}))
        return notes

    def _other_load(self) -> Reason | None:
        """The load of processes outside the job, where worth saying."""
        c = self.cores
        if c.other < OTHER_LOAD_WORTH_SAYING * c.cores:
            return None
        return Reason("other_load", {"other": c.other, "cores": c.cores})

    # -- candidates ----------------------------------------------------------------------

    def workers(self) -> Recommendation | None:
        if self.parts is None or self.storage == "device":
            return None
        top = int(max(2 * self.cores.cores, self.k + 2))
        predicted = {k: p for k in range(top + 1) if (p := self._workers_x(k, None)).samples_per_s is not None}
        if not predicted:
            return None
        best = max(float(p.samples_per_s or 0.0) for p in predicted.values())
        k = min(k for k, p in predicted.items() if (p.samples_per_s or 0.0) >= NEAR_BEST * best)
        if k == self.k:
            return None
        change: Change = {"loader.num_workers": k}
        notes = self._drop_worker_only(change) if k == 0 else []
        if k and not self.k and predicted[k].tier == ESTIMATED and self._compute_beside_workers(k) is None:
            # the loop never ran beside a worker: receiving each batch costs it CPU a 0-worker run cannot show
            notes.append(Reason("handover_unmeasured", {"script": self.script}))
        return self._rec(change, predicted[k], Reason("workers", {"k": k, "made_s": sum(self.parts),
                                                                  "other": self._other_load()}),
                         note=tuple(notes))

    def fewer_threads(self) -> Recommendation | None:
        """Fewer torch threads where the job's own threads and workers fill the cores available and the change's
        effect was measured (a GPU job: only by a probe of the loop at those threads); never for load outside
        the job."""
        if self.parts is None or not self.k or self.wait < COMPUTE_BOUND_FRACTION:
            return None
        c = self.cores
        if c.busy < SATURATED_FRACTION * c.available:
            return None
        threads = int(max(1, c.available - self.k))
        if threads >= self.threads or (self.gpu and (self.k, float(threads)) not in self.probes.trained):
            return None
        p = self._workers_x(self.k, float(threads))
        if p.samples_per_s is None:
            return None
        return self._rec({"train.threads": threads}, p,
                         Reason("fewer_threads", {"k": self.k, "threads": int(self.threads), "busy": c.busy,
                                                  "available": c.available, "fewer": threads}))

    def on_device(self) -> Recommendation | None:
        n = self.data.samples
        if self.storage in ("device", "script") or not n or n * SAMPLE_BYTES > DEVICE_DATA_MAX_BYTES \
                or self.wait < COMPUTE_BOUND_FRACTION:
            return None
        change: Change = {"data.storage": "device"}
        if self.k:
            change["loader.num_workers"] = 0
        notes = self._drop_worker_only(change)
        if self.storage == "images":
            notes.append(Reason("images_only"))
        if self.throttled:
            notes.append(Reason("throttle_on_device"))
        if self.data.cache == "cold":
            change["data.cache"] = "warm"
        p = self.predict(change)
        if p.samples_per_s is None:
            return None
        return self._rec(change, p, Reason("on_device", {"data_bytes": n * SAMPLE_BYTES, "wait": self.wait}),
                         note=tuple(notes))

    def pin_memory(self) -> Recommendation | None:
        if not self.gpu or pins_memory(self.loader.pin_memory, self.device) or self.h2d < PIN_MEMORY_H2D:
            return None
        return self._rec({"loader.pin_memory": True}, self.predict({"loader.pin_memory": True}),
                         Reason("pin_memory", {"h2d": self.h2d}))

    def batch_fetch(self) -> Recommendation | None:
        if self.parts is None or self.storage != "ram" or self.wait < COMPUTE_BOUND_FRACTION:
            return None
        fetch, prep, collate = self.parts
        p = fetch + prep + collate
        if p <= 0 or (fetch + collate) / p < SHARE_DOMINATES:
            return None
        return self._rec({}, self._batch_x(), Reason("batch_fetch", {"share": (fetch + collate) / p, "fetch": fetch,
                                                                     "collate": collate}),
                         code_change=WHOLE_BATCHES_CODE)

    def cache_in_ram(self) -> Recommendation | None:
        if self.parts is None or self.storage not in ON_DISK or self.wait < COMPUTE_BOUND_FRACTION:
            return None
        fetch, prep, collate = self.parts
        p = fetch + prep + collate
        measured = decode_share(self.transforms) if self.transforms is not None else None
        decode = measured >= SHARE_DOMINATES if measured is not None else \
            self.storage == "images" and p > 0 and prep / p >= SHARE_DOMINATES
        stored = (self.cold or self.throttled or self.storage == "files") and p > 0 and fetch / p >= SHARE_DOMINATES
        if not (decode or stored):
            return None
        change: Change = {"data.storage": "ram"}
        if self.data.cache == "cold":
            change["data.cache"] = "warm"
        how = "cold" if self.cold else "throttled" if self.throttled else "files"
        measured_decode = (decode_reason(self.transforms) if self.transforms is not None and measured is not None
                           else None)
        if decode:
            what = measured_decode or Reason("decode_share", {"share": prep / p, "prep": prep})
        else:
            what = Reason("fetch_share", {"storage": self.storage, "how": how, "share": fetch / p, "fetch": fetch})
        note: tuple[Reason, ...] = ()
        if self.storage == "images":
            note = (Reason("images_only"),)
        if self.throttled:
            note = (Reason("throttle_cache"),)
        return self._rec(change, self.predict(change), Reason("cache_in_ram", {"what": what, "decode": decode}),
                         note=note)

    def transform_changes(self) -> list[Recommendation]:
        """The training loader's transform and decode changes (``transform_advice``), each predicted from the
        measured per-sample seconds it saves (``saved_x``)."""
        if self.wait < COMPUTE_BOUND_FRACTION:
            return []
        out = []
        for saving in prep_savings(self.transforms):
            if saving.kind == DECODE_IN_RAM and not self.script and self.storage in ON_DISK:
                continue
            p = self.saved_x(saving)
            if p is None:
                continue
            notes = (saving.note,) if saving.note is not None else ()
            if not self.script:
                notes = (*notes, Reason("code_change_only"))
            out.append(self._rec({}, p, Reason("transform_saving", {"why": saving.why}),
                                 code_change=saving.code_change, note=notes))
        return out

    def saved_x(self, saving: PrepSaving) -> Prediction | None:
        """The run's samples/s with ``saving``'s seconds per sample taken out of prep (and fetch): the measured
        rate times the estimate's X(k) after over X(k) before. None without loading records."""
        if self.parts is None or self.current is None:
            return None
        fetch, prep, collate = self.parts
        before = self.estimate.at(self.k, self.supply(fetch, prep, collate))
        after_estimate = dataclasses.replace(self.estimate, storage=math.inf) if saving.fetch_saved_s else self.estimate
        after = after_estimate.at(self.k, self.supply(fetch - min(saving.fetch_saved_s, fetch),
                                                      prep - min(saving.prep_saved_s, prep), collate))
        p = ratio(before, after, self.current, Reason("prep_saved", {"saved_s": min(saving.prep_saved_s, prep)}))
        return dataclasses.replace(p, model=Reason("assumed", {"model": p.model, "assumed": saving.assumed})) \
            if saving.assumed else p

    def prefetch(self) -> Recommendation | None:
        pre = self.attr.prefetch
        if not self.k or self.parts is None or pre.absent is not None:
            return None
        empty, busy = pre.empty_step_fraction, self.loading.worker_busy_mean_fraction
        if empty is None or empty < BURSTY_EMPTY_FRACTION or (busy is not None and busy >= WORKERS_BUSY):
            return None
        factor = prefetch_factor(self.k, pre.prefetch_factor) or 1
        change: Change = {"loader.prefetch_factor": 2 * factor}
        return self._rec(change, self.predict(change),
                         Reason("prefetch", {"empty": empty, "busy": busy or 0, "k": self.k, "factor": 2 * factor}))

    # -- the honest negative -------------------------------------------------------------

    def negative(self, verdict: Verdict) -> Recommendation:
        assert self.current is not None  # recommend() answers a run without counted steps itself
        c = self.cores
        busy = c.busy / c.available if c.available > 0 else None
        other = self._other_load()
        if verdict.klass == "compute":
            threads = None
            if not self.gpu and self.k and self.cpu.oversubscribed and busy is not None and busy >= SATURATED_FRACTION:
                threads = Reason("oversubscribed", {"k": self.k, "threads": int(self.threads), "busy": c.busy,
                                                    "available": c.available, "fewer": int(max(1, c.available - self.k)),
                                                    "script": self.script})
            return _negative(self.current,
                             Reason("compute_bound", {"wait": self.wait, "ceiling": self.ceiling,
                                                      "current": self.current, "threads": threads, "other": other}),
                             Reason("compute_ceiling"))
        if busy is not None and busy >= SATURATED_FRACTION:
            return _negative(self.current,
                             Reason("cores_saturated", {"busy": busy, "available": c.available, "other": other}),
                             Reason("cores_none_left"))
        return _negative(self.current,
                         Reason("no_gain", {"min_gain": MIN_GAIN - 1, "current": self.current, "ceiling": self.ceiling,
                                            "storage": self.storage_words, "other": other}),
                         Reason("all_candidates"))

    def persistent(self) -> Recommendation | None:
        """Persistent workers save the start of a *re-iterated* loader's pass (its workers are kept), never a new
        loader's first pass; loaders re-created per fit get the risk instead, with reuse as the code change."""
        if not self.k or self.loader.persistent_workers:
            return None
        if self.cold and self.storage == "memmap":
            return None  # refused by the scenario: mapped pages cannot be dropped
        firsts = self._pass_firsts
        if firsts is None or firsts.empty:
            return None
        median_wait = float(self.counted["data_wait_s"].median())
        median_step = float(self.counted["step_s"].median())
        again, new = self._pass_starts(firsts)
        slow = self._slow_starts(again, median_wait, median_step)
        if slow is not None:
            saved, _ = slow
            return self._rec({"loader.persistent_workers": True}, self._persistent_x(),
                             Reason("persistent", {"epochs": len(again), "wait": float(again["data_wait_s"].mean()),
                                                   "median_wait": median_wait, "median_step": median_step,
                                                   "saved": saved, "total": self.total_s}))
        recreated = self._recreated()
        slow = self._slow_starts(new, median_wait, median_step) if recreated else None
        if slow is None or recreated is None:
            return None
        saved, x = slow
        name, count = recreated
        return self._rec({}, Prediction(x, ESTIMATED, Reason("new_loaders")),
                         Reason("recreated_loaders", {"count": count, "name": name,
                                                      "wait": float(new["data_wait_s"].mean()),
                                                      "median_wait": median_wait, "saved": saved, "total": self.total_s}),
                         code_change=RECREATED_LOADERS_CODE, note=(Reason("recreated_loaders_risk"),))


def _negative(current: float | None, why: Reason, model: Reason) -> Recommendation:
    return Recommendation({}, current, 1.0, why, model, tier=MEASURED)
