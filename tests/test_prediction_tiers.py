"""Predictions in tiers on hand-made runs of machines unlike the development box: what each gets, and why.

Every run here is built by hand (``test_verdict.make_run``: 100 ms steps of 128 samples), its CPU samples set to
what the sampler would see: the training process and its workers in % of one core, the machine in % of all.
"""

from __future__ import annotations

import math
import re

import pytest
from test_recommend import as_written
from test_verdict import STEP_S, make_run

from pipeprof.analysis.attribution import attribution
from pipeprof.analysis.recommend import predict_change, recommend
from pipeprof.analysis.verdict import verdict_from_attribution

BATCH = 128


def machine_run(*, cores: int, workers: int, wait: float = 0.4, batch_s: float = 0.3, threads: int | None = None,
                main_cores: float = 1.0, other_cores: float = 0.0, gpu: bool = True, h2d: float = 0.0):
    """A run on ``cores`` cores: ``workers`` workers each making a batch in ``batch_s`` (all of it CPU), the
    training process busy ``main_cores``, processes outside the job ``other_cores``; on ``cuda:0`` if ``gpu``."""
    run = make_run(wait=wait, h2d=h2d, workers=workers, loading=(0.0, batch_s * 0.9, batch_s * 0.1), cores=cores,
                   threads=threads or cores, gpu_util=60.0 if gpu else None)
    busy_workers = workers * 0.9 if workers else 0.0
    run.samples["main_cpu_pct"] = 100 * main_cores
    run.samples["workers_cpu_pct"] = 100 * busy_workers
    run.samples["cpu_util_pct"] = 100 * (main_cores + busy_workers + other_cores) / cores
    if gpu:
        run.meta["device"] = "cuda:0"
    run.meta["what_ifs"] = {}
    return run


def recs_of(run):
    attr = attribution(run)
    return [as_written(r) for r in recommend(run, attr, verdict_from_attribution(attr))]


def predicted(run, change):
    attr = attribution(run)
    rec = predict_change(run, attr, verdict_from_attribution(attr), change)
    return as_written(rec) if rec is not None else None


def compute_ceiling(run) -> float:
    counted = run.steps[~run.steps["warmup"]]
    return float(counted["samples"].sum() / (counted["compute_s"] + counted["h2d_s"]).sum())


def paced(available: float, per_worker: float, busy: float, ceiling: float) -> float:
    """Workers making ``per_worker`` samples/s each on a core, on the ``available`` cores less the training
    process's at their pace X (``busy × X / ceiling``): X = (available − busy·X/C) · per_worker, solved."""
    return available * per_worker / (1 + busy * per_worker / ceiling)


def named_ceilings(text: str) -> list[float]:
    """Every "compute ceiling N samples/s" a recommendation's words name."""
    return [float(m.replace(",", "")) for m in re.findall(r"compute ceiling ([\d,.]+) samples/s", text)]


def test_a_measured_change_is_predicted_from_its_probe_against_the_as_run_loop():
    run = machine_run(cores=2, workers=1, gpu=False, threads=1, main_cores=0.8)
    run.meta["what_ifs"] = {"train_workers": {"2": {"samples_per_s": 3000.0, "threads": 1}},
                            "train_as_run": {"samples_per_s": 1000.0}}
    now = BATCH / STEP_S
    rec = predicted(run, {"loader.num_workers": 2})
    assert rec["tier"] == "measured"
    assert rec["predicted_samples_per_s"] == pytest.approx(now * 3000.0 / 1000.0)  # X_run · probe / probe(as run)
    # measured first, whatever an estimate says
    assert recs_of(run)[0]["tier"] == "measured"


def test_more_workers_than_probed_are_estimated_from_the_compute_beside_workers_and_scale_at_most_linearly():
    # 0 workers on 2 cores; the loop fed by 1 worker was probed: its compute beside a worker (receiving batches
    # included) and its own rate bound an estimate of 2 workers, which compute alone (no receiving) would not
    run = machine_run(cores=16, workers=0, gpu=False, threads=1, main_cores=1.0)
    now = BATCH / STEP_S
    free = predicted(run, {"loader.num_workers": 2})
    assert free["tier"] == "estimated"
    run.meta["what_ifs"] = {"train_workers": {"1": {"samples_per_s": 0.3 * now, "threads": 1,
                                                    "compute_samples_per_s": 0.5 * compute_ceiling(run)}},
                            "train_as_run": {"samples_per_s": now}}
    rec = predicted(run, {"loader.num_workers": 2})
    assert rec["tier"] == "estimated"
    assert rec["predicted_samples_per_s"] <= 2 * 0.3 * now + 1e-6  # 2/1 x the loop measured with 1 worker
    assert rec["predicted_samples_per_s"] <= 0.5 * compute_ceiling(run) + 1e-6  # C beside a worker
    assert rec["predicted_samples_per_s"] < free["predicted_samples_per_s"]
    assert "C beside workers" in rec["model"] and "what_ifs.train_workers" in rec["model"]


