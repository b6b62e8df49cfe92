"""Differential analysis: stall arithmetic on hand-made summaries, and the three sub-scenarios per storage kind."""

from pathlib import Path

import pytest

from pipeprof.analysis import differential as analysis
from pipeprof.analysis.differential import MIN_STALL_TO_SPLIT, TOLERANCE, throughput
from pipeprof.errors import UsageError
from pipeprof.pipeline.diagnose import build_diagnosis, sub_scenarios
from pipeprof.render.diagnosis_text import diagnosis_words
from pipeprof.scenario import ON_DISK, load_scenario, scenario_from_dict
from pipeprof.variants import scenario_dict


# The analysis as diagnosis.json keeps it: its reasons (kinds and numbers) in words (render.diagnosis_text).
def differential(*args, **kwargs):
    return diagnosis_words(analysis.differential(*args, **kwargs))


def stall_fractions(*args, **kwargs):
    return diagnosis_words(analysis.stall_fractions(*args, **kwargs))


def cross_check(*args, **kwargs):
    return diagnosis_words(analysis.cross_check(*args, **kwargs))


SCENARIOS = sorted(Path(__file__).parent.parent.joinpath("scenarios").glob("*.toml"))


def summary(samples_per_s, data_wait=None, fetch=None):
    """The parts of summary.json the differential analysis reads."""
    s = {"samples_per_s": samples_per_s, "fractions": {"data_wait": data_wait}, "loading": None}
    if fetch is not None:
        s["loading"] = {"fractions": {"fetch": fetch, "prep": (1 - fetch) * 0.8, "collate": (1 - fetch) * 0.2}}
    return s


def three(compute=1000.0, prep=500.0, real=250.0, **real_kw):
    return {"compute": summary(compute), "prep": summary(prep), "real": summary(real, **real_kw)}


# ---- the arithmetic ------------------------------------------------------------------------


def test_known_throughputs_give_exact_fractions():
    # t = 1, 2 and 4 ms per sample: fetch adds 2 of the real 4 ms, prep 1, compute is 1.
    d = differential(three(1000.0, 500.0, 250.0))
    assert d["samples_per_s"] == {"compute": 1000.0, "prep": 500.0, "real": 250.0}
    assert d["seconds_per_sample"] == pytest.approx({"compute": 1e-3, "prep": 2e-3, "real": 4e-3})
    f = d["fractions"]
    assert f["fetch_stall"] == pytest.approx(0.5)
    assert f["prep_stall"] == pytest.approx(0.25)
    assert f["compute"] == pytest.approx(0.25)
    assert f["stall"] == pytest.approx(0.75)
    assert f["fetch_stall"] + f["prep_stall"] + f["compute"] == pytest.approx(1.0)
    assert d["clamped"] == {} and d["null_reasons"] == {}
    assert d["unclamped"] == f


def test_other_known_throughputs():
    # compute 10,000/s (100 us), prep 8,000/s (125 us), real 2,000/s (500 us).
    f = stall_fractions({"compute": 10_000.0, "prep": 8_000.0, "real": 2_000.0})["fractions"]
    assert f["fetch_stall"] == pytest.approx(375 / 500)
    assert f["prep_stall"] == pytest.approx(25 / 500)
    assert f["compute"] == pytest.approx(100 / 500)


def test_a_negative_stall_is_clamped_to_zero_and_reported():
    # The prep run (300/s) came out slower than the real one (400/s): noise. It counts as the real one.
    r = stall_fractions({"compute": 1000.0, "prep": 300.0, "real": 400.0})
    assert r["unclamped"]["fetch_stall"] == pytest.approx((1 / 400 - 1 / 300) * 400)
    assert r["unclamped"]["prep_stall"] == pytest.approx((1 / 300 - 1 / 1000) * 400)  # 0.93: beyond the stall
    f = r["fractions"]
    assert f["fetch_stall"] == 0.0
    assert f["prep_stall"] == pytest.approx(0.6) and f["compute"] == pytest.approx(0.4)
    assert f["fetch_stall"] + f["prep_stall"] + f["compute"] == pytest.approx(1.0)
    assert set(r["clamped"]) == {"fetch_stall", "prep_stall"}
    assert "clamped to 0.0%" in r["clamped"]["fetch_stall"]
    assert "prep run (300 samples/s) was slower than the real run (400 samples/s)" in r["clamped"]["fetch_stall"]


