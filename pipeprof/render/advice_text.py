"""A recommendation in words: its reason, its model and its notes, from the ``Reason``s the record carries
(``analysis.recommend``: a kind and its numbers). The terminal, the report and summary.json (written at the edge,
``pipeline.derive.summary_document``) all say these."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.reasons import WRITTEN, Reason
from pipeprof.analysis.recommend import Recommendation
from pipeprof.render.prediction_text import DECODE_JPEG_BASIS, model_text
from pipeprof.render.script_text import script_words


def reason_text(r: Reason | None) -> str:
    """A reason's sentence (a recommendation's ``reason`` or a part of one); "" for None."""
    if r is None:
        return ""
    return _REASONS[r.kind](r.values)


def _change_words(change: dict[str, Any]) -> str:
    """A setting change as the command line gives it: "loader.num_workers=3 loader.pin_memory=true"."""
    return " ".join(f"{key}={fmt.setting_arg(value)}" for key, value in change.items()) or "no change"


def note_text(notes: tuple[Reason, ...]) -> str | None:
    """A recommendation's notes, joined by "; "; None without any."""
    return "; ".join(reason_text(n) for n in notes) if notes else None


def recommendation_words(rec: Recommendation) -> dict[str, str]:
    """summary.json's words of one recommendation: ``reason``, ``model`` and, where it has them, ``note`` and
    ``script_text``."""
    words = {"reason": reason_text(rec.reason), "model": model_text(rec.model)}
    note = note_text(rec.note)
    if note is not None:
        words["note"] = note
    if rec.code_change is not None:
        words["code_change"] = code_text(rec.code_change)
    if rec.script_text is not None:
        words["script_text"] = script_words(rec.script_text)
    return words


def code_text(r: Reason) -> str:
    """A code change no setting makes, as its author would write it."""
    return _CODES[r.kind](r.values)


_CODES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    WRITTEN: lambda n: str(n["text"]),
    "whole_batches_code": lambda n: ("give the Dataset a __getitems__(indices) that returns the whole batch, or use "
                                     "a BatchSampler with batch_size=None"),
    "reuse_loader_code": lambda n: ("build the DataLoader once, outside fit, and iterate that one loader in every "
                                    "fit (with persistent_workers=True it keeps its workers between passes)"),
    "decode_in_ram_code": lambda n: ("decode the data set once into RAM (e.g. a TensorDataset of decoded samples) "
                                     "and apply only the transforms per sample"),
    "decode_jpeg_code": lambda n: ("decode JPEG files with torchvision.io.decode_jpeg(torchvision.io.read_file(path)) "
                                   "instead of PIL.Image.open(path).convert('RGB'), and transforms.v2 on the uint8 "
                                   "tensor it returns"),
    "cache_after_code": lambda n: (f"cache the samples after {n['last']}: apply {' → '.join(n['prefix'])} once (e.g. "
                                   "in a first pass into a tensor held in RAM or saved to disk) and keep "
                                   f"{' → '.join(n['rest'])} in the per-sample transform"),
}


def _now(current: float) -> str:
    return f"{fmt.rate(current)} now"


def _other(other: Reason | None) -> str:
    return f"; {reason_text(other)}" if other is not None else ""


def _predicted_change(n: Mapping[str, Any]) -> str:
    what = ("taking whole batches at once" if n["whole_batches"] else
            ", ".join(f"{k}={v!r}" for k, v in n["settings"].items()))
    return what or "no change"


def _workers(n: Mapping[str, Any]) -> str:
    k, made_s = n["k"], n["made_s"]
    how = (f"a worker makes a sample in {fmt.duration(made_s)} "
           f"({fmt.rate(1 / made_s) if made_s > 0 else 'unbounded'} each); with {fmt.plural(k, 'worker')}"
           if k else f"the training process makes each sample in {fmt.duration(made_s)} between steps")
    return how + _other(n["other"])