def test_an_estimate_of_workers_from_a_run_without_any_says_what_it_leaves_out_until_the_loop_is_measured():
    """benchmarks/advice_check.py: estimates of more workers from a run at 0 workers promised +39 % to +132 % more
    than the bare scripts made (receiving a batch from a worker cost a loop 750 us of CPU where making it cost
    213 us); the estimate says so, and how to measure it, until a probe measured the loop beside workers."""
    run = machine_run(cores=16, workers=0, gpu=False, threads=1, main_cores=1.0)
    (rec,) = [r for r in recs_of(run) if "loader.num_workers" in r["change"]]
    assert rec["tier"] == "estimated" and "receiving each batch from a worker" in rec["note"]
    now = BATCH / STEP_S
    run.meta["what_ifs"] = {"train_workers": {"1": {"samples_per_s": 0.9 * now, "threads": 1,
                                                    "compute_samples_per_s": 0.9 * compute_ceiling(run)}},
                            "train_as_run": {"samples_per_s": now}}
    assert not any("receiving each batch" in (r.get("note") or "") for r in recs_of(run))  # measured beside one


@pytest.mark.parametrize("cores, workers, batch_s, main_cores", [
    (16, 4, 0.3, 1.0), (64, 16, 2.0, 1.0), (2, 1, 0.05, 0.9), (4, 0, 0.03, 1.2), (8, 2, 0.01, 0.5),
])
def test_an_estimate_never_exceeds_the_ceilings_it_names(cores, workers, batch_s, main_cores):
    run = machine_run(cores=cores, workers=workers, batch_s=batch_s, main_cores=main_cores)
    ceiling = compute_ceiling(run)
    estimated = [r for r in recs_of(run) if r["tier"] == "estimated" and "loader.num_workers" in r["change"]]
    assert estimated, "a run short of workers gets an estimate"
    for rec in estimated:
        x = rec["predicted_samples_per_s"]
        assert x <= ceiling * (1 + 1e-9)
        for named in named_ceilings(rec["model"] + rec["reason"]):
            assert round(x) <= named  # the "min(compute ceiling 264, supply) = 283" defect


def test_a_gpu_job_gets_no_cpu_thread_advice_unless_the_threads_were_measured():
    # 16 cores, 16 torch threads, 4 workers, cuda:0, 40 % data wait; its own threads and workers fill the cores.
    run = machine_run(cores=16, workers=4, threads=16, main_cores=12.5)
    recs = recs_of(run)
    assert not any("train.threads" in r["change"] or "set_num_threads" in r["reason"] for r in recs)
    assert predicted(run, {"train.threads": 12}) is None  # its compute is on the GPU: nothing measured
    run.meta["what_ifs"] = {"train_threads": {"4": {"samples_per_s": 2500.0, "threads": 12}}}
    (threads,) = [r for r in recs_of(run) if "train.threads" in r["change"]]
    assert threads["tier"] == "measured" and threads["change"] == {"train.threads": 12}


def test_a_change_on_every_rank_is_predicted_for_every_rank_on_the_shared_cores():
    # A 2-rank job on 2 cores: --loader applies to every rank, so 4 workers a rank are 8 on the node's 2 cores.
    alone = machine_run(cores=2, workers=1, batch_s=0.4, main_cores=0.5, gpu=False, threads=1)
    ranked = machine_run(cores=2, workers=1, batch_s=0.4, main_cores=0.5, gpu=False, threads=1)
    ranked.meta["rank"] = {"rank": 1, "local_rank": 1, "world_size": 2}
    one, two = predicted(alone, {"loader.num_workers": 4}), predicted(ranked, {"loader.num_workers": 4})
    # alone: the workers get 2 cores less the training process's at the new pace; a rank of two: 2/2 less it
    per_worker, ceiling = BATCH / 0.4, compute_ceiling(alone)
    busy = 0.5 / (1 - 0.4)  # the training process's cores while not waiting (0.5 on average, waiting 40%)
    assert one["predicted_samples_per_s"] == pytest.approx(paced(2.0, per_worker, busy, ceiling))
    assert two["predicted_samples_per_s"] == pytest.approx(paced(1.0, per_worker, busy, ceiling))
    assert "shared by 2 ranks" in two["model"]


