"""The verdict and its attribution, from hand-made runs whose right answer follows from the numbers."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from pipeprof.analysis.attribution import NO_PROBE, Attribution, attribution
from pipeprof.analysis.evidence import CpuEvidence, DiskCeiling, GpuEvidence, LoadingEvidence, StepShares
from pipeprof.analysis.thresholds import MIN_COUNTED_STEPS
from pipeprof.analysis.verdict import CLASSES, verdict, verdict_from_attribution
from pipeprof.pipeline.derive import summarize
from pipeprof.render.cache_text import cache_words
from pipeprof.render.console import print_summary
from pipeprof.render.html import render_html
from pipeprof.render.verdict_text import verdict_json, verdict_notes, verdict_sentence
from pipeprof.run_folder import LOADING_COLUMNS, PROCESS_COLUMNS, SAMPLE_COLUMNS, STEP_COLUMNS, Run, to_json

STEP_S = 0.1  # every step lasts 100 ms


def make_run(*, wait: float = 0.3, h2d: float = 0.01, n: int = 40, warmup: int = 4, workers: int = 0,
             prefetch_factor: int | None = None, ready=None, loading: tuple[float, float, float] | None = None,
             threads: int = 2, cores: int = 2, read_bytes_per_s: float = 0.0, gpu_util: float | None = None,
             storage: str = "ram") -> Run:
    """``n`` steps of 100 ms: ``wait`` and ``h2d`` fractions of each, compute the rest.

    ``ready``: batches ready per step (a number, a list, or None for not observed).
    ``loading``: (fetch, prep, collate) seconds per batch of 128 samples, made by the
    training process (0 workers) or by the workers taking turns, each batch just in
    time for its step; None for a run without loading records.
    """
    step = np.arange(n)
    steps = pd.DataFrame({
        "step": step, "epoch": 0, "warmup": step < warmup, "t_start_s": step * STEP_S,
        "data_wait_s": wait * STEP_S, "h2d_s": h2d * STEP_S, "compute_s": (1 - wait - h2d) * STEP_S,
        "step_s": STEP_S, "host_wait_s": wait * STEP_S, "samples": 128, "loss": 1.0, "correct": 100,
        "ready_batches": np.nan if ready is None else np.broadcast_to(np.asarray(ready, dtype=float), (n,)),
        "collective_wait_s": 0.0,
    })[STEP_COLUMNS]
    t = np.arange(0.0, n * STEP_S, 0.05)
    samples = pd.DataFrame({
        "t_s": t, "cpu_util_pct": 90.0, "main_cpu_pct": 120.0, "workers_cpu_pct": 50.0 if workers else 0.0,
        "main_rss_bytes": 1e8, "workers_rss_bytes": 0.0, "tree_rss_bytes": 1e8, "workers": workers,
        "read_bytes_per_s": read_bytes_per_s,
    })[SAMPLE_COLUMNS]
    gpu = {"available": False, "reason": "no GPU in use: training device is cpu"}
    if gpu_util is not None:
        samples["gpu_util_pct"] = gpu_util
        gpu = {"available": True, "name": "Fake GPU"}
    meta = {
        "scenario": {"name": "hand-made", "data": {"storage": storage},
                     "loader": {"batch_size": 128, "num_workers": workers, "prefetch_factor": prefetch_factor}},
        "device": "cpu", "gpu": gpu, "absences": {},
        "environment": {"cpu_cores": cores, "torch_threads": threads},
    }
    run = Run(meta=meta, steps=steps, samples=samples)
    if loading is not None:
        fetch, prep, collate = loading
        made_s = fetch + prep + collate
        end = step * STEP_S
        run.loading = pd.DataFrame({
            "batch": step, "step": step, "worker": step % workers if workers else -1, "pid": 100,
            "t_start_s": end - made_s, "t_end_s": end, "fetch_s": fetch, "prep_s": prep, "collate_s": collate,
            "samples": 128, "nbytes": 128 * 3136, "fetch_max_s": fetch / 64,
        }).reindex(columns=LOADING_COLUMNS)  # columns added later (core_wait_s) unknown: NaN
    return run


# -- one run per class -----------------------------------------------------------------


def test_compute_bound():
    v = verdict(make_run(wait=0.02, loading=(0.001, 0.0, 0.0005)))
    assert (v.klass, v.rule, v.degree) == ("compute", "R2", None)
    assert v.evidence["data_wait_fraction"] == pytest.approx(0.02)
    assert (v.reason.kind, v.reason["data_wait_fraction"]) == ("compute", pytest.approx(0.02))  # numbers, not words
    assert "Compute-bound" in verdict_sentence(v) and "2.0%" in verdict_sentence(v)


@pytest.mark.parametrize("loading, klass, words", [
    ((0.025, 0.003, 0.002), "input:fetch", "fetching samples"),
    ((0.003, 0.025, 0.002), "input:prep", "decoding and transforming"),
    ((0.003, 0.002, 0.025), "input:main", "collating"),
])
def test_no_workers_split_by_loading_fractions(loading, klass, words):
    v = verdict(make_run(wait=0.3, loading=loading))  # a 30 ms batch for a 30 ms wait
    assert (v.klass, v.rule, v.degree) == (klass, "R4", "input-bound")
    assert words in verdict_sentence(v) and "num_workers = 0" in verdict_sentence(v)
    cause = v.reason.parts[0]  # the input's reason holds its cause's: the largest part, with its share
    assert (cause.kind, cause["fraction"]) == ("serial", pytest.approx(25 / 30))
    assert max(v.evidence[f"{p}_fraction"] for p in ("fetch", "prep", "collate")) == pytest.approx(25 / 30)


def test_no_workers_wait_outside_batch_making_is_the_training_process():
    v = verdict(make_run(wait=0.3, loading=(0.008, 0.001, 0.001)))  # 10 ms of batch making for a 30 ms wait
    assert (v.klass, v.rule) == ("input:main", "R3")
    assert v.evidence["production_over_wait_fraction"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("loading, klass, rule", [
    ((0.008, 0.007, 0.001), "input:main", "R3"),  # own work 12 ms + collate 1 against fetch 8 and prep 7
    ((0.020, 0.002, 0.002), "input:fetch", "R4"),  # own work 6 ms + collate 2 against fetch 20
])
def test_no_workers_own_work_counts_against_each_part_not_all_of_them(loading, klass, rule):
    # A 28 / 30 ms wait; making a batch covers more than half of it, yet in the first
    # run the training process's own work is the largest share of the wait.
    wait = 0.28 if rule == "R3" else 0.3
    v = verdict(make_run(wait=wait, loading=loading))
    assert (v.klass, v.rule) == (klass, rule), verdict_sentence(v)
    assert v.evidence["production_over_wait_fraction"] > 0.5


def test_workers_with_a_full_queue_yet_waiting_is_the_training_process():
    # memmap-workers: 8 of 8 ready on most steps, yet the loop waits
    v = verdict(make_run(wait=0.22, workers=2, prefetch_factor=4, ready=8, loading=(0.01, 0.002, 0.003)))
    assert (v.klass, v.rule) == ("input:main", "R5")
    ev = v.evidence
    assert ev["capacity_batches"] == 8 and ev["full_step_fraction"] == 1.0 and ev["empty_step_fraction"] == 0.0
    assert ev["ready_wait_fraction"] == 1.0
    assert "wait_when_empty_mean_s" not in ev  # no step found it empty: no such mean, not a zero
    assert "prefetch queue full (all 8 batches it holds ready)" in verdict_sentence(v)


def test_saturated_workers_set_the_pace_whatever_the_queue_showed():
    # Each worker makes every other batch in 190 of its 200 ms (busy ~95%): a batch "ready" at
    # next() was not the one the loop needed in time; the workers are the limit, by fetch.
    v = verdict(make_run(wait=0.5, workers=2, ready=1, loading=(0.15, 0.03, 0.01)))
    assert (v.klass, v.rule) == ("input:fetch", "R6"), verdict_sentence(v)
    assert v.evidence["ready_wait_fraction"] == pytest.approx(1.0)
    assert v.evidence["worker_busy_mean_fraction"] >= 0.8 and "busy" in verdict_sentence(v)


def test_workers_with_an_empty_queue_and_fetch_dominant_is_storage():
    v = verdict(make_run(wait=0.6, workers=2, ready=0, loading=(0.15, 0.01, 0.005)))
    assert (v.klass, v.rule) == ("input:fetch", "R6")
    assert v.evidence["empty_step_fraction"] == 1.0
    assert v.evidence["capacity_batches"] == 4  # prefetch_factor None -> PyTorch's default 2
    assert "cannot keep up" in verdict_sentence(v)


def test_workers_with_an_empty_queue_and_prep_dominant_is_preprocessing():
    v = verdict(make_run(wait=0.6, workers=2, ready=0, loading=(0.01, 0.15, 0.005)))
    assert (v.klass, v.rule) == ("input:prep", "R6")


def test_h2d_bound():
    v = verdict(make_run(wait=0.1, h2d=0.3))
    assert (v.klass, v.rule) == ("h2d", "R1")
    assert v.evidence["h2d_fraction"] == pytest.approx(0.3)


def test_one_headline_the_coarse_bottleneck_is_the_verdicts():
    """Data wait 0.25 and h2d 0.30: once an "Input-bound" card beside a "bound by the copy" verdict."""
    s = summarize(make_run(wait=0.25, h2d=0.30))
    assert (s["verdict"]["class"], s["bottleneck"]) == ("h2d", "h2d")
    assert s["bottleneck_reason"].startswith("bound by the copy to the device: 30% of step time")
    s = summarize(make_run(wait=0.12, loading=(0.01, 0.001, 0.001)))  # partly input-bound, by storage
    assert (s["verdict"]["class"], s["bottleneck"]) == ("input:fetch", "input")
    assert s["bottleneck_reason"].startswith("partly input-bound: 12%")


def test_h2d_below_the_wait_is_not_h2d():
    assert verdict(make_run(wait=0.4, h2d=0.25, loading=(0.03, 0.01, 0.0))).klass == "input:fetch"


def test_balanced_when_the_queue_is_neither_ready_nor_empty():
    ready = [0, 5] * 20  # half the steps find a batch ready, and the wait is the same on both
    v = verdict(make_run(wait=0.3, workers=2, prefetch_factor=4, ready=ready, loading=(0.01, 0.01, 0.0)))
    assert (v.klass, v.rule) == ("balanced", "R7")
    assert v.evidence["ready_wait_fraction"] == pytest.approx(0.5)
    assert "bursty" in verdict_sentence(v)


def test_no_counted_steps():
    v = verdict(make_run(n=4, warmup=4))
    assert (v.klass, v.rule) == ("unknown", "R0")  # not "balanced": that word means a wait, no one cause


def test_partly_input_bound_between_5_and_20_percent():
    v = verdict(make_run(wait=0.12, loading=(0.01, 0.001, 0.001)))
    assert v.klass == "input:fetch" and v.degree == "partly input-bound"
    assert verdict_sentence(v).startswith("Partly input-bound (12% of step time")


def test_every_class_is_reachable_and_known():
    seen = {verdict(r).klass for r in (
        make_run(wait=0.01), make_run(wait=0.3, h2d=0.4), make_run(wait=0.3, loading=(0.03, 0, 0)),
        make_run(wait=0.3, loading=(0, 0.03, 0)), make_run(wait=0.3, loading=(0, 0, 0.03)),
        make_run(wait=0.3, workers=2, ready=[0, 3] * 20, loading=(0.01, 0.01, 0)), make_run(n=4, warmup=4))}
    # input:start is set after the table, where spawned workers' start-up holds the wait at each pass's start
    from pipeprof.analysis.worker_start import with_start_verdict, worker_start_summary

    run = make_run(wait=0.3, workers=2, ready=[0, 3] * 20, loading=(0.01, 0.01, 0))
    steps = run.steps.assign(epoch=np.arange(len(run.steps)) // 10)
    steps["data_wait_s"] = np.where(steps["epoch"].diff().fillna(1) != 0, 5.0, 0.001)
    started = worker_start_summary([{"loader": 0, "worker": 0, "pid": 9, "process_start_s": t, "prepare_t0_s": t + 0.2,
                                     "prepare_t1_s": t + 4.0, "unpickled_s": t + 4.5} for t in (0.0, 60.0)], 120.0)
    seen.add(with_start_verdict(verdict(run), started, steps).klass)
    assert seen == set(CLASSES)


# -- attribution ----------------------------------------------------------------------


def test_oversubscription_is_detected_and_said():
    run = make_run(wait=0.22, workers=2, prefetch_factor=4, ready=8, loading=(0.01, 0.002, 0.003))
    cpu = attribution(run).cpu
    assert (cpu.num_workers, cpu.torch_threads, cpu.cores_usable, cpu.threads_wanted) == (2, 2, 2, 4)
    assert cpu.oversubscribed is True
    assert cpu.busy_cores == pytest.approx(1.7)  # 120% + 50% of one core
    notes = verdict_notes(verdict(run))
    assert any("2 workers + 2 torch threads on 2 usable cores" in n for n in notes)


@pytest.mark.parametrize("workers, threads, cores", [(0, 2, 2), (1, 1, 2), (2, 2, 8)])
def test_no_oversubscription_when_cores_suffice(workers, threads, cores):
    run = make_run(wait=0.01, workers=workers, threads=threads, cores=cores, ready=1 if workers else None)
    assert attribution(run).cpu.oversubscribed is False
    assert not any("torch threads" in n for n in verdict_notes(verdict(run)))


def test_absent_probe_and_gpu_are_reasons_never_zeros():
    attr = attribution(make_run(read_bytes_per_s=5e6))
    assert attr.disk.mean_read_bytes_per_s == pytest.approx(5e6)
    assert attr.disk.ceiling == DiskCeiling(absent=NO_PROBE)
    assert attr.gpu == GpuEvidence(absent="no GPU in use: training device is cpu")
    assert attr.gpu.mean_util_pct is None and attr.prefetch.capacity_batches is None
    assert attr.prefetch.absent is not None and attr.prefetch.absent.startswith("no prefetch queue: num_workers = 0")
    # in summary.json an absent section is its reason alone
    assert attr.to_json()["gpu"] == {"absent": "no GPU in use: training device is cpu"}
    assert attr.to_json()["disk"]["ceiling"] == {"absent": NO_PROBE}


def test_disk_against_the_probed_ceiling():
    probe = {"disk": {"sequential_read_cold": {"median_bytes_per_s": 2e9},
                      "random_read_cold": {"median_reads_per_s": 20_000}}}
    run = make_run(wait=0.5, read_bytes_per_s=1e8, loading=(0.04, 0.005, 0.005))
    ceiling = attribution(run, probe).disk.ceiling
    assert ceiling is not None and ceiling.absent is None
    assert ceiling.sequential_cold_bytes_per_s == 2e9
    assert ceiling.random_4k_cold_bytes_per_s == 20_000 * 4096
    assert ceiling.peak_over_sequential_fraction == pytest.approx(0.05)
    v = verdict(run, probe)
    assert v.klass == "input:fetch" and "of the probed cold sequential ceiling" in verdict_sentence(v)
    assert "no machine probe" in verdict_sentence(verdict(run))
    refused = {"disk": {"sequential_read_cold": {"absent": "the page cache was not dropped"},
                        "random_read_cold": {"absent": "the page cache was not dropped"}}}
    assert attribution(run, refused).disk.ceiling == DiskCeiling(absent="machine probe: the page cache was not dropped")


def test_gpu_idle_when_a_gpu_was_sampled():
    gpu = attribution(make_run(gpu_util=35.0)).gpu
    assert gpu == GpuEvidence(mean_util_pct=35.0, idle_pct=65.0)
    assert gpu.to_json() == {"mean_util_pct": 35.0, "idle_pct": 65.0}


def test_prefetch_occupancy():
    ready = [0] * 10 + [4] * 20 + [8] * 10  # counted steps 4..39: 6 empty, 20 half, 10 full
    p = attribution(make_run(workers=2, prefetch_factor=4, ready=ready)).prefetch
    assert p.capacity_batches == 8 and p.steps_observed == 36
    assert p.empty_step_fraction == pytest.approx(6 / 36)
    assert p.full_step_fraction == pytest.approx(10 / 36)
    assert p.mean_ready_batches == pytest.approx((20 * 4 + 10 * 8) / 36)
    assert p.mean_occupancy_fraction == pytest.approx(p.mean_ready_batches / 8)


def test_cold_cache_that_was_not_cold_is_said():
    run = make_run(wait=0.5, storage="memmap", loading=(0.04, 0.005, 0.005))
    run.meta["scenario"]["data"]["samples"] = 1000
    run.meta["cache"] = {"mode": "cold", "dataset_bytes": 10**8, "drops": [{"epoch": 0, "dropped": True}]}
    run.processes = pd.DataFrame({"t_s": [0.0, 4.0], "pid": 1, "role": "main", "cpu_pct": 100.0,
                                  "rss_bytes": 1e8, "read_bytes": [0.0, 1e5], "uss_bytes": np.nan})[PROCESS_COLUMNS]
    v = verdict(run)
    assert any(n.startswith("The cold page cache was not cold") for n in verdict_notes(v))


# -- older runs ------------------------------------------------------------------------


def test_older_run_without_queue_or_loading_records_still_gets_a_verdict():
    disk_bound = verdict(make_run(wait=0.5, workers=2, read_bytes_per_s=5e7))
    assert (disk_bound.klass, disk_bound.rule) == ("input:fetch", "R9")
    assert disk_bound.evidence["cause_measured"] is False and "inferred" in verdict_sentence(disk_bound)
    assert verdict(make_run(wait=0.5, workers=2)).klass == "input:prep"
    assert verdict(make_run(wait=0.5, workers=0)).klass == "input:main"
    attr = attribution(make_run(wait=0.5, workers=2))
    assert attr.loading.absent and attr.prefetch.absent
    assert attr.loading.batch_s is None and attr.loading.busy_fraction_by_worker == {}


def test_older_run_with_loading_but_no_queue_uses_worker_busy_time():
    idle = verdict(make_run(wait=0.3, workers=2, loading=(0.01, 0.005, 0.005)))  # busy ~10% of their span
    assert (idle.klass, idle.rule) == ("input:main", "R8")
    busy = verdict(make_run(wait=0.6, workers=2, loading=(0.18, 0.01, 0.005)))  # busy ~97%
    assert (busy.klass, busy.rule) == ("input:fetch", "R8")


def test_run_without_loader_metadata_reads_workers_from_loading_records():
    run = make_run(wait=0.3, loading=(0.003, 0.025, 0.002))
    del run.meta["scenario"]["loader"]
    assert verdict(run).klass == "input:prep"


# -- summary, report, console ------------------------------------------------------------


@pytest.fixture(scope="module")
def workers_run() -> Run:
    return make_run(wait=0.22, workers=2, prefetch_factor=4, ready=8, loading=(0.01, 0.002, 0.003))


def test_summary_keeps_the_coarse_bottleneck_and_adds_verdict_and_attribution(workers_run):
    s = summarize(workers_run)
    assert s["bottleneck"] == "input"
    assert s["verdict"]["class"] == "input:main" and s["verdict"]["sentence"]
    assert set(s["attribution"]) == {"step", "loading", "cpu", "disk", "gpu", "prefetch", "data", "cache"}
    assert "NaN" not in to_json(s)


def test_html_shows_the_verdict_first_and_the_occupancy_plot(workers_run):
    s = summarize(workers_run)
    html = render_html(workers_run, s)
    top = html.split('<section class="headline', 1)[0]  # before the headline cards
    assert 'id="verdict-sentence">Input-bound (22% of step time waiting for data)' in top
    assert "the training process (main)" in top and "input:main" in top
    assert "2 workers + 2 torch threads on 2 usable cores" in top
    evidence = html.split('id="evidence-table"', 1)[1].split("</table>", 1)[0]
    assert "steps that found the queue full" in evidence and "100.0%" in evidence
    assert "not measured: no GPU in use" in evidence
    queue = html.split('id="plot-prefetch"', 1)[1].split("</figure>", 1)[0]
    assert "<svg" in queue and "capacity: 8" in queue
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))


def test_html_without_a_queue_says_why():
    run = make_run(wait=0.3, loading=(0.003, 0.025, 0.002))
    html = render_html(run, summarize(run))
    queue = html.split('id="plot-prefetch"', 1)[1].split("</figure>", 1)[0]
    assert "<svg" not in queue and "not measured: no prefetch queue: num_workers = 0" in queue
    assert "input:prep" in html.split('<section class="headline', 1)[0]


def test_html_of_an_older_summary_without_a_verdict():
    """A summary.json without the verdict and attribution keys (an older one) is read back leniently: its
    verdict is unknown, never a class it did not have, and the evidence it lacks is said to be absent."""
    run = make_run()
    s = summarize(run)
    del s["verdict"], s["attribution"]
    html = render_html(run, s)
    assert 'class="verdict-box verdict-unknown"' in html and "<code>unknown</code>" in html
    assert "not measured: no counted step has a ready_batches reading" in html


def test_console_has_one_verdict_row(workers_run):
    console = Console(record=True, width=200)
    print_summary(summarize(workers_run), "runs/x", console=console)
    text = console.export_text()
    assert re.search(r"verdict\s+input:main: Input-bound \(22% of step time", text)
    assert "note: 2 workers + 2 torch threads" in text
    assert len(re.findall(r"^verdict\b", text, re.M)) == 1


# -- the records against summary.json ----------------------------------------------------------

GOLDEN = Path(__file__).parent / "fixtures" / "runs"


@pytest.mark.parametrize("name", sorted(p.parent.name for p in GOLDEN.glob("*/summary.json")))
def test_attribution_read_back_from_summary_json_gives_the_same_json_and_verdict(name):
    s = json.loads((GOLDEN / name / "summary.json").read_text())
    record = Attribution.from_json(s["attribution"])
    written = record.to_json()  # the cache's reason is words, written at the edge (pipeline.derive)
    written["cache"]["reason"] = cache_words(record.cache.reason)
    assert written == s["attribution"]
    assert verdict_json(verdict_from_attribution(record)) == s["verdict"]  # the verdict reads nothing else


def test_attribution_from_json_is_lenient():
    record = Attribution.from_json({"step": {"steps": 3, "data_wait_fraction": 0.5, "new_key": 1},
                                    "loading": {"absent": "no records"}, "disk": {"mean_read_bytes_per_s": 1e6}})
    assert record.step == StepShares(steps=3, data_wait_fraction=0.5)
    assert record.fractions["data_wait"] == 0.5 and math.isnan(record.fractions["h2d"])
    assert record.loading == LoadingEvidence(absent="no records")
    assert record.disk.ceiling is None and record.disk.mean_read_bytes_per_s == 1e6
    assert record.cpu == CpuEvidence() and record.cache.absent is None
    assert record.to_json()["loading"] == {"absent": "no records"}
    assert "new_key" not in record.to_json()["step"]


@pytest.mark.parametrize("n, counted, words", [(4, 0, "No step was counted"), (5, 1, "Only 1 step was counted"),
                                               (8, 4, "Only 4 steps were counted")])
def test_too_few_counted_steps_give_no_verdict_and_say_how_many(n, counted, words):
    # Issue 14, item 8: a run that counted fewer steps than MIN_COUNTED_STEPS (after 4 warm-up steps) names
    # no bottleneck, whatever its few steps waited (here 50%: a "confident" input verdict before).
    v = verdict(make_run(n=n, warmup=4, wait=0.5, loading=(0.02, 0.01, 0.005)))
    assert (v.klass, v.rule, v.degree) == ("unknown", "R0", None)
    assert words in verdict_sentence(v) and f"at least {MIN_COUNTED_STEPS} counted steps" in verdict_sentence(v)
    assert v.evidence["counted_steps"] == counted and v.evidence["min_counted_steps"] == MIN_COUNTED_STEPS


def test_enough_counted_steps_are_judged():
    v = verdict(make_run(n=4 + MIN_COUNTED_STEPS, warmup=4, wait=0.5, loading=(0.02, 0.01, 0.005)))
    assert v.klass.startswith("input:")


# -- uncertain bands (issue 14, item 7) -------------------------------------------------------


def _busy_run(busy: float, ready, *, mix=(0.1, 0.85, 0.05), wait: float = 0.35) -> Run:
    """Two workers taking turns, each busy ``busy`` of its span making batches split ``mix`` (fetch, prep, collate)."""
    made_s = busy * 2 * STEP_S  # each worker makes every other batch of a 100 ms step
    return make_run(wait=wait, workers=2, ready=ready, loading=tuple(made_s * m for m in mix))


@pytest.mark.parametrize("ready", [1, 0, [0, 4] * 20], ids=["ready", "empty", "bursty"])
def test_workers_busy_around_the_cut_off_give_the_same_verdict_every_time(ready):
    # Six identical Lightning runs: workers busy 0.73-0.80 around R6's 0.8, prep-dominated making; they were
    # called input:main four times and input:prep twice. The ground truth is prep-bound.
    verdicts = [verdict(_busy_run(b, ready)) for b in (0.72, 0.74, 0.76, 0.78, 0.80, 0.82)]
    busy = [v.evidence["worker_busy_mean_fraction"] for v in verdicts]
    assert 0.72 <= min(busy) <= 0.75 and 0.8 <= max(busy) <= 0.85  # both sides of 0.8
    assert len({(v.klass, v.rule, v.uncertain, v.candidates) for v in verdicts}) == 1
    assert verdicts[0].klass == "input:prep"
    if ready == 0:  # the queue ran dry: it agrees with the busy workers, no doubt left
        assert not verdicts[0].uncertain and verdicts[0].candidates == ("input:prep",)
    else:  # a batch was ready: the queue says the training process, the busy workers say prep
        assert verdicts[0].uncertain and verdicts[0].candidates[0] == "input:prep"
        assert len(verdicts[0].candidates) == 2 and "uncertain between" in verdict_sentence(verdicts[0])


def test_saturated_cores_settle_busy_workers_doing_cpu_work_as_prep():
    run = _busy_run(0.76, 1)
    run.samples["main_cpu_pct"] = 150.0  # 1.5 + 0.5 cores of 2: the cores are saturated
    v = verdict(run)
    assert (v.klass, v.uncertain) == ("input:prep", False)
    assert v.evidence["busy_over_usable_fraction"] == pytest.approx(1.0)


@pytest.mark.parametrize("busy, ready, wait, klass, rule", [
    # workers with slack, batches ready, a ready step's wait short next to the 55-62 ms a batch takes them
    (0.55, 1, 0.1, "input:main", "R5"), (0.62, 1, 0.1, "input:main", "R5"),
    (0.95, 1, 0.35, "input:prep", "R6"), (0.95, 0, 0.35, "input:prep", "R6"), (0.60, 0, 0.35, "input:prep", "R6"),
    (0.60, [0, 4] * 20, 0.35, "balanced", "R7"),
])
def test_far_from_the_cut_offs_the_verdicts_are_as_before(busy, ready, wait, klass, rule):
    v = verdict(_busy_run(busy, ready, wait=wait))
    assert (v.klass, v.rule, v.uncertain, v.candidates) == (klass, rule, False, (klass,)), verdict_sentence(v)


@pytest.mark.parametrize("busy", [0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95])
@pytest.mark.parametrize("ready", [0, 1, 4, [0, 4] * 20, [4, 4, 4, 0] * 10])
def test_no_sentence_contradicts_its_own_queue_numbers(busy, ready):
    v = verdict(_busy_run(busy, ready))
    full, empty = v.evidence["full_step_fraction"], v.evidence["empty_step_fraction"]
    if full >= 0.5:  # "72% of steps found the prefetch queue full" never beside "cannot keep up"
        assert "cannot keep up" not in verdict_sentence(v), verdict_sentence(v)
    if "cannot keep up" in verdict_sentence(v):
        assert empty > 0 and v.evidence["ready_wait_fraction"] <= 0.45
    if "keep up, and" in verdict_sentence(v):  # R5's "the workers keep up": not when they are saturated
        assert v.evidence.get("worker_busy_mean_fraction", 0.0) < 0.7
    if v.uncertain:
        assert "uncertain between" in verdict_sentence(v) and len(v.candidates) >= 2
    else:
        assert "uncertain" not in verdict_sentence(v).lower() and v.candidates == (v.klass,)


def test_waiting_for_a_core_is_cpu_contention_never_storage():
    # In-memory data on a crowded machine: 60% of the making was __getitem__ off the CPU, nearly all of it
    # runnable but waiting for a core (issue 14, item 6). Counted as fetch it reads "storage".
    attr = attribution(_busy_run(0.95, 0, mix=(0.6, 0.35, 0.05)))
    assert verdict_from_attribution(attr).klass == "input:fetch"
    loading = dataclasses.replace(attr.loading, fetch_fraction=0.05, prep_fraction=0.35, collate_fraction=0.05,
                                  core_wait_fraction=0.55)
    v = verdict_from_attribution(dataclasses.replace(attr, loading=loading))
    assert (v.klass, v.uncertain) == ("input:prep", False), verdict_sentence(v)
    assert "storage" not in verdict_sentence(v) and "55% was waiting for a core (CPU contention" in verdict_sentence(v)
    assert v.evidence["core_wait_fraction"] == 0.55
    # A core wait larger than the gap between real shares of fetch and CPU work: either could limit.
    loading = dataclasses.replace(attr.loading, fetch_fraction=0.24, prep_fraction=0.38, collate_fraction=0.05,
                                  core_wait_fraction=0.33)
    v = verdict_from_attribution(dataclasses.replace(attr, loading=loading))
    assert (v.klass, v.uncertain, v.candidates) == ("input:fetch", True, ("input:fetch", "input:prep")), verdict_sentence(v)
    # With 0 workers too: the core wait goes to no part, so the real storage wait still decides.
    serial = attribution(make_run(wait=0.3, loading=(0.016, 0.008, 0.002)))
    loading = dataclasses.replace(serial.loading, fetch_fraction=0.4, prep_fraction=0.3, collate_fraction=0.05,
                                  core_wait_fraction=0.25)
    v = verdict_from_attribution(dataclasses.replace(serial, loading=loading))
    assert v.klass == "input:fetch" and "was waiting for a core" in verdict_sentence(v), verdict_sentence(v)
    assert sum(_shares(verdict_sentence(v))) <= 100.5, verdict_sentence(v)  # every share of one whole: the wait
    assert v.candidates == ("input:fetch", "input:prep")  # 25% of core wait outweighs the gap between them
    loading = dataclasses.replace(loading, fetch_fraction=0.6, prep_fraction=0.2, core_wait_fraction=0.15)
    v = verdict_from_attribution(dataclasses.replace(serial, loading=loading))
    assert (v.klass, v.uncertain) == ("input:fetch", False), verdict_sentence(v)


@pytest.mark.parametrize("h2d", [0.18, 0.20, 0.22])
def test_h2d_near_its_cut_off_is_named_beside_the_other_cause(h2d):
    v = verdict(make_run(wait=0.1, h2d=h2d, loading=(0.01, 0.001, 0.001)))
    assert (v.klass, v.rule, v.uncertain, v.candidates) == ("h2d", "R1", True, ("h2d", "input:fetch"))
    assert verdict_sentence(v).startswith("Uncertain: the copy to the device takes")
    assert verdict(make_run(wait=0.1, h2d=0.25)).candidates == ("h2d",)
    assert verdict(make_run(wait=0.1, h2d=0.15, loading=(0.01, 0.001, 0.001))).candidates == ("input:fetch",)


@pytest.mark.parametrize("wait", [0.041, 0.05, 0.059])
def test_a_wait_near_five_percent_is_compute_or_input_uncertain(wait):
    v = verdict(make_run(wait=wait, loading=(0.004, 0.0003, 0.0003)))
    assert (v.klass, v.rule, v.uncertain) == ("compute", "R2", True)
    assert v.candidates == ("compute", "input:fetch")


def test_two_parts_too_close_to_tell_apart_are_both_named():
    v = verdict(make_run(wait=0.3, loading=(0.0145, 0.0155, 0.0)))  # fetch 48%, prep 52% of a 30 ms wait
    assert (v.klass, v.rule, v.uncertain, v.candidates) == ("input:fetch", "R4", True, ("input:fetch", "input:prep"))
    assert "too close to tell apart" in verdict_sentence(v)
    v = verdict(make_run(wait=0.3, loading=(0.0155, 0.0145, 0.0)))
    assert (v.klass, v.candidates) == ("input:fetch", ("input:fetch", "input:prep"))


def test_summary_json_carries_uncertain_and_candidates():
    s = summarize(_busy_run(0.77, 1))
    assert s["verdict"]["uncertain"] is True and s["verdict"]["candidates"] == ["input:prep", "input:main"]
    s = summarize(make_run(wait=0.02))
    assert s["verdict"]["uncertain"] is False and s["verdict"]["candidates"] == ["compute"]


@pytest.mark.parametrize("busy, uncertain", [(0.55, False), (0.62, True)])
def test_a_ready_batch_that_takes_as_long_as_making_one_was_not_delivered(busy, uncertain):
    """Pure-Python preprocessing in a Lightning run (1 worker): "ready" steps waited 11 ms against the 14 ms the
    worker takes per batch, the queue seldom full, and R5 blamed the training process on 4 of 6 identical runs.
    A batch counted in the queue but sent late by a worker busy with CPU work: the workers set the pace."""
    v = verdict(_busy_run(busy, 1, wait=0.35))  # 35 ms waits with a batch ready; a batch every 55 / 62 ms
    assert (v.klass, v.rule, v.uncertain) == ("input:prep", "R6", uncertain), verdict_sentence(v)
    assert v.evidence["wait_when_ready_over_supply_fraction"] == pytest.approx(35 / (busy * 100))
    assert v.evidence["supply_interval_s"] == pytest.approx(busy * 0.1)
    assert "sends it late" in verdict_sentence(v) and "keep up" not in verdict_sentence(v)
    if uncertain:  # 0.56 of the supply interval: inside the band, the training process is named too
        assert v.candidates == ("input:prep", "input:main")


def test_undelivered_batches_of_storage_bound_workers_keep_the_training_process_a_candidate():
    v = verdict(_busy_run(0.55, 1, mix=(0.85, 0.1, 0.05), wait=0.35))  # sleep-like fetch releases the interpreter
    assert v.uncertain and v.candidates == ("input:fetch", "input:main"), verdict_sentence(v)


def test_a_full_queue_with_long_waits_stays_the_training_process():
    # memmap-workers: the queue full on most steps, yet each step waits: the batches were there to take
    v = verdict(_busy_run(0.55, 4, wait=0.35))
    assert (v.klass, v.rule) == ("input:main", "R5"), verdict_sentence(v)
    assert "wait_when_ready_over_supply_fraction" not in v.evidence


def test_a_core_wait_too_small_to_matter_is_not_said():
    """The demo sweep said "0.0% more was waiting for a core (CPU contention: every core was busy)"."""
    attr = attribution(_busy_run(0.95, 0, mix=(0.05, 0.9, 0.05)))
    for core, said in ((0.0, False), (0.015, False), (0.05, True)):
        loading = dataclasses.replace(attr.loading, core_wait_fraction=core)
        v = verdict_from_attribution(dataclasses.replace(attr, loading=loading))
        assert ("was waiting for a core" in verdict_sentence(v)) is said, (core, verdict_sentence(v))


def test_a_rank_that_waits_in_collectives_more_than_it_computes_is_told_it_waits_for_the_others():
    run = make_run(wait=0.02, h2d=0.0)
    run.steps["collective_wait_s"] = 0.8 * STEP_S
    run.steps["compute_s"] = 0.18 * STEP_S
    judged = verdict(run)
    assert judged.klass == "compute" and verdict_sentence(judged).startswith("Waiting for the other ranks: 80%")
    assert judged.evidence["collective_wait_fraction"] == pytest.approx(0.8)
    plain = verdict(make_run(wait=0.02, h2d=0.0))
    assert verdict_sentence(plain).startswith("Compute-bound") and "collective_wait_fraction" not in plain.evidence


def _shares(sentence: str) -> list[float]:
    """The percentages said of the wait: after the headline's "(30% of step time waiting for data)"."""
    import re
    return [float(x) for x in re.findall(r"(\d+(?:\.\d+)?)%", sentence.split("waiting for data)", 1)[1])]


