"""Whole-program runs of fixtures written in the documented style of the libraries people load data with:
timm (``create_loader`` with its ``PrefetchLoader`` and ``create_transform``), Hugging Face ``datasets``
(``with_transform`` feeding a DataLoader), WebDataset (``.batched()`` + ``WebLoader(batch_size=None)``) and
torchdata (``StatefulDataLoader``). Each fixture is profiled once (module-scoped) and checked against its
own count of steps and samples, ``len(loader)`` and its own ``perf_counter`` data-wait share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support.shared import made_once

pytestmark = pytest.mark.integration
FIXTURES = Path(__file__).parent / "fixtures"


class Profiled:
    def __init__(self, stdout: str, stderr: str, folder: Path) -> None:
        self.own: dict[str, Any] = json.loads(next(line for line in reversed(stdout.splitlines())
                                                   if line.startswith("{")))
        self.summary: dict[str, Any] = json.loads((folder / "summary.json").read_text())
        self.meta: dict[str, Any] = json.loads((folder / "run.json").read_text())
        self.steps = pd.read_csv(folder / "steps.csv")
        self.processes = pd.read_csv(folder / "processes.csv")
        self.stderr = stderr

    def train(self) -> dict[str, Any]:
        (loader,) = [d for d in self.summary["loaders"] if d["role"] == "train"]
        return loader

    def transforms(self) -> list[str]:
        return [t["name"] for t in self.summary.get("transforms") or []]


def _profile(factory: pytest.TempPathFactory, script: str, *args: str, data: str | None = None) -> Profiled:
    """``pipeprof profile`` of the fixture ``script`` with ``args`` (and ``data`` followed by a folder for its
    data), made once for all the session's workers."""
    def build(tmp: Path) -> dict[str, str]:
        out = tmp / script
        (tmp / "data").mkdir()
        proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--quiet", "--out", str(out), "--",
                               sys.executable, str(FIXTURES / script), *args,
                               *((data, str(tmp / "data")) if data else ())],
                              capture_output=True, text=True, timeout=240,
                              env={**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        (folder,) = [p for p in out.iterdir() if (p / "run.json").is_file() and not p.is_symlink()]
        return {"stdout": proc.stdout, "stderr": proc.stderr, "folder": str(folder)}

    made = made_once(factory, f"data library fixture {script} {args} {data}", build)
    return Profiled(made["stdout"], made["stderr"], Path(made["folder"]))


@pytest.fixture(scope="module")
def timm_run(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    return _profile(tmp_path_factory, "timm_train.py", data="--data")


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    return _profile(tmp_path_factory, "hf_datasets_train.py", "--samples", "160")


@pytest.fixture(scope="module")
def wds_batched_run(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    return _profile(tmp_path_factory, "webdataset_train.py", "--batched", data="--data")


@pytest.fixture(scope="module")
def torchdata_run(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    return _profile(tmp_path_factory, "torchdata_train.py")


def _same_wait(run: Profiled) -> None:
    assert run.summary["fractions"]["data_wait"] == pytest.approx(run.own["data_wait_share"], abs=0.05)
    _split_adds_up(run)


def _split_adds_up(run: Profiled) -> None:
    """A sample's making split into fetch, waiting for a core, decode, transforms and the rest adds up to the
    time it took (off the CPU, waiting, on it), never more: no core wait inside decode or a transform as well;
    and the transform rows add up to the split's transform part."""
    loading = run.summary["loading"]
    split = loading["split"]
    making = loading["fetch_per_sample_s"] + (loading["core_wait_per_sample_s"] or 0.0) + loading["prep_per_sample_s"]
    assert min(v for v in split.values() if v is not None) >= 0
    assert sum(v for v in split.values() if v is not None) == pytest.approx(making, rel=1e-6)
    rows = sum(t["per_sample_s"] for t in run.summary["transforms"])
    # each row is per sample of the calls it timed, the split per sample of the loader's: within 1 % (a batch of
    # the last step can hold calls no counted sample did; 0.11 % apart once in a full suite run)
    assert rows == pytest.approx(split["transform_per_sample_s"], rel=1e-2)


def test_timm_prefetch_loader_one_batch_a_step_named_as_train_py_names_them(timm_run):
    own, s = timm_run.own, timm_run.summary
    assert own["steps"] == 2 * own["len_loader"]  # the script's own count: no extra batch, no lost one
    assert s["steps"] + s["warmup_steps"] == own["steps"]  # none holding 2 batches, the last step kept
    assert timm_run.steps["samples"].tolist() == [8] * own["steps"]
    names = {d["name"]: d for d in s["loaders"]}
    assert set(names) == {"loader_train", "loader_eval"}  # not loader.loader
    assert names["loader_train"]["batches"] == own["steps"] and names["loader_eval"]["role"] == "eval"
    # timm's transforms factory: its leaves named, the PIL decode apart from them
    assert {"RandomResizedCropAndInterpolation", "RandomHorizontalFlip(p=0.5)"} <= set(timm_run.transforms())
    assert s["loading"]["split"]["decode_per_sample_s"] > 0
    _same_wait(timm_run)


def test_hf_with_transform_opened_to_the_pipeline_it_applies(hf_run):
    own, s = hf_run.own, hf_run.summary
    assert s["steps"] + s["warmup_steps"] == own["steps"] == 2 * own["len_loader"]
    assert hf_run.train()["name"] == "train_dataloader" and hf_run.train()["samples"] == own["samples"]
    # the with_transform function applies a Compose of its module's: its leaves are timed, not one opaque function
    assert {"RandomResizedCrop", "RandomHorizontalFlip(p=0.5)", "ToTensor()", "Normalize"} == {
        name.split("(size")[0] for name in hf_run.transforms()}
    split = s["loading"]["split"]
    assert 0 < split["decode_per_sample_s"] and 0 < split["transform_per_sample_s"]
    assert "PIL.Image.convert" in s["decode"]["how"]  # the function's own PIL call, outside the pipeline
    assert "transforms" not in s.get("absences", {})
    assert "Arrow table reads" in s["absences"]["reads"]  # not timed apart, and said
    _same_wait(hf_run)


def test_webdataset_batched_counted_by_the_batch_and_map_tuple_transforms_named(wds_batched_run):
    own, s = wds_batched_run.own, wds_batched_run.summary
    assert s["steps"] + s["warmup_steps"] == own["steps"]
    assert wds_batched_run.steps["samples"].tolist() == [16] * own["steps"]  # not 1 a batch
    train = wds_batched_run.train()
    assert train["samples"] == own["samples"] and train["batch_size"] is None
    assert train["name"] == "loader"  # the script's, not a variable inside webdataset
    assert {"RandomResizedCrop", "ToTensor()", "Normalize"} <= set(wds_batched_run.transforms())
    assert "samples_per_batch" not in wds_batched_run.meta["absences"]
    _same_wait(wds_batched_run)


def test_torchdata_stateful_dataloader_profiled_with_its_workers(torchdata_run):
    own, s = torchdata_run.own, torchdata_run.summary
    assert s["steps"] + s["warmup_steps"] == own["steps"] == 2 * own["len_loader"]
    assert torchdata_run.train()["name"] == "train_loader" and torchdata_run.train()["samples"] == own["samples"]
    roles = torchdata_run.processes.groupby("role")["pid"].nunique().to_dict()
    assert roles.get("worker", 0) >= 1 and "child" not in roles  # the loader's own workers, recognised as such
    assert {"RandomResizedCrop", "Normalize"} <= set(torchdata_run.transforms())
    _same_wait(torchdata_run)
