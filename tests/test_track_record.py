"""This machine's track record (pipeprof.track_record): checked predictions kept in a small file, summarised by
tier, and the model's own error of a run's intervals taken from it once a tier has enough checks."""

from __future__ import annotations

import json
import os

from test_intervals import noisy_run, recs_and_intervals, width

from pipeprof import track_record
from pipeprof.analysis.intervals import MODEL_ERROR, intervals
from pipeprof.pipeline.sweep import keep_checks
from pipeprof.render.probe import track_record_text


def _checks(tier: str, errors: list[float], source: str = "sweep") -> list[dict]:
    """Checks of ``tier`` whose predictions missed by ``errors`` (predicted / measured - 1) at 1,000 samples/s."""
    return [track_record.check_row(source, tier, 1000.0 * (1 + e), 1000.0, abs(e) < 0.2, {"loader.num_workers": 2})
            for e in errors]


def test_checks_are_appended_read_back_and_summarised_by_tier(tmp_path):
    path = tmp_path / "record.jsonl"
    assert track_record.append(_checks("estimated", [0.1, -0.3, 0.05]), path) is None
    assert track_record.append(_checks("measured", [0.02]) + [None], path) is None  # None: nothing checked
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"tier": "estimated", "err')  # a line cut short: left out, the rest kept
    rows = track_record.read(path)
    assert [r["tier"] for r in rows] == ["estimated"] * 3 + ["measured"]
    tiers = track_record.summary(rows, path)["tiers"]
    assert tiers["estimated"]["checks"] == 3 and abs(tiers["estimated"]["median_abs_error"] - 0.1) < 1e-9
    assert abs(tiers["estimated"]["worst_abs_error"] - 0.3) < 1e-9 and tiers["estimated"]["inside_share"] == 2 / 3
    assert tiers["estimated"]["used"] is False and tiers["measured"]["checks"] == 1  # fewer than MIN_CHECKS


def test_a_check_without_both_numbers_or_a_tier_is_not_kept():
    assert track_record.check_row("verify", "estimated", None, 900.0, None, {}) is None
    assert track_record.check_row("verify", "estimated", 1000.0, 0.0, None, {}) is None
    assert track_record.check_row("verify", "not_predicted", 1000.0, 900.0, None, {}) is None
    row = track_record.check_row("verify", "measured", 1100.0, 1000.0, True, {"loader.num_workers": 2})
    assert row is not None and abs(row["error"] - 0.1) < 1e-9 and row["inside"] is True


def test_a_sweeps_checks_go_into_the_record_and_an_unwritable_one_is_noted(tmp_path):
    doc = {"notes": [], "prediction_check": {"rows": [{"tier": "estimated", "predicted": 1100.0, "measured": 1000.0,
                                                       "inside": True, "change": {}}]}}
    keep_checks(doc, "sweep")  # into the suite's own record for this test (own_track_record)
    (row,) = track_record.read()
    assert row["source"] == "sweep" and abs(row["error"] - 0.1) < 1e-9 and doc["notes"] == []
    blocker = tmp_path / "file"
    blocker.write_text("")
    why = track_record.append(_checks("estimated", [0.1]), blocker / "record.jsonl")  # its folder is a file
    assert why is not None and str(blocker / "record.jsonl") in why
    os.environ[track_record.ENV] = str(blocker / "record.jsonl")  # restored by the suite's own_track_record
    keep_checks(doc, "sweep")
    assert len(doc["notes"]) == 1 and "do not count towards this machine's intervals" in doc["notes"][0]


def test_a_sweeps_and_a_verifys_checks_become_rows():
    check = {"rows": [{"tier": "estimated", "predicted": 1200.0, "measured": 1000.0, "inside": False,
                       "change": {"loader.num_workers": 2}}, {"tier": "measured", "predicted": None,
                                                             "measured": 1000.0}]}
    rows = track_record.prediction_check_rows("tune", check)
    assert rows[1] is None and rows[0]["source"] == "tune" and abs(rows[0]["error"] - 0.2) < 1e-9
    summary = {"recommendations": [{"change": {"loader.num_workers": 3}, "tier": "measured"}],
               "verification": {"status": "complete", "change": {"loader.num_workers": 3},
                                "predicted_samples_per_s": 900.0, "measured_samples_per_s": 1000.0,
                                "within_interval": True}}
    row = track_record.verification_row(summary)
    assert row["tier"] == "measured" and row["source"] == "verify" and abs(row["error"] + 0.1) < 1e-9
    assert track_record.verification_row({**summary, "verification": {"status": "failed"}}) is None


def test_enough_checks_of_a_tier_replace_the_yardsticks_error_in_the_intervals(tmp_path):
    run = noisy_run(0.01)
    run.meta["what_ifs"] = {}
    (rec,), (yardstick,) = recs_and_intervals(run, calibrated=True)
    assert rec.tier == "estimated" and "the yardstick's typical" in yardstick.method
    few = track_record.summary(_checks("estimated", [0.04] * (track_record.MIN_CHECKS - 1)))
    (same,) = intervals(run, [rec], checks=few)  # too few checks: the yardstick's still
    assert same.method == yardstick.method
    record = track_record.summary(_checks("estimated", [0.04, -0.04] * track_record.MIN_CHECKS))
    (own,) = intervals(run, [rec], checks=record)
    assert f"this machine's track record: the median of its last {2 * track_record.MIN_CHECKS} checks" in own.method
    assert "own error z(0.9) × 4%" in own.method and MODEL_ERROR["estimated"] > 0.05
    assert width(own) < width(yardstick)  # a machine whose estimates held gets narrower intervals
    run.meta["track_record"] = record  # as run.json records it when the run began: the summary's intervals use it
    (recorded,) = intervals(run, [rec])
    assert recorded.method == own.method
    wrong = track_record.summary(_checks("estimated", [0.6, -0.5] * track_record.MIN_CHECKS))
    (wider,) = intervals(run, [rec], checks=wrong)
    assert width(wider) > width(yardstick)  # and one whose estimates missed, wider ones


def test_probe_prints_the_record_by_tier():
    record = track_record.summary(_checks("estimated", [0.1, 0.3] * 4) + _checks("measured", [0.05]))
    text = track_record_text(record)
    assert "estimated: 8 checks, median error" in text and "its median is the intervals' model error" in text
    assert "measured: 1 check, median error 5" in text and "until it has 8 checks" in text
    empty = track_record_text(track_record.summary([]))
    assert "measured: no check yet" in empty and "estimated: no check yet" in empty
    assert json.loads(json.dumps(record)) == record  # run.json keeps it as it is