def test_a_prep_run_faster_than_the_ceiling_clamps_the_prep_stall():
    r = stall_fractions({"compute": 1000.0, "prep": 1250.0, "real": 500.0})
    f = r["fractions"]
    assert r["unclamped"]["prep_stall"] == pytest.approx(-0.1)
    assert f["prep_stall"] == 0.0 and f["fetch_stall"] == pytest.approx(0.5) and f["compute"] == pytest.approx(0.5)
    assert set(r["clamped"]) == {"prep_stall", "fetch_stall"}
    assert "faster than the compute ceiling" in r["clamped"]["prep_stall"]
    reason = analysis.stall_fractions({"compute": 1000.0, "prep": 1250.0, "real": 500.0}).clamped["prep_stall"]
    assert (reason.kind, reason["unclamped"], reason["clamped"]) == ("clamped", pytest.approx(-0.1), 0.0)
    assert [(c.kind, c["run"], c["other"]) for c in reason.parts] == [("run_faster", "prep", "compute")]


def test_clamping_without_the_compute_run():
    r = stall_fractions({"compute": None, "prep": 300.0, "real": 400.0}, {"compute": "failed: boom"})
    assert r["fractions"]["fetch_stall"] == 0.0 and set(r["clamped"]) == {"fetch_stall"}
    assert r["fractions"]["prep_stall"] is None and "compute run (failed: boom)" in r["null_reasons"]["prep_stall"]


def test_a_real_run_faster_than_the_ceiling_caps_compute_and_clamps_stalls():
    r = stall_fractions({"compute": 1000.0, "prep": 1100.0, "real": 1200.0})
    assert r["fractions"] == {"fetch_stall": 0.0, "prep_stall": 0.0, "stall": 0.0, "compute": 1.0}
    assert set(r["clamped"]) == {"fetch_stall", "prep_stall", "stall", "compute"}
    assert r["unclamped"]["compute"] == pytest.approx(1.2)
    assert "120.0% clamped to 100.0%" in r["clamped"]["compute"]
    assert "real run (1,200 samples/s) was faster than the compute ceiling" in r["clamped"]["compute"]


def test_throughput_reads_only_positive_finite_numbers():
    assert throughput({"samples_per_s": 12.5}) == 12.5
    for bad in (None, {}, {"samples_per_s": None}, {"samples_per_s": float("nan")}, {"samples_per_s": 0},
                {"samples_per_s": "fast"}, {"samples_per_s": True}):
        assert throughput(bad) is None


# ---- the cross-check -----------------------------------------------------------------------


def test_cross_check_agrees_within_tolerance():
    # Differential: stall 0.75, fetch share 0.5 / 0.75 = 0.667.
    d = differential(three(real=250.0, data_wait=0.72, fetch=0.62))
    c = d["cross_check"]
    assert c["tolerance"] == TOLERANCE == 0.10
    assert c["data_wait"]["direct"] == 0.72 and c["data_wait"]["differential"] == pytest.approx(0.75)
    assert c["data_wait"]["difference"] == pytest.approx(-0.03)
    assert c["data_wait"]["agree"] is True
    assert c["fetch_share"]["differential"] == pytest.approx(2 / 3)
    assert c["fetch_share"]["agree"] is True
    assert c["agree"] is True


def test_cross_check_shows_a_disagreement_with_both_numbers():
    d = differential(three(real=250.0, data_wait=0.50, fetch=0.20))
    c = d["cross_check"]
    assert c["data_wait"] == {"direct": 0.50, "differential": pytest.approx(0.75),
                              "difference": pytest.approx(-0.25), "agree": False, "reason": None, "notes": []}
    assert c["fetch_share"]["agree"] is False
    assert c["fetch_share"]["direct"] == 0.20
    assert c["fetch_share"]["difference"] == pytest.approx(0.20 - 2 / 3)
    assert c["agree"] is False


def test_exactly_at_the_tolerance_agrees_and_just_beyond_does_not():
    fractions = {"fetch_stall": 0.5, "prep_stall": 0.25, "stall": 0.75, "compute": 0.25}
    at = cross_check(summary(1.0, data_wait=0.65), fractions)
    beyond = cross_check(summary(1.0, data_wait=0.649), fractions)
    assert at["data_wait"]["agree"] is True
    assert beyond["data_wait"]["agree"] is False


def test_too_little_stall_is_not_split():
    fractions = {"fetch_stall": 0.02, "prep_stall": 0.01, "stall": 0.03, "compute": 0.97}
    c = cross_check(summary(1.0, data_wait=0.04, fetch=0.9), fractions)
    assert 0.03 < MIN_STALL_TO_SPLIT
    assert c["fetch_share"]["agree"] is None and c["fetch_share"]["differential"] is None
    assert "too little to split" in c["fetch_share"]["reason"]
    assert c["data_wait"]["agree"] is True and c["agree"] is True