def _threads_busy(n: Mapping[str, Any]) -> str:
    return (f"{fmt.plural(n['k'], 'worker')} + {fmt.plural(n['threads'], 'torch thread')} keep "
            f"{n['busy']:.2f} of the {n['available']:.2f} cores available busy")


def _oversubscribed(n: Mapping[str, Any]) -> str:
    fewer = n["fewer"]
    how = f"try torch.set_num_threads({fewer}) in the script" if n["script"] else f"measure --set train.threads={fewer}"
    return f"its {_threads_busy(n)}: {how}"


def _compute_bound(n: Mapping[str, Any]) -> str:
    current, ceiling = n["current"], n["ceiling"]
    headroom = fmt.change_pct(ceiling, current)
    above = f"is the same as the {_now(current)}" if headroom == "the same" else f"is {headroom} the {_now(current)}"
    threads = f"; {reason_text(n['threads'])}" if n["threads"] is not None else ""
    return (f"the run is compute-bound: only {fmt.pct(n['wait'], 1)} of step time waits for data; "
            f"the compute ceiling {fmt.rate(ceiling)} {above}, so a faster input pipeline "
            f"cannot gain more — make the model's step cheaper instead{threads}{_other(n['other'])}")


_FETCH_HOW = {"cold": "cold", "throttled": "throttled", "files": "one file per sample"}