def test_no_fewer_workers_for_a_loader_whose_workers_are_the_bottleneck_without_a_measurement():
    run = machine_run(cores=4, workers=4, batch_s=0.6, main_cores=0.5, gpu=False, threads=1)
    assert not any(r["change"].get("loader.num_workers", 4) < 4 for r in recs_of(run))
    assert predicted(run, {"loader.num_workers": 2}) is None
    run.meta["what_ifs"] = {"train_workers": {"3": {"samples_per_s": 2000.0, "threads": 1}}}
    (fewer,) = [r for r in recs_of(run) if r["change"].get("loader.num_workers") == 3]
    assert fewer["tier"] == "measured"  # measured, it may be advised


def test_cpu_used_outside_the_job_is_reported_and_never_blamed_on_its_threads():
    # Compute-bound on 2 cores: 2 workers + 2 torch threads "oversubscribe" them, but the workers are idle and the
    # training process uses 0.29 of a core; processes outside the job kept 1.6 cores busy.
    run = make_run(wait=0.02, workers=2, loading=(0.001, 0.0, 0.0005), cores=2, threads=2)
    run.samples["main_cpu_pct"], run.samples["workers_cpu_pct"] = 29.0, 1.0
    run.samples["cpu_util_pct"] = 100 * (0.3 + 1.6) / 2
    (rec,) = recs_of(run)
    assert "processes outside the job kept 1.60 of the 2 cores busy" in rec["reason"]
    assert "train.threads" not in rec["reason"] and "set_num_threads" not in rec["reason"]
    # the same run whose own threads fill the cores is told to measure fewer
    run.samples["main_cpu_pct"], run.samples["cpu_util_pct"] = 190.0, 100.0
    (rec,) = recs_of(run)
    assert "measure --set train.threads=1" in rec["reason"] and "outside the job" not in rec["reason"]


def test_script_advice_is_in_the_scripts_terms_only():
    run = machine_run(cores=4, workers=2, batch_s=0.01, main_cores=0.8, gpu=False, threads=2)
    run.meta["kind"] = "script"
    run.meta["scenario"] = {"name": "script", "loader": {"batch_size": 128, "num_workers": 2, "prefetch_factor": 4}}
    run.meta["loaders"] = [{"number": 0, "name": "train_loader", "dataset": "Images", "batch_size": 128,
                            "num_workers": 2, "prefetch_factor": 4, "role": "train", "passes": 1}]
    run.meta["what_ifs"] = {"train_workers": {"0": {"samples_per_s": 5000.0, "threads": 2}}}
    recs = recs_of(run)
    (zero,) = [r for r in recs if r["change"].get("loader.num_workers") == 0]
    assert "drop prefetch_factor= from the DataLoader(...) call" in zero["note"]
    assert "num_workers=0" in zero["script_text"]
    for rec in recs:
        words = " ".join(str(rec.get(k) or "") for k in ("reason", "note", "script_text"))
        assert "scenario" not in words and "--set" not in words


def test_a_16_core_gpu_machine_with_4_busy_workers_is_told_to_add_workers_up_to_the_compute_ceiling():
    # 4 workers at 427 samples/s each make 1,707 samples/s; the GPU step would take 2,133: the workers are the
    # bottleneck and 15 cores are free, so one more worker reaches the ceiling (the smallest k that does).
    run = machine_run(cores=16, workers=4)
    (rec,) = [r for r in recs_of(run) if "loader.num_workers" in r["change"]]
    assert rec["change"] == {"loader.num_workers": 5} and rec["tier"] == "estimated"
    assert rec["predicted_samples_per_s"] == pytest.approx(compute_ceiling(run))
    assert not any("train.threads" in r["change"] for r in recs_of(run))


