"""Recommendations from hand-made runs whose predicted throughput follows from the model's arithmetic."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
from rich.console import Console
from test_verdict import STEP_S, make_run

from pipeprof.analysis.advice_text import set_text
from pipeprof.analysis.attribution import attribution
from pipeprof.analysis.recommend import (
    RECEIVE_S_PER_BATCH,
    RECEIVE_S_PER_BYTE,
    SEND_S_PER_BATCH,
    SEND_S_PER_BYTE,
    STALL,
    Recommendation,
    _Model,
    is_no_op,
    receive_when_ready,
    recommend,
    worker_share,
)
from pipeprof.analysis.summary import summarize
from pipeprof.analysis.thresholds import MIN_COUNTED_STEPS
from pipeprof.analysis.verdict import verdict_from_attribution
from pipeprof.render.console import print_summary
from pipeprof.render.html import render_html
from pipeprof.scenario import SAMPLE_BYTES, SCHEMA

BATCH = 128
# Where no loader_workers probe measured k: the training process's CPU per sample receiving a batch, and the workers'
# per sample sending one (from a run without workers), as the model estimates them.
RECEIVE = RECEIVE_S_PER_BATCH / BATCH + RECEIVE_S_PER_BYTE * SAMPLE_BYTES
SEND = SEND_S_PER_BATCH / BATCH + SEND_S_PER_BYTE * SAMPLE_BYTES


def recs_of(run, probe=None):
    """The recommendations as summary.json has them (``Recommendation.to_json()``)."""
    attr = attribution(run, probe)
    return [r.to_json() for r in recommend(run, attr, verdict_from_attribution(attr))]


def with_main_cpu(run, pct: float):
    run.samples["main_cpu_pct"] = pct
    return run


def by_key(recs, key):
    return [r for r in recs if key in r["change"]]


def assert_valid_keys(recs):
    for r in recs:
        for key in r["change"]:
            section, _, name = key.rpartition(".")
            assert name in SCHEMA[section], key


def test_num_workers_up_with_free_cores():
    # 4 cores, 2 torch threads; the training process uses 1.2 cores, 70% of it training (wait 0.3):
    # 0.84 cores, so 3.16 are free. A worker makes a batch in 0.15 s: 853.3 samples/s each.
    run = with_main_cpu(make_run(wait=0.3, h2d=0.01, loading=(0.09, 0.05, 0.01), cores=4, threads=2), 120.0)
    recs = recs_of(run)
    ceiling = BATCH / (0.7 * STEP_S)  # compute + h2d = 70 ms per step
    (rec,) = by_key(recs, "loader.num_workers")
    # X(2) = 2 / (p + send) = 1,690 < C; X(3) = min(2,536, 1/(1/C + receive)) = 1,809: the smallest k reaching the
    # best. 3 workers + 2 torch threads > 4 cores: 1 thread, compute keeps min(1, 1/0.84) of C, the workers their
    # own 3 cores (no stall); receiving each batch costs the training process RECEIVE a sample.
    x = 1 / (1 / ceiling + RECEIVE)
    assert rec["change"] == {"loader.num_workers": 3, "train.threads": 1}
    assert rec["predicted_samples_per_s"] == pytest.approx(x)
    assert rec["predicted_speedup"] == pytest.approx(x / (BATCH / STEP_S))
    assert "3 workers" in rec["reason"] and "1,829" in rec["reason"] and "1,809" in rec["reason"]
    assert_valid_keys(recs)


def test_num_workers_down_without_free_cores():
    # 2 cores, 2 torch threads, 2 workers; the training process uses both cores: nothing is free.
    run = with_main_cpu(make_run(wait=0.5, h2d=0.01, workers=2, ready=0, loading=(0.02, 0.01, 0.0),
                                 cores=2, threads=2), 200.0)
    recs = recs_of(run)
    ceiling = BATCH / (0.5 * STEP_S)  # compute + h2d = 50 ms per step: 2,560 samples/s
    (rec,) = by_key(recs, "loader.num_workers")
    # k=1 needs 1 torch thread (1 + 2 > 2 cores): C' = C x min(1, 1/2) = 1,280, no gain; k=2 with 1 thread the same.
    # k=0: the training process makes the batches itself, X(0) = 1 / (p + 1/C_free); C was measured beside the
    # 2 workers busy u·X = 0.3 cores beyond what the torch threads leave: C_free = C·exp(STALL·0.3) = 4,456.
    c_free = ceiling * math.exp(STALL * 0.03 / BATCH * (BATCH / STEP_S))
    assert rec["change"] == {"loader.num_workers": 0}
    assert rec["predicted_samples_per_s"] == pytest.approx(1 / (0.03 / BATCH + 1 / c_free))
    assert recs[0] is rec
    assert_valid_keys(recs)


def test_ranked_by_predicted_speedup():
    run = with_main_cpu(make_run(wait=0.3, h2d=0.01, loading=(0.09, 0.05, 0.01), cores=4, threads=2), 120.0)
    run.meta["scenario"]["data"]["samples"] = 30000  # small: on-device data applies too
    recs = recs_of(run)
    assert len(recs) >= 2
    speedups = [r["predicted_speedup"] for r in recs]
    assert speedups == sorted(speedups, reverse=True)
    assert all(s >= 1.05 for s in speedups)
    assert_valid_keys(recs)


def test_compute_bound_says_so():
    run = make_run(wait=0.02, loading=(0.001, 0.0, 0.0005))
    (rec,) = recs_of(run)
    assert rec["change"] == {} and rec["predicted_speedup"] == 1.0
    assert rec["predicted_samples_per_s"] == pytest.approx(BATCH / STEP_S)
    assert "compute-bound" in rec["reason"] and "2.0%" in rec["reason"]
    assert set_text(rec) == "no change"


def test_saturated_cores_say_more_workers_will_not_help():
    # Both cores busy with the training process (200%); per-sample fetch is cheap but training needs the cores.
    run = with_main_cpu(make_run(wait=0.3, h2d=0.01, loading=(0.02, 0.1, 0.0), cores=2, threads=2), 200.0)
    (rec,) = recs_of(run)
    assert rec["change"] == {} and rec["predicted_speedup"] == 1.0
    assert "more workers will not help" in rec["reason"] and "2 cores are saturated (100%" in rec["reason"]


def test_persistent_workers_for_slow_epoch_starts():
    run = make_run(wait=0.1, workers=2, ready=1, loading=(0.002, 0.002, 0.001), n=40, warmup=4)
    run.steps["epoch"] = run.steps["step"] // 10
    starts = run.steps["step"].isin([10, 20, 30])
    run.steps.loc[starts, "data_wait_s"] = 0.5 + 0.1 * STEP_S
    run.steps.loc[starts, "step_s"] = 0.5 + STEP_S
    recs = recs_of(run)
    (rec,) = by_key(recs, "loader.persistent_workers")
    assert rec["change"] == {"loader.persistent_workers": True}
    total_s = 36 * STEP_S + 3 * 0.5
    assert rec["predicted_samples_per_s"] == pytest.approx(36 * BATCH / (total_s - 3 * 0.5))
    assert "the first step of 3 epochs waited 510 ms" in rec["reason"]
    # Without the slow starts there is nothing to gain from keeping the workers.
    assert not by_key(recs_of(make_run(wait=0.1, workers=2, ready=1, loading=(0.002, 0.002, 0.001))),
                      "loader.persistent_workers")


def test_cache_in_ram_for_cold_memmap():
    run = make_run(wait=0.5, h2d=0.01, loading=(0.08, 0.002, 0.003), storage="memmap", read_bytes_per_s=5e7)
    run.meta["scenario"]["data"]["cache"] = "cold"
    recs = recs_of(run)
    (rec,) = [r for r in recs if r["change"].get("data.storage") == "ram"]
    assert rec["change"] == {"data.storage": "ram", "data.cache": "warm"}
    # 0 workers: X(0) = 1 / (p' + 1/C) with fetch gone: p' = 0.005 s per batch.
    ceiling = BATCH / (0.5 * STEP_S)
    assert rec["predicted_samples_per_s"] == pytest.approx(1 / (0.005 / BATCH + 1 / ceiling))
    assert "cold" in rec["reason"]
    assert set_text(rec) == "--set data.storage=ram --set data.cache=warm"
    assert_valid_keys(recs)


def test_pin_memory_only_on_cuda():
    cpu = make_run(wait=0.1, h2d=0.15, loading=(0.002, 0.001, 0.001))
    assert not by_key(recs_of(cpu), "loader.pin_memory")
    cuda = make_run(wait=0.1, h2d=0.15, loading=(0.002, 0.001, 0.001), gpu_util=60.0)
    cuda.meta["device"] = "cuda:0"
    (rec,) = by_key(recs_of(cuda), "loader.pin_memory")
    assert rec["predicted_samples_per_s"] == pytest.approx(BATCH / (STEP_S - 0.15 * STEP_S / 2))
    assert "halves" in rec["reason"]


def test_summary_carries_recommendations():
    s = summarize(make_run(wait=0.02, loading=(0.001, 0.0, 0.0005)))
    assert s["recommendations"][0]["change"] == {}
    assert set(s["recommendations"][0]) >= {"change", "predicted_samples_per_s", "predicted_speedup", "reason",
                                            "model"}



def test_workers_beyond_free_cores_take_them_from_training():
    # 2 cores, 1 torch thread; 1 worker + 1 thread fit the cores: the worker has its own, compute does not stall.
    # It makes a sample in p + send = 480 us: X(1) = min(2,083, 1/(1/C + receive) = 2,107) = 2,083 (C = 128 / 0.06 s).
    run = with_main_cpu(make_run(wait=0.4, h2d=0.0, loading=(0.03, 0.02, 0.01), cores=2, threads=1), 200.0)
    (rec,) = by_key(recs_of(run), "loader.num_workers")
    assert rec["change"] == {"loader.num_workers": 1}
    assert rec["predicted_samples_per_s"] == pytest.approx(1 / (0.06 / BATCH + SEND))


def test_num_workers_up_lowers_torch_threads_on_full_cores():
    # Same run with 2 torch threads on 2 cores: 1 worker + 2 threads would oversubscribe, so the
    # recommendation comes with 1 thread; compute keeps min(1, 1 / 1.2) of C, the worker gets the other core.
    run = with_main_cpu(make_run(wait=0.4, h2d=0.0, loading=(0.03, 0.02, 0.01), cores=2, threads=2), 200.0)
    (rec,) = by_key(recs_of(run), "loader.num_workers")
    assert rec["change"] == {"loader.num_workers": 1, "train.threads": 1}
    assert rec["predicted_samples_per_s"] == pytest.approx(1 / (1.2 * 0.06 / BATCH + RECEIVE))
    assert "1 torch thread" in rec["reason"]
    assert_valid_keys([rec])


def test_report_and_console_show_the_recommendations():
    run = make_run(wait=0.5, h2d=0.01, loading=(0.08, 0.002, 0.003), storage="memmap", read_bytes_per_s=5e7)
    run.meta["scenario"]["data"]["cache"] = "cold"
    s = summarize(run)
    html = render_html(run, s)
    assert 'id="recommendations-table"' in html and "--set data.storage=ram --set data.cache=warm" in html
    assert html.index('id="verdict"') < html.index('id="recommendations"') < html.index('class="headline')
    console = Console(width=200, record=True)
    print_summary(s, "run-folder", console=console)
    text = console.export_text()
    top = set_text(s["recommendations"][0])
    assert top.startswith("--set ") and re.search(r"top recommendation\s+" + re.escape(top), text)


def test_on_device_predicts_the_compute_ceiling_measured_alone_not_the_contended_one():
    run = with_main_cpu(make_run(wait=0.3, h2d=0.01, loading=(0.09, 0.05, 0.01), cores=4, threads=2), 120.0)
    run.meta["scenario"]["data"]["samples"] = 30000
    contended = by_key(recs_of(run), "data.storage")[0]["predicted_samples_per_s"]
    run.meta["compute_ceiling"] = {"samples_per_s": 3 * contended, "steps": 20, "batch_size": BATCH}
    device = [r for r in recs_of(run) if r["change"].get("data.storage") == "device"][0]
    assert device["predicted_samples_per_s"] == pytest.approx(3 * contended)
    assert "alone" in device["reason"]


def test_the_compute_ceiling_is_measured_after_the_run_on_one_batch_with_a_fake_clock():
    import torch

    from pipeprof.measure.clock import FakeClock
    from pipeprof.pipeline.train import COMPUTE_PROBE_STEPS, COMPUTE_PROBE_WARMUP, measure_compute_ceiling

    clock, calls = FakeClock(), []

    def step_fn(x, y):
        calls.append((tuple(x.shape), tuple(y.shape), x.device.type))
        clock.advance(0.002)  # every step takes 2 ms
        return 0.0, 0

    class Work:  # the parts of a Workload the probe uses
        device = torch.device("cpu")
        scenario = type("S", (), {"loader": type("L", (), {"batch_size": 64})()})()
        rank = None  # one process (a DDP rank measures its own compute without the all-reduce)

    Work.step_fn = staticmethod(step_fn)
    result = measure_compute_ceiling(Work(), clock)
    assert len(calls) == COMPUTE_PROBE_WARMUP + COMPUTE_PROBE_STEPS
    assert calls[0] == ((64, 784), (64,), "cpu")
    assert result["samples_per_s"] == pytest.approx(64 / 0.002)  # warm-up steps not timed
    assert result["took_s"] == pytest.approx(COMPUTE_PROBE_STEPS * 0.002)


# -- issue 14, item 4: never a no-op; item 8: too few steps, runs that ended early ------------------


@pytest.mark.parametrize("change, noop", [
    ({"loader.num_workers": 1}, True),  # a loader that already has 1 worker
    ({"train.threads": 2}, True),  # the thread count it already has
    ({"loader.num_workers": 1, "train.threads": 2}, True),  # every key as it is
    ({"loader.num_workers": 1, "train.threads": 1}, False),  # one key changes: a change
    ({"loader.prefetch_factor": 2}, True),  # the DataLoader's default with workers
    ({"loader.persistent_workers": False}, True),
    ({"data.storage": "ram"}, True),
    ({"data.cache": "warm"}, False),  # current value unknown: not a no-op
    ({}, False),  # a code change or the honest negative
])
def test_is_no_op_compares_every_key_with_the_current_setting(change, noop):
    current = {"loader.num_workers": 1, "train.threads": 2, "loader.prefetch_factor": 2,
               "loader.persistent_workers": False, "loader.pin_memory": False, "data.storage": "ram"}
    assert is_no_op(change, current) is noop


def _one_worker_run():
    return with_main_cpu(make_run(wait=0.4, h2d=0.0, workers=1, ready=0, loading=(0.03, 0.02, 0.01),
                                  cores=2, threads=2), 120.0)


@pytest.mark.parametrize("candidate, change", [
    ("workers", {"loader.num_workers": 1}),  # num_workers=1 offered to a loader with 1 worker
    ("fewer_threads", {"train.threads": 2}),  # a thread count equal to the current one
    ("prefetch", {"loader.num_workers": 1, "train.threads": 2}),  # generally: every key as it is
])
def test_a_change_equal_to_the_current_settings_is_never_recommended(monkeypatch, candidate, change):
    run = _one_worker_run()
    attr = attribution(run)
    model = _Model(run, attr)
    assert model.current_settings()["loader.num_workers"] == 1 and model.current_settings()["train.threads"] == 2
    noop = Recommendation(dict(change), 1e9, 10.0, "a no-op", "none")
    monkeypatch.setattr(_Model, candidate, lambda self: noop)
    recs = recommend(run, attr, verdict_from_attribution(attr))
    assert all(r.change != change for r in recs) and recs


def test_too_few_counted_steps_get_no_recommendations():
    run = make_run(n=4 + MIN_COUNTED_STEPS - 1, warmup=4, wait=0.5, loading=(0.09, 0.05, 0.01), cores=4)
    assert recs_of(run) == []
    s = summarize(run)
    assert s["recommendations"] == [] and s["verdict"]["rule"] == "R0"
    assert s["bottleneck_reason"] == (f"too few counted steps to judge: {MIN_COUNTED_STEPS - 1} steps counted, "
                                      f"at least {MIN_COUNTED_STEPS} needed")


@pytest.mark.parametrize("status", ["failed", "interrupted"])
def test_recommendations_of_a_run_that_ended_early_carry_the_caveat(status):
    run = with_main_cpu(make_run(wait=0.3, h2d=0.01, loading=(0.09, 0.05, 0.01), cores=4, threads=2), 120.0)
    run.meta["status"] = status
    recs = recs_of(run)
    assert recs and all(f"the run ended early ({status}) after 40 steps (36 counted)" in r["note"] for r in recs)
    run.meta["status"] = "complete"
    assert all("ended early" not in (r.get("note") or "") for r in recs_of(run))


def test_the_caveat_also_goes_on_the_honest_negative():
    run = make_run(wait=0.02, loading=(0.001, 0.0, 0.0005))  # compute-bound: the negative
    run.meta["status"] = "failed"
    (rec,) = recs_of(run)
    assert rec["change"] == {} and "ended early (failed)" in rec["note"]


# -- issue 14: advice that fits what the change can save and the command that made the run ----------------


def _script_run(loaders: list[dict], *, workers: int = 2, **kw):
    """A hand-made run as a profiled script records it: kind "script" and run.json's ``loaders``."""
    run = make_run(workers=workers, **kw)
    run.meta["kind"] = "script"
    run.meta["scenario"] = {"name": "script", "loader": {"batch_size": 128, "num_workers": workers,
                                                         "pin_memory": kw.get("pin", False)}}
    run.meta["loaders"] = loaders
    return run