def test_shares_said_of_one_wait_add_up_to_it_with_the_wait_for_a_core():
    """mnist, 0 workers on a loaded machine: "79% CPU work ... against 21% collating ...; 81% more was waiting
    for a core" (181% in one sentence)."""
    serial = attribution(make_run(wait=0.3, loading=(0.016, 0.008, 0.002)))
    loading = dataclasses.replace(serial.loading, fetch_fraction=0.0, prep_fraction=0.15, collate_fraction=0.04,
                                  core_wait_fraction=0.81)
    v = verdict_from_attribution(dataclasses.replace(serial, loading=loading))
    assert "was waiting for a core" in verdict_sentence(v) and "more was waiting" not in verdict_sentence(v), verdict_sentence(v)
    assert sum(_shares(verdict_sentence(v))) <= 100.5, verdict_sentence(v)


def _varying_run(first: float, second: float) -> Run:
    """make_run's 40 steps waiting ``first`` of each step up to step 19 and ``second`` after, while the machine's
    other load rises from none to 30% of its 2 cores (the tree uses 60%: 120% of one core)."""
    run = make_run(wait=first, loading=(0.016, 0.008, 0.002))
    later = run.steps["step"] >= 20
    run.steps.loc[later, "data_wait_s"] = second * STEP_S
    run.steps.loc[later, "host_wait_s"] = second * STEP_S
    run.steps.loc[later, "compute_s"] = (1 - second - 0.01) * STEP_S
    run.samples["cpu_util_pct"] = np.where(run.samples["t_s"] >= 2.0, 90.0, 60.0)
    return run


