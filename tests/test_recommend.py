"""Recommendations from hand-made runs whose predicted throughput follows from the model's arithmetic."""

from __future__ import annotations

import re

import pytest
from rich.console import Console
from test_verdict import STEP_S, make_run

from pipeprof.analysis.attribution import attribution
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.recommend import Recommendation, _Model, is_no_op, recommend
from pipeprof.analysis.thresholds import MIN_COUNTED_STEPS
from pipeprof.analysis.verdict import verdict_from_attribution
from pipeprof.pipeline.derive import summarize
from pipeprof.render.advice_text import recommendation_words
from pipeprof.render.console import print_summary
from pipeprof.render.html import render_html
from pipeprof.render.interval_text import change_text
from pipeprof.render.verdict_text import verdict_notes
from pipeprof.run_meta import LoaderInfo
from pipeprof.scenario import SCHEMA

BATCH = 128
# Where no loader_workers probe measured k: the training process's CPU per sample receiving a batch, and the workers'
# per sample sending one (from a run without workers), as the model estimates them.


def as_written(rec: Recommendation) -> dict:
    """A recommendation as summary.json has it: its record's keys and its words (``render.advice_text``)."""
    return {**rec.to_json(), **recommendation_words(rec)}


def recs_of(run, probe=None):
    """The recommendations as summary.json has them (``Recommendation.to_json()`` and, written at the edge, their
    words: ``as_written``)."""
    attr = attribution(run, probe)
    return [as_written(r) for r in recommend(run, attr, verdict_from_attribution(attr))]


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


def test_ranked_by_predicted_speedup():
    run = with_main_cpu(make_run(wait=0.3, h2d=0.01, loading=(0.09, 0.05, 0.01), cores=4, threads=2), 120.0)
    run.meta["scenario"]["data"]["samples"] = 30000  # small: on-device data applies too
    recs = recs_of(run)
    assert len(recs) >= 2
    tiers = ["measured", "estimated", "not_predicted"]
    keys = [(tiers.index(r["tier"]), -(r["predicted_speedup"] or 0.0)) for r in recs]
    assert keys == sorted(keys)  # measured first, then estimated, then not predicted; by speed-up within each
    assert all(r["predicted_speedup"] >= 1.05 for r in recs if r["tier"] != "not_predicted")
    assert_valid_keys(recs)


def test_compute_bound_says_so():
    run = make_run(wait=0.02, loading=(0.001, 0.0, 0.0005))
    (rec,) = recs_of(run)
    assert rec["change"] == {} and rec["predicted_speedup"] == 1.0
    assert rec["predicted_samples_per_s"] == pytest.approx(BATCH / STEP_S)
    assert "compute-bound" in rec["reason"] and "2.0%" in rec["reason"]
    assert change_text(Recommendation.from_json(rec)) == "no change"


def test_saturated_cores_say_more_workers_will_not_help():
    # Both cores busy with the training process (200%); per-sample fetch is cheap but training needs the cores.
    run = with_main_cpu(make_run(wait=0.3, h2d=0.01, loading=(0.02, 0.1, 0.0), cores=2, threads=2), 200.0)
    run.samples["cpu_util_pct"] = 100.0  # the machine's 2 cores, all the job's
    (rec,) = recs_of(run)
    assert rec["change"] == {} and rec["predicted_speedup"] == 1.0
    assert "more workers will not help: the job keeps 100% of the 2.00 cores available busy" in rec["reason"]


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
    assert change_text(Recommendation.from_json(rec)) == "--set data.storage=ram --set data.cache=warm"
    assert_valid_keys(recs)


def test_summary_carries_recommendations():
    s = summarize(make_run(wait=0.02, loading=(0.001, 0.0, 0.0005)))
    assert s["recommendations"][0]["change"] == {}
    assert set(s["recommendations"][0]) >= {"change", "predicted_samples_per_s", "predicted_speedup", "reason",
                                            "model"}



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
    top = change_text(Recommendation.from_json(s["recommendations"][0]))
    assert top.startswith("--set ") and re.search(r"top recommendation\s+" + re.escape(top), text)


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
    noop = Recommendation(dict(change), 1e9, 10.0, Reason.written("a no-op"), Reason.written("none"))
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
    run.samples["main_cpu_pct"], run.samples["cpu_util_pct"] = 150.0, 100.0  # the job's own threads fill the cores
    (rec,) = recs_of(run)
    assert "try torch.set_num_threads(1) in the script" in rec["reason"]
    assert "--set" not in rec["reason"] and "quick" not in rec["reason"] and "~5x" not in rec["reason"]
    scenario = recs_of(with_main_cpu(make_run(wait=0.02, workers=2, loading=(0.001, 0.0, 0.0005)), 150.0))
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
    script = code_profile(_script_run([_train_loader(0, 1)])).to_json()
    assert "pipeprof run" not in script["cprofile"]["absent"] and "pipeprof profile" in script["cprofile"]["absent"]
    assert "pipeprof run" not in script["pyspy"]["absent"]
    assert "pipeprof run --cprofile" in (code_profile(make_run()).cprofile.absent or "")