def _train_loader(number: int, passes: int, **extra):
    return {"number": number, "name": "train_iter", "dataset": "SyntheticImages", "batch_size": 128,
            "num_workers": 2, "role": "train", "passes": passes, **extra}


def _slow_starts(run):
    run.steps["epoch"] = run.steps["step"] // 10
    starts = run.steps["step"].isin([10, 20, 30])
    run.steps.loc[starts, "data_wait_s"] = 0.5 + 0.1 * STEP_S
    run.steps.loc[starts, "step_s"] = 0.5 + STEP_S
    return run


def test_a_new_loader_per_fit_gets_the_risk_not_persistent_workers():
    # d2l style: a new DataLoader per fit, each iterated once; their first steps wait for new workers.
    loaders = [_train_loader(n, 1) for n in range(4)]
    run = _slow_starts(_script_run(loaders, wait=0.1, ready=1, loading=(0.002, 0.002, 0.001)))
    recs = recs_of(run)
    assert not by_key(recs, "loader.persistent_workers")
    (reuse,) = [r for r in recs if "build the DataLoader once" in (r.get("code_change") or "")]
    assert "a new DataLoader is built per fit: persistent_workers would keep each one's workers alive until " \
           "garbage collection; build the loader once and reuse it" in reuse["note"]
    assert "4 DataLoaders named train_iter were built, each iterated once" in reuse["reason"]