def test_a_run_whose_windows_are_judged_differently_says_so_rather_than_one_class():
    """Four identical Lightning runs were input:prep, input:prep, compute, input:prep (waits 17, 18, 4, 34%)."""
    from pipeprof.analysis.variation import run_variation

    run = _varying_run(0.02, 0.34)
    variation = run_variation(run.steps, run.samples, 2)
    assert variation is not None and variation.varies
    assert (variation.low.first_step, variation.high.last_step) == (4, 39)
    assert variation.low.other_load_fraction == pytest.approx(0.0)
    assert variation.high.other_load_fraction == pytest.approx(0.30)
    v = summarize(run)["verdict"]
    assert v["uncertain"] is True and "compute" in v["candidates"] and any(c.startswith("input:") for c in v["candidates"])
    note = next(n for n in v["notes"] if n.startswith("The run itself varied"))
    assert "steps 4-" in note and "-39 34%" in note and "other processes used 30% of the machine's cores" in note
    assert "the run itself varied" in v["sentence"]
    # a steady run, and one whose windows sit either side of a cut-off but close: nothing said
    for steady in (make_run(wait=0.3, loading=(0.016, 0.008, 0.002)), _varying_run(0.04, 0.07)):
        judged = summarize(steady)["verdict"]
        assert not any(n.startswith("The run itself varied") for n in judged["notes"]), judged["notes"]
        assert not run_variation(steady.steps, steady.samples, 2).varies
