"""analysis.transforms: per-loader transform / decode costs and the fetch / decode / transform / other split, from
hand-built records with known numbers (warm-up batches left out, the pipeline's order and randomness kept)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from pipeprof.analysis.transforms import (
    decode_json,
    loader_transforms,
    split_json,
    training_loader,
    training_transforms,
    transforms_json,
)
from pipeprof.pipeline.derive import summarize
from pipeprof.run_folder import LOADING_COLUMNS, STEP_COLUMNS, TRANSFORM_COLUMNS, Run, load_run


def steps(n: int, warmup: int) -> pd.DataFrame:
    rows = [{c: 0.0 for c in STEP_COLUMNS} | {"step": i, "warmup": i < warmup, "samples": 4} for i in range(n)]
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def loading(n: int, fetch_s: float, core_wait_s: float | None, prep_s: float) -> pd.DataFrame:
    rows = [{c: 0.0 for c in LOADING_COLUMNS} | {"batch": i, "step": i, "worker": 0, "fetch_s": fetch_s,
                                                 "core_wait_s": float("nan") if core_wait_s is None else core_wait_s,
                                                 "prep_s": prep_s, "samples": 4} for i in range(n)]
    return pd.DataFrame(rows, columns=LOADING_COLUMNS)


def row(step, kind, name, calls, wall_s, cpu_s, loader=0):
    return {"step": step, "loader": loader, "worker": 0, "kind": kind, "name": name, "calls": calls,
            "wall_s": wall_s, "cpu_s": cpu_s}


PIPELINE = [{"name": "Normalize", "random": False}, {"name": "RandomAffine", "random": True},
            {"name": "ToTensor", "random": False}]


def scenario_records(warm_cost: float = 9.0) -> list[dict]:
    """3 steps, the first warm-up (its rows cost ``warm_cost``: must not count); 4 samples a batch."""
    out = []
    for step in range(3):
        scale = warm_cost if step == 0 else 1.0
        out += [row(step, "batch", "", 4, 0.100 * scale, 0.080 * scale),
                row(step, "transform", "Normalize", 4, 0.004 * scale, 0.004 * scale),
                row(step, "transform", "RandomAffine", 2, 0.040 * scale, 0.030 * scale),  # skipped half the time
                row(step, "transform", "ToTensor", 4, 0.004 * scale, 0.002 * scale),
                row(step, "decode", "PIL.Image.open+convert", 4, 0.020 * scale, 0.016 * scale),
                row(step, "decode", "numpy.load", 4, 0.002 * scale, 0.002 * scale)]
    return out


def scenario_run(**meta) -> Run:
    return Run(meta={"transform_pipelines": {"0": PIPELINE}, **meta}, steps=steps(3, 1),
               loading=loading(3, fetch_s=0.020, core_wait_s=0.004, prep_s=0.080),
               transforms=pd.DataFrame(scenario_records(), columns=TRANSFORM_COLUMNS))


def test_a_scenarios_costs_per_sample_over_counted_batches_costliest_first_with_the_pipelines_order():
    lt = training_transforms(scenario_run())
    assert lt is not None and lt.loader == 0 and lt.samples == 8  # two counted batches of 4
    names = [c.name for c in lt.transforms]
    assert names == ["RandomAffine", "Normalize", "ToTensor"]  # costliest first; a tie keeps the pipeline's order
    affine = lt.transforms[0]
    assert (affine.order, affine.random, affine.calls) == (1, True, 4)
    assert affine.per_sample_s == pytest.approx(0.080 / 8) and affine.cpu_per_sample_s == pytest.approx(0.060 / 8)
    assert affine.share_of_prep == pytest.approx(0.080 / 0.160)  # over loading.csv's prep_s (a scenario's)
    assert [c.order for c in lt.transforms[1:]] == [0, 2]
    assert lt.decode is not None
    assert lt.decode.how == "PIL.Image.open+convert + numpy.load"  # costliest first
    assert (lt.decode.calls, lt.decode.per_sample_s) == (16, pytest.approx(0.044 / 8))
    split = lt.split
    assert split is not None
    assert split.fetch_s == pytest.approx(0.040 / 8) and split.core_wait_s == pytest.approx(0.008 / 8)
    assert split.decode_s == pytest.approx(0.044 / 8) and split.transform_s == pytest.approx(0.096 / 8)
    assert split.other_s == pytest.approx((0.160 - 0.044 - 0.096) / 8)
    # the parts sum to __getitem__: fetch + core wait + prep
    total = split.fetch_s + split.core_wait_s + split.decode_s + split.transform_s + split.other_s
    assert total == pytest.approx((0.040 + 0.008 + 0.160) / 8)


def test_json_rows_carry_the_contracts_keys():
    lt = training_transforms(scenario_run())
    rows = transforms_json(lt)
    assert rows is not None and rows[0] == {"name": "RandomAffine", "per_sample_s": pytest.approx(0.010),
                                            "cpu_per_sample_s": pytest.approx(0.0075), "calls": 4,
                                            "share_of_prep": pytest.approx(0.5), "random": True}
    assert set(decode_json(lt.decode)) == {"per_sample_s", "cpu_per_sample_s", "calls", "how"}
    assert split_json(lt.split)["other_per_sample_s"] == pytest.approx(0.0025)
    assert transforms_json(None) is None and decode_json(None) is None and split_json(None) is None


def test_a_script_splits_getitem_by_cpu_time_and_picks_the_train_loader():
    records = [row(s, "batch", "", 4, 0.100, 0.060, loader=1) for s in (0, 1, 2)]
    records += [row(s, "transform", "Resize", 4, 0.030, 0.025, loader=1) for s in (0, 1, 2)]
    records += [row(s, "decode", "torchvision.io.decode_jpeg", 4, 0.020, 0.020, loader=1) for s in (0, 1, 2)]
    records += [row(s, "transform", "Resize", 4, 0.5, 0.5, loader=0) for s in (1, 2)]  # another loader
    records += [row(s, "batch", "", 2, 1.0, 1.0, loader=0) for s in (1, 2)]
    run = Run(meta={"kind": "script", "loaders": [{"number": 0, "role": "eval"}, {"number": 1, "role": "train"}],
                    "transform_pipelines": {"1": [{"name": "Resize", "random": None}]}},
              steps=steps(3, 1), loading=loading(3, fetch_s=0.030, core_wait_s=0.005, prep_s=0.060),
              transforms=pd.DataFrame(records, columns=TRANSFORM_COLUMNS))
    assert training_loader(run) == 1
    every = loader_transforms(run)
    assert sorted(every) == [0, 1] and every[0].samples == 4
    other = every[0].split  # not the training loader: no core wait known, all on the CPU, so no fetch
    assert (other.fetch_s, other.core_wait_s, other.transform_s, other.other_s) == (0.0, None, 0.25, 0.25)
    lt = every[1]
    assert lt.samples == 8 and lt.transforms[0].random is None
    # The core wait (0.01 s of 0.08 s off the CPU: q = 1/8) is shared by off-CPU time: Resize's 0.005 s off it
    # holds 1/8 of its own, taken out of its wall.
    assert lt.transforms[0].share_of_prep == pytest.approx((0.030 - 0.005 / 8) / 0.100)  # of the __getitem__ wall
    split = lt.split
    # off-CPU outside decode and transforms: (0.2 - 0.12) - 0 - 0.01 = 0.07, less its 1/8 waiting for a core
    assert split.fetch_s == pytest.approx(0.070 * 7 / 8 / 8) and split.core_wait_s == pytest.approx(0.010 / 8)
    assert split.transform_s == pytest.approx((0.060 - 0.010 / 8) / 8)
    assert split.other_s == pytest.approx((0.120 - 0.040 - 0.050) / 8)  # the CPU outside decode and transforms
    total = split.fetch_s + split.core_wait_s + split.decode_s + split.transform_s + split.other_s
    assert total == pytest.approx(0.200 / 8)


def test_unknown_core_wait_and_a_script_without_a_train_role():
    run = scenario_run()
    run.loading["core_wait_s"] = float("nan")
    assert training_transforms(run).split.core_wait_s is None
    assert training_loader(Run(meta={"kind": "script", "loaders": [{"number": 3, "role": None}]},
                               steps=steps(1, 0))) == 3
    assert training_loader(Run(meta={"kind": "script"}, steps=steps(1, 0))) is None


def test_nothing_timed_is_none_and_a_batch_less_scenario_counts_loading_samples():
    empty = Run(meta={}, steps=steps(3, 1))
    assert loader_transforms(empty) == {} and training_transforms(empty) is None
    no_batches = [r for r in scenario_records() if r["kind"] != "batch"]
    run = scenario_run()
    run.transforms = pd.DataFrame(no_batches, columns=TRANSFORM_COLUMNS)
    lt = training_transforms(run)
    assert lt.samples == 8 and lt.transforms[0].per_sample_s == pytest.approx(0.010)
    # only warm-up rows: nothing counted
    run.transforms = pd.DataFrame([r for r in scenario_records() if r["step"] == 0], columns=TRANSFORM_COLUMNS)
    assert training_transforms(run) is None


RUNS = Path(__file__).parent / "fixtures" / "runs"


def with_transforms(folder: str, loader: int) -> Run:
    """A committed run folder with transforms.csv rows added for every batch: Normalize at a tenth of the batch's
    prep time, Crop at a half; a decode at a fifth."""
    run = load_run(RUNS / folder)
    rows = []
    for b in run.loading.itertuples():
        rows += [row(b.step, "batch", "", b.samples, b.fetch_s + b.prep_s, b.prep_s, loader),
                 row(b.step, "transform", "Normalize", b.samples, b.prep_s / 10, b.prep_s / 10, loader),
                 row(b.step, "transform", "Crop", b.samples, b.prep_s / 2, b.prep_s / 2, loader),
                 row(b.step, "decode", "numpy.load", b.samples, b.prep_s / 5, b.prep_s / 5, loader)]
    run.transforms = pd.DataFrame(rows, columns=TRANSFORM_COLUMNS)
    run.meta["transform_pipelines"] = {str(loader): [{"name": "Normalize", "random": False},
                                                     {"name": "Crop", "random": True}]}
    return run


@pytest.mark.parametrize("folder", ["scenario-ram", "script-plain-loop"])
def test_summary_json_carries_the_training_loaders_transforms_decode_and_split(folder):
    run = with_transforms(folder, 0)
    summary = summarize(run)  # validated against the schema (conftest)
    assert [t["name"] for t in summary["transforms"]] == ["Crop", "Normalize"]
    assert summary["transforms"][0]["share_of_prep"] == pytest.approx(0.5, rel=0.01)  # of prep (a script's: getitem)
    assert summary["decode"]["how"] == "numpy.load"
    split = summary["loading"]["split"]
    assert split["transform_per_sample_s"] == pytest.approx(summary["transforms"][0]["per_sample_s"] * 1.2)
    if folder.startswith("script"):
        assert summary["loaders"][0]["transforms"] == summary["transforms"]
        assert summary["loaders"][0]["decode"] == summary["decode"]


def test_a_scenarios_prep_takes_back_the_core_wait_taken_out_of_it():
    """A batch whose fetch kept nothing gave the rest of its wait from prep: the transforms' walls include it,
    so the share's denominator does too, and the split's core wait is the rest (the wait outside prep)."""
    run = scenario_run()
    run.loading.loc[1, "fetch_s"] = 0.0  # batch 1 (counted): its 0.004 s wait came out of prep (fetch was less)
    lt = training_transforms(run)
    assert lt.transforms[0].share_of_prep == pytest.approx(0.080 / 0.164)
    split = lt.split
    assert split.core_wait_s == pytest.approx(0.004 / 8)
    assert split.other_s == pytest.approx((0.164 - 0.044 - 0.096) / 8)
    total = split.fetch_s + split.core_wait_s + split.decode_s + split.transform_s + split.other_s
    assert total == pytest.approx((0.020 + 0.008 + 0.160) / 8)  # still the __getitem__ wall


def test_waiting_for_a_core_is_not_counted_inside_transforms_and_again_as_waiting():
    # A loaded machine (HF: decode 5.98 + transform 7.10 ms against 8.9 ms to make a sample): most of the
    # transforms' and decode's off-CPU time is waiting for a core, which loading.csv lists too.
    records = [row(s, "batch", "", 4, 0.100, 0.040, loader=0) for s in (0, 1, 2)]
    records += [row(s, "transform", "RandomResizedCrop", 4, 0.050, 0.020, loader=0) for s in (0, 1, 2)]
    records += [row(s, "transform", "Normalize", 4, 0.010, 0.005, loader=0) for s in (0, 1, 2)]
    records += [row(s, "decode", "PIL.Image.open", 4, 0.035, 0.010, loader=0) for s in (0, 1, 2)]
    run = Run(meta={"kind": "script", "loaders": [{"number": 0, "role": "train"}]},
              steps=steps(3, 1), loading=loading(3, fetch_s=0.0, core_wait_s=0.054, prep_s=0.040),
              transforms=pd.DataFrame(records, columns=TRANSFORM_COLUMNS))
    lt = training_transforms(run)
    split = lt.split
    parts = (split.fetch_s, split.core_wait_s, split.decode_s, split.transform_s, split.other_s)
    assert min(parts) >= 0 and sum(parts) == pytest.approx(0.100 * 2 / 8)  # no more than the __getitem__ wall
    assert split.decode_s + split.transform_s + split.core_wait_s <= 0.100 * 2 / 8 + 1e-12
    # each transform row less its share of the wait, the rows summing to the split's transform part
    assert sum(c.per_sample_s for c in lt.transforms) == pytest.approx(split.transform_s)
    q = 0.054 / 0.060  # core wait over __getitem__'s off-CPU time
    assert lt.transforms[0].per_sample_s == pytest.approx((0.050 - q * 0.030) * 2 / 8)
    assert lt.decode.per_sample_s == pytest.approx(split.decode_s)