def test_persistent_workers_predict_only_the_passes_of_a_loader_iterated_again():
    # One loader iterated four times: the starts of passes 1-3 are what keeping its workers saves.
    run = _slow_starts(_script_run([_train_loader(0, 4)], wait=0.1, ready=1, loading=(0.002, 0.002, 0.001)))
    (rec,) = by_key(recs_of(run), "loader.persistent_workers")
    assert rec["predicted_samples_per_s"] == pytest.approx(36 * BATCH / (36 * STEP_S))
    assert rec["script_text"] == "train_iter: DataLoader(SyntheticImages(...), persistent_workers=True)"
    # Two loaders of two passes each: only the second pass of each is a re-iteration (epochs 1 and 3).
    loaders = [_train_loader(0, 2), _train_loader(1, 2, name="other")]
    (rec,) = by_key(recs_of(_slow_starts(_script_run(loaders, wait=0.1, ready=1,
                                                    loading=(0.002, 0.002, 0.001)))), "loader.persistent_workers")
    assert rec["predicted_samples_per_s"] == pytest.approx(36 * BATCH / (36 * STEP_S + 0.5))
    assert "the first step of 2 epochs waited" in rec["reason"]


def test_a_scenarios_first_pass_is_never_saved_by_persistent_workers():
    run = make_run(wait=0.1, workers=2, ready=1, loading=(0.002, 0.002, 0.001), n=40, warmup=0)
    run.steps["epoch"] = run.steps["step"] // 20
    run.steps.loc[0, ["data_wait_s", "step_s"]] = (0.5 + 0.1 * STEP_S, 0.5 + STEP_S)  # epoch 0: the workers start
    assert not by_key(recs_of(run), "loader.persistent_workers")


def test_a_scripts_compute_bound_advice_names_no_scenario_flag_and_no_other_run():
    run = _script_run([_train_loader(0, 1)], wait=0.02, loading=(0.001, 0.0, 0.0005), threads=2, cores=2)
    (rec,) = recs_of(run)
    assert "try torch.set_num_threads(1) in the script" in rec["reason"]
    assert "--set" not in rec["reason"] and "quick" not in rec["reason"] and "~5x" not in rec["reason"]
    scenario = recs_of(make_run(wait=0.02, workers=2, loading=(0.001, 0.0, 0.0005)))
    assert "measure --set train.threads=1" in scenario[0]["reason"] and "quick" not in scenario[0]["reason"]


