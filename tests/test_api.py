"""The Python API, ``pipeprof.profile()``: a profiled block in this very process, as a notebook would run it."""

from __future__ import annotations

import json
import time

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data._utils import fetch as _fetch

import pipeprof
from pipeprof.script import hooks

pytestmark = pytest.mark.integration
ORIGINALS = {(DataLoader, "__iter__"): DataLoader.__iter__, (torch.Tensor, "to"): torch.Tensor.to,
             (_fetch._MapDatasetFetcher, "fetch"): _fetch._MapDatasetFetcher.fetch}


def _setup(samples: int = 320):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(samples, 784), torch.randint(0, 10, (samples,)))
    model = torch.nn.Sequential(torch.nn.Linear(784, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    return data, model, torch.optim.SGD(model.parameters(), lr=0.05)


def test_profile_block_with_wrap_validation_and_the_same_run_folder(tmp_path):
    data, model, optimizer = _setup()
    train_loader = DataLoader(data, batch_size=32, shuffle=True)
    val_loader = DataLoader(data, batch_size=64)
    collate = train_loader.collate_fn
    with pipeprof.profile(name="nb", out=tmp_path, warmup_steps=2, quiet=True) as prof:
        for _epoch in range(2):
            for x, y in prof.wrap(train_loader):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                time.sleep(0.004)
                optimizer.step()
            with torch.no_grad():
                for x, _ in val_loader:
                    model(x)
    s = prof.summary
    assert s["steps"] + s["warmup_steps"] == 20  # 2 epochs of 320 / 32
    assert {d["name"]: d["role"] for d in s["loaders"]} == {"train_loader": "train", "val_loader": "eval"}
    steps = prof.run.steps[~prof.run.steps["warmup"]]
    assert (steps["compute_s"] / steps["step_s"]).median() > 0.5  # the median step: one stall of a busy machine
    assert s["step_source"] == "optimizer"
    for name in ("run.json", "steps.csv", "samples.csv", "loading.csv", "summary.json", "report.html"):
        assert (prof.folder / name).is_file()
    assert json.loads((prof.folder / "run.json").read_text())["script"]["api"] is True
    assert (tmp_path / "index.html").is_file()
    # Raw records in: `pipeprof report` re-derives the same summary from the folder alone.
    from pipeprof.cli.main import main
    before = json.loads((prof.folder / "summary.json").read_text())
    assert main(["report", str(prof.folder), "--quiet"]) == 0
    after = json.loads((prof.folder / "summary.json").read_text())
    assert after["steps"] == before["steps"] and after["loaders"] == before["loaders"]
    assert after["fractions"] == pytest.approx(before["fractions"])
    # After the block the loaders are the user's again: plain batches, their own collate, nothing patched.
    x, y = next(iter(train_loader))
    assert isinstance(x, torch.Tensor) and hooks.active() is None
    assert train_loader.collate_fn is collate and prof._hooks.patches.applied() == []
    assert [getattr(owner, name) for owner, name in ORIGINALS] == list(ORIGINALS.values())  # test_hook_patches: all


def test_manual_steps_and_an_exception_inside_the_block(tmp_path):
    data, model, optimizer = _setup(160)
    loader = DataLoader(data, batch_size=16)
    with pytest.raises(ValueError, match="boom"):
        with pipeprof.profile(name="failing", out=tmp_path, warmup_steps=0, quiet=True) as prof:
            for i, (x, _y) in enumerate(loader):
                model(x).sum().backward()
                if i % 2:
                    prof.step()  # one step per two batches
                if i == 7:
                    raise ValueError("boom")
    meta = json.loads((prof.folder / "run.json").read_text())
    assert meta["status"] == "failed" and meta["error"] == "ValueError: boom"
    assert prof.summary["step_source"] == "prof.step" and prof.summary["steps"] == 4
    with pytest.raises(RuntimeError, match="inside `with pipeprof.profile"):
        prof.step()


def test_training_batches_no_step_holds_are_counted_and_said(tmp_path):
    # prof.step() marks that stop two batches before the loop does: those two batches trained in no step.
    data, model, optimizer = _setup(128)
    train_loader = DataLoader(data, batch_size=16)  # 8 batches
    with pipeprof.profile(name="uncounted", out=tmp_path, warmup_steps=1, quiet=True) as prof:
        for i, (x, y) in enumerate(prof.wrap(train_loader)):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if i < 6:
                prof.step()
    s = prof.summary
    assert s["step_source"] == "prof.step" and s["steps"] + s["warmup_steps"] == 6
    said = s["absences"]["uncounted_batches"]
    assert said.startswith("2 of 8 training batches are in no counted step: they came after the last step's end")
    assert said in prof.run.meta["notes"]


def test_two_blocks_at_once_are_refused(tmp_path):
    with pipeprof.profile(name="outer", out=tmp_path, quiet=True) as outer:
        with pytest.raises(RuntimeError, match="already profiling"):
            with pipeprof.profile(name="inner", out=tmp_path, quiet=True):
                pass
        assert hooks.active() is outer._hooks  # the refused one undid nothing of the outer block's
    assert hooks.active() is None
    with pipeprof.profile(name="next", out=tmp_path, quiet=True) as following:  # and the next block starts
        assert hooks.active() is following._hooks


def test_bad_options_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="warmup_steps"):
        pipeprof.profile(out=tmp_path, warmup_steps=-1)
    with pytest.raises(ValueError, match="sample_hz"):
        pipeprof.profile(out=tmp_path, sample_hz=0)
