"""Issue 18, items 3-4: the verdict names the costliest transform, and the recommendations that follow from the
measured per-transform and decode costs (hand-made ``LoaderTransforms`` records, exact arithmetic)."""

from __future__ import annotations

import pytest
from test_verdict import STEP_S, make_run

from pipeprof.analysis import change_model as recommend_module
from pipeprof.analysis.attribution import attribution
from pipeprof.analysis.recommend import recommend
from pipeprof.analysis.transform_advice import (
    DECODE_JPEG_KEEPS,
    cache_point,
    costliest,
    prep_savings,
)
from pipeprof.analysis.transforms import DecodeCost, LoaderTransforms, PrepSplit, TransformCost
from pipeprof.analysis.verdict import verdict, verdict_from_attribution, with_transforms
from pipeprof.render.advice_text import code_text, note_text, reason_text
from pipeprof.render.prediction_text import model_text
from pipeprof.render.verdict_text import verdict_sentence

BATCH = 128
# make_run's batches: fetch 3 ms, prep 25 ms, collate 2 ms per batch of 128, made by the training process.
LOADING = (0.003, 0.025, 0.002)
FETCH, PREP, COLLATE = (part / BATCH for part in LOADING)
# its compute + h2d: 70 ms a step of 100 ms (wait 0.3): C = 128 / 0.07; the run's rate 128 / 0.1.
C = BATCH / (0.7 * STEP_S)
NOW = BATCH / STEP_S


def cost(name: str, order: int, per_sample_s: float, random: bool | None, calls: int = 4096) -> TransformCost:
    return TransformCost(name, order, per_sample_s, 0.9 * per_sample_s, calls, per_sample_s / PREP, random)


RESIZE = cost("Resize(size=256)", 0, 120e-6, False)
FLIP = cost("RandomHorizontalFlip(p=0.5)", 1, 10e-6, True)
NORMALIZE = cost("Normalize", 2, 20e-6, False)
PIL_DECODE = DecodeCost(30e-6, 29e-6, 4096, "PIL.Image.open+convert")


def lt(transforms=(RESIZE, NORMALIZE, FLIP), decode=PIL_DECODE, split=None) -> LoaderTransforms:
    ordered = tuple(sorted(transforms, key=lambda c: -c.per_sample_s))
    return LoaderTransforms(0, 4096, ordered, decode, split)


def recs_with(monkeypatch, record: LoaderTransforms | None, **run_kw):
    monkeypatch.setattr(recommend_module, "training_transforms", lambda run: record)
    run = make_run(wait=0.3, loading=LOADING, **run_kw)
    attr = attribution(run)
    return recommend(run, attr, verdict_from_attribution(attr))


def code(recs, starts: str):
    return [r for r in recs if r.code_change is not None and code_text(r.code_change).startswith(starts)]


# -- the verdict ---------------------------------------------------------------------------------------------------


def test_a_prep_bound_verdict_names_the_costliest_transform_with_its_measured_share_and_time():
    judged = verdict_from_attribution(attribution(make_run(wait=0.3, loading=LOADING)))
    assert judged.klass == "input:prep"
    named = with_transforms(judged, lt())
    # Resize: 120 µs of the 195.3 µs prep per sample = 61.44%
    assert verdict_sentence(named) == (verdict_sentence(judged)[:-1] +
                                       "; Resize(size=256) takes 61% of preparation, 120 µs per sample.")
    assert named.evidence["prep_costliest"] == "Resize(size=256)"
    assert named.evidence["prep_costliest_per_sample_s"] == pytest.approx(120e-6)
    assert named.evidence["prep_costliest_fraction"] == pytest.approx(120e-6 / PREP)
    assert (named.klass, named.rule, named.degree) == (judged.klass, judged.rule, judged.degree)


def test_decoding_is_named_instead_where_it_costs_more_than_any_transform():
    judged = verdict_from_attribution(attribution(make_run(wait=0.3, loading=LOADING)))
    slow_decode = DecodeCost(150e-6, 140e-6, 4096, "PIL.Image.open+convert")
    named = with_transforms(judged, lt(decode=slow_decode))
    # prep per sample = Resize's 120 µs / its 61.44% share = 195.3 µs; decode 150 µs of it = 76.8%
    assert verdict_sentence(named).endswith("; decoding (PIL.Image.open+convert) takes 77% of preparation, 150 µs per sample.")
    assert costliest(lt(decode=slow_decode)).share_of_prep == pytest.approx(150e-6 / PREP)


