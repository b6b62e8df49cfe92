"""Intervals on predictions (issue 17, item 2): made-up runs whose noise is known."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from rich.console import Console
from test_verdict import make_run
from test_verify import as_written

from pipeprof.analysis.attribution import attribution
from pipeprof.analysis.intervals import (
    MODEL_ERROR,
    RERUN_CV,
    Z_90,
    Interval,
    block_length,
    circular_blocks,
    intervals,
    model_kind,
    ranked,
    resample_run,
    t_90,
)
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.recommend import Recommendation, recommend
from pipeprof.analysis.verdict import verdict_from_attribution
from pipeprof.pipeline.derive import summarize
from pipeprof.render.advice_text import note_text
from pipeprof.render.console import print_summary


def noisy_run(noise: float, *, seed: int = 0, n: int = 80, block: int = 10, wait: float = 0.3):
    """A run predicted x1.41 by more workers (test_recommend's first case), its steps and batches slower or
    faster together by a factor exp(noise · N(0, 1)) drawn once per ``block`` steps: a machine that drifts."""
    run = make_run(wait=wait, h2d=0.01, loading=(0.02, 0.12, 0.01), cores=4, threads=2, n=n)
    run.samples["main_cpu_pct"] = 120.0
    run.samples["cpu_util_pct"] = 30.0  # the machine's CPU is the job's own: 1.2 of 4 cores
    rng = np.random.default_rng(seed)
    factor = np.repeat(np.exp(noise * rng.standard_normal(n // block + 1)), block)[:n]
    for column in ("step_s", "data_wait_s", "compute_s", "h2d_s", "host_wait_s"):
        run.steps[column] = run.steps[column] * factor
    for column in ("fetch_s", "prep_s", "collate_s"):
        run.loading[column] = run.loading[column] * factor
    return run


NO_CALIBRATION = {"rerun_cv": 0.0, "model_error": {"measured": 0.0, "estimated": 0.0}}


def recs_and_intervals(run, calibrated=False, **kwargs):
    """The recommendations and their intervals; without the calibrated re-run and model terms unless asked,
    so the bootstrap's own width is what the tests see."""
    attr = attribution(run)
    recs = recommend(run, attr, verdict_from_attribution(attr))
    return recs, intervals(run, recs, **({} if calibrated else NO_CALIBRATION), **kwargs)


def test_the_calibrated_terms_widen_an_estimate_more_than_a_measured_prediction():
    (rec,), (bare,) = recs_and_intervals(noisy_run(0.01))
    _, (calibrated,) = recs_and_intervals(noisy_run(0.01), calibrated=True)
    assert width(calibrated) > width(bare) + 0.5  # x(1 + ...) -- the model's own error dominates a steady run
    assert rec.tier == "estimated" and model_kind(rec) == "estimated"
    assert "estimated model's own error" in calibrated.method
    assert model_kind(dataclasses.replace(rec, tier="measured")) == "measured"
    half = {k: math.sqrt((Z_90 * RERUN_CV) ** 2 + (Z_90 * e) ** 2) for k, e in MODEL_ERROR.items()}
    assert half["measured"] < half["estimated"]


def width(interval: Interval) -> float:
    assert interval.speedup is not None
    low, high = interval.speedup
    return high / low - 1


def test_a_steady_run_gives_a_narrow_interval_and_a_noisy_one_a_wide_one():
    (steady,), (steady_interval,) = recs_and_intervals(noisy_run(0.01))
    (noisy,), (noisy_interval,) = recs_and_intervals(noisy_run(0.3))
    assert steady.change == noisy.change == {"loader.num_workers": 3}
    assert width(steady_interval) < 0.03
    assert width(noisy_interval) > 10 * width(steady_interval)
    assert not steady_interval.may_not_help and steady_interval.level == 0.8


def test_the_interval_contains_the_point_prediction():
    for noise in (0.0, 0.05, 0.3, 0.8):
        recs, bounds = recs_and_intervals(noisy_run(noise, seed=3))
        for rec, interval in zip(recs, bounds, strict=True):
            assert interval.samples_per_s is not None and interval.speedup is not None
            low, high = interval.samples_per_s
            assert low <= rec.predicted_samples_per_s <= high
            assert interval.speedup[0] <= rec.predicted_speedup <= interval.speedup[1]


def test_a_run_without_noise_has_an_interval_of_its_point():
    (rec,), (interval,) = recs_and_intervals(noisy_run(0.0))
    assert interval.samples_per_s == pytest.approx((rec.predicted_samples_per_s,) * 2)


def test_the_same_run_gives_the_same_intervals_and_another_seed_others():
    run = noisy_run(0.3)
    assert summarize(run) == summarize(run)
    _, first = recs_and_intervals(run)
    _, again = recs_and_intervals(run)
    _, other = recs_and_intervals(run, seed=5)
    assert first == again
    assert first[0].samples_per_s != other[0].samples_per_s


def test_a_change_whose_interval_includes_one_is_not_presented_as_a_gain():
    summary = summarize(noisy_run(0.8))
    (rec,) = summary["recommendations"]
    low, high = rec["interval"]["speedup"]
    assert low <= 1.0 < rec["predicted_speedup"] < high
    assert rec["interval"]["may_not_help"] is True
    console = Console(record=True, width=400)
    print_summary(summary, "runs/x", console=console)
    assert f"(may not help: ×{low:.2f}–{high:.2f})" in console.export_text()


def test_changes_that_may_not_help_are_ranked_after_the_certain_gains():
    def rec(name: str, speedup: float) -> Recommendation:
        return Recommendation({name: 1}, 100 * speedup, speedup, Reason.written("why"), Reason.written("model"))

    recs = [rec("a", 2.0), rec("b", 1.6), rec("c", 1.3)]
    bounds = [Interval((90.0, 300.0), (0.9, 3.0), "m"), Interval((150.0, 170.0), (1.5, 1.7), "m"),
              Interval((120.0, 140.0), (1.2, 1.4), "m")]
    ordered, ordered_bounds = ranked(recs, bounds)
    assert [r.change for r in ordered] == [{"b": 1}, {"c": 1}, {"a": 1}]
    assert ordered_bounds[-1].may_not_help and not ordered_bounds[0].may_not_help


def test_changes_within_each_others_noise_rank_the_same_way_every_run_the_smaller_first():
    """Two profiles of one script (issue 44, item 4): 2 and 3 workers each predicted inside the other's interval
    swap places with the noise of the run; ranked by the smaller change instead, the top advice is the same."""
    def rec(workers: int, rate: float) -> Recommendation:
        return Recommendation({"loader.num_workers": workers}, rate, rate / 100, Reason.written("why"),
                              Reason.written("model"))

    def bound(rate: float) -> Interval:
        return Interval((0.85 * rate, 1.15 * rate), (0.0085 * rate, 0.0115 * rate), "m")

    runs = [(180.0, 172.0), (171.0, 183.0)]  # (2 workers, 3 workers) predicted, profile by profile
    for two, three in runs:
        by_speed = sorted([rec(2, two), rec(3, three)], key=lambda r: -r.predicted_samples_per_s)
        ordered, _ = ranked(by_speed, [bound(r.predicted_samples_per_s) for r in by_speed])
        assert [r.change["loader.num_workers"] for r in ordered] == [2, 3]
        assert [n.values["others"] for n in ordered[0].note] == [({"loader.num_workers": 3},)]
        assert [n.values["others"] for n in ordered[1].note] == [({"loader.num_workers": 2},)]
    apart = [rec(3, 240.0), rec(2, 150.0)]  # beyond each other's noise: the faster first, no note
    ordered, _ = ranked(apart, [bound(240.0), bound(150.0)])
    assert [r.change["loader.num_workers"] for r in ordered] == [3, 2] and not ordered[0].note
    assert "within the noise of loader.num_workers=3" in (note_text(ranked(
        [rec(3, 183.0), rec(2, 171.0)], [bound(183.0), bound(171.0)])[0][0].note) or "")


def test_the_honest_negative_gets_no_bounds():
    run = make_run(wait=0.02, loading=(0.001, 0.0, 0.0005))  # compute-bound
    (rec,), (interval,) = recs_and_intervals(run)
    assert rec.change == {} and interval.samples_per_s is None and interval.speedup is None
    assert "nothing to bound" in interval.method and not interval.may_not_help


def test_circular_blocks_are_runs_of_consecutive_steps():
    rng = np.random.default_rng(0)
    picks = circular_blocks(23, 5, rng)
    assert len(picks) == 23 and picks.min() >= 0 and picks.max() < 23
    for start in range(0, 20, 5):
        block = picks[start:start + 5]
        assert ((np.diff(block) % 23) == 1).all()
    assert block_length(200) == 10 and block_length(20) == 4 and block_length(3) == 1


def test_a_resample_keeps_the_run_shape_epoch_starts_and_each_batch_with_its_step():
    run = noisy_run(0.3, n=60)
    run.steps["epoch"] = run.steps["step"] // 20
    run.steps["data_wait_s"] = run.steps["step"] * 1e-4  # every step's own value, to follow it
    run.loading["fetch_s"] = run.loading["step"] * 1e-5
    again = resample_run(run, np.random.default_rng(1))
    assert len(again.steps) == len(run.steps) and list(again.steps["step"]) == list(run.steps["step"])
    assert list(again.steps["epoch"]) == list(run.steps["epoch"])
    assert list(again.steps["t_start_s"]) == list(run.steps["t_start_s"])
    drawn = (again.steps["data_wait_s"] / 1e-4).round().astype(int)
    counted = ~again.steps["warmup"].astype(bool)
    assert drawn[~counted].tolist() == again.steps["step"][~counted].tolist()  # warm-up untouched
    assert (drawn[counted] >= 4).all() and drawn[counted].nunique() < counted.sum()  # drawn with repeats
    for first in (4, 20, 40):  # each epoch's first counted step stays in place
        assert drawn[first] == first
    fetch = again.loading.set_index("step")["fetch_s"] / 1e-5
    assert (fetch.loc[again.steps["step"]].round().astype(int).to_numpy() == drawn.to_numpy()).all()


def test_measured_what_ifs_are_resampled_from_their_windows():
    run = noisy_run(0.0)
    run.meta["compute_ceiling"] = {"samples_per_s": 2000.0, "samples_per_s_per_window": [1000.0, 2000.0, 3000.0]}
    run.meta["what_ifs"] = [{"samples_per_s": 50.0, "samples_per_s_per_window": [50.0, 50.0]}]
    rng = np.random.default_rng(2)
    seen = set()
    for _ in range(20):
        meta = resample_run(run, rng).meta
        windows = meta["compute_ceiling"]["samples_per_s_per_window"]
        assert set(windows) <= {1000.0, 2000.0, 3000.0}
        assert meta["compute_ceiling"]["samples_per_s"] == pytest.approx(float(np.mean(windows)))
        assert meta["what_ifs"][0]["samples_per_s"] == 50.0
        seen.add(meta["compute_ceiling"]["samples_per_s"])
    assert len(seen) > 2
    assert run.meta["compute_ceiling"]["samples_per_s"] == 2000.0  # the run itself unchanged


def test_verification_says_whether_the_measured_rate_fell_in_the_interval():
    interval = Interval((900.0, 1100.0), (0.9, 1.1), "m")
    record = {"status": "complete", "change": {"loader.num_workers": 2}, "predicted_samples_per_s": 1000.0,
              "predicted_speedup": 1.0, "measured_samples_per_s": 1050.0}
    inside = as_written(record, 1000.0, interval)
    assert inside["within_interval"] is True and "inside the predicted interval 900–1,100" in inside["verdict_words"]
    outside = as_written({**record, "measured_samples_per_s": 1200.0}, 1000.0, interval)
    assert outside["within_interval"] is False and "outside" in outside["verdict_words"]
    assert as_written(record, 1000.0)["within_interval"] is None
    assert as_written({**record, "status": "failed"}, 1000.0, interval)["within_interval"] is None


def test_verifying_a_change_that_may_not_help_says_it_was_not_offered_as_a_gain():
    # plain_loop's only recommendation: x1.22 in x0.85-x1.75, measured x0.67 (stop 26).
    interval = Interval((850.0, 1750.0), (0.85, 1.75), "m")
    assert interval.may_not_help
    record = {"status": "complete", "change": {"loader.num_workers": 1}, "predicted_samples_per_s": 1220.0,
              "predicted_speedup": 1.22, "measured_samples_per_s": 670.0}
    words = as_written(record, 1000.0, interval)["verdict_words"]
    assert "predicted ×1.22, measured ×0.67" in words
    assert words.endswith("the change was presented as one that may not help (its interval reaches ×1.0), "
                          "not as a gain")
    gain = Interval((1100.0, 1750.0), (1.1, 1.75), "m")
    assert "may not help" not in as_written(record, 1000.0, gain)["verdict_words"]


def test_a_verified_run_records_within_interval_for_the_checked_recommendation():
    run = noisy_run(0.1)
    (rec,) = summarize(run)["recommendations"]
    low, high = rec["interval"]["samples_per_s"]
    run.meta["verification"] = {"status": "complete", "change": rec["change"],
                                "predicted_samples_per_s": rec["predicted_samples_per_s"],
                                "predicted_speedup": rec["predicted_speedup"], "measured_samples_per_s": high * 1.01}
    v = summarize(run)["verification"]
    assert v["within_interval"] is False and v["interval"]["samples_per_s"] == [low, high]
    run.meta["verification"]["measured_samples_per_s"] = (low + high) / 2
    assert summarize(run)["verification"]["within_interval"] is True


def test_t_90_continues_its_table():
    assert t_90(9) == pytest.approx(1.383, abs=1e-3)
    assert t_90(20) == 1.3253 and t_90(21) == pytest.approx(1.3232, abs=0.002)  # beyond the table: within 0.002
    assert t_90(1000) == pytest.approx(1.2816, abs=1e-3)
    with pytest.raises(ValueError):
        t_90(0)


def test_the_what_ifs_are_drawn_alike_whatever_their_key_order():
    """run.json is saved with sorted keys: a summary derived before the save and one derived from the folder
    must draw the same windows."""
    from pipeprof.analysis.intervals import _resample_windows

    probe = {"device_loop": {"samples_per_s": 10.0, "samples_per_s_per_window": [8.0, 10.0, 12.0]},
             "ram_loader": {"samples_per_s": 5.0, "samples_per_s_per_window": [4.0, 5.0, 7.0]}}
    reordered = {k: dict(reversed(list(v.items()))) for k, v in reversed(list(probe.items()))}
    first = _resample_windows(probe, np.random.default_rng(1))
    again = _resample_windows(reordered, np.random.default_rng(1))
    assert first == again and first != probe


def test_the_models_own_error_is_the_yardsticks_floor_unless_this_run_measured_more():
    from pipeprof.analysis.change_model import ModelCheck
    from pipeprof.analysis.intervals import own_error

    missed = ModelCheck(estimate_errors=(0.05, -0.7), remeasured=0.3)
    assert own_error("estimated", missed, workers=2) == (pytest.approx(0.7), True)  # the workers' estimate missed
    assert own_error("estimated", missed, workers=0) == (MODEL_ERROR["estimated"], False)  # no workers estimated
    assert own_error("measured", missed, workers=2) == (pytest.approx(0.3), True)
    close = ModelCheck(estimate_errors=(0.01,), remeasured=0.02)
    assert own_error("estimated", close, workers=3) == (MODEL_ERROR["estimated"], False)
    assert own_error("measured", close, workers=3) == (MODEL_ERROR["measured"], False)
    assert own_error("measured", ModelCheck(), workers=1) == (MODEL_ERROR["measured"], False)


def test_an_estimate_the_run_saw_miss_gets_a_wider_interval_that_says_so():
    run = noisy_run(0.01)
    run.meta["what_ifs"] = {}
    (rec,), (floor,) = recs_and_intervals(run, calibrated=True)
    assert rec.tier == "estimated" and rec.change == {"loader.num_workers": 3}
    assert "the yardstick's typical" in floor.method
    # a probe of the run's own next worker count that measured 60 % of what the model estimates for it
    attr = attribution(run)
    k = int(attr.cpu.num_workers or 0) + 1
    from pipeprof.analysis.recommend import predict_change
    est = predict_change(run, attr, verdict_from_attribution(attr), {"loader.num_workers": k})
    assert est is not None and est.tier == "estimated"
    run.meta["what_ifs"] = {"train_workers": {str(k): {"samples_per_s": 0.6 * est.predicted_samples_per_s,
                                                         "threads": attr.cpu.torch_threads}}}
    recs = recommend(run, attribution(run), verdict_from_attribution(attribution(run)))
    wider = intervals(run, recs)
    three = next(i for r, i in zip(recs, wider, strict=True) if r.change == {"loader.num_workers": 3})
    assert "as this run measured it" in three.method
    assert width(three) > width(floor)


def test_a_verified_runs_intervals_take_the_re_run_noise_its_repeated_runs_measured():
    # --verify ran the base and the change 3 times each, fresh processes: this machine's re-run noise, measured
    run = noisy_run(0.01)
    plain = summarize(run)["recommendations"][0]["interval"]
    run.meta["verification"] = {"status": "complete", "predicted_samples_per_s": 1.0, "measured_samples_per_s": 1.0,
                                "base_runs_samples_per_s": [1000.0, 1300.0, 800.0],
                                "measured_runs_samples_per_s": [1500.0, 1900.0, 1200.0]}
    verified = summarize(run)
    interval = verified["recommendations"][0]["interval"]
    noise = verified["verification"]["rerun_noise"]
    assert noise["measured_cv"] > noise["cv"] > RERUN_CV and noise["df"] == 4
    assert f"a re-run's noise z(0.9) × {100 * noise['cv']:.0f}% (with this machine's" in interval["method"]
    low, high = interval["speedup"]
    plain_low, plain_high = plain["speedup"]
    assert high / low > plain_high / plain_low  # a noisier machine than the prior: wider
    assert "with this machine's" not in plain["method"]