def test_low_throughputs_keep_significant_figures_and_no_zero_gain_is_stated():
    run = make_run(wait=0.004, loading=(0.0002, 0.0, 0.0001))
    run.steps["samples"] = 1  # 10 samples/s
    run.steps["step_s"] *= 25  # 0.4 samples/s
    for col in ("data_wait_s", "h2d_s", "compute_s", "host_wait_s"):
        run.steps[col] *= 25
    (rec,) = recs_of(run)
    assert "0.4 samples/s now" in rec["reason"] and " 0 samples/s" not in rec["reason"]
    assert not re.search(r"(?<![\d.])0(\.0)?% above", rec["reason"]), rec["reason"]
    assert "is 0.4% above the 0.4 samples/s now" in rec["reason"], rec["reason"]
    run.steps["data_wait_s"] *= 0.01  # a ceiling 0.004% above: no gain to state
    run.steps["compute_s"] = run.steps["step_s"] - run.steps["h2d_s"] - run.steps["data_wait_s"]
    (rec,) = recs_of(run)
    assert "is the same as the 0.4 samples/s now" in rec["reason"], rec["reason"]


def test_the_code_profile_of_a_script_run_does_not_offer_pipeprof_run_flags():
    from pipeprof.analysis.hotspots import code_profile
    script = code_profile(_script_run([_train_loader(0, 1)]))
    assert "pipeprof run" not in script["cprofile"]["absent"] and "pipeprof profile" in script["cprofile"]["absent"]
    assert "pipeprof run" not in script["pyspy"]["absent"]
    assert "pipeprof run --cprofile" in code_profile(make_run())["cprofile"]["absent"]


def test_pin_memory_on_cpu_is_noted_for_a_script():
    run = _script_run([_train_loader(0, 1, pin_memory=True)], wait=0.3, ready=0, loading=(0.01, 0.15, 0.005))
    run.meta["scenario"]["loader"]["pin_memory"] = True
    notes = verdict_from_attribution(attribution(run)).notes
    assert any("pin_memory=True has no effect here: the batches went to the cpu" in n for n in notes)
    scenario = make_run(wait=0.3)  # a scenario notes it in run.json when it builds its loader
    scenario.meta["scenario"]["loader"]["pin_memory"] = True
    assert not any("pin_memory" in n for n in verdict_from_attribution(attribution(scenario)).notes)


@pytest.mark.parametrize("framework, text", [
    ("transformers", "torch.set_num_threads(1); TrainingArguments(dataloader_num_workers=1)"),
    ("lightning", "torch.set_num_threads(1); the DataLoader built in train_dataloader(): "
                  "DataLoader(SyntheticImages(...), num_workers=1)"),
    (None, "torch.set_num_threads(1); train_iter: DataLoader(SyntheticImages(...), num_workers=1)"),
])
def test_advice_code_is_what_the_user_can_write_for_their_framework(framework, text):
    from pipeprof.analysis.advice_text import script_text
    loader = _train_loader(0, 1, framework=framework, built_in="train_dataloader" if framework else None)
    assert script_text({"loader.num_workers": 1, "train.threads": 1}, loader) == text
    assert script_text({"train.threads": 1}, loader) == "torch.set_num_threads(1)"  # never a loader's name
    # the workers it already has are no change to write (a Trainer run with 1 worker told to set threads)
    assert script_text({"loader.num_workers": 1, "train.threads": 1}, {**loader, "num_workers": 1}) == \
        "torch.set_num_threads(1)"
    args = script_text({"loader.num_workers": 2, "loader.pin_memory": True, "loader.prefetch_factor": 4,
                        "loader.persistent_workers": True}, _train_loader(0, 1, framework="transformers", num_workers=0))
    assert args == ("TrainingArguments(dataloader_num_workers=2, dataloader_pin_memory=True, "
                    "dataloader_prefetch_factor=4, dataloader_persistent_workers=True)")


def test_a_lightning_script_passing_its_own_loaders_to_fit_is_told_the_loaders_name():
    # No train_dataloader() in the script: its loaders were built in main() and handed to trainer.fit.
    from pipeprof.analysis.advice_text import script_text
    loader = _train_loader(0, 1, framework="lightning", built_in=None, name="train_loader")
    assert script_text({"loader.num_workers": 1}, loader) == \
        "train_loader: DataLoader(SyntheticImages(...), num_workers=1)"
    loader = _train_loader(0, 1, framework="lightning", built_in="make_loader", name="make_loader")
    assert script_text({"loader.num_workers": 1}, loader) == \
        "the DataLoader built in make_loader(): DataLoader(SyntheticImages(...), num_workers=1)"


# -- issue 17, item 1: what-ifs measured after the run, and predict_change -------------------------

from pipeprof.analysis.recommend import WHOLE_BATCHES, predict_change  # noqa: E402


def with_what_ifs(run, **rates):
    """run.json's what_ifs with the given probes' samples/s (three equal windows each)."""
    run.meta["what_ifs"] = {name: {"samples_per_s": rate, "samples_per_s_per_window": [rate] * 3}
                            for name, rate in rates.items()}
    return run


def predicted(run, change):
    attr = attribution(run, None)
    rec = predict_change(run, attr, verdict_from_attribution(attr), change)
    return rec if rec is None else rec.to_json()


def test_data_on_the_device_is_predicted_as_the_device_resident_loop_measured():
    run = with_main_cpu(make_run(wait=0.3, h2d=0.01, loading=(0.09, 0.05, 0.01), cores=4, threads=2), 120.0)
    run.meta["scenario"]["data"]["samples"] = 30000
    run.meta["compute_ceiling"] = {"samples_per_s": 5000.0}  # one batch repeated: overshoots the real loop
    with_what_ifs(run, device_loop=3000.0)
    rec = predicted(run, {"data.storage": "device"})
    assert rec["predicted_samples_per_s"] == pytest.approx(3000.0)
    assert rec["predicted_speedup"] == pytest.approx(3000.0 / (BATCH / STEP_S))
    assert "C_loop" in rec["model"]
    (top,) = [r for r in recs_of(run) if r["change"].get("data.storage") == "device"]
    assert top["predicted_samples_per_s"] == pytest.approx(3000.0)  # recommendations take the same number


def test_zero_workers_cost_what_the_loader_alone_and_the_device_loop_measured():
    # A run with 2 workers; after it the 0-worker loader made 20,000 samples/s and the device loop 2,000.
    run = with_main_cpu(make_run(wait=0.5, h2d=0.01, workers=2, ready=0, loading=(0.02, 0.01, 0.0),
                                 cores=2, threads=2), 200.0)
    with_what_ifs(run, device_loop=2000.0, loader_alone=20000.0)
    rec = predicted(run, {"loader.num_workers": 0})
    assert rec["predicted_samples_per_s"] == pytest.approx(1 / (1 / 20000.0 + 1 / 2000.0))
    assert "L0" in rec["model"] and "C_loop" in rec["model"]
    (workers,) = by_key(recs_of(run), "loader.num_workers")
    assert workers["change"] == {"loader.num_workers": 0}
    assert workers["predicted_samples_per_s"] == pytest.approx(rec["predicted_samples_per_s"])


def test_decoded_samples_in_ram_cost_what_the_ram_loader_measured_not_nothing():
    # Images decoded by the training process: fetch 1 ms, decode 20 ms, collate 1 ms per batch.
    run = make_run(wait=0.5, h2d=0.0, loading=(0.001, 0.02, 0.001), storage="images")
    analytical = predicted(run, {"data.storage": "ram"})["predicted_samples_per_s"]
    c = BATCH / (0.5 * STEP_S)
    assert analytical == pytest.approx(1 / (0.001 / BATCH + 1 / c))  # only collate left (assumed)
    with_what_ifs(run, device_loop=2000.0, ram_loader=10000.0)
    rec = predicted(run, {"data.storage": "ram"})
    assert rec["predicted_samples_per_s"] == pytest.approx(1 / (1 / 10000.0 + 1 / 2000.0))
    assert "p_ram" in rec["model"]