def test_a_64_core_machine_with_16_workers_is_told_the_workers_the_ceiling_needs_within_its_free_cores():
    run = machine_run(cores=64, workers=16, batch_s=2.0)  # 64 samples/s a worker
    (rec,) = [r for r in recs_of(run) if "loader.num_workers" in r["change"]]
    k = rec["change"]["loader.num_workers"]
    per_worker = BATCH / 2.0
    assert k == 33 and k * per_worker >= 0.98 * compute_ceiling(run)  # the smallest k within 2 % of the ceiling
    assert k <= 63  # never more workers than the free cores (64 less the training process's one)
    assert rec["predicted_samples_per_s"] == pytest.approx(min(compute_ceiling(run), k * per_worker))


def test_a_shared_machine_with_half_its_cores_busy_elsewhere_gets_workers_for_the_cores_left():
    # 16 cores, 8 of them busy with processes outside the job: the workers get 8 − 1 = 7, not 15.
    free = machine_run(cores=16, workers=4, batch_s=0.6)
    shared = machine_run(cores=16, workers=4, batch_s=0.6, other_cores=8.0)
    (on_free,) = [r for r in recs_of(free) if "loader.num_workers" in r["change"]]
    (on_shared,) = [r for r in recs_of(shared) if "loader.num_workers" in r["change"]]
    per_worker = BATCH / 0.6
    assert on_free["change"] == {"loader.num_workers": 10}  # 10 × 213 reaches the 2,133 ceiling
    assert on_shared["change"] == {"loader.num_workers": 7}
    # 8 cores left: 7 workers would have 7 of them, but the training process at that pace takes more than 1
    expected = paced(8.0, per_worker, 1.0 / (1 - 0.4), compute_ceiling(shared))
    assert expected < 7 * per_worker and on_shared["predicted_samples_per_s"] == pytest.approx(expected)
    assert "processes outside the job used 8.00 of 16" in on_shared["model"]
    assert "outside the job kept 8.00 of the 16 cores busy" in on_shared["reason"]


def test_the_tier_is_shown_beside_every_predicted_number():
    from rich.console import Console

    from pipeprof.analysis.reasons import Reason
    from pipeprof.analysis.recommend import Recommendation
    from pipeprof.analysis.summary import summary_record
    from pipeprof.render.console import print_summary
    from pipeprof.render.html import render_html
    from pipeprof.render.interval_text import speedup_text

    run = machine_run(cores=16, workers=4)
    summary = summary_record(run)
    top = speedup_text(summary.recommendations[0], summary.intervals[0])
    assert summary.recommendations[0].tier == "estimated" and top.endswith(", estimated")
    console = Console(record=True, width=400)
    print_summary(summary, "runs/x", console=console)
    assert f"{top}:" in console.export_text()
    assert top in render_html(run, summary)
    assert speedup_text(Recommendation({"loader.pin_memory": True}, None, None, Reason.written(""), Reason.written(""),
                                       tier="not_predicted"),
                        None) == "not predicted: try --verify or tune"


def test_the_model_checks_its_workers_estimate_against_the_runs_own_measurements():
    from pipeprof.analysis.recommend import model_check

    # 1 worker on 16 cores: the estimate at the run's own worker is checked against the run itself
    run = machine_run(cores=16, workers=1, gpu=False, threads=1, main_cores=0.8)
    alone = model_check(run, attribution(run))
    assert len(alone.estimate_errors) == 1 and alone.remeasured is None
    # a probe of 2 workers that measured half the estimate: the check says the estimate missed by x2
    estimate = predicted(run, {"loader.num_workers": 2})
    assert estimate["tier"] == "estimated"
    run.meta["what_ifs"] = {"train_workers": {"2": {"samples_per_s": estimate["predicted_samples_per_s"] / 2,
                                                    "threads": 1}}}
    probed = model_check(run, attribution(run))
    assert len(probed.estimate_errors) == 2  # by worker count: the run's 1, then the probe's 2
    assert probed.estimate_errors[0] == alone.estimate_errors[0]
    assert probed.estimate_errors[1] == pytest.approx(math.log(2), rel=0.02)
    assert probed.estimate_error == max(abs(e) for e in probed.estimate_errors)
    # the as-run loop measured again after the run, 20 % above the run: a re-measurement 20 % off
    now = BATCH / STEP_S
    run.meta["what_ifs"]["train_as_run"] = {"samples_per_s": 1.2 * now}
    assert model_check(run, attribution(run)).remeasured == pytest.approx(math.log(1.2), rel=0.02)