def test_no_loading_records_leave_the_split_unchecked():
    c = differential(three(data_wait=0.7))["cross_check"]
    assert c["fetch_share"]["agree"] is None and "no loading records" in c["fetch_share"]["reason"]
    assert c["data_wait"]["agree"] is True


def test_notes_for_images_and_workers():
    c = differential(three(data_wait=0.7, fetch=0.6), storage="images", num_workers=2)["cross_check"]
    notes = " ".join(c["fetch_share"]["notes"])
    assert "decoding" in notes and "2 workers" in notes
    assert c["data_wait"]["notes"]
    assert differential(three(data_wait=0.7, fetch=0.6), storage="memmap")["cross_check"]["fetch_share"]["notes"] == []


# ---- missing runs --------------------------------------------------------------------------


def test_a_missing_prep_run_nulls_what_needs_it_with_the_reason():
    runs = three(real=250.0, data_wait=0.7, fetch=0.6)
    runs["prep"] = None
    d = differential(runs, missing={"prep": "failed: RuntimeError: boom"})
    f = d["fractions"]
    assert f["fetch_stall"] is None and f["prep_stall"] is None
    assert "prep run (failed: RuntimeError: boom)" in d["null_reasons"]["fetch_stall"]
    assert "prep run" in d["null_reasons"]["prep_stall"]
    # compute and real are enough for the total stall and the compute share
    assert f["stall"] == pytest.approx(0.75) and f["compute"] == pytest.approx(0.25)
    assert d["samples_per_s"]["prep"] is None and d["seconds_per_sample"]["prep"] is None
    c = d["cross_check"]
    assert c["data_wait"]["agree"] is True
    assert c["fetch_share"]["agree"] is None and "split is not known" in c["fetch_share"]["reason"]


def test_a_missing_real_run_nulls_everything_and_the_cross_check():
    runs = three()
    runs["real"] = None
    d = differential(runs, missing={"real": "failed: building the workload: OSError: disk full"})
    assert all(v is None for v in d["fractions"].values())
    assert all("real run (failed: building the workload: OSError: disk full)" in r
               for r in d["null_reasons"].values())
    c = d["cross_check"]
    assert c["agree"] is None
    assert "the real run is missing (failed: building the workload" in c["data_wait"]["reason"]
    assert c["fetch_share"]["direct"] is None


def test_a_summary_without_throughput_counts_as_missing():
    runs = three()
    runs["compute"] = summary(None)
    d = differential(runs)
    assert d["fractions"]["prep_stall"] is None and d["fractions"]["fetch_stall"] == pytest.approx(0.5)
    assert "no samples/s" in d["null_reasons"]["prep_stall"]


# ---- the three sub-scenarios ---------------------------------------------------------------

KINDS = {
    "memmap-cold-2workers": """
        [data]
        storage = "memmap"
        cache = "cold"
        samples = 3000
        transform = "normalize"
        [loader]
        batch_size = 50
        num_workers = 2
        prefetch_factor = 4
        pin_memory = true
        [train]
        epochs = 2
        warmup_steps = 5
    """,
    "images-jpeg": """
        [data]
        storage = "images"
        format = "jpeg"
        quality = 80
        samples = 3000
        transform = "augment"
        augment_passes = 2
        [loader]
        batch_size = 64
        [train]
        steps = 500
        warmup_steps = 10
    """,
    "images-png-workers": """
        [data]
        storage = "images"
        samples = 3000
        [loader]
        batch_size = 64
        num_workers = 2
        persistent_workers = true
        [train]
        steps = 50
    """,
    "files-throttle": """
        [data]
        storage = "files"
        throttle = "hdd"
        cache = "cold"
        samples = 3000
        [loader]
        batch_size = 50
        num_workers = 3
        persistent_workers = true
        [train]
        steps = 100
    """,
    "files-throttle-table": """
        [data]
        storage = "files"
        throttle = { latency_ms = 2, bandwidth_mb_s = 50 }
        samples = 3000
        [train]
        steps = 100
    """,
    "ram": """
        [data]
        storage = "ram"
        samples = 3000
        throttle = "nfs"
        [loader]
        batch_size = 32
        num_workers = 1
        shuffle = false
        [train]
        steps = 100
    """,
    "device": """
        [data]
        storage = "device"
        samples = 3000
        transform = "normalize"
        [loader]
        batch_size = 50
        [train]
        epochs = 1
        warmup_steps = 5
    """,
}