def test_a_cold_run_at_zero_workers_predicts_from_its_own_pass_not_the_cold_probe():
    # Memmap read cold by the training process: fetch 20 ms, prep 1 ms, collate 1 ms a batch over its pass. The
    # 0-worker loader probed after the run read every page cold right after the drop (2,000 samples/s: slower
    # than the pass, whose pages warm as it goes): a 0-worker prediction takes the run's own p.
    run = make_run(wait=0.5, h2d=0.0, loading=(0.02, 0.001, 0.001), storage="memmap")
    run.meta["scenario"]["data"]["cache"] = "cold"
    with_what_ifs(run, device_loop=3000.0, device_loop_threads=2000.0, loader_alone=2000.0)
    run.meta["what_ifs"]["device_loop"]["threads"] = 2
    rec = predicted(run, {"train.threads": 1})
    assert rec["predicted_samples_per_s"] == pytest.approx(1 / (0.022 / BATCH + 1 / 2000.0))
    assert "p from the run's loading records" in rec["model"]
    run.meta["scenario"]["data"]["cache"] = "warm"  # warm: the probe measured what the run reads
    assert predicted(run, {"train.threads": 1})["predicted_samples_per_s"] == pytest.approx(1 / (1 / 2000.0 + 1 / 2000.0))


def test_decoded_samples_in_ram_with_workers_free_the_compute_the_decoding_workers_stalled():
    # 1 worker decoding images (fetch 1 ms, decode 60 ms, collate 1 ms per batch of 128) beside 2 torch threads
    # on 2 cores: compute measured under that worker's stall. Cached in RAM, the worker only indexes and sends
    # (the RAM loader probe: 40,000 samples/s), so compute gets most of its speed back: the fixed point with the
    # RAM costs, not the run's stalled C (which the supply-only form kept: "min(C, supply)").
    run = with_main_cpu(make_run(wait=0.2, h2d=0.0, workers=1, loading=(0.001, 0.06, 0.001), cores=2,
                                 threads=2, storage="images"), 150.0)
    with_what_ifs(run, device_loop=6000.0, ram_loader=40000.0)
    rec = predicted(run, {"data.storage": "ram"})
    x = rec["predicted_samples_per_s"]
    c_run = BATCH / (0.8 * STEP_S)  # the run's own compute ceiling, stalled
    assert "p_ram" in rec["model"] and "u_k = p_ram + sending a batch" in rec["model"]
    assert x > 1.5 * c_run  # the stall the decoding worker caused is gone
    # the fixed point: the training process receives each batch and computes beside a worker busy u·X cores
    u = 1 / 40000.0 + SEND
    assert x < 1 / (1 / 6000.0 + RECEIVE) * 1.001  # never above the loop alone with the receive cost
    assert x * u < 1.0  # the worker is not the limit: it would make 1/u > X samples/s on its core


def test_whole_batches_with_no_workers_are_the_device_loop_plus_the_copy():
    run = make_run(wait=0.5, h2d=0.01, loading=(0.03, 0.0, 0.02))
    with_what_ifs(run, device_loop=2000.0, loader_alone=5000.0)
    rec = predicted(run, {WHOLE_BATCHES: True})
    h2d_per_sample = 0.01 * STEP_S / BATCH
    assert rec["predicted_samples_per_s"] == pytest.approx(1 / (1 / 2000.0 + h2d_per_sample))
    assert rec["change"] == {} and "__getitems__" in rec["code_change"]
    (code,) = [r for r in recs_of(run) if r.get("code_change") and "__getitems__" in r["code_change"]]
    assert code["predicted_samples_per_s"] == pytest.approx(rec["predicted_samples_per_s"])


@pytest.mark.parametrize("change", [
    {"loader.num_workers": 3}, {"loader.num_workers": 1, "train.threads": 1}, {"train.threads": 1},
    {"loader.prefetch_factor": 4}, {"loader.persistent_workers": True}, {"loader.pin_memory": True},
    {"data.storage": "device"},
])
def test_any_change_of_the_listed_kinds_is_predicted_whether_or_not_recommended(change):
    run = with_main_cpu(make_run(wait=0.3, h2d=0.01, workers=2, loading=(0.09, 0.05, 0.01), cores=4, threads=2),
                        120.0)
    run.meta["scenario"]["data"]["samples"] = 30000
    rec = predicted(run, change)
    assert rec is not None and rec["predicted_samples_per_s"] > 0
    assert rec["change"] == change and rec["model"]


def test_an_unmodelled_change_or_a_run_too_short_is_not_predicted():
    run = make_run(wait=0.3, loading=(0.09, 0.05, 0.01))
    assert predicted(run, {"loader.batch_size": 256}) is None  # not a key the model composes
    assert predicted(run, {"data.storage": "memmap"}) is None  # another storage than RAM or the device
    assert predicted(run, {"loader.prefetch_factor": 4}) is None  # no workers to prefetch
    short = make_run(wait=0.3, n=MIN_COUNTED_STEPS - 1, warmup=0, loading=(0.09, 0.05, 0.01))
    assert predicted(short, {"loader.num_workers": 1}) is None


def test_without_probes_the_model_says_it_is_the_analytical_one():
    run = make_run(wait=0.3, workers=2, loading=(0.09, 0.05, 0.01), cores=4)
    assert "analytical, no what-if probe" in predicted(run, {"loader.num_workers": 3})["model"]
    run.meta["kind"] = "script"
    run.meta["scenario"]["kind"] = "script"
    run.meta["what_ifs"] = {"absent": "no --steps: the what-if segments run in the script's own loop"}
    assert "[analytical, no what-if probe: no --steps: the what-if" in predicted(run, {"loader.num_workers": 3})["model"]
    # the segments measured 1 and 3 workers at the run's threads (script.segments): 3 is read from them
    trained = {"samples_per_s": 1500.0, "samples_per_s_per_window": [1500.0] * 3, "startup_s": 0.05,
               "threads": attribution(run, None).cpu.torch_threads}
    run.meta["what_ifs"] = {"train_workers": {"1": trained, "3": trained}}
    model = predicted(run, {"loader.num_workers": 3})["model"]
    assert "what_ifs.train_workers" in model and "analytical" not in model
    # a setting the segments did not measure says so
    assert "the what-if segments of the script's own loop did not measure this setting" in \
        predicted(run, {"loader.num_workers": 4})["model"]
    with_what_ifs(run, device_loop=2000.0)
    assert "analytical" not in predicted(run, {"loader.num_workers": 3})["model"]