_REASONS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    WRITTEN: lambda n: str(n["text"]),
    "predicted": lambda n: (f"{reason_text(n['why'])}: predicted {fmt.rate(n['x'])} ({n['tier']}; "
                            f"{_now(n['current'])})"),
    "not_predicted_change": lambda n: f"{reason_text(n['why'])}; not predicted: try --verify or tune",
    "predicted_change": _predicted_change,
    "ended_early": lambda n: (f"the run ended early ({n['status']}) after {fmt.plural(n['steps'], 'step')} "
                              f"({n['counted']} counted): this advice rests on those steps only, and a full run may "
                              "behave differently"),
    "needs_workers": lambda n: (f"drop {n['key']}= from the DataLoader(...) call: it needs workers" if n["script"]
                                else f"remove loader.{n['key']} from the scenario: it needs workers"),
    "other_load": lambda n: (f"processes outside the job kept {n['other']:.2f} of the {n['cores']:g} cores busy "
                             "during the run (not this job's threads)"),
    "workers": _workers,
    "fewer_threads": lambda n: (f"{_threads_busy(n)}; with {fmt.plural(n['fewer'], 'torch thread')} the workers get "
                                "more of them"),
    "images_only": lambda n: "remove data.format / data.quality from the scenario: they apply to images only",
    "throttle_on_device": lambda n: "remove data.throttle from the scenario: it does not apply to on-device data",
    "throttle_cache": lambda n: "remove data.throttle from the scenario (slow storage is what the cache avoids)",
    "on_device": lambda n: (f"the data set is small ({fmt.byte_size(n['data_bytes'])}): held on the device, "
                            f"batches are taken by index with no loading at all ({fmt.pct(n['wait'])} of "
                            "step time waits for data now)"),
    "pin_memory": lambda n: (f"host → device copies take {fmt.pct(n['h2d'])} of step time; pinned memory can make "
                             "them faster and lets them overlap compute"),
    "batch_fetch": lambda n: (f"per-sample indexing and collate are {fmt.pct(n['share'])} of making a batch "
                              f"({fmt.duration(n['fetch'])} + {fmt.duration(n['collate'])} per sample): take whole "
                              "batches at once"),
    "decode_share": lambda n: (f"decoding is {fmt.pct(n['share'])} of making a batch ({fmt.duration(n['prep'])} per "
                               "sample)"),
    "fetch_share": lambda n: (f"fetching from {n['storage']} ({_FETCH_HOW[n['how']]}) is {fmt.pct(n['share'])} of "
                              f"making a batch ({fmt.duration(n['fetch'])} per sample)"),
    "cache_in_ram": lambda n: (f"{reason_text(n['what'])}; with decoded samples cached in RAM "
                               f"fetch{' and decode' if n['decode'] else ''} go away"),
    "handover_unmeasured": lambda n: (
        "estimated from a run without workers, whose loop never ran beside one: what receiving each batch from a "
        "worker costs the training process (unpickling it, its shared memory) is not in this estimate, which may "
        "promise too much; " + ("`pipeprof profile --steps N` measures the loop beside workers"
                                if n["script"] else "the what-if probes or --verify measure it")),
    "within_noise": lambda n: ("within the noise of " + " and ".join(_change_words(c) for c in n["others"])
                               + " (each predicted inside the other's interval): ranked by the smaller change, "
                                 "the same way every run"),
    "transform_saving": lambda n: f"{reason_text(n['why'])}, from the measured per-transform costs",
    "code_change_only": lambda n: "a code change: no scenario setting expresses it, so --verify cannot re-run it",
    "prefetch": lambda n: (f"supply is bursty: {fmt.pct(n['empty'])} of steps found the queue empty while the workers "
                           f"were busy only {fmt.pct(n['busy'])} of the time; a deeper queue "
                           f"({n['k']} × {n['factor']} batches) lets them run ahead, saving the bursts' waits"),
    "oversubscribed": _oversubscribed,
    "compute_bound": _compute_bound,
    "cores_saturated": lambda n: (f"more workers will not help: the job keeps {fmt.pct(n['busy'])} of the "
                                  f"{n['available']:.2f} cores available busy (training process and workers)"
                                  f"{_other(n['other'])}"),
    "no_gain": lambda n: (f"no change predicts a gain of {fmt.pct(n['min_gain'], 0)} or more from what this run "
                          f"measured ({_now(n['current'])}, compute ceiling {fmt.rate(n['ceiling'])}; "
                          f"{model_text(n['storage'])}){_other(n['other'])}; --verify or tune measures a change"),
    "persistent": lambda n: (f"the first step of {fmt.plural(n['epochs'], 'epoch')} waited "
                             f"{fmt.duration(n['wait'])} on average against a median wait "
                             f"of {fmt.duration(n['median_wait'])} (median step {fmt.duration(n['median_step'])}): "
                             "workers are started anew every time the loader is iterated again; keeping them saves "
                             f"{fmt.duration(n['saved'])} of {fmt.duration(n['total'])}"),
    "recreated_loaders": lambda n: (f"{n['count']} DataLoaders named {n['name'] or 'the training loader'} were "
                                    "built, each iterated once (a new DataLoader per fit); the first step of each "
                                    f"new one's pass waited {fmt.duration(n['wait'])} on average against a median "
                                    "wait of "
                                    f"{fmt.duration(n['median_wait'])}, starting its workers: one loader built once "
                                    f"and iterated again, its workers kept, saves {fmt.duration(n['saved'])} of "
                                    f"{fmt.duration(n['total'])}"),
    # The risk of persistent workers on loaders re-created per fit (predicted x1.13, ~3x slower).
    "recreated_loaders_risk": lambda n: ("a new DataLoader is built per fit: persistent_workers would keep each one's "
                                         "workers alive until garbage collection; build the loader once and reuse it"),
    # analysis.ranks: a rank's recommendation said for the job
    "on_every_rank": lambda n: f"on every rank: {reason_text(n['reason'])}",
    "straggler": lambda n: f"{_straggler(n)}{reason_text(n['reason'])}",
    "straggler_pace": lambda n: (f"{_straggler(n)}{reason_text(n['reason'])}; the job goes at the slowest rank's "
                                 f"pace: {n['world']} ranks × {fmt.rate(n['pace'])}"
                                 + (f", bounded by rank {n['next_rank']}'s own pace {fmt.rate(n['bound'])}"
                                    if n["bound"] is not None else "")
                                 + f" = {fmt.rate(n['predicted'])} for the job ({fmt.rate(n['job'])} now)"),
    "straggler_no_gain": lambda n: (f"{_straggler(n)}none of its changes would speed the job up by "
                                    f"{fmt.pct(n['min_gain'], 0)} or more: past {fmt.rate(n['bound'])} rank "
                                    f"{n['next_rank']} sets the pace"),
}


