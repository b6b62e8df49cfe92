"""A prediction's model in words: the arithmetic ``analysis.prediction`` and ``analysis.change_model`` did, from
the ``Reason`` each prediction carries (a kind and its numbers). summary.json's recommendation ``model`` is this
text, written at the edge (``pipeline.derive.summary_document``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.reasons import WRITTEN, Reason

TRY_MEASURING = "not predicted: nothing this run measured carries this change; try --verify or tune"
# What analysis.transform_advice.DECODE_JPEG_KEEPS rests on, said with every estimate made from it.
DECODE_JPEG_BASIS = ("decode_jpeg took 0.48-0.66 of PIL's open + convert on 64-500 px JPEGs (measured once on "
                     "pipeprof's 2-core machine, not in this run)")


def model_text(r: Reason | None) -> str:
    """The sentence of a prediction's model (or of a part of one); "" for None."""
    if r is None:
        return ""
    return _MODELS[r.kind](r.values)


def _storage(storage: float, inside: bool = False) -> str:
    if not math.isfinite(storage):
        return ""
    return f", storage {fmt.rate(storage)}" if inside else f", at most storage {fmt.rate(storage)}"


def _cores(n: Mapping[str, Any]) -> str:
    shared = f" a rank (the {n['cores'] - n['other']:.2f} shared by {n['ranks']} ranks)" if n["ranks"] > 1 else ""
    other = f" (processes outside the job used {n['other']:.2f} of {n['cores']:g})" if n["other"] >= 0.05 else ""
    return f"{n['available']:.2f} cores available{shared}{other}"


def _no_core_left(n: Mapping[str, Any]) -> str:
    main = f", the training process uses {n['main']:.2f}" if n["main"] is not None else ""
    return f"no core left for workers: {model_text(n['cores'])}{main}"


def _estimate_workers(n: Mapping[str, Any]) -> str:
    p = n["p"]
    main = (f" beside the training process's {n['main_at']:.2f} at that pace" if n["main_at"] is not None else "")
    return (f"min(compute ceiling {fmt.rate(n['c'])}, {n['k']} × {fmt.rate(1 / p) if p > 0 else 'unbounded'} a "
            f"worker on {n['w']:.2f} free cores{main} = {fmt.rate(n['rate'])}"
            f"{_storage(n['storage'], True)}) = {fmt.rate(n['x'])}; {model_text(n['cores'])}")


def _probe_beside_run(n: Mapping[str, Any]) -> str:
    return (f"X_run · probe/probe(as run) = {fmt.rate(n['run'])} × {fmt.rate(n['probe'])} / "
            f"{fmt.rate(n['as_run'])}: {model_text(n['what'])} measured after the run beside the run's own loop "
            f"(what_ifs.{n['source']})")


def _loop_fed_by(n: Mapping[str, Any]) -> str:
    threads = n.get("threads")
    return (f"the training loop fed by {fmt.plural(n['k'], 'worker')}"
            + (f" at {fmt.plural(int(threads), 'torch thread')}" if threads is not None else ""))


def _beside_workers(n: Mapping[str, Any]) -> str:
    k, kp = n["k"], n["k_probed"]
    words = (f"; C beside workers = {fmt.rate(n['c'])}, the loop's compute measured beside "
             f"{fmt.plural(kp, 'worker')} (receiving their batches included: what_ifs.train_workers)")
    if n.get("anchored") is not None:
        words += (f"; read against the loop measured with {fmt.plural(kp, 'worker')} ({fmt.rate(n['measured'])}): "
                  f"that × the estimate's X({k}) / X({kp}) = {fmt.rate(n['anchored'])}")
    if n["cap"] is not None:
        words += (f"; at most {k}/{kp} × the loop measured with {fmt.plural(kp, 'worker')} "
                  f"= {fmt.rate(n['cap'])}")
    return model_text(n["model"]) + words


def _storage_ceiling(n: Mapping[str, Any]) -> str:
    case = n["case"]
    if case == "probe":
        return f"storage ceiling {fmt.rate(n['rate'])} (probe, cold reads)"
    why = {"not_cold": "the data is not read from a cold disk", "no_rates": "the probe has no cold read rates",
           "absent": n.get("absent") or "no probe"}[case]
    return f"no storage ceiling ({why})"


PERSISTENT_MODEL = "n / (counted time − excess wait of re-iterated passes' first steps)"

