"""A distributed job's analysis (analysis/ranks.py): per-rank entries, the straggler, the job's numbers and
rank-aware advice, from hand-made ranks whose right answer follows from the numbers."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from conftest import schema_errors

from pipeprof.analysis.ranks import (
    RankResult,
    job_recommendations,
    median_rank,
    oversubscription,
    straggler,
)
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.recommend import Recommendation
from pipeprof.analysis.summary import summary_record
from pipeprof.analysis.thresholds import MIN_GAIN, STRAGGLER_MARGIN
from pipeprof.pipeline.derive import summarize
from pipeprof.render.advice_text import reason_text
from pipeprof.render.prediction_text import model_text
from pipeprof.render.straggler_text import straggler_words
from pipeprof.run_folder import SAMPLE_COLUMNS, STEP_COLUMNS, Run, to_json

N_STEPS, WARMUP = 30, 3


def make_rank(rank: int, *, wait: float = 0.0, h2d: float = 0.0, collective: float = 0.0, step_s: float = 0.1,
              samples: int = 128, workers: int = 0, threads: int = 2, cores: int = 4, node: str = "node-a",
              world_size: int = 2) -> Run:
    """One rank's run: ``N_STEPS`` steps of ``step_s``, ``wait`` / ``h2d`` / ``collective`` fractions of each,
    compute the rest."""
    step = np.arange(N_STEPS)
    steps = pd.DataFrame({
        "step": step, "epoch": 0, "warmup": step < WARMUP, "t_start_s": step * step_s,
        "data_wait_s": wait * step_s, "h2d_s": h2d * step_s, "compute_s": (1 - wait - h2d - collective) * step_s,
        "step_s": step_s, "host_wait_s": wait * step_s, "samples": samples, "loss": 1.0, "correct": np.nan,
        "ready_batches": np.nan, "collective_wait_s": collective * step_s,
    })[STEP_COLUMNS]
    t = np.arange(0.0, N_STEPS * step_s, 0.05)
    sampled = pd.DataFrame({
        "t_s": t, "cpu_util_pct": 90.0, "main_cpu_pct": 100.0, "workers_cpu_pct": 50.0 if workers else 0.0,
        "main_rss_bytes": 1e8, "workers_rss_bytes": 0.0, "tree_rss_bytes": 1e8, "workers": workers,
        "read_bytes_per_s": 0.0,
    })[SAMPLE_COLUMNS]
    meta = {
        "scenario": {"name": "ddp", "data": {"storage": "ram"},
                     "loader": {"batch_size": samples, "num_workers": workers}},
        "device": "cpu", "gpu": {"available": False, "reason": "cpu"}, "absences": {}, "status": "complete",
        "environment": {"cpu_cores": cores, "torch_threads": threads},
        "rank": {"rank": rank, "local_rank": rank, "world_size": world_size, "node": node, "node_rank": 0,
                 "pid": 1000 + rank, "backend": "gloo", "status": "complete", "error": None},
    }
    return Run(meta=meta, steps=steps, samples=sampled)


def make_job(ranks: list[Run], median: int | None = None) -> Run:
    job = {"id": "test", "world_size": len(ranks), "ranks": [r.meta["rank"]["rank"] for r in ranks],
           "nodes": sorted({r.meta["rank"]["node"] for r in ranks}), "launcher": "torchrun", "untraced": []}
    if median is not None:
        job["median_rank"] = median
    top = ranks[median if median is not None else 0]
    meta = {**{k: v for k, v in top.meta.items() if k != "rank"}, "job": job}
    return Run(meta=meta, steps=top.steps.copy(), samples=top.samples.copy(), ranks=ranks)


def input_straggler_job() -> Run:
    """Rank 1 waits 80% of its step for data; rank 0 has done its work in 25 ms and waits 75% in collectives."""
    return make_job([make_rank(0, collective=0.75), make_rank(1, wait=0.8)], median=0)


def test_input_straggler_is_the_rank_waiting_for_data_while_the_others_wait_in_collectives():
    s = straggler(input_straggler_job().ranks)
    assert (s.rank, s.node, s.kind) == (1, "node-a", "input")
    ev = s.evidence
    assert ev["own_step_s_by_rank"] == pytest.approx({"0": 0.025, "1": 0.1})
    assert ev["straggler_data_wait_fraction"] == pytest.approx(0.8)
    assert ev["others_median_data_wait_fraction"] == pytest.approx(0.0)
    assert ev["others_median_collective_wait_fraction"] == pytest.approx(0.75)
    assert ev["own_step_excess_fraction"] == pytest.approx(3.0)  # 100 ms against 25 ms
    assert ev["data_wait_excess_s"] == pytest.approx(0.08)
    assert s.why.kind == "straggler_named" and s.why["others_collective_wait"] == pytest.approx(0.75)
    words = straggler_words(s)
    assert "Rank 1" in words and "waiting for data" in words and "75%" in words


def test_compute_and_h2d_stragglers():
    compute = straggler([make_rank(0, wait=0.1, collective=0.6), make_rank(1, wait=0.1)])
    assert (compute.rank, compute.kind) == (1, "compute")
    assert compute.evidence["compute_excess_s"] == pytest.approx(0.06)
    h2d = straggler([make_rank(0, h2d=0.1, collective=0.5), make_rank(1, h2d=0.6), make_rank(2, h2d=0.1,
                                                                                             collective=0.5)])
    assert (h2d.rank, h2d.kind) == (1, "h2d")


@pytest.mark.parametrize("slower, named", [(1 + STRAGGLER_MARGIN / 2, False), (1 + 2 * STRAGGLER_MARGIN, True)])
def test_ranks_within_noise_name_no_straggler(slower, named):
    # Rank 1 takes ``slower`` times rank 0's own time; rank 0 waits the difference in collectives.
    collective = 1 - 1 / slower
    s = straggler([make_rank(0, wait=0.1, collective=collective), make_rank(1, wait=0.1)])
    assert (s.rank, s.kind) == ((1, "compute") if named else (None, "none"))
    if not named:
        assert s.why.kind == "straggler_within" and "No rank sets the pace" in straggler_words(s)


def test_equal_ranks_have_no_straggler_and_the_job_gets_the_median_ranks_advice_on_every_rank():
    job = make_job([make_rank(0, wait=0.1), make_rank(1, wait=0.1)])
    out = summarize(job)
    assert out["straggler"]["kind"] == "none" and out["straggler"]["rank"] is None
    assert out["straggler"]["node"] is None
    rank_recs = summary_record(job.ranks[0]).recommendations
    assert [r["predicted_speedup"] for r in out["recommendations"]] == [r.predicted_speedup for r in rank_recs]
    for job_rec, rank_rec in zip(out["recommendations"], rank_recs, strict=True):
        assert job_rec["predicted_samples_per_s"] == pytest.approx(out["samples_per_s"] * rank_rec.predicted_speedup)


def test_a_single_rank_cannot_be_compared():
    s = straggler([make_rank(0, wait=0.5)])
    assert (s.rank, s.kind, s.evidence["ranks_compared"]) == (None, "none", 1)


def test_job_samples_per_s_is_the_sum_over_ranks_and_the_rest_is_the_median_ranks():
    ranks = [make_rank(0, collective=0.75, samples=64), make_rank(1, wait=0.8, samples=128)]
    out = summarize(make_job(ranks, median=0))
    assert out["samples_per_s"] == pytest.approx(640 + 1280)  # 64 and 128 samples every 100 ms
    assert out["samples"] == (N_STEPS - WARMUP) * (64 + 128)
    rank0 = summarize(ranks[0])
    assert out["fractions"] == pytest.approx(rank0["fractions"])
    assert out["verdict"] == rank0["verdict"]
    assert [e["rank"] for e in out["ranks"]] == [0, 1]
    one = out["ranks"][1]
    assert (one["node"], one["pid"], one["local_rank"], one["steps"], one["status"]) == (
        "node-a", 1001, 1, N_STEPS - WARMUP, "complete")
    assert one["samples_per_s"] == pytest.approx(1280)
    assert one["fractions"]["data_wait"] == pytest.approx(0.8)
    assert out["ranks"][0]["fractions"]["collective_wait"] == pytest.approx(0.75)
    assert one["verdict"]["class"].startswith("input")
    assert out["straggler"]["rank"] == 1 and out["straggler"]["kind"] == "input"


def test_median_rank_per_the_contract():
    def ranks(*step_s):
        return [make_rank(i, step_s=s, world_size=len(step_s)) for i, s in enumerate(step_s)]

    assert median_rank(ranks(0.1, 0.3, 0.2)) == 2  # the middle median step time
    assert median_rank(ranks(0.4, 0.1, 0.3, 0.2)) == 3  # even count: the lower middle (0.2 of 0.1 0.2 0.3 0.4)
    assert median_rank(ranks(0.2, 0.2)) == 0  # ties by rank number
    assert median_rank([]) is None
    # summary.json follows job.median_rank when recorded, else computes it
    three = ranks(0.1, 0.3, 0.2)
    assert summarize(make_job(three))["step_time_s"]["median"] == pytest.approx(0.2)
    assert summarize(make_job(three, median=1))["step_time_s"]["median"] == pytest.approx(0.3)


def test_oversubscribed_node_advice_counts_every_ranks_workers_and_threads():
    busy = [make_rank(i, workers=3, threads=2, cores=4) for i in range(2)]
    recs = summarize(make_job(busy))["recommendations"]
    advice = [r for r in recs if "busy threads" in r["reason"]]
    assert len(advice) == 1
    assert "2 ranks × (3 workers + 2 torch threads) = 10 busy threads on 4 cores of node node-a" in advice[0]["reason"]
    assert advice[0]["change"] == {"loader.num_workers": 1, "train.threads": 1}  # 2 cores per rank
    assert advice[0]["predicted_speedup"] is None
    assert recs[0] is advice[0] or recs[0] == advice[0]  # the node's advice first

    fits = [make_rank(i, workers=1, threads=1, cores=4) for i in range(2)]
    assert not oversubscription(_results(make_job(fits)))
    apart = [make_rank(i, workers=3, threads=2, cores=4, node=f"node-{i}") for i in range(2)]
    assert not oversubscription(_results(make_job(apart)))  # one rank per node: its own advice covers it


def test_oversubscription_names_each_rank_when_they_differ():
    ranks = [make_rank(0, workers=5, threads=4, cores=8), make_rank(1, workers=2, threads=4, cores=8)]
    (rec,) = oversubscription(_results(make_job(ranks)))
    assert "rank 0: (5 + 4) + rank 1: (2 + 4) = 15 busy threads on 8 cores" in reason_text(rec.reason)
    assert rec.change == {"loader.num_workers": 2, "train.threads": 2}  # 4 cores a rank, 5:4 -> 2 + 2


def _results(job: Run, recs: dict[int, list[Recommendation]] | None = None) -> list[RankResult]:
    out = []
    for rank_run in job.ranks:
        s = summary_record(rank_run)
        rank = rank_run.meta["rank"]["rank"]
        out.append(RankResult(run=rank_run, steps=s.steps, samples=s.samples, samples_per_s=s.samples_per_s,
                              fractions=s.fractions, loading=s.loading, verdict=s.verdict,
                              cpu=s.attribution.cpu,
                              recommendations=tuple((recs or {}).get(rank, s.recommendations))))
    return out


@pytest.mark.parametrize("predicted, job_expected", [
    (2000.0, 2 * 2000.0),  # below rank 0's own pace: the straggler's fix sets the job's pace
    (8000.0, 2 * 128 / 0.025),  # above it: rank 0's own pace (128 samples in 25 ms) bounds the job
])
def test_the_straggler_s_advice_predicts_the_job_at_the_slowest_ranks_pace(predicted, job_expected):
    job = input_straggler_job()
    fix = Recommendation({"loader.num_workers": 4}, predicted, predicted / 1280, Reason.written("more workers"),
                         Reason.written("X(k)"))
    results = _results(job, {1: [fix]})
    recs = job_recommendations(results, 0, straggler(job.ranks), 2560.0)
    (rec,) = recs
    assert rec.change == {"loader.num_workers": 4}
    assert rec.predicted_samples_per_s == pytest.approx(job_expected)
    assert rec.predicted_speedup == pytest.approx(job_expected / 2560.0)
    assert rec.reason.kind == "straggler_pace" and rec.reason["rank"] == 1 and rec.reason["node"] == "node-a"
    assert (rec.reason["bound"] is not None) == (predicted > 5120)
    words = reason_text(rec.reason)
    assert words.startswith("rank 1 (the straggler on node node-a): more workers")
    assert ("bounded by rank 0" in words) == (predicted > 5120)
    assert model_text(rec.model) == "world_size × min(X', R_next), X' = X(k)"


def test_a_straggler_fix_the_next_rank_would_cap_under_the_minimum_gain_is_not_advised():
    # Rank 2 is nearly as slow as rank 1: fixing rank 1 alone gains the job under MIN_GAIN.
    job = make_job([make_rank(0, collective=0.75, cores=8), make_rank(1, wait=0.8, cores=8),
                    make_rank(2, wait=0.79, collective=0.01, cores=8)], median=0)
    fix = Recommendation({"loader.num_workers": 4}, 4000.0, 4000.0 / 1280, Reason.written("more workers"), Reason.written("X(k)"))
    (rec,) = job_recommendations(_results(job, {1: [fix]}), 0, straggler(job.ranks), 3 * 1280.0)
    assert rec.change == {} and rec.predicted_speedup == 1.0
    assert rec.reason.kind == "straggler_no_gain" and rec.reason["next_rank"] == 2
    words = reason_text(rec.reason)
    assert "rank 2 sets the pace" in words and f"{100 * (MIN_GAIN - 1):.0f}%" in words


def test_summary_json_of_a_job_and_of_one_process_match_the_schema():
    job = summarize(input_straggler_job())
    assert schema_errors(json.loads(to_json(job))) == []
    one = summarize(make_rank(0, wait=0.3))
    assert (one["ranks"], one["straggler"]) == ([], None)
    assert schema_errors(json.loads(to_json(one))) == []
    bad = {**job, "straggler": {**job["straggler"], "kind": "slow"}}
    assert schema_errors(bad)
    assert schema_errors({**job, "ranks": [{**job["ranks"][0], "fractions": {"data_wait": 0.1}}]})
    without = {k: v for k, v in one.items() if k != "straggler"}
    assert schema_errors(without)


def test_a_failed_rank_fails_the_job_and_is_kept():
    ranks = [make_rank(0, collective=0.75), make_rank(1, wait=0.8)]
    ranks[1].meta["rank"] = {**ranks[1].meta["rank"], "status": "failed", "error": "boom"}
    job = make_job(ranks, median=0)
    job.meta = {**job.meta, "status": "failed", "error": "rank 1: boom"}
    out = summarize(job)
    assert (out["status"], out["error"]) == ("failed", "rank 1: boom")
    assert [e["status"] for e in out["ranks"]] == ["complete", "failed"]


def test_rank_entries_are_plain_json():
    out = summarize(input_straggler_job())
    assert json.loads(to_json(out))["ranks"][0]["pid"] == 1000
    assert dataclasses.is_dataclass(summary_record(input_straggler_job()).straggler)


def test_oversubscription_is_not_advised_when_every_rank_already_has_one_worker_and_one_thread():
    lowest = [make_rank(i, workers=1, threads=1, cores=2) for i in range(2)]
    assert oversubscription(_results(make_job(lowest))) == []  # 4 busy threads on 2 cores, nothing left to lower


def test_a_rank_slow_on_a_few_steps_only_is_no_straggler():
    """Its mean own time is 20% above the other's, lifted by three slow steps; it was the faster on the rest."""
    steady, spiky = make_rank(0), make_rank(1)
    counted = ~spiky.steps["warmup"]
    spiky.steps.loc[counted, ["step_s", "compute_s"]] = [0.095, 0.095]
    spikes = spiky.steps.index[counted][:3]
    spiky.steps.loc[spikes, ["step_s", "compute_s"]] = [0.325, 0.325]
    found = straggler([steady, spiky])
    assert found.evidence["own_step_excess_fraction"] > STRAGGLER_MARGIN
    assert found.evidence["slower_step_fraction"] < 0.2
    assert found.kind == "none" and found.rank is None and found.why.kind == "straggler_noise"
    assert "within noise" in straggler_words(found)
    slow = make_rank(1, step_s=0.12)  # slower step after step, by 20%: named
    assert straggler([steady, slow]).rank == 1 and straggler([steady, slow]).evidence["slower_step_fraction"] == 1.0


def test_a_jobs_verify_re_run_is_measured_against_the_jobs_samples_per_s():
    job = make_job([make_rank(0), make_rank(1)])
    job.meta["verification"] = {"status": "complete", "measured_samples_per_s": 5120.0,
                                "predicted_samples_per_s": 4096.0, "predicted_speedup": 1.6}
    s = summarize(job)
    assert s["samples_per_s"] == pytest.approx(2560.0)  # two ranks of 128 samples per 0.1 s step
    assert s["verification"]["measured_speedup"] == pytest.approx(2.0)
    assert summarize(make_job([make_rank(0), make_rank(1)]))["verification"] is None