def load(tmp_path, text, name="kind"):
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(line.strip() for line in text.splitlines()))
    return load_scenario(path)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_sub_scenarios_are_valid_with_the_right_storage_and_no_refused_keys(tmp_path, kind):
    s = load(tmp_path, KINDS[kind], kind)
    steps = min(s.total_steps(), 40)
    subs = sub_scenarios(s, steps, "test.toml")
    assert list(subs) == ["compute", "prep", "real"]
    compute, prep, real = (subs[r].scenario for r in ("compute", "prep", "real"))
    for sub in (compute, prep, real):
        # valid: it goes through the validator again unchanged
        assert scenario_from_dict(scenario_dict(sub), "again") == sub
        assert sub.train.steps == steps and sub.train.epochs is None
        assert sub.train.warmup_steps == s.train.warmup_steps
        assert (sub.data.transform, sub.data.augment_passes) == (s.data.transform, s.data.augment_passes)
        assert (sub.data.samples, sub.data.seed) == (s.data.samples, s.data.seed)
        assert sub.model == s.model and sub.train.device == s.train.device and sub.profile == s.profile

    assert compute.data.storage == "device"
    assert compute.loader.num_workers == 0
    assert compute.loader.prefetch_factor is None and compute.loader.persistent_workers is False
    assert compute.data.cache == "warm" and compute.data.throttle is None
    assert compute.loader.batch_size == s.loader.batch_size and compute.loader.shuffle == s.loader.shuffle

    assert prep.data.storage == "ram"
    assert prep.data.cache == "warm" and prep.data.throttle is None
    assert prep.loader == s.loader  # the same workers, prefetch, pinning

    assert real.data == s.data and real.loader == s.loader

    # what changed is spelled out
    changes = " ".join(subs["compute"].changes)
    assert ("data.storage = 'device'" in changes) == (s.data.storage != "device")
    if s.loader.num_workers:
        assert f"loader.num_workers = 0 (was {s.loader.num_workers})" in changes
    if s.data.throttle is not None:
        assert "data.throttle = unset" in " ".join(subs["prep"].changes)
    if s.data.cache == "cold":
        assert "data.cache = 'warm' (was 'cold')" in " ".join(subs["prep"].changes)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_shipped_scenario_splits_into_valid_sub_scenarios(path):
    s = load_scenario(path)
    assert scenario_from_dict(scenario_dict(s), "again") == s
    subs = sub_scenarios(s, min(s.total_steps(), 200), str(path))
    assert subs["compute"].scenario.data.storage == "device"
    assert subs["prep"].scenario.data.storage == "ram"
    assert subs["real"].scenario.data.storage == s.data.storage
    assert subs["prep"].scenario.data.storage not in ON_DISK


def test_too_few_steps_for_the_warm_up_is_a_usage_error(tmp_path):
    s = load(tmp_path, KINDS["device"])
    with pytest.raises(UsageError, match=r"--steps 5 .*train.warmup_steps = 5"):
        sub_scenarios(s, 5, "x.toml")


def test_build_diagnosis_records_a_run_that_failed_in_training(tmp_path):
    s = load(tmp_path, KINDS["memmap-cold-2workers"])
    plans = sub_scenarios(s, 40, "x.toml")
    outcomes = {
        "compute": {"status": "complete", "error": None, "folder": "compute", "summary": summary(1000.0, 0.05)},
        "prep": {"status": "complete", "error": None, "folder": "prep", "summary": summary(500.0, 0.3, 0.1)},
        "real": {"status": "failed", "error": "RuntimeError: worker died", "folder": "real",
                 "summary": summary(100.0, 0.9, 0.8)},  # partial steps: never used
    }
    d = build_diagnosis(s, plans, outcomes, 40, {"scenario_file": "x.toml", "overrides": ["a.b=1"]})
    assert d["status"] == "failed"
    assert d["runs"]["real"]["status"] == "failed" and d["runs"]["real"]["error"] == "RuntimeError: worker died"
    assert d["runs"]["real"]["report"] == "real/report.html"  # the steps so far are kept and linked
    assert d["samples_per_s"]["real"] is None
    assert all(v is None for v in d["fractions"].values())
    assert "real run (failed: RuntimeError: worker died)" in d["null_reasons"]["fetch_stall"]
    assert d["runs"]["compute"]["storage"] == "device" and d["runs"]["prep"]["num_workers"] == 2
    assert d["steps_per_run"] == 40 and d["overrides"] == ["a.b=1"]
