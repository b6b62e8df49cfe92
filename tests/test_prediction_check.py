"""A sweep's predictions set beside its own points (analysis.prediction_check), in sweep.json and on its page."""

from __future__ import annotations

import pytest

from pipeprof.analysis import prediction_check as checking
from pipeprof.analysis.prediction_check import point_predictions
from pipeprof.analysis.sweep import point_record
from pipeprof.render.sweep import render_sweep_html


def prediction_check(points: list[dict]) -> dict:
    """sweep.json's ``prediction_check`` as written."""
    return checking.prediction_check(points).to_json()


def summary(rate: float, recs: list[dict]) -> dict:
    return {"samples_per_s": rate, "recommendations": recs}


def rec(change: dict, predicted: float | None, tier: str = "estimated", bounds=None) -> dict:
    return {"change": change, "predicted_samples_per_s": predicted, "tier": tier,
            "interval": {"samples_per_s": bounds}}


def grid() -> list[dict]:
    """num_workers 0, 1, 2 × storage images: each point's run recommends something."""
    return [
        point_record(0, "num_workers=0", {"loader.num_workers": 0, "data.storage": "images"}, "complete",
                     summary=summary(1000.0, [rec({"loader.num_workers": 2}, 2400.0, "measured", [2000.0, 2800.0]),
                                              rec({"data.storage": "ram"}, 5000.0, "estimated", [4000.0, 6000.0]),
                                              rec({"train.threads": 1}, 1500.0),  # threads are not swept
                                              rec({}, 1000.0)])),  # the honest negative
        point_record(1, "num_workers=1", {"loader.num_workers": 1, "data.storage": "images"}, "complete",
                     summary=summary(1800.0, [rec({"loader.num_workers": 2}, 3000.0, "estimated", None)])),
        point_record(2, "num_workers=2", {"loader.num_workers": 2, "data.storage": "images"}, "complete",
                     summary=summary(2000.0, [rec({"loader.pin_memory": True}, None, "not_predicted")])),
        point_record(3, "num_workers=0 ram", {"loader.num_workers": 0, "data.storage": "ram"}, "failed",
                     reason="boom"),
    ]


def test_every_prediction_that_lands_on_another_point_is_set_beside_its_measurement():
    check = prediction_check(grid())
    rows = {(r["from"], r["to"]): r for r in check["rows"]}
    # the ram point failed, the threads change lands nowhere, the negative and the unpredicted are not predictions
    assert set(rows) == {("num_workers=0", "num_workers=2"), ("num_workers=1", "num_workers=2")}
    measured = rows[("num_workers=0", "num_workers=2")]
    assert measured == {"from": "num_workers=0", "change": {"loader.num_workers": 2}, "to": "num_workers=2",
                        "predicted": 2400.0, "measured": 2000.0, "error": pytest.approx(0.2), "inside": True,
                        "tier": "measured", "disturbed": []}
    no_bounds = rows[("num_workers=1", "num_workers=2")]
    assert no_bounds["error"] == pytest.approx(0.5) and no_bounds["inside"] is None
    every = {"pairs": 2, "median_abs_error": pytest.approx(0.35), "worst_abs_error": pytest.approx(0.5),
             "inside_share": 1.0}
    assert check["summary"] == {**every, "undisturbed": every}  # no point said it never settled or was shared


def test_a_prediction_outside_its_interval_counts_against_the_inside_share():
    points = grid()
    points[0]["predictions"][0]["interval"] = [2200.0, 2600.0]  # measured 2,000: outside
    assert prediction_check(points)["summary"]["inside_share"] == 0.0


def test_nothing_to_check_is_said_so():
    lone = [point_record(0, "only", {"loader.num_workers": 0}, "complete",
                         summary=summary(1000.0, [rec({"loader.num_workers": 1}, 1500.0)]))]
    check = prediction_check(lone)
    nothing = {"pairs": 0, "median_abs_error": None, "worst_abs_error": None, "inside_share": None}
    assert check == {"rows": [], "summary": {**nothing, "undisturbed": nothing}}
    doc = {"kind": "sweep", "points": lone, "axes": [{"key": "loader.num_workers", "values": [0]}],
           "prediction_check": check, "notes": []}
    assert "nothing to check the predictions against" in render_sweep_html(doc)


def test_a_point_keeps_only_its_predicted_setting_changes():
    kept = point_predictions(summary(1000.0, [rec({"loader.num_workers": 2}, 2400.0, "measured", [2000.0, 2800.0]),
                                              rec({}, 1000.0), rec({"loader.pin_memory": True}, None)]))
    assert kept == [{"change": {"loader.num_workers": 2}, "predicted_samples_per_s": 2400.0, "tier": "measured",
                     "interval": [2000.0, 2800.0]}]


