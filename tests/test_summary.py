"""The summary contract, computed from hand-made raw records."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import schema_errors

from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.steps import fractions, step_breakdown
from pipeprof.analysis.summary import Summary, bottleneck, summary_record, uss_snapshot
from pipeprof.analysis.verdict import Verdict
from pipeprof.pipeline.derive import summarize, summary_document
from pipeprof.render.advice_text import recommendation_words
from pipeprof.render.verdict_text import bottleneck_words
from pipeprof.resource_use import UssSnapshot
from pipeprof.run_folder import PROCESS_COLUMNS, SAMPLE_COLUMNS, STEP_COLUMNS, Run, to_json

FIXTURE_RUNS = Path(__file__).parent / "fixtures" / "runs"


def make_steps(n=20, warmup=2, wait_s=0.01, h2d_s=0.001, compute_s=0.02, other_s=0.002, samples=64):
    step_s = wait_s + h2d_s + compute_s + other_s
    rows = []
    for i in range(n):
        rows.append({"step": i, "epoch": 0, "warmup": i < warmup, "t_start_s": i * step_s,
                     "data_wait_s": wait_s, "h2d_s": h2d_s, "compute_s": compute_s, "step_s": step_s,
                     "host_wait_s": wait_s, "samples": samples, "loss": 2.0 - i * 0.05,
                     "correct": min(samples, 6 + 3 * i)})
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def make_run(steps, samples=None, processes=None, meta=None):
    return Run(meta=meta or {"scenario": {"name": "t"}, "device": "cpu", "gpu": {"available": False}},
               steps=steps,
               samples=samples if samples is not None else pd.DataFrame(columns=SAMPLE_COLUMNS),
               processes=processes if processes is not None else pd.DataFrame(columns=PROCESS_COLUMNS))


def test_throughput_and_fractions_agree_with_the_steps():
    steps = make_steps()
    s = summarize(make_run(steps))
    counted = steps[~steps.warmup]
    assert s["steps"] == 18 and s["warmup_steps"] == 2
    assert s["samples_per_s"] == pytest.approx(counted.samples.sum() / counted.step_s.sum())
    assert sum(s["fractions"].values()) == pytest.approx(1.0)
    assert s["fractions"]["data_wait"] == pytest.approx(0.01 / 0.033)
    assert s["fractions"]["other"] == pytest.approx(0.002 / 0.033)
    assert s["step_time_s"]["median"] == pytest.approx(0.033)
    assert s["bottleneck"] == "input"


def test_tail_gives_final_loss_and_accuracy():
    steps = make_steps(n=20, warmup=0)
    s = summarize(make_run(steps))
    tail = steps.tail(2)  # 10% of 20 steps
    assert s["final_loss"] == pytest.approx(tail.loss.mean())
    assert s["accuracy"] == pytest.approx(tail.correct.sum() / tail.samples.sum())


def test_percentiles_ignore_warmup():
    steps = make_steps(n=11, warmup=1)
    steps.loc[0, "step_s"] = 100.0  # a slow first step (worker start-up) must not count
    steps.loc[10, "step_s"] = 0.133
    s = summarize(make_run(steps))
    assert s["step_time_s"]["median"] == pytest.approx(0.033)
    assert s["step_time_s"]["p90"] == pytest.approx(np.percentile([0.033] * 9 + [0.133], 90))


@pytest.mark.parametrize("wait,klass,words", [
    (0.0, "compute", "compute-bound"), (0.039, "compute", "compute-bound"),  # outside R2's uncertain band
    (0.061, "input", "partly input-bound"), (0.19, "input", "partly input-bound"),
    (0.201, "input", "input-bound"), (0.9, "input", "input-bound")])
def test_bottleneck_is_the_verdicts_class_in_coarse_form(wait, klass, words):
    s = summarize(make_run(make_steps(wait_s=wait * 0.033, h2d_s=0.0, compute_s=(1 - wait) * 0.033 - 0.002)))
    assert s["fractions"]["data_wait"] == pytest.approx(wait, abs=1e-9)
    assert s["verdict"]["class"] == klass or s["verdict"]["class"].startswith(klass + ":")
    assert (s["bottleneck"], s["bottleneck_reason"].split(":")[0]) == (klass, words)
    assert f"{100 * wait:.0f}%" in s["bottleneck_reason"] or f"{100 * wait:.1f}%" in s["bottleneck_reason"]


@pytest.mark.parametrize("klass,coarse", [("compute", "compute"), ("input:fetch", "input"), ("input:prep", "input"),
                                          ("input:main", "input"), ("h2d", "h2d"), ("balanced", "balanced"),
                                          ("unknown", "unknown")])
def test_every_verdict_class_has_one_coarse_class(klass, coarse):
    degree = None if klass in ("compute", "h2d", "unknown") else "partly input-bound"
    evidence = {"data_wait_fraction": None if klass == "unknown" else 0.1, "h2d_fraction": 0.3}
    got, reason = bottleneck(Verdict(klass, "R0", degree, Reason.written(""), evidence))
    assert got == coarse and reason.kind == {"compute": "bottleneck_compute", "h2d": "bottleneck_h2d",
                                             "unknown": "bottleneck_unknown"}.get(klass, "bottleneck_partly_input")
    words = bottleneck_words(reason)
    assert words and ("no single cause" in words) == (klass == "balanced")


def test_empty_run_has_no_statistics_but_does_not_crash():
    s = summarize(make_run(make_steps(n=0)))
    assert s["steps"] == 0 and s["samples_per_s"] is None and s["final_loss"] is None
    assert all(math.isnan(v) for v in s["fractions"].values())
    assert s["bottleneck"] == s["verdict"]["class"] == "unknown"


def test_other_never_negative_and_overlapping_parts_normalized():
    steps = make_steps(other_s=0.0)
    steps["compute_s"] += 1e-4  # device-event rounding: parts a hair over the whole
    f = fractions(steps)
    assert f["other"] == 0.0
    assert sum(f.values()) == pytest.approx(1.0)
    assert (step_breakdown(steps)["other_s"] >= 0).all()


def test_system_statistics_only_over_counted_window():
    steps = make_steps(n=10, warmup=5)  # counted from t=0.165 s to 0.33 s
    samples = pd.DataFrame({"t_s": [0.0, 0.1, 0.2, 0.3, 0.4], "cpu_util_pct": [100.0, 100.0, 40.0, 60.0, 5.0],
                            "main_cpu_pct": [150.0, 150, 80, 120, 1], "workers_cpu_pct": [0.0] * 5,
                            "main_rss_bytes": [1e8, 3e8, 2e8, 2e8, 2e8], "workers_rss_bytes": [0.0] * 5,
                            "tree_rss_bytes": [1e8, 3e8, 2e8, 2e8, 2e8], "workers": [0] * 5,
                            "read_bytes_per_s": [np.nan, 1e6, 2e6, 4e6, 0.0]})
    s = summarize(make_run(steps, samples=samples))
    assert s["cpu"]["mean_util"] == pytest.approx(50.0)
    assert s["cpu"]["peak_util"] == pytest.approx(60.0)
    assert s["cpu"]["main_mean_pct"] == pytest.approx(100.0)
    assert s["memory"]["peak_rss_bytes"] == pytest.approx(3e8)  # peak over the whole run
    assert s["disk"]["mean_read_bytes_per_s"] == pytest.approx(3e6)


def test_unmeasured_values_are_null_not_zero():
    s = summarize(make_run(make_steps()))
    assert s["cpu"]["mean_util"] is None
    assert s["memory"]["peak_rss_bytes"] is None
    assert s["memory"]["uss_bytes"] is None
    assert s["disk"]["read_bytes"] is None
    assert s["gpu"] is None
    assert s["loading"] is None  # no loading records


def test_uss_snapshot_and_read_bytes_per_process():
    processes = pd.DataFrame([
        {"t_s": 0.0, "pid": 1, "role": "main", "cpu_pct": np.nan, "rss_bytes": 10, "read_bytes": 100, "uss_bytes": np.nan},
        {"t_s": 5.0, "pid": 1, "role": "main", "cpu_pct": 90, "rss_bytes": 10, "read_bytes": 300, "uss_bytes": 50},
        {"t_s": 5.0, "pid": 2, "role": "worker", "cpu_pct": 90, "rss_bytes": 10, "read_bytes": 1000, "uss_bytes": 7},
        {"t_s": 5.0, "pid": 3, "role": "worker", "cpu_pct": 90, "rss_bytes": 10, "read_bytes": 10, "uss_bytes": 8},
        {"t_s": 6.0, "pid": 2, "role": "worker", "cpu_pct": 90, "rss_bytes": 10, "read_bytes": 1500, "uss_bytes": np.nan},
    ], columns=PROCESS_COLUMNS)
    assert uss_snapshot(processes) == UssSnapshot(main=50.0, workers=15.0, snapshots=1)
    s = summarize(make_run(make_steps(), processes=processes))
    assert s["disk"]["read_bytes"] == pytest.approx(200 + 500)


def test_gpu_summary_when_a_gpu_was_sampled():
    steps = make_steps(n=10, warmup=0)
    samples = pd.DataFrame({"t_s": [0.1, 0.2], "gpu_util_pct": [30.0, 50.0], "gpu_mem_used_bytes": [1e9, 2e9],
                            "pcie_rx_bytes_per_s": [1e6, 3e6], "pcie_tx_bytes_per_s": [0.0, 0.0]})
    meta = {"scenario": {"name": "g"}, "gpu": {"available": True, "name": "Fake"}}
    g = summarize(make_run(steps, samples=samples, meta=meta))["gpu"]
    assert g["mean_util_pct"] == pytest.approx(40.0)
    assert g["peak_mem_used_bytes"] == pytest.approx(2e9)
    assert g["mean_pcie_rx_bytes_per_s"] == pytest.approx(2e6)


def test_summaries_match_the_published_schema_and_the_schema_is_strict():
    """pipeprof/schemas/summary.schema.json (tests/conftest.py checks every summary the tests make against it):
    a renamed, mistyped, missing or unknown key must fail it."""
    s = json.loads(to_json(summarize(make_run(make_steps()))))
    assert schema_errors(s) == []
    renamed = {("samples_per_sec" if k == "samples_per_s" else k): v for k, v in s.items()}
    assert any("samples_per_s" in e for e in schema_errors(renamed))  # required key missing
    assert any("samples_per_sec" in e for e in schema_errors(renamed))  # and the new one is not allowed
    assert schema_errors({**s, "steps": "18"})  # mistyped
    assert schema_errors({**s, "bottleneck": "moderate"})  # not a class
    assert schema_errors({**s, "loading": {**(s["loading"] or {}), "fetch_s": 0.1}})  # the old loading names
    assert schema_errors({**s, "verdict": {**s["verdict"], "klass": "compute"}})
    assert schema_errors({**s, "attribution": {**s["attribution"], "gpu": {"absent": "x"}}}) == []  # absent is fine
    assert schema_errors({**s, "attribution": {**s["attribution"], "step": {"absent": "x"}}})  # but not for step


def test_the_summary_record_is_what_summary_json_is_made_of():
    run = make_run(make_steps())
    record = summary_record(run)
    assert isinstance(record, Summary) and summary_document(record) == summarize(run)
    # the record's data is summary.json but the words written at the edge
    assert set(summarize(run)) - set(record.to_json()) == {"bottleneck_reason"}
    assert {k: v for k, v in summarize(run)["verdict"].items() if k not in ("sentence", "notes")} == \
        record.verdict.to_json()
    assert record.bottleneck == record.verdict.coarse == "input"
    # its data, and the words written at the edge (render.advice_text)
    assert record.recommendations and {**record.recommendations[0].to_json(), "interval": record.intervals[0].to_json(),
                                       **recommendation_words(record.recommendations[0])
                                       } == summarize(run)["recommendations"][0]
    assert {"reason", "model"}.isdisjoint(record.recommendations[0].to_json())
    assert record.attribution.fractions == record.fractions and record.loading is None


# -- issue 14, item 8: workers that never existed; a script's wall time ------------------------------


def _sampled(workers):
    return pd.DataFrame({"t_s": [0.0, 7.5, 15.0], "cpu_util_pct": [50.0] * 3, "main_cpu_pct": [90.0] * 3,
                         "workers_cpu_pct": [0.0] * 3, "main_rss_bytes": [1e8] * 3,
                         "workers_rss_bytes": [0.0, 3e8 if workers else 0.0, 0.0], "tree_rss_bytes": [1e8] * 3,
                         "workers": [0, workers, 0], "read_bytes_per_s": [0.0] * 3})


def test_memory_of_workers_that_never_existed_is_not_measured_not_zero():
    s = summarize(make_run(make_steps(), samples=_sampled(0)))
    assert s["memory"]["peak_workers_rss_bytes"] is None  # "not measured", never "0 B"
    assert s["memory"]["peak_main_rss_bytes"] == pytest.approx(1e8)
    s = summarize(make_run(make_steps(), samples=_sampled(2)))
    assert s["memory"]["peak_workers_rss_bytes"] == pytest.approx(3e8)


def test_uss_of_workers_that_never_existed_is_null():
    processes = pd.DataFrame([{"t_s": 5.0, "pid": 1, "role": "main", "cpu_pct": 90, "rss_bytes": 10,
                               "read_bytes": 300, "uss_bytes": 50}], columns=PROCESS_COLUMNS)
    assert uss_snapshot(processes) == UssSnapshot(main=50.0, workers=None, snapshots=1)


def _script_meta(**script):
    return {"scenario": {"name": "s"}, "kind": "script", "device": "cpu", "gpu": {"available": False},
            "status": "complete", "script": {"command_line": "python train.py", **script}, "loaders": [],
            "step_source": "optimizer"}


def test_a_script_without_steps_keeps_its_wall_time_while_duration_is_the_counted_steps():
    # No DataLoader iterated: 0 counted steps, but the script ran 15 s (the sampler watched it throughout).
    s = summarize(make_run(make_steps(n=0), samples=_sampled(0), meta=_script_meta()))
    assert s["duration_s"] == 0.0 and s["steps"] == 0
    assert s["script"]["wall_s"] == pytest.approx(15.0)
    assert s["bottleneck"] == "unknown" and s["recommendations"] == []
    assert "0 steps counted" in s["bottleneck_reason"]
    assert not schema_errors(json.loads(to_json(s)))


def test_a_recorded_script_wall_time_wins_over_the_sampler_span():
    s = summarize(make_run(make_steps(), samples=_sampled(0), meta=_script_meta(wall_s=15.4)))
    assert s["script"]["wall_s"] == pytest.approx(15.4)
    assert s["duration_s"] == pytest.approx(18 * 0.033)


def _round_trips(doc):
    """summary.json read back (summary_from_json) and written again (its words as read) is the same summary.json."""
    from pipeprof.analysis.summary import summary_from_json
    again = json.loads(to_json(summary_document(summary_from_json(doc))))
    assert again == json.loads(to_json(doc))


@pytest.mark.parametrize("name", sorted(p.parent.name for p in (FIXTURE_RUNS.glob("*/summary.json"))))
def test_every_golden_summary_reads_back_into_the_same_summary(name):
    _round_trips(json.loads((FIXTURE_RUNS / name / "summary.json").read_text()))


def test_a_summary_with_ranks_a_straggler_and_damage_reads_back_into_the_same_summary():
    doc = json.loads((FIXTURE_RUNS / "script-plain-loop" / "summary.json").read_text())
    doc["ranks"] = [{"rank": r, "local_rank": r, "node": "n0", "pid": 100 + r, "steps": 20, "samples_per_s": 10.0 * (r + 1),
                     "fractions": {"data_wait": 0.5 - r / 10, "h2d": None}, "loading": None,
                     "verdict": {"class": "compute", "rule": "R2", "degree": None, "sentence": "Compute-bound.",
                                 "evidence": {"data_wait_fraction": 0.01}, "notes": [], "uncertain": False,
                                 "candidates": ["compute"]}, "status": "complete"} for r in (0, 1)]
    doc["straggler"] = {"rank": 0, "node": "n0", "kind": "input", "evidence": {"data_wait_fraction": 0.5},
                        "sentence": "Rank 0 waits for data."}
    doc["status"], doc["damage"] = "damaged", [{"file": "steps.csv", "line": 7, "reason": "cut off"}]
    doc["bottleneck_reason"] = "a reason of its own (an attach's)"
    _round_trips(doc)
