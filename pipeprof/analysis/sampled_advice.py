"""Recommendations from sampled shares (``pipeprof attach``): the kinds a profiled run gets, none predicted.

An attached run has no step times, so ``recommend.recommend`` (whose every number is a samples/s predicted from
them) gives nothing. What the stacks do measure is where the time went: the training threads' shares (waiting
for a batch, copying to the device) and the workers' (busy, and busy with fetch / decode / transforms /
collate), beside the loader's settings as far as the stacks show them (``SampledLoader``) and the cores the
sampler saw in use (``prediction.Cores``). ``recommend_sampled`` applies the profiled run's rules to those
shares, with the same thresholds (``analysis.thresholds``), and returns the same ``Recommendation`` records at
the ``not_predicted`` tier: no samples/s, no speed-up; the reason says what the samples showed and that
``pipeprof profile --verify`` or ``pipeprof tune`` measures the change. Pure: no clock, no torch.

* **workers** (input-bound: the data wait at least ``COMPUTE_BOUND_FRACTION``): with none, the training
  process makes its batches in the wait ``w`` of its time and computes in ``1 − w``, so ``⌈w / (1 − w)⌉``
  workers, each making batches at its pace, keep up with the loop; with ``k`` workers busy ``b`` of their
  samples (at least ``WORKERS_BUSY``: they set the pace), ``⌈k·b / (1 − w)⌉``, as many more as the cores left
  idle (those available to a rank less what it kept busy) hold at the cores a worker kept busy (a worker
  waiting on storage needs next to none); from none, not where the rank kept at least ``SATURATED_FRACTION``
  of its cores busy. The fewest that keep up at the sampled pace: a setting to try, not a prediction.
* **pin_memory** (a GPU matched to the job, pinning not seen, the copy at least ``PIN_MEMORY_H2D``).
* **decode once into RAM**, and **decode_jpeg instead of PIL** for PIL's decode (input-bound, the decode calls
  at least ``SHARE_DOMINATES`` of the workers' busy samples): the code changes of ``transform_advice``.
* the honest negative where none applies: compute-bound, no core left, or nothing the samples support.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pipeprof.analysis.attribution import Attribution
from pipeprof.analysis.change_model import Change
from pipeprof.analysis.prediction import NOT_PREDICTED, Cores
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.recommend import Recommendation
from pipeprof.analysis.thresholds import (
    COMPUTE_BOUND_FRACTION,
    PIN_MEMORY_H2D,
    SATURATED_FRACTION,
    SHARE_DOMINATES,
    WORKERS_BUSY,
)
from pipeprof.analysis.transform_advice import (
    DECODE_IN_RAM_CODE,
    DECODE_IN_RAM_NOTE,
    DECODE_JPEG_CODE,
    DECODE_JPEG_NOTE,
)
from pipeprof.analysis.verdict import Verdict
from pipeprof.loader_rules import pins_memory


@dataclass(frozen=True)
class SampledLoader:
    """The training loader's settings as the stacks show them: None where they do not, ``absent`` saying why
    (setting name -> reason)."""

    num_workers: int | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None
    absent: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"num_workers": self.num_workers, "pin_memory": self.pin_memory,
                "prefetch_factor": self.prefetch_factor, "absent": dict(self.absent)}


@dataclass(frozen=True)
class SampledEvidence:
    """What an attach measured beside the attribution: the loader read from the stacks, the device, the
    decode calls' share of the workers' busy samples (and their names, most sampled first), the cores (None:
    not sampled, ``cores_absent`` says why) and how the attach ended (``ended_early``: the reason, else None)."""

    loader: SampledLoader
    device: str
    decode_fraction: float | None = None
    decode_names: tuple[str, ...] = ()
    cores: Cores | None = None
    cores_absent: str | None = None
    ended_early: str | None = None


def recommend_sampled(attr: Attribution, verdict: Verdict, evidence: SampledEvidence) -> list[Recommendation]:
    """The recommendations the sampled shares support (module docstring), the change with the larger share of
    time first; one negative entry where none applies; empty where the verdict could not judge (too few
    samples)."""
    if verdict.klass == "unknown":
        return []
    wait = attr.step.data_wait_fraction or 0.0
    h2d = attr.step.h2d_fraction or 0.0
    workers = _workers(attr, evidence, wait)
    ranked: list[tuple[float, Recommendation]] = []
    for share, rec in ((wait, workers if isinstance(workers, Recommendation) else None),
                       (wait, _decode_in_ram(evidence, wait)), (wait, _decode_jpeg(evidence, wait)),
                       (h2d, _pin_memory(evidence, h2d))):
        if rec is not None:
            ranked.append((share, rec))
    ranked.sort(key=lambda pair: -pair[0])  # stable: equal shares keep the order above
    recs = [rec for _, rec in ranked] or [_negative(attr, verdict, evidence, wait,
                                                    workers if isinstance(workers, Reason) else None)]
    if evidence.ended_early:
        recs = [r.with_note(Reason.written(evidence.ended_early)) for r in recs]  # the attach's words (attach.summary)
    return recs


def _rec(change: Change, why: Reason, note: Reason | None = None, code_change: Reason | None = None
         ) -> Recommendation:
    return Recommendation(change, None, None, Reason("sampled_not_predicted", {"why": why}), Reason("sampled_shares"),
                          note=(note,) if note is not None else (), code_change=code_change, tier=NOT_PREDICTED)


def _saturated(cores: Cores | None) -> bool:
    return cores is not None and cores.available > 0 and cores.busy >= SATURATED_FRACTION * cores.available


def _workers(attr: Attribution, evidence: SampledEvidence, wait: float) -> Recommendation | Reason | None:
    """More workers, or why not where the workers set the pace (a ``Reason``), or None where they do not."""
    k = evidence.loader.num_workers
    if k is None or wait < COMPUTE_BOUND_FRACTION or wait >= 1.0:
        return None
    cores = evidence.cores
    if k == 0:
        if _saturated(cores):
            return None  # the making moves to workers, which need cores beside the training process's
        wanted = max(1, math.ceil(wait / (1 - wait) - 1e-9))
        how = Reason("sampled_workers_none", {"wait": wait, "wanted": wanted, "idle": max(cores.available - cores.busy,
                                                                                          0.0) if cores is not None else None})
    else:
        busy = attr.loading.worker_busy_mean_fraction
        if busy is None or busy < WORKERS_BUSY:
            return None  # the workers have slack: more of them would wait too
        wanted = max(k + 1, math.ceil(k * busy / (1 - wait) - 1e-9))
        idle, most = None, wanted
        if cores is not None:
            # a new worker takes the cores a worker kept busy (a worker waiting on storage or a sleep, next to none)
            left, each = max(cores.available - cores.busy, 0.0), cores.workers / k
            cap = k + (math.floor(left / each + 1e-9) if each > 0 else wanted)
            if cap <= k:
                return Reason("sampled_no_core", {"idle": Reason("sampled_idle", {"left": left, "each": each, "cap": None})})
            idle = Reason("sampled_idle", {"left": left, "each": each, "cap": cap if wanted > cap else None})
            most = min(wanted, cap)
        how = Reason("sampled_workers", {"k": k, "busy": busy, "wait": wait, "wanted": wanted, "idle": idle})
        wanted = most
    if cores is None:
        how = Reason("sampled_cores_unsampled", {"how": how, "absent": evidence.cores_absent})
    return _rec({"loader.num_workers": wanted}, how)


def _pin_memory(evidence: SampledEvidence, h2d: float) -> Recommendation | None:
    pinned = evidence.loader.pin_memory
    if not evidence.device.startswith("cuda") or pins_memory(bool(pinned), evidence.device) \
            or h2d < PIN_MEMORY_H2D:
        return None
    note = None
    if pinned is None:
        note = Reason("sampled_pin_unread", {"absent": evidence.loader.absent.get("pin_memory")})
    return _rec({"loader.pin_memory": True}, Reason("sampled_pin_memory", {"h2d": h2d}), note=note)


def _decodes(evidence: SampledEvidence, wait: float) -> bool:
    share = evidence.decode_fraction
    return wait >= COMPUTE_BOUND_FRACTION and share is not None and share >= SHARE_DOMINATES


def _decode(evidence: SampledEvidence) -> Reason:
    return Reason("sampled_decode", {"names": evidence.decode_names, "fraction": evidence.decode_fraction})


def _decode_in_ram(evidence: SampledEvidence, wait: float) -> Recommendation | None:
    if not _decodes(evidence, wait):
        return None
    return _rec({}, Reason("sampled_decode_in_ram", {"decode": _decode(evidence)}),
                code_change=DECODE_IN_RAM_CODE, note=DECODE_IN_RAM_NOTE)


def _decode_jpeg(evidence: SampledEvidence, wait: float) -> Recommendation | None:
    if not _decodes(evidence, wait) or not any("PIL" in name for name in evidence.decode_names):
        return None
    return _rec({}, Reason("sampled_decode_jpeg", {"decode": _decode(evidence)}), code_change=DECODE_JPEG_CODE,
                note=DECODE_JPEG_NOTE)


def _negative(attr: Attribution, verdict: Verdict, evidence: SampledEvidence, wait: float,
              no_workers: Reason | None) -> Recommendation:
    """No change the samples support, and why (nothing predicted: no samples/s was measured); ``no_workers``:
    why more workers, which would set the pace, cannot have cores."""
    if verdict.klass == "compute" or wait < COMPUTE_BOUND_FRACTION:
        why = Reason("sampled_compute_bound", {"wait": wait})
    elif no_workers is not None:
        why = no_workers
    elif _saturated(evidence.cores):
        cores = evidence.cores
        assert cores is not None
        why = Reason("sampled_saturated", {"busy": cores.busy, "available": cores.available})
    else:
        busy = attr.loading.worker_busy_mean_fraction
        why = Reason("sampled_nothing", {"wait": wait, "busy": busy if busy is not None and busy < WORKERS_BUSY else None})
    return Recommendation({}, None, None, Reason("sampled_negative", {"why": why}), Reason("sampled_shares"),
                          tier=NOT_PREDICTED)