def test_at_0_workers_the_run_itself_checks_nothing_of_the_workers_estimate():
    from pipeprof.analysis.recommend import model_check

    run = machine_run(cores=16, workers=0, gpu=False, threads=1, main_cores=1.0)
    assert model_check(run, attribution(run)).estimate_errors == ()  # 1/(p + 1/C) is the run's own sum


def test_more_workers_are_estimated_at_the_cpu_a_sample_costs_in_a_worker_process_where_it_was_measured():
    # 4 workers on 16 cores, each sample costing 0.3 s / 128 of CPU in the training process's own loading: the
    # loader alone, probed with 4 workers, measured 1.5× that per sample in the workers (their processes' CPU:
    # a worker hands its batch over, and pays for its neighbours), which 8 workers' estimate must take
    run = machine_run(cores=16, workers=4, gpu=False, threads=1, main_cores=1.0, wait=0.6)
    before = predicted(run, {"loader.num_workers": 8})
    per_sample_s = 0.3 / BATCH
    run.meta["what_ifs"] = {"loader_workers": {"4": {"samples_per_s": 1.0, "num_workers": 4,
                                                     "worker_cpu_s_per_sample": 1.5 * per_sample_s}}}
    after = predicted(run, {"loader.num_workers": 8})
    assert before["tier"] == after["tier"] == "estimated"
    supply = 8 / (1.5 * per_sample_s)  # 8 workers, each with a core of its own, at the measured cost
    assert after["predicted_samples_per_s"] == pytest.approx(min(supply, compute_ceiling(run)), rel=1e-6)
    assert after["predicted_samples_per_s"] < before["predicted_samples_per_s"]
    assert "measured with 4 workers (what_ifs.loader_workers)" in after["model"]


def _probed(run, now: float, ceiling: float, at_two: float) -> None:
    """The loop fed by 1 and 2 workers measured after the run (2 at ``at_two`` samples/s), and the as-run loop."""
    run.meta["what_ifs"] = {"train_workers": {"1": {"samples_per_s": 1.2 * now, "threads": 1,
                                                    "compute_samples_per_s": 0.9 * ceiling},
                                              "2": {"samples_per_s": at_two, "threads": 1,
                                                    "compute_samples_per_s": 0.85 * ceiling}},
                            "train_as_run": {"samples_per_s": now}}


def test_more_workers_than_measured_are_read_against_the_most_workers_measured():
    # 2 cores, no workers: 1 and 2 workers were measured. 3 or 4 workers have no core more than 2 had, so the
    # estimate gives them what it gives 2, and read against 2's measurement they are predicted at it: the
    # advice is the measured 2 workers, not an estimate that only looks higher for being an estimate
    run = machine_run(cores=2, workers=0, gpu=False, threads=1, main_cores=1.0, wait=0.6, batch_s=0.06)
    now, ceiling = BATCH / STEP_S, compute_ceiling(run)
    for at_two in (1.5 * now, 1.2 * 1.5 * now):
        _probed(run, now, ceiling, at_two)
        for k in (3, 4):
            rec = predicted(run, {"loader.num_workers": k})
            assert rec["tier"] == "estimated"
            assert rec["predicted_samples_per_s"] == pytest.approx(at_two)  # X(2) measured × X(k)/X(2) estimated
            assert "read against the loop measured with 2 workers" in rec["model"]
        assert [(r["change"], r["tier"]) for r in recs_of(run) if "loader.num_workers" in r["change"]] == \
            [({"loader.num_workers": 2}, "measured")]


def test_on_many_cores_more_workers_scale_from_the_measurement_as_the_estimate_does():
    # 16 cores: 4 workers have twice the cores 2 had; the estimate doubles from 2 to 4 and so does the
    # prediction read against 2's measurement, whatever that measurement was
    run = machine_run(cores=16, workers=0, gpu=False, threads=1, main_cores=1.0, wait=0.8, batch_s=0.3)
    now, ceiling = BATCH / STEP_S, compute_ceiling(run)
    predictions = []
    for at_two in (1.5 * now, 1.2 * now):
        _probed(run, now, ceiling, at_two)
        predictions.append(predicted(run, {"loader.num_workers": 4})["predicted_samples_per_s"])
    assert predictions[1] / predictions[0] == pytest.approx(1.2 / 1.5)  # moves with the measurement
    assert predictions[0] == pytest.approx(2 * 1.5 * now, rel=0.05)  # twice the workers, twice the cores
    assert predictions[0] <= 0.85 * ceiling  # never past the compute measured beside workers