def test_pin_memory_on_cpu_is_noted_for_a_script():
    run = _script_run([_train_loader(0, 1, pin_memory=True)], wait=0.3, ready=0, loading=(0.01, 0.15, 0.005))
    run.meta["scenario"]["loader"]["pin_memory"] = True
    notes = verdict_notes(verdict_from_attribution(attribution(run)))
    assert any("pin_memory=True has no effect here: the batches went to the cpu" in n for n in notes)
    scenario = make_run(wait=0.3)  # a scenario notes it in run.json when it builds its loader
    scenario.meta["scenario"]["loader"]["pin_memory"] = True
    assert not any("pin_memory" in n for n in verdict_notes(verdict_from_attribution(attribution(scenario))))


@pytest.mark.parametrize("framework, text", [
    ("transformers", "torch.set_num_threads(1); TrainingArguments(dataloader_num_workers=1)"),
    ("lightning", "torch.set_num_threads(1); the DataLoader built in train_dataloader(): "
                  "DataLoader(SyntheticImages(...), num_workers=1)"),
    (None, "torch.set_num_threads(1); train_iter: DataLoader(SyntheticImages(...), num_workers=1)"),
])
def test_advice_code_is_what_the_user_can_write_for_their_framework(framework, text):
    from pipeprof.render.script_text import script_text
    raw = _train_loader(0, 1, framework=framework, built_in="train_dataloader" if framework else None)
    loader = LoaderInfo.parse(raw)
    assert loader is not None
    assert script_text({"loader.num_workers": 1, "train.threads": 1}, loader) == text
    assert script_text({"train.threads": 1}, loader) == "torch.set_num_threads(1)"  # never a loader's name
    # the workers it already has are no change to write (a Trainer run with 1 worker told to set threads)
    assert script_text({"loader.num_workers": 1, "train.threads": 1}, LoaderInfo.parse({**raw, "num_workers": 1})) == \
        "torch.set_num_threads(1)"
    args = script_text({"loader.num_workers": 2, "loader.pin_memory": True, "loader.prefetch_factor": 4,
                        "loader.persistent_workers": True},
                       LoaderInfo.parse(_train_loader(0, 1, framework="transformers", num_workers=0)))
    assert args == ("TrainingArguments(dataloader_num_workers=2, dataloader_pin_memory=True, "
                    "dataloader_prefetch_factor=4, dataloader_persistent_workers=True)")


def test_a_lightning_script_passing_its_own_loaders_to_fit_is_told_the_loaders_name():
    # No train_dataloader() in the script: its loaders were built in main() and handed to trainer.fit.
    from pipeprof.render.script_text import script_text
    loader = LoaderInfo.parse(_train_loader(0, 1, framework="lightning", built_in=None, name="train_loader"))
    assert loader is not None
    assert script_text({"loader.num_workers": 1}, loader) == \
        "train_loader: DataLoader(SyntheticImages(...), num_workers=1)"
    loader = LoaderInfo.parse(_train_loader(0, 1, framework="lightning", built_in="make_loader", name="make_loader"))
    assert loader is not None
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
    return rec if rec is None else as_written(rec)


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
    {"loader.num_workers": 3}, {"loader.prefetch_factor": 4}, {"loader.persistent_workers": True}, {"loader.pin_memory": True},
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
    assert predicted(run, {"train.threads": 1}) is None  # compute at 1 thread not measured
    short = make_run(wait=0.3, n=MIN_COUNTED_STEPS - 1, warmup=0, loading=(0.09, 0.05, 0.01))
    assert predicted(short, {"loader.num_workers": 1}) is None


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


def with_trained(run, name="train_workers", **by_k):
    """what_ifs.train_workers (or train_threads, train_ram_workers): "k" -> (the loop's samples/s fed by k
    workers, its torch threads)."""
    run.meta["what_ifs"][name] = {
        k.lstrip("k"): {"samples_per_s": rate, "samples_per_s_per_window": [rate] * 3, "threads": threads,
                        "startup_s": 0.05} for k, (rate, threads) in by_k.items()}
    return run


def with_what_ifs_entry(run, name, rate):
    run.meta["what_ifs"][name] = {"samples_per_s": rate, "samples_per_s_per_window": [rate] * 3, "threads": 2,
                                  "num_workers": 0}
    return run
