"""summary.json of an attached run: the usual contract, its shares sampled.

``sampled_summary(run)`` starts from ``analysis.summary.summary_record`` (CPU,
memory, disk and GPU from the sampler's tables, as for any run; every
step-level field absent) and puts in what the stacks measured:

* ``fractions`` — the training threads' sampled shares (device waits count
  with compute, as the hooks' ``compute_s`` holds them);
* ``sampled`` — ``attach.shares.SampledShares.to_json()``: each class's
  fraction, its samples and its Wilson interval, per training process, each
  worker's busy share and its fetch / decode / transform / collate parts,
  and the timeline of windows;
* ``verdict``, ``bottleneck`` — ``analysis.verdict`` on the attribution with
  the sampled shares as its step shares; judged only from
  ``MIN_TRAINING_SAMPLES`` samples of the training threads;
* ``recommendations`` — ``analysis.sampled_advice.recommend_sampled`` on the
  same attribution and verdict, with the loader's settings the stacks show
  (``attach.loader_read``, also in ``sampled.loader``): the kinds a profiled
  run gets, each ``not_predicted`` (no step times: no samples/s to predict);
  empty where too few samples were judged, the reason in
  ``absences["recommendations"]``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pipeprof.analysis.attribution import attribution
from pipeprof.analysis.evidence import LoadingEvidence, StepShares
from pipeprof.analysis.intervals import none
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.sampled_advice import recommend_sampled
from pipeprof.analysis.sections import SampledSection, SampledShare, SampledWindow
from pipeprof.analysis.summary import Summary, bottleneck, summary_record
from pipeprof.analysis.thresholds import MIN_COUNTED_STEPS
from pipeprof.analysis.verdict import verdict_from_attribution
from pipeprof.attach.loader_read import sampled_evidence
from pipeprof.attach.shares import SampledShares, sampled_shares, window_shares
from pipeprof.numbers import finite
from pipeprof.run_folder import Run

MIN_TRAINING_SAMPLES = 50  # of the training threads: below it a share's interval is wider than ±14 points
NOT_PREDICTED_INTERVAL = "not predicted: sampled from outside, no step times"


def is_sampled(run: Run) -> bool:
    """The run was attached from outside (run.json ``timing.method`` is ``"sampled"``)."""
    return run.info.timing.method == "sampled"


def sampled_summary(run: Run) -> Summary:
    """The summary of an attached run (see module docstring)."""
    summary = summary_record(run)
    shares = sampled_shares(run.stacks)
    fractions = shares.fractions()
    attr = attribution(run)
    enough = shares.training_samples >= MIN_TRAINING_SAMPLES
    loading = sampled_loading(shares)
    step = StepShares(steps=MIN_COUNTED_STEPS if enough else 0,
                      data_wait_fraction=finite(fractions["data_wait"]), h2d_fraction=finite(fractions["h2d"]),
                      collective_wait_fraction=finite(fractions["collective_wait"]),
                      compute_fraction=finite(fractions["compute"]), other_fraction=finite(fractions["other"]))
    judged = verdict_from_attribution(dataclasses.replace(attr, step=step, fractions=fractions,
                                                          loading=loading))
    too_few = (f"Too few samples of the training threads to judge: {shares.training_samples} "
               f"sampled, at least {MIN_TRAINING_SAMPLES} needed (attach for longer).")
    if not enough:
        judged = dataclasses.replace(
            judged, reason=Reason.written(too_few),
            evidence={"training_samples": shares.training_samples, "min_training_samples": MIN_TRAINING_SAMPLES})
    _, reason = bottleneck(judged)
    absences = dict(summary.absences)
    evidence = sampled_evidence(run.stacks, shares, run.samples, run.info, _ended_early(run))
    recs = tuple(recommend_sampled(dataclasses.replace(attr, step=step, loading=loading), judged, evidence))
    if not recs:  # none where the verdict could not judge: too few samples (or shares it could not read)
        absences["recommendations"] = too_few if not enough else "the sampled shares could not be judged"
    absences.update({f"loader.{key}": why for key, why in evidence.loader.absent.items()})  # settings not read
    return dataclasses.replace(
        summary, fractions=fractions, verdict=judged,
        reason=Reason("sampled", {}, (reason,)) if enough else judged.reason,
        recommendations=recs, intervals=tuple(none(NOT_PREDICTED_INTERVAL) for _ in recs),
        absences=absences,
        sampled=sampled_section(shares, window_shares(run.stacks), run.info.attach, evidence.loader.to_json()),
        # no step counted: the shares are sampled
        attribution=dataclasses.replace(summary.attribution, step=dataclasses.replace(step, steps=0), loading=loading))


def _ended_early(run: Run) -> str | None:
    """The caveat on the advice of an attach whose process exited before it ended."""
    attached = run.info.attach
    if attached.get("ended") != "exited":
        return None
    sampled_s = finite(attached.get("sampled_s"))
    seconds = f"the {sampled_s:.0f} s" if sampled_s is not None else "what was"
    return f"the process exited during the attach: this advice rests on {seconds} sampled before"


def sampled_loading(shares: SampledShares) -> LoadingEvidence:
    """The attribution's ``loading`` from the workers' samples: how many, each one's busy share, and the parts'
    shares of their busy samples (decode and transforms are prep, as the hooks split a sample's making)."""
    if not shares.workers:
        return LoadingEvidence(absent="no DataLoader worker was sampled (num_workers = 0, or none running): "
                                      "the training process makes its batches")
    busy = sum(w.busy.samples for w in shares.workers)
    part = {k: sum(w.parts[k].samples for w in shares.workers) for k in ("fetch", "decode", "transform", "collate")}
    busy_shares = [w.busy.fraction for w in shares.workers]
    by_worker: dict[str, float | None] = {str(w.pid): w.busy.fraction for w in shares.workers}
    return LoadingEvidence(workers=len(shares.workers), split="sampled",
                           fetch_fraction=part["fetch"] / busy if busy else None,
                           prep_fraction=(part["decode"] + part["transform"]) / busy if busy else None,
                           collate_fraction=part["collate"] / busy if busy else None,
                           busy_fraction_by_worker=by_worker,
                           worker_busy_mean_fraction=sum(busy_shares) / len(busy_shares))


def sampled_section(shares: SampledShares, windows: list[SampledShares], attach: dict[str, Any],
                    loader: dict[str, Any]) -> SampledSection:
    """summary.json ``sampled``: the shares, the timeline of ``windows``, the attach's settings and the loader's."""
    written = shares.to_json()
    return SampledSection(training_samples=shares.training_samples,
                          training={k: SampledShare.from_json(v.to_json()) for k, v in shares.training.items()},
                          timeline=tuple(_window(w) for w in windows), attach=attach, loader=loader,
                          shares={k: v for k, v in written.items() if k not in ("training_samples", "training")})


def _window(w: SampledShares) -> SampledWindow:
    busy = [x.busy.fraction for x in w.workers]
    f = w.fractions()
    return SampledWindow(t_start_s=w.t_start_s, t_end_s=w.t_end_s, training_samples=w.training_samples,
                         data_wait_fraction=f["data_wait"], h2d_fraction=f["h2d"],
                         collective_wait_fraction=f["collective_wait"], compute_fraction=f["compute"],
                         other_fraction=f["other"], worker_busy_mean_fraction=sum(busy) / len(busy) if busy else None)