def test_the_verdict_is_unchanged_without_transforms_or_when_prep_does_not_set_the_pace():
    prep_bound = verdict_from_attribution(attribution(make_run(wait=0.3, loading=LOADING)))
    assert with_transforms(prep_bound, None) == prep_bound
    fetch_bound = verdict_from_attribution(attribution(make_run(wait=0.3, loading=(0.025, 0.003, 0.002))))
    assert fetch_bound.klass == "input:fetch"
    assert with_transforms(fetch_bound, lt()) == fetch_bound
    # a run folder without transforms.csv: verdict() as before
    run = make_run(wait=0.3, loading=LOADING)
    assert verdict_sentence(verdict(run)) == verdict_sentence(prep_bound)


def test_a_costliest_transform_that_waited_says_its_time_on_the_cpu_beside_its_wall_time():
    judged = verdict_from_attribution(attribution(make_run(wait=0.3, loading=LOADING)))
    # under contention: 120 µs of wall, 60 µs on the CPU (the rest waited for a core)
    waited = TransformCost("Resize(size=256)", 0, 120e-6, 60e-6, 4096, 120e-6 / PREP, False)
    named = with_transforms(judged, lt((waited, NORMALIZE, FLIP)))
    assert verdict_sentence(named).endswith("; Resize(size=256) takes 61% of preparation, 120 µs per sample (60.0 µs of it on "
                                   "the CPU).")


def test_a_scripts_off_cpu_fetch_spent_inside_the_transforms_is_said_and_the_transform_named():
    fetch_bound = verdict_from_attribution(attribution(make_run(wait=0.3, loading=(0.025, 0.003, 0.002))))
    assert fetch_bound.klass == "input:fetch"
    # a transform that sleeps 2 ms a sample (10 µs on the CPU): the off-CPU "fetch" is inside it
    sleepy = TransformCost("Expensive", 1, 2e-3, 10e-6, 4096, 0.8, None)
    quick = TransformCost("Cheap", 0, 200e-6, 190e-6, 4096, 0.08, None)
    inside = lt((sleepy, quick), decode=None, split=PrepSplit(100e-6, None, 0.0, 2.2e-3, 50e-6))
    said = with_transforms(fetch_bound, inside, fetch_off_cpu=True)
    assert verdict_sentence(said) == verdict_sentence(fetch_bound)[:-1] + (
        "; most of that time off the CPU is spent inside the transforms, not outside them reading: Expensive takes "
        "2.00 ms per sample, 1.99 ms of it off the CPU.")
    assert said.evidence["fetch_in_transforms_per_sample_s"] == pytest.approx(2e-3 - 10e-6 + 10e-6)
    assert said.evidence["fetch_in_transforms_costliest"] == "Expensive"
    # a scenario's fetch is its storage's (not off-CPU time): unchanged; and where reading outside them dominates
    assert with_transforms(fetch_bound, inside) == fetch_bound
    reading = lt((sleepy, quick), decode=None, split=PrepSplit(3e-3, None, 0.0, 2.2e-3, 50e-6))
    assert with_transforms(fetch_bound, reading, fetch_off_cpu=True) == fetch_bound


# -- the rules -----------------------------------------------------------------------------------------------------


def test_the_cache_point_is_the_dominant_deterministic_transform_before_a_random_one():
    top, prefix = cache_point(lt())
    assert top is RESIZE and prefix == (RESIZE,)
    # a random transform before the dominant one: its output differs every epoch, nothing to cache
    early_flip = cost("RandomHorizontalFlip(p=0.5)", 0, 10e-6, True)
    late_resize = cost("Resize(size=256)", 1, 120e-6, False)
    assert cache_point(lt((early_flip, late_resize, cost("Normalize", 2, 20e-6, False)))) is None
    # no random transform after it: nothing per sample is left to keep
    assert cache_point(lt((RESIZE, NORMALIZE))) is None
    # randomness unknown (None) is not deterministic
    assert cache_point(lt((cost("Resize(size=256)", 0, 120e-6, None), NORMALIZE, FLIP))) is None
    # the deterministic transform does not dominate the transforms' time (120 of 250 µs)
    assert cache_point(lt((RESIZE, cost("RandomResizedCrop", 1, 130e-6, True)))) is None