def test_fewer_threads_keep_the_compute_the_loop_measured_at_that_many_threads():
    # 2 cores, 2 torch threads and 1 worker: oversubscribed. After the run the device loop made 3,000 samples/s
    # at 2 threads and 2,400 at 1. With 1 thread the worker has a core of its own: compute keeps what it measured
    # beside the worker, scaled by the loop's thread ratio, and gets back the worker's modelled stall in
    # proportion to the worker's busy cores b (not the loop alone at 1 thread: 27-43% too high on the yardstick).
    def one_thread(loading):
        run = with_main_cpu(make_run(wait=0.3, h2d=0.0, workers=1, loading=loading, cores=2, threads=2), 150.0)
        with_what_ifs(run, device_loop=3000.0, device_loop_threads=2400.0)
        run.meta["what_ifs"]["device_loop"]["threads"] = 2
        return predicted(run, {"train.threads": 1})

    c_run, x_run = BATCH / (0.7 * STEP_S), BATCH / STEP_S
    # A worker nearly idle (3 ms a batch of 128: b = 0.03 cores): the run's C, all but unchanged.
    idle = one_thread((0.001, 0.001, 0.001))
    b = 0.003 / BATCH * x_run
    c = c_run * math.exp(STALL * b * b)  # C^(1-b) · (C·exp(STALL·b))^b, the stall's over = b here
    assert idle["predicted_samples_per_s"] == pytest.approx(1 / (1 / (c * 2400.0 / 3000.0) + RECEIVE))
    assert "C_loop(threads)/C_loop(T)" in idle["model"] and "busy cores" in idle["model"]
    # A worker busy half a core (50 ms a batch: b = 0.5): half its modelled stall, on a log scale, goes with a
    # core of its own (its stall exp(STALL·0.5) on the run's C; C^(1/2)·C_free^(1/2) = C·exp(STALL·0.25)).
    half = one_thread((0.0, 0.05, 0.0))
    c = c_run * math.exp(STALL * 0.5 * 0.5)
    assert half["predicted_samples_per_s"] == pytest.approx(1 / (1 / (c * 2400.0 / 3000.0) + RECEIVE))
    # From a run without workers the loop alone at 1 thread is the compute (nothing beside it to carry over).
    alone = with_main_cpu(make_run(wait=0.3, h2d=0.0, loading=(0.001, 0.001, 0.001), cores=2, threads=2), 150.0)
    with_what_ifs(alone, device_loop=3000.0, device_loop_threads=2400.0, loader_alone=1e9)
    alone.meta["what_ifs"]["device_loop"]["threads"] = 2
    rec0 = predicted(alone, {"train.threads": 1})
    assert rec0["predicted_samples_per_s"] == pytest.approx(1 / (1e-9 + 1 / 2400.0))
    assert "C_loop(threads)" in rec0["model"]
    run = with_main_cpu(make_run(wait=0.3, h2d=0.0, workers=1, loading=(0.001, 0.001, 0.001), cores=2,
                                 threads=2), 150.0)
    with_what_ifs(run, device_loop=3000.0, device_loop_threads=2400.0)
    run.meta["what_ifs"]["device_loop"]["threads"] = 2
    # Without the probe at 1 thread: the assumption, C·min(1, 1/m) with m = 1.5 cores.
    del run.meta["what_ifs"]["device_loop_threads"]
    assumed = predicted(run, {"train.threads": 1})
    assert assumed["predicted_samples_per_s"] == pytest.approx(1 / (1.5 * 0.7 * STEP_S / BATCH + RECEIVE))
    assert "assumed" in assumed["model"]


def test_more_threads_from_a_run_at_one_gain_what_the_loop_measured_at_the_cores():
    # 2 cores, 1 torch thread, no workers: after the run the loop made 2,400 samples/s at 1 thread and 3,000 at
    # the 2 cores (the threads probe from a run at 1 goes up, not down).
    run = with_main_cpu(make_run(wait=0.3, h2d=0.0, loading=(0.001, 0.001, 0.001), cores=2, threads=1), 100.0)
    with_what_ifs(run, device_loop=2400.0, device_loop_threads=3000.0, loader_alone=1e9)
    run.meta["what_ifs"]["device_loop"]["threads"] = 1
    run.meta["what_ifs"]["device_loop_threads"]["threads"] = 2
    two = predicted(run, {"train.threads": 2})
    assert two["predicted_samples_per_s"] == pytest.approx(1 / (1e-9 + 1 / 3000.0))
    assert "C_loop(threads)" in two["model"] and "assumed" not in two["model"]
    # Beyond the probes the loop is held at the nearer one: no gain is invented past what was measured.
    four = predicted(run, {"train.threads": 4})
    assert four["predicted_samples_per_s"] == pytest.approx(two["predicted_samples_per_s"])
    # An entry from before the probe went both ways (no threads key) was at 1 thread: with the run at 1 too,
    # there is nothing to interpolate and the assumption speaks.
    del run.meta["what_ifs"]["device_loop_threads"]["threads"]
    assert "assumed" in predicted(run, {"train.threads": 2})["model"]


def with_workers_probe(run, entries):
    """what_ifs.loader_workers: k -> (samples/s, receive CPU s/sample, workers' CPU s/sample)."""
    run.meta["what_ifs"]["loader_workers"] = {
        str(k): {"samples_per_s": rate, "samples_per_s_per_window": [rate] * 3, "receive_cpu_s_per_sample": q,
                 "worker_cpu_s_per_sample": u} for k, (rate, q, u) in entries.items()}
    return run


def time_shared_fixed_point(k, threads, cores, rate, q, u, c_free):
    """The X where the workers' supply (their cores time-shared: the fair share k·N/(k + T) while the training
    process computes, a share X/C_k of the time, and min(k, N) while it waits) and the training process's
    rate 1/(1/C_k + q), C_k = C_free/exp(STALL·over), meet (g falls as x grows: one crossing)."""
    def g(x):
        c_k = c_free / math.exp(STALL * min(max(threads + u * x - cores, 0.0), u * x))
        f = min(x / c_k, 1.0)
        w = k if k + threads <= cores else f * k * cores / (k + threads) + (1 - f) * min(k, cores)
        return min(rate, w / u, 1 / (1 / c_k + q))

    lo, hi = 0.0, 1 / (1 / c_free + q)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if g(mid) >= mid else (lo, mid)
    return lo


def test_more_workers_are_predicted_from_the_k_worker_loader_measured_alone():
    # 2 cores, 2 torch threads, no workers; after the run: the loop 2,000/s, 1 worker alone 10,000/s, receiving
    # 50 us and working 200 us a sample; 3 workers alone 30,000/s, 50 us, 100 us.
    run = with_main_cpu(make_run(wait=0.3, h2d=0.01, loading=(0.02, 0.01, 0.0), cores=2, threads=2), 150.0)
    with_what_ifs(run, device_loop=2000.0, loader_alone=20000.0)
    with_workers_probe(run, {1: (10000.0, 50e-6, 200e-6), 3: (30000.0, 50e-6, 100e-6)})
    # k=1: 1 + 2 threads > 2 cores: W time-shared; X = the fixed point of X = min(L_k, W/u, 1/(1/C_k + q)),
    # C_k = 2,000/exp(STALL·200 us·X) (over = min(2 + w − 2, w) = w).
    one = predicted(run, {"loader.num_workers": 1})
    assert one["predicted_samples_per_s"] == pytest.approx(
        time_shared_fixed_point(1, 2, 2, 10000.0, 50e-6, 200e-6, 2000.0), rel=1e-6)
    assert one["predicted_samples_per_s"] < 2000.0  # the stalled compute, not the supply, limits it
    assert "L_k" in one["model"] and "loader_workers" in one["model"] and "analytical" not in one["model"]
    three = predicted(run, {"loader.num_workers": 3})
    assert three["predicted_samples_per_s"] == pytest.approx(
        time_shared_fixed_point(3, 2, 2, 30000.0, 50e-6, 100e-6, 2000.0), rel=1e-6)
    two = predicted(run, {"loader.num_workers": 2})  # not probed: the same fixed point, its costs estimated
    assert "estimated" in two["model"] and "loader_workers" not in two["model"]