def _straggler(n: Mapping[str, Any]) -> str:
    where = f" on node {n['node']}" if n["node"] else ""
    return f"rank {n['rank']} (the straggler{where}): "


# -- analysis.sampled_advice: an attached run's recommendations, from sampled shares ---------------------------

TRY_PROFILE = "not predicted (sampled from outside): try pipeprof profile --verify or pipeprof tune on the script"


def _sampled_workers_none(n: Mapping[str, Any]) -> str:
    wait, wanted = n["wait"], n["wanted"]
    how = (f"the training process makes its own batches (no worker sampled): {fmt.pct(wait)} of its samples "
           f"wait for them and {fmt.pct(1 - wait)} compute, so ⌈{wait:.2f} / {1 - wait:.2f}⌉ = "
           f"{fmt.plural(wanted, 'worker')} making batches at its pace keep up")
    return how + (f"; {n['idle']:.2f} cores were left idle" if n["idle"] is not None else "")


def _sampled_workers(n: Mapping[str, Any]) -> str:
    k, busy, wait = n["k"], n["busy"], n["wait"]
    how = (f"{fmt.plural(k, 'worker')} were busy {fmt.pct(busy)} of their samples while the training threads "
           f"waited for a batch in {fmt.pct(wait)} of theirs: ⌈{k} × {busy:.2f} / {1 - wait:.2f}⌉ = "
           f"{fmt.plural(n['wanted'], 'worker')} keep up at the sampled pace")
    return how + (f"; {reason_text(n['idle'])}" if n["idle"] is not None else "")


def _sampled_idle(n: Mapping[str, Any]) -> str:
    words = f"{n['left']:.2f} cores were left idle, and a worker kept {n['each']:.2f} busy"
    return words + (f", so at most {n['cap']}" if n["cap"] is not None else "")


def _sampled_decode(n: Mapping[str, Any]) -> str:
    how = f" ({', '.join(n['names'])})" if n["names"] else ""
    return f"decoding{how} took {fmt.pct(n['fraction'])} of the workers' busy samples"


def _sampled_nothing(n: Mapping[str, Any]) -> str:
    workers = f"; the workers were busy only {fmt.pct(n['busy'])} of their samples" if n["busy"] is not None else ""
    return (f"no setting change is supported by the samples: {fmt.pct(n['wait'])} of the training threads' samples "
            f"wait for data{workers} (where the wait falls is in the verdict)")


_REASONS.update({
    "sampled_not_predicted": lambda n: f"{reason_text(n['why'])}; {TRY_PROFILE}",
    "sampled_workers_none": _sampled_workers_none,
    "sampled_workers": _sampled_workers,
    "sampled_idle": _sampled_idle,
    "sampled_no_core": lambda n: f"more workers will not help: {reason_text(n['idle'])}",
    "sampled_cores_unsampled": lambda n: (f"{reason_text(n['how'])}; the cores left idle were not sampled "
                                          f"({n['absent'] or 'no CPU samples'})"),
    "sampled_pin_memory": lambda n: (f"host → device copies took {fmt.pct(n['h2d'])} of the training threads' "
                                     "samples and no pinning was seen; pinned memory can make them faster and lets "
                                     "them overlap compute"),
    "sampled_pin_unread": lambda n: f"pin_memory could not be read ({n['absent'] or 'not seen'})",
    "sampled_decode": _sampled_decode,
    "sampled_decode_in_ram": lambda n: f"{reason_text(n['decode'])}: decoded once, it costs nothing after",
    "sampled_decode_jpeg": lambda n: (f"{reason_text(n['decode'])}, PIL's among them: torchvision's decode_jpeg "
                                      "decodes JPEG files faster"),
    "sampled_compute_bound": lambda n: (f"the job is compute-bound: only {fmt.pct(n['wait'], 1)} of the training "
                                        "threads' samples wait for data, so a faster input pipeline cannot gain "
                                        "more — make the model's step cheaper instead"),
    "sampled_saturated": lambda n: (f"more workers will not help: the job kept {n['busy']:.2f} of the "
                                    f"{n['available']:.2f} cores available to a rank busy"),
    "sampled_nothing": _sampled_nothing,
    "sampled_negative": lambda n: (f"{reason_text(n['why'])}; pipeprof profile on the script measures steps and "
                                   "predicts changes"),
})