def test_the_cache_point_takes_the_deterministic_transforms_after_the_dominant_one_up_to_the_first_random():
    """torchvision's classic order: Resize, CenterCrop (deterministic), then a random flip, then ToTensor and
    Normalize: the samples are cached after CenterCrop (smaller, and its time saved too), and everything from
    the flip on stays per sample."""
    resize, crop = cost("Resize(size=64)", 0, 600e-6, False), cost("CenterCrop(size=56)", 1, 40e-6, False)
    flip, to_tensor = cost("RandomHorizontalFlip(p=0.5)", 2, 20e-6, True), cost("ToTensor()", 3, 100e-6, False)
    normalize = cost("Normalize", 4, 80e-6, False)
    record = lt((resize, crop, flip, to_tensor, normalize), decode=None)
    top, prefix = cache_point(record)
    assert top is resize and prefix == (resize, crop)
    (saving,) = [s for s in prep_savings(record) if s.kind == "cache_after"]
    assert saving.prep_saved_s == pytest.approx(640e-6) and saving.fetch_saved_s == 0
    assert saving.code_change.kind == "cache_after_code"
    assert code_text(saving.code_change) == ("cache the samples after CenterCrop(size=56): apply Resize(size=64) → "
                                  "CenterCrop(size=56) once (e.g. in a first pass into a tensor held in RAM or saved "
                                  "to disk) and keep RandomHorizontalFlip(p=0.5) → ToTensor() → Normalize in the "
                                  "per-sample transform")
    assert saving.why.kind == "cache_after" and saving.why["first_random"] == "RandomHorizontalFlip(p=0.5)"
    assert saving.why["prefix"] == ("Resize(size=64)", "CenterCrop(size=56)")
    assert "(the first random transform is RandomHorizontalFlip(p=0.5))" in reason_text(saving.why)


def test_no_advice_without_measured_transforms():
    assert prep_savings(None) == []
    assert costliest(None) is None


# -- the recommendations' numbers ----------------------------------------------------------------------------------


def test_cache_after_the_deterministic_prefix_predicts_from_the_measured_costs(monkeypatch):
    (rec,) = code(recs_with(monkeypatch, lt()), "cache the samples after Resize(size=256)")
    # saved: Resize 120 µs + the decode before it 30 µs a sample. 0 workers: X = 1/(p + 1/C), and the
    # prediction is the measured rate times X(after)/X(before).
    p = FETCH + PREP + COLLATE
    x = NOW * (p + 1 / C) / (p - 150e-6 + 1 / C)
    assert rec.change == {}
    assert rec.predicted_samples_per_s == pytest.approx(x)
    assert rec.predicted_speedup == pytest.approx(x / NOW)
    assert rec.code_change is not None and "RandomHorizontalFlip(p=0.5)" in code_text(rec.code_change)
    assert rec.reason.kind == "predicted" and rec.reason["why"].kind == "transform_saving"
    reason, note = reason_text(rec.reason), note_text(rec.note) or ""
    assert "measured per-transform costs" in reason and "80%" in reason  # 120 of the transforms' 150 µs
    assert "--verify cannot re-run it" in note and "more than they save" in note


def test_decode_dominating_a_sample_suggests_decoding_once_and_decode_jpeg_as_an_estimate(monkeypatch):
    slow_decode = DecodeCost(150e-6, 140e-6, 4096, "PIL.Image.open+convert")
    split = PrepSplit(FETCH, None, 150e-6, 30e-6, PREP - 180e-6)  # decode 150 of 218.75 µs: 69%
    recs = recs_with(monkeypatch, lt((cost("Normalize", 0, 30e-6, False),), slow_decode, split))
    p = FETCH + PREP + COLLATE
    (ram,) = code(recs, "decode the data set once into RAM")
    x_ram = NOW * (p + 1 / C) / (p - 150e-6 - FETCH + 1 / C)  # the decode and the fetch before it go
    assert ram.predicted_samples_per_s == pytest.approx(x_ram)
    assert "69% of a sample's making" in reason_text(ram.reason)
    (jpeg,) = code(recs, "decode JPEG files with torchvision.io.decode_jpeg")
    saved = 150e-6 * (1 - DECODE_JPEG_KEEPS)
    assert jpeg.predicted_samples_per_s == pytest.approx(NOW * (p + 1 / C) / (p - saved + 1 / C))
    assert jpeg.model.kind == "assumed"
    assert "an estimate" in reason_text(jpeg.reason)
    assert "(assumed" in model_text(jpeg.model) and "not in this run" in model_text(jpeg.model)
    assert "only for JPEG" in (note_text(jpeg.note) or "")


def test_decode_jpeg_only_for_pil_and_nothing_where_decode_does_not_dominate(monkeypatch):
    tv_decode = DecodeCost(150e-6, 140e-6, 4096, "torchvision.io.decode_jpeg")
    split = PrepSplit(FETCH, None, 150e-6, 30e-6, PREP - 180e-6)
    recs = recs_with(monkeypatch, lt((cost("Normalize", 0, 30e-6, False),), tv_decode, split))
    assert code(recs, "decode JPEG") == [] and len(code(recs, "decode the data set once")) == 1
    small = PrepSplit(FETCH, None, 30e-6, 150e-6, PREP - 180e-6)
    recs = recs_with(monkeypatch, lt((cost("Normalize", 0, 150e-6, False),), PIL_DECODE, small))
    assert code(recs, "decode") == []