def test_from_a_run_with_workers_compute_is_its_own_c_before_its_workers_stall():
    # 1 worker, 2 threads, 2 cores: the run's C was measured under its worker's stall (busy u·X cores), so
    # C_free = C·exp(STALL·u·X) with u of the nearest probed k (2 here); then the same fixed point at k = 2.
    run = with_main_cpu(make_run(wait=0.3, h2d=0.01, workers=1, ready=0, loading=(0.02, 0.01, 0.0),
                                 cores=2, threads=2), 150.0)
    with_what_ifs(run, device_loop=5000.0, loader_alone=20000.0)
    with_workers_probe(run, {2: (30000.0, 50e-6, 300e-6)})
    m = _Model(run, attribution(run, None))
    c_free = m.ceiling * math.exp(STALL * 300e-6 * m.current)
    two = predicted(run, {"loader.num_workers": 2})
    assert two["predicted_samples_per_s"] == pytest.approx(
        time_shared_fixed_point(2, 2, 2, 30000.0, 50e-6, 300e-6, c_free), rel=1e-6)
    assert "run's own workers" in two["model"]


def test_from_a_run_with_workers_a_batch_is_received_in_the_time_its_ready_steps_took():
    # 1 worker, 1 thread on 4 cores; every step found a batch waiting and still waited 10 ms for it: receiving
    # takes 10 ms a batch (78 us a sample) of wall time, where the probe's CPU read 8 us. More workers then
    # change nothing: the run's own rate, not the probe's handover.
    def run_with(ready):
        run = with_main_cpu(make_run(wait=0.1, h2d=0.0, workers=1, ready=ready, loading=(0.001, 0.001, 0.001),
                                     cores=4, threads=1), 100.0)
        with_what_ifs(run, device_loop=5000.0, loader_alone=1e6)
        return with_workers_probe(run, {2: (30000.0, 8e-6, 20e-6)})

    c = BATCH / (0.9 * STEP_S)
    rec = predicted(run_with(4), {"loader.num_workers": 2})
    waiting = rec["predicted_samples_per_s"]
    assert "the run's own wall time taking a batch that was already waiting" in rec["model"]
    assert waiting == pytest.approx(1 / (1 / c + 0.1 * STEP_S / BATCH))
    assert waiting == pytest.approx(BATCH / STEP_S)  # the run's own rate: its k reproduced
    assert predicted(run_with(0), {"loader.num_workers": 2})["predicted_samples_per_s"] == pytest.approx(
        1 / (1 / c + 8e-6))  # no step found a batch waiting: its waits were the worker's; the probe's q


@pytest.mark.parametrize("ready, expected", [
    ([1] * 40, 0.01 / 128), ([0] * 20 + [2] * 20, 0.01 / 128), ([0] * 35 + [1] * 5, None), ([float("nan")] * 40, None)])
def test_the_receive_time_comes_from_enough_steps_that_found_a_batch_waiting(ready, expected):
    steps = pd.DataFrame({"ready_batches": ready, "data_wait_s": 0.01, "samples": 128})
    got = receive_when_ready(steps)
    assert got == (None if expected is None else pytest.approx(expected))


def test_workers_get_their_fair_share_of_the_cores_only_while_the_training_process_computes():
    # own cores where the workers and the threads fit; the fair share k·N/(k + T) while computing; min(k, N)
    # while the training process waits for a batch; in proportion in between.
    assert worker_share(1, 1, 2, computing=0.9) == 1.0
    assert worker_share(1, 2, 2, computing=1.0) == pytest.approx(2 / 3)
    assert worker_share(1, 2, 2, computing=0.0) == 1.0
    assert worker_share(3, 2, 2, computing=0.0) == 2.0
    assert worker_share(2, 2, 2, computing=0.25) == pytest.approx(0.25 * 1.0 + 0.75 * 2.0)


def test_a_worker_beside_a_waiting_training_process_gets_more_than_its_fair_share():
    # Augmenting in a worker costs 400 us a sample; the loop alone runs 20,000/s with 2 threads on 2 cores. The
    # fair share alone gives the worker 2/3 of a core (1,667/s); the training process computes a small share of
    # the time and waits for batches the rest, when the worker has its whole core.
    run = with_main_cpu(make_run(wait=0.8, h2d=0.01, loading=(0.0, 0.4e-3 * BATCH, 0.0), cores=2, threads=2), 120.0)
    with_what_ifs(run, device_loop=20000.0, loader_alone=2400.0)
    with_workers_probe(run, {1: (2450.0, 20e-6, 400e-6)})
    one = predicted(run, {"loader.num_workers": 1})["predicted_samples_per_s"]
    assert one > (2 / 3) / 400e-6 * 1.05
    assert one == pytest.approx(time_shared_fixed_point(1, 2, 2, 2450.0, 20e-6, 400e-6, 20000.0), rel=1e-6)


def test_a_deeper_queue_saves_the_waits_of_bursts_not_a_steady_shortfall():
    # 1 worker, every step waits the same 30 ms: the supply is short of the loop, not bursty; more batches queued
    # change nothing.
    steady = make_run(wait=0.3, workers=1, loading=(0.02, 0.01, 0.0))
    rec = predicted(steady, {"loader.prefetch_factor": 4})
    assert rec["predicted_samples_per_s"] == pytest.approx(BATCH / STEP_S)
    # Bursts: every 4th counted step waits 30 ms more than the others (5 ms): a deeper queue saves those 30 ms
    # each, at most up to what the worker makes busy all the time.
    bursty = make_run(wait=0.05, workers=1, loading=(0.02, 0.01, 0.0))
    longer = bursty.steps["step"] % 4 == 0
    bursty.steps.loc[longer, ["data_wait_s", "host_wait_s"]] += 0.03
    bursty.steps.loc[longer, "step_s"] += 0.03
    m = _Model(bursty, attribution(bursty, None))
    saved = 8 * 0.03  # steps 8, 12, ..., 36: step 4, the first counted, begins the pass (a start, not a burst)
    busy = m.loading.worker_busy_mean_fraction
    expected = min(m.samples / (m.total_s - saved), m.current / busy)
    rec = predicted(bursty, {"loader.prefetch_factor": 4})
    assert rec["predicted_samples_per_s"] == pytest.approx(expected)
    assert rec["predicted_samples_per_s"] > m.current
    assert "bursts" in rec["model"]


def test_each_pass_start_costs_the_workers_start_up_unless_they_persist():
    # 0 workers, 4 passes of 10 steps (the first begins in the warm-up): with workers, the 3 counted pass starts
    # each start them anew (STARTUP_S_PER_WORKER each, estimated); persistent workers start once, in the warm-up.
    from pipeprof.analysis.recommend import STARTUP_S_PER_WORKER

    run = with_main_cpu(make_run(wait=0.4, h2d=0.0, loading=(0.03, 0.02, 0.01), cores=2, threads=1), 200.0)
    run.steps["epoch"] = run.steps["step"] // 10
    steady = 1 / (0.06 / BATCH + SEND)  # as test_workers_beyond_free_cores_take_them_from_training
    m = _Model(run, attribution(run, None))
    one = predicted(run, {"loader.num_workers": 1})
    assert one["predicted_samples_per_s"] == pytest.approx(
        m.samples / (m.samples / steady + 3 * STARTUP_S_PER_WORKER))
    assert "3 pass starts" in one["model"]
    kept = predicted(run, {"loader.num_workers": 1, "loader.persistent_workers": True})
    assert kept["predicted_samples_per_s"] == pytest.approx(steady)