_MODELS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    WRITTEN: lambda n: str(n["text"]),
    "not_predicted": lambda n: f"{TRY_MEASURING} ({model_text(n['why'])})",
    "no_ceiling": lambda n: "no compute ceiling measured",
    "cores": _cores,
    "no_core_left": _no_core_left,
    "estimate_no_workers": lambda n: (f"1/(p + 1/C) = 1/({fmt.duration(n['p'])} + 1/{fmt.rate(n['c'])}) = "
                                      f"{fmt.rate(n['x'])}{_storage(n['storage'])}"),
    "estimate_workers": _estimate_workers,
    "probe_beside_run": _probe_beside_run,
    "probe_as_read": lambda n: (f"{model_text(n['what'])} measured after the run (no as-run loop beside it: the "
                                "probe's samples/s as read)"),
    "ratio_missing": lambda n: f"{model_text(n['what'])}: {model_text(n['model'])}",
    "ratio": lambda n: (f"X_run · X(after)/X(before), {model_text(n['what'])}: X(before) = "
                        f"{model_text(n['before'])}; X(after) = {model_text(n['after'])}"),
    "prep_saved": lambda n: f"prep − {fmt.duration(n['saved_s'])}",
    "assumed": lambda n: f"{model_text(n['model'])}; {model_text(n['assumed'])}",
    "decode_jpeg_assumed": lambda n: f"decode × {n['keeps']} with decode_jpeg (assumed: {DECODE_JPEG_BASIS})",
    # analysis.change_model
    "not_a_setting": lambda n: f"{', '.join(n['keys'])}: not a setting predicted",
    "no_counted_steps": lambda n: "no counted steps",
    "combined": lambda n: "combined with another",
    "storage_change": lambda n: f"data.storage = {n['to']!r} from {n['from']!r}",
    "warm_and_cold": lambda n: "warm and cold reads of the same storage",
    "pin_memory_unchanged": lambda n: "the run as measured: pinned memory changes nothing here",
    "pin_memory_unmeasured": lambda n: "pinned memory's effect on the copy was not measured",
    "as_measured": lambda n: "the run as measured",
    "persistent_off": lambda n: "turning persistent workers off",
    "prefetch_other_workers": lambda n: "prefetch with another number of workers",
    "loop_fed_by": _loop_fed_by,
    "loop_fed_by_ram": lambda n: (f"the training loop fed by {fmt.plural(n['k'], 'worker')} over decoded samples "
                                  "in RAM"),
    "no_loading_records_workers": lambda n: "no loading records to estimate workers from",
    "fewer_workers": lambda n: f"fewer workers than the run's {n['k']}: their effect was not measured",
    "beside_workers": _beside_workers,
    "worker_cost": lambda n: (f"{model_text(n['model'])}; a worker's CPU per sample {fmt.duration(n['cpu_s'])}, "
                              f"measured with {fmt.plural(n['k_probed'], 'worker')} (what_ifs.loader_workers)"),
    "gpu_threads": lambda n: ("the job computes on a GPU: torch's CPU threads are not its compute, and no probe "
                              "measured them"),
    "threads_unmeasured": lambda n: f"compute at {fmt.plural(int(n['threads']), 'torch thread')} was not measured",
    "threads_ceiling": lambda n: (f"{model_text(n['model'])}; C at {n['threads']:g} threads = C × the loop alone "
                                  f"at {n['threads']:g} / at {n['run_threads']:g} threads "
                                  "(what_ifs.device_loop_threads)"),
    "batches_unmeasured": lambda n: "taking whole batches was not measured" + (" with workers" if n["workers"] else ""),
    "whole_batches": lambda n: ("1/(1/C_loop + h2d per sample): the loop taking whole batches by one index, "
                                "measured after the run (what_ifs.device_loop), plus the run's copy"),
    "device_loop": lambda n: "the training loop over on-device data",
    "device_ceiling": lambda n: (f"C = {fmt.rate(n['c'])}, the compute ceiling ("
                                 + ("measured after the run alone" if n["alone"] else "n / Σ(compute + h2d)")
                                 + "): no loading is left"),
    "ram_loader": lambda n: (f"{model_text(n['model'])}; p = decoded samples in RAM through a 0-worker loader, "
                             "measured after the run (what_ifs.ram_loader)"),
    "no_loading_records": lambda n: "no loading records",
    "decode_share_unmeasured": lambda n: "the decode's share of preparing a sample was not measured",
    "no_passes": lambda n: "no workers or no epochs to tell passes by",
    "persistent_model": lambda n: PERSISTENT_MODEL + {"saved": "",
                                                      "no_start": ": no counted pass start, nothing to save",
                                                      "none_longer": ": none waited longer"}[n["case"]],
    "prefetch_model": lambda n: ("min(n / (counted time − Σ max(wait − median wait, 0)), X / busy): the bursts' "
                                 "waits saved, at most the workers' output busy all the time"
                                 + (f" (busy {fmt.pct(n['busy'])})" if n["busy"] is not None
                                    else " (their busy share not measured)")),
    "storage_ceiling": _storage_ceiling,
    # analysis.recommend: the persistent workers of loaders built anew, and the negatives
    "new_loaders": lambda n: "n / (counted time − excess wait of new loaders' first steps)",
    "compute_ceiling": lambda n: "C = n / Σ(compute + h2d)",
    "cores_none_left": lambda n: "W = the cores available, none left",
    "all_candidates": lambda n: "all candidates",
    # analysis.ranks: the job at its slowest rank's pace, and a node's cores shared by its ranks
    "job_pace": lambda n: "world_size × min(X', R_next)" + (f", X' = {model_text(n['model'])}"
                                                            if n["model"] is not None else ""),
    # analysis.sampled_advice: an attached run's, never predicted
    "sampled_shares": lambda n: "sampled shares (attach): no step times to predict from",
    "node_cores": lambda n: ("Σ over the node's ranks (num_workers + torch threads) against its usable cores; "
                             "⌊N / ranks⌋ cores per rank; not predicted"),
}