def test_a_scenarios_images_on_disk_get_the_decoded_cache_as_a_setting_citing_the_measured_decode(monkeypatch):
    slow_decode = DecodeCost(150e-6, 140e-6, 4096, "PIL.Image.open+convert")
    split = PrepSplit(FETCH, None, 150e-6, 30e-6, PREP - 180e-6)
    recs = recs_with(monkeypatch, lt((cost("Normalize", 0, 30e-6, False),), slow_decode, split), storage="images")
    (ram,) = [r for r in recs if r.change.get("data.storage") == "ram"]
    assert ram.reason["why"].kind == "cache_in_ram" and ram.reason["why"]["decode"]
    assert ("decoding (PIL.Image.open+convert) measured at 69% of a sample's making, 150 µs per sample"
            in reason_text(ram.reason))
    # fetch gone and only the measured decode out of prep (the transforms stay)
    assert ram.predicted_samples_per_s == pytest.approx(1 / (PREP - 150e-6 + COLLATE + 1 / C))
    assert code(recs, "decode the data set once") == []  # the setting says it; no code change beside it


def test_no_transform_advice_for_a_compute_bound_run(monkeypatch):
    monkeypatch.setattr(recommend_module, "training_transforms", lambda run: lt())
    run = make_run(wait=0.02, loading=LOADING)
    attr = attribution(run)
    recs = recommend(run, attr, verdict_from_attribution(attr))
    assert code(recs, "cache the samples") == []


# -- end to end: transforms.csv rows through summarize, the intervals and the report ----------------------------------

PIPELINE = [{"name": "Resize(size=256)", "random": False}, {"name": "RandomHorizontalFlip(p=0.5)", "random": True},
            {"name": "Normalize", "random": False}]


def run_with_transforms_csv(per_sample: dict[str, float], decode_s: float, *, wait: float, loading):
    """make_run with transforms.csv rows: each batch of 128 samples spends ``per_sample[name]`` seconds a sample in
    each transform and ``decode_s`` in PIL's decode, and its __getitem__ the batch's fetch + prep."""
    import pandas as pd

    from pipeprof.run_folder import TRANSFORM_COLUMNS

    run = make_run(wait=wait, loading=loading)
    run.meta["transform_pipelines"] = {"0": PIPELINE}
    rows = []
    for step in run.steps["step"]:
        rows.append({"step": step, "loader": 0, "worker": -1, "kind": "batch", "name": "", "calls": BATCH,
                     "wall_s": loading[0] + loading[1], "cpu_s": loading[1]})
        rows.append({"step": step, "loader": 0, "worker": -1, "kind": "decode", "name": "PIL.Image.open+convert",
                     "calls": BATCH, "wall_s": decode_s * BATCH, "cpu_s": decode_s * BATCH})
        for name, seconds in per_sample.items():
            rows.append({"step": step, "loader": 0, "worker": -1, "kind": "transform", "name": name, "calls": BATCH,
                         "wall_s": seconds * BATCH, "cpu_s": seconds * BATCH})
    run.transforms = pd.DataFrame(rows, columns=TRANSFORM_COLUMNS)
    return run


def test_from_transforms_csv_to_the_verdict_a_certain_gain_and_the_report():
    from pipeprof.pipeline.derive import summarize
    from pipeprof.render.html import render_html

    # 0 workers; per batch fetch 3 ms, prep 50 ms, collate 2 ms; compute + h2d 40 ms a step of 100 ms
    loading = (0.003, 0.050, 0.002)
    run = run_with_transforms_csv({"Resize(size=256)": 350e-6, "RandomHorizontalFlip(p=0.5)": 5e-6, "Normalize": 5e-6},
                                  30e-6, wait=0.6, loading=loading)
    summary = summarize(run)
    prep = loading[1] / BATCH
    assert summary["verdict"]["class"] == "input:prep"
    assert summary["verdict"]["sentence"].endswith(
        f"; Resize(size=256) takes {round(100 * 350e-6 / prep)}% of preparation, 350 µs per sample.")
    (rec,) = [r for r in summary["recommendations"] if (r.get("code_change") or "").startswith("cache the samples")]
    p, c = sum(loading) / BATCH, BATCH / (0.4 * STEP_S)
    x = NOW * (p + 1 / c) / (p - 380e-6 + 1 / c)  # Resize 350 µs + decode 30 µs saved a sample: x2.05
    assert rec["predicted_samples_per_s"] == pytest.approx(x)
    low, high = rec["interval"]["speedup"]
    assert 1.0 < low < x / NOW < high and rec["interval"]["may_not_help"] is False  # the resamples kept the rows
    html = render_html(run, summary)
    assert 'id="transforms"' in html and "cache the samples after Resize(size=256)" in html