def with_trained(run, name="train_workers", **by_k):
    """what_ifs.train_workers (or train_threads, train_ram_workers): "k" -> (the loop's samples/s fed by k
    workers, its torch threads)."""
    run.meta["what_ifs"][name] = {
        k.lstrip("k"): {"samples_per_s": rate, "samples_per_s_per_window": [rate] * 3, "threads": threads,
                        "startup_s": 0.05} for k, (rate, threads) in by_k.items()}
    return run


def test_a_number_of_workers_trained_beside_after_the_run_is_predicted_as_that_loop_measured():
    # 2 cores, 2 torch threads, no workers. After the run the loop fed by 1 worker made 1,500 samples/s at 2
    # threads: the fixed point from the loader alone and the device loop would say otherwise, the measurement
    # of the changed loop is the prediction (each counted pass start's worker start-up added).
    run = with_main_cpu(make_run(wait=0.3, h2d=0.01, loading=(0.02, 0.01, 0.0), cores=2, threads=2), 150.0)
    with_what_ifs(run, device_loop=2000.0, loader_alone=20000.0)
    with_workers_probe(run, {1: (10000.0, 50e-6, 200e-6)})
    fixed_point = predicted(run, {"loader.num_workers": 1})["predicted_samples_per_s"]
    with_trained(run, k1=(1500.0, 2))
    m = _Model(run, attribution(run, None))
    starts = m._pass_starts_with(False)
    one = predicted(run, {"loader.num_workers": 1})
    assert one["predicted_samples_per_s"] == pytest.approx(m.samples / (m.samples / 1500.0 + starts * 0.05))
    assert one["predicted_samples_per_s"] != pytest.approx(fixed_point)
    assert "train_workers" in one["model"] and "start-up" in one["model"]
    # At other threads the probe did not measure it: the fixed point as before.
    other = predicted(run, {"loader.num_workers": 1, "train.threads": 1})
    assert "train_workers" not in other["model"] and "L_k" in other["model"]
    with_trained(run, k1=(1500.0, 1))  # a probe at 1 thread says nothing of 1 worker beside 2
    assert predicted(run, {"loader.num_workers": 1})["predicted_samples_per_s"] == pytest.approx(fixed_point)


def test_a_threads_change_beside_the_runs_workers_is_predicted_as_the_loop_trained_at_those_threads():
    # 1 worker at 1 thread on 2 cores; after the run the loop fed by its 1 worker made 2,600 samples/s at 2
    # threads (train_threads), where the device loop's ratio would carry the run's compute up.
    run = with_main_cpu(make_run(wait=0.3, h2d=0.0, workers=1, loading=(0.001, 0.001, 0.001), cores=2,
                                 threads=1), 100.0)
    with_what_ifs(run, device_loop=2400.0, device_loop_threads=3000.0, loader_alone=1e9)
    run.meta["what_ifs"]["device_loop"]["threads"] = 1
    run.meta["what_ifs"]["device_loop_threads"]["threads"] = 2
    scaled = predicted(run, {"train.threads": 2})
    assert "train_threads" not in scaled["model"]
    with_trained(run, "train_threads", k1=(2600.0, 2))
    m = _Model(run, attribution(run, None))
    two = predicted(run, {"train.threads": 2})
    assert two["predicted_samples_per_s"] == pytest.approx(
        m.samples / (m.samples / 2600.0 + m._pass_starts_with(False) * 0.05))
    assert "train_threads" in two["model"]
    assert "train_threads" not in predicted(run, {"train.threads": 2, "loader.num_workers": 2})["model"]


def test_decoded_samples_in_ram_at_the_runs_workers_are_predicted_as_the_loop_trained_on_them():
    run = with_main_cpu(make_run(wait=0.5, h2d=0.01, workers=1, loading=(0.08, 0.002, 0.003), storage="memmap",
                                 read_bytes_per_s=5e7, cores=2, threads=1), 150.0)
    with_what_ifs(run, device_loop=9000.0, loader_alone=2000.0, ram_loader=50000.0)
    with_trained(run, "train_ram_workers", k1=(4000.0, 1))
    m = _Model(run, attribution(run, None))
    starts = m._pass_starts_with(False)
    ram = predicted(run, {"data.storage": "ram"})
    assert ram["predicted_samples_per_s"] == pytest.approx(m.samples / (m.samples / 4000.0 + starts * 0.05))
    assert "train_ram_workers" in ram["model"]
    two = predicted(run, {"data.storage": "ram", "loader.num_workers": 2})  # not the k it trained at
    assert "train_ram_workers" not in two["model"]


def test_no_workers_trained_after_the_run_is_predicted_as_measured_with_no_start_up():
    # 1 worker, 2 threads: the loop making its own batches after the run made 900 samples/s; no worker starts.
    run = with_main_cpu(make_run(wait=0.5, h2d=0.01, workers=1, ready=0, loading=(0.02, 0.01, 0.0), cores=2,
                                 threads=2), 200.0)
    with_what_ifs(run, device_loop=2000.0, loader_alone=20000.0)
    from_loader = predicted(run, {"loader.num_workers": 0})
    assert "L0" in from_loader["model"]
    with_trained(run, k0=(900.0, 2))
    zero = predicted(run, {"loader.num_workers": 0})
    assert zero["predicted_samples_per_s"] == pytest.approx(900.0)
    assert "X(0)" in zero["model"] and "train_workers" in zero["model"] and "start-up" not in zero["model"]


def test_a_run_whose_probes_ran_slow_is_predicted_at_its_own_pace():
    # 0 workers from RAM. After the run its own loop measured again (train_as_run) made 0.8 of the run's
    # samples/s: a slow stretch of seconds every probe shared. Each probe is read at the run's pace, so a
    # prediction from them is the run's own rate times what the probes measured the change to do against it.
    run = with_main_cpu(make_run(wait=0.3, h2d=0.0, loading=(0.001, 0.001, 0.001), cores=2, threads=2), 100.0)
    current = _Model(run, attribution(run, None)).current
    with_what_ifs(run, device_loop=2000.0, loader_alone=20000.0)
    with_trained(run, k1=(1500.0, 2))
    before_device = predicted(run, {"data.storage": "device"})
    before_one = predicted(run, {"loader.num_workers": 1})
    assert "pace" not in before_device["model"]  # no train_as_run: the probes as recorded
    with_what_ifs_entry(run, "train_as_run", 0.8 * current)
    device = predicted(run, {"data.storage": "device"})
    assert device["predicted_samples_per_s"] == pytest.approx(before_device["predicted_samples_per_s"] / 0.8)
    one = predicted(run, {"loader.num_workers": 1})
    assert one["predicted_samples_per_s"] == pytest.approx(before_one["predicted_samples_per_s"] / 0.8, rel=0.01)
    assert "the run's pace" in device["model"] and "x0.800" in device["model"]
    # An analytical prediction (no probe in it) is not read at the probes' pace.
    assert "pace" not in (predicted(run, {"loader.pin_memory": True}) or {"model": ""})["model"]


def with_what_ifs_entry(run, name, rate):
    run.meta["what_ifs"][name] = {"samples_per_s": rate, "samples_per_s_per_window": [rate] * 3, "threads": 2,
                                  "num_workers": 0}
    return run