def test_the_sweep_page_shows_the_track_record():
    points = grid()
    doc = {"kind": "sweep", "points": points, "notes": [],
           "axes": [{"key": "loader.num_workers", "values": [0, 1, 2]},
                    {"key": "data.storage", "values": ["images", "ram"]}],
           "prediction_check": prediction_check(points)}
    page = render_sweep_html(doc)

    assert "2 predictions of one point" in page and "median error 35.0%" in page and "worst 50.0%" in page
    assert "<code>loader.num_workers=2</code>" in page and "+20%" in page and "measured" in page


def _budget(cv: float) -> dict:
    """A point's run.json ``steady`` when it ran out of time with its windows at this coefficient of variation."""
    return {"steady": True, "stopped": "budget", "cv": cv, "cv_threshold": 0.05, "windows": 5}


def test_a_pair_with_an_end_measured_disturbed_is_named_and_kept_out_of_the_undisturbed_record():
    points = grid()
    points[2]["steady"] = _budget(0.58)  # num_workers=2: out of time, its windows still ±58 %
    points[1]["steady"] = dict(_budget(0.03), stopped="budget")  # out of time but settled within 5 %: fine
    points[0]["steady"] = {"steady": True, "stopped": "stable", "cv": 0.02, "cv_threshold": 0.05}
    check = prediction_check(points)
    rows = {(r["from"], r["to"]): r for r in check["rows"]}
    assert rows[("num_workers=0", "num_workers=2")]["disturbed"] == [
        {"point": "num_workers=2", "never_settled": True, "cv": 0.58, "outside_share": None}]
    assert check["summary"]["pairs"] == 2 and check["summary"]["undisturbed"]["pairs"] == 0
    # settled, but a neighbour kept half the machine busy the whole time: its windows agree, its number is the
    # neighbour's; the source's own measurement counts too
    points[2]["steady"] = {"steady": True, "stopped": "stable", "cv": 0.01, "cv_threshold": 0.05}
    points[0]["outside_share"] = 0.5
    points[1]["outside_share"] = 0.05  # under the share worth naming: not disturbed
    check = prediction_check(points)
    rows = {(r["from"], r["to"]): r for r in check["rows"]}
    assert rows[("num_workers=0", "num_workers=2")]["disturbed"] == [
        {"point": "num_workers=0", "never_settled": False, "cv": None, "outside_share": 0.5}]
    assert check["summary"]["undisturbed"]["pairs"] == 1
    assert check["summary"]["undisturbed"]["median_abs_error"] == pytest.approx(0.5)  # the 1 -> 2 pair's +50 %
    doc = {"kind": "sweep", "points": points, "notes": [],
           "axes": [{"key": "loader.num_workers", "values": [0, 1, 2]}], "prediction_check": check}
    page = render_sweep_html(doc)
    assert "num_workers=0: processes outside the job kept 50% of the cores busy" in page
    assert "Between points measured undisturbed (1 of them): median error 50.0%" in page
    # out of time before enough windows for a cv: it never showed it settled either
    points[0]["steady"] = {"steady": True, "stopped": "budget", "cv": None, "cv_threshold": 0.05}
    check = prediction_check(points)
    assert {"point": "num_workers=0", "never_settled": True, "cv": None, "outside_share": 0.5} in \
        check["rows"][0]["disturbed"]
    doc["prediction_check"] = check
    assert "num_workers=0: never settled (too few windows), processes outside the job" in render_sweep_html(doc)


def test_a_points_outside_share_is_the_machines_cpu_less_the_jobs():
    cpu = {"cores": 2, "mean_util": 100.0, "main_mean_pct": 97.0, "workers_mean_pct": 0.0}
    one = point_record(0, "p", {}, "complete", summary={"samples_per_s": 585.0, "cpu": cpu})
    assert one["outside_share"] == pytest.approx(0.515)  # a neighbour took the other core
    # a 2-rank job on one machine: the other rank, as busy as this one, is the job's own
    job = point_record(0, "p", {}, "complete", summary={"samples_per_s": 585.0, "cpu": cpu,
                                                        "job": {"world_size": 2, "nodes": ["n0"]}})
    assert job["outside_share"] == pytest.approx(0.03)  # 2 cores busy, 1.94 of them the job's
    assert point_record(0, "p", {}, "complete", summary={"samples_per_s": 1.0})["outside_share"] is None


def test_the_terminal_says_the_track_record_in_one_line():
    from pipeprof.cli.sweep_output import check_words

    points = grid()
    assert check_words({"prediction_check": prediction_check(points)}) == (
        "predictions checked: 2 recommendations landed on another point measured here: median error 35%, "
        "worst 50%, inside the 80 % interval 100%")
    points[2]["steady"] = _budget(0.4)
    line = check_words({"prediction_check": prediction_check(points)})
    assert line is not None and line.endswith("; every pair has a point that never settled or shared the machine "
                                              "(see the page)")
    assert check_words({"prediction_check": prediction_check(grid()[:1])}) is None  # nothing landed