# -- analysis.transform_advice: the transform and decode changes, from the measured per-transform costs -----------


def _decode_measured(n: Mapping[str, Any]) -> str:
    how = f" ({n['how']})" if n["how"] else ""
    at = f"{fmt.pct(n['share'])} of a sample's making, " if n["share"] is not None else ""
    return f"decoding{how} measured at {at}{fmt.duration(n['per_sample_s'])} per sample"


def _cache_after(n: Mapping[str, Any]) -> str:
    prefix = n["prefix"]
    return (f"{n['top']} is deterministic and takes {fmt.pct(n['top_share'])} of the transforms' time "
            f"({fmt.duration(n['top_s'])} per sample); {' → '.join(prefix)} give{'s' if len(prefix) == 1 else ''} "
            f"the same output every epoch (the first random transform is {n['first_random']}): caching the samples "
            f"after {n['last']} saves {fmt.duration(n['prefix_s'])} of transforms"
            + (f" and {fmt.duration(n['decode_s'])} of decoding" if n["decode_s"] else "") + " per sample")


_REASONS.update({
    "decode_measured": _decode_measured,
    "cache_after": _cache_after,
    "decode_in_ram": lambda n: f"{reason_text(n['decode'])}: decoded once, it costs nothing after",
    "decode_jpeg": lambda n: (f"{reason_text(n['decode'])}; decode_jpeg is estimated to save "
                              f"{fmt.pct(1 - n['keeps'])} of it, {fmt.duration(n['saved'])} per sample (an estimate: "
                              f"{DECODE_JPEG_BASIS})"),
    "cache_after_risk": lambda n: (f"the cached samples take memory (or disk) at their size after {n['last']}; read "
                                   "from a disk instead of RAM they can cost more than they save"),
    "decode_in_ram_risk": lambda n: ("the decoded data set must fit in RAM (decoded images are several times their "
                                     "files' size)"),
    "decode_jpeg_risk": lambda n: ("only for JPEG files; transforms that need a PIL image convert back and can lose "
                                   "the saving"),
})


# -- analysis.ranks: a node's ranks that want more cores than it has ------------------------------------------


def _oversubscribed_node(n: Mapping[str, Any]) -> str:
    ranks = n["ranks"]
    if n["alike"]:
        _, workers, threads = ranks[0]
        how = f"{len(ranks)} ranks × ({fmt.plural(workers, 'worker')} + {fmt.plural(threads, 'torch thread')})"
    else:
        how = " + ".join(f"rank {rank}: ({w} + {t})" for rank, w, t in ranks)
    where = f"node {n['node']}" if n["node"] else "the node"
    return (f"{how} = {n['busy']} busy threads on {fmt.plural(n['cores'], 'core')} of {where}: the ranks' workers and "
            f"torch threads take turns on the cores, each rank's model sees only its own; "
            f"{fmt.plural(n['share'], 'core')} per rank: {fmt.plural(n['new_workers'], 'worker')} + "
            f"{fmt.plural(n['new_threads'], 'torch thread')} on each rank")


_REASONS["oversubscribed_node"] = _oversubscribed_node
