"""The Lightning and Hugging Face callbacks: the same run as `pipeprof profile` of the same script, from inside.

Unit tests of the shared part (the split, the one-time finish) on a fake clock; then one small real run of each
fixture under `pipeprof profile` and one of its copy that adds the callback (module-scoped, shared by the tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pipeprof.integrations.session import FitProfile, UnfinishedFit, step_split
from pipeprof.pipeline.script_verify import report_lines

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def test_the_split_leaves_out_what_was_not_measured():
    split = step_split({"fractions": {"data_wait": 0.25, "h2d": None, "compute": 0.7, "other": float("nan")},
                        "samples_per_s": 1200.0, "steps": 40})
    assert split == {"pipeprof/data_wait_share": 0.25, "pipeprof/compute_share": 0.7,
                     "pipeprof/samples_per_s": 1200.0, "pipeprof/steps": 40.0}
    assert step_split({}) == {}


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_fit_is_finished_once_and_an_unfinished_one_is_saved_as_failed(tmp_path):
    import torch

    clock = Clock()
    fit = FitProfile("unit", tmp_path, {"quiet": True, "clock": clock, "warmup_steps": 0})
    fit.start()
    fit.start()  # a second begin hook of the same fit changes nothing
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(12, 2))
    for (x,) in torch.utils.data.DataLoader(data, batch_size=4):  # 3 steps
        clock.t += 0.01
        model(x).sum().backward()
        optimizer.step()
    fit._at_exit()  # the process ends before the end hook
    assert not fit.active and fit.folder is not None and fit.folder.parent == tmp_path
    run = json.loads((fit.folder / "run.json").read_text())
    assert run["status"] == "failed" and UnfinishedFit.__name__ in run["error"]
    assert len(pd.read_csv(fit.folder / "steps.csv")) >= 2  # what was measured is kept (the last step may be open)
    assert fit.finish() is False  # already saved: nothing more


# ---- one real run of each fixture, both ways ------------------------------------------------------------

def _profiled(tmp: Path, script: str, *args: str) -> tuple[Path, dict]:
    out = tmp / "profile"
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--out", str(out), "--quiet", "--",
                           "python", str(FIXTURES / script), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    own = json.loads(next(line for line in reversed(proc.stdout.splitlines()) if line.startswith("{")))
    return Path(report_lines(proc.stdout, proc.stderr)[-1]).parent, own


def _called_back(tmp: Path, script: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, str(FIXTURES / script), *args, "--out", str(tmp / "callback")],
                          cwd=tmp, capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(next(line for line in reversed(proc.stdout.splitlines()) if line.startswith("{")))


def _both(tmp: Path, script: str, *args: str) -> tuple[dict, dict, dict, dict]:
    """The summaries of `pipeprof profile` of ``script`` and of its copy with the callback, and each script's own
    output (its own clock's steps and data wait share)."""
    own = _called_back(tmp, script.replace(".py", "_callback.py"), *args)
    profiled, profiled_own = _profiled(tmp, script, *args)
    summaries = [json.loads((Path(f) / "summary.json").read_text()) for f in (profiled, own["folder"])]
    return summaries[0], summaries[1], profiled_own, own


def _within_own_clock(fractions: dict, own_share: float) -> None:
    """The script's own clock times from one batch's end hook to the next one's start hook: the loader's fetch
    (pipeprof's data wait) and the framework's own work in between (its loop's bookkeeping, its loggers: pipeprof's
    "other"). So its share lies between pipeprof's data wait and data wait + other, 3 points either way; how much of
    "other" falls there is the framework's and the machine's (5 points of a step on a slow, shared 2-core machine)."""
    low, other = fractions["data_wait"], fractions["other"] or 0.0
    assert low - 0.03 <= own_share <= low + other + 0.03, (own_share, fractions)


def _same_wait(profiled: dict, called_back: dict, profiled_own: dict, own: dict) -> None:
    """Data wait shares: the callback's and `pipeprof profile`'s within 3 points of each other beyond what the
    script's own clock saw change between the two runs (a machine's run-to-run noise is no fault of either way
    of profiling); each held to its script's own clock in the same run (``_within_own_clock``)."""
    cb, pp = called_back["fractions"]["data_wait"], profiled["fractions"]["data_wait"]
    _within_own_clock(called_back["fractions"], own["data_wait_share"])
    _within_own_clock(profiled["fractions"], profiled_own["data_wait_share"])
    assert abs(cb - pp) <= 0.03 + abs(own["data_wait_share"] - profiled_own["data_wait_share"])


@pytest.fixture(scope="module")
def lightning_runs(tmp_path_factory):
    pytest.importorskip("lightning")
    return _both(tmp_path_factory.mktemp("lightning"), "lightning_mlp.py", "--batches", "12", "--getitem-ms", "1")


@pytest.fixture(scope="module")
def hf_runs(tmp_path_factory):
    pytest.importorskip("transformers")
    return _both(tmp_path_factory.mktemp("hf"), "hf_trainer.py", "--max-steps", "12", "--getitem-ms", "1")


@pytest.mark.integration
@pytest.mark.serial  # a data-wait share held within 3 points of the script's own timer: not beside other tests
def test_lightning_callback_matches_pipeprof_profile(lightning_runs):
    profiled, called_back, profiled_own, own = lightning_runs
    assert called_back["status"] == "complete"
    assert called_back["steps"] == profiled["steps"] == own["steps"] - 5  # 2 epochs of 12, 5 warm-up
    _same_wait(profiled, called_back, profiled_own, own)
    assert {d["framework"] for d in called_back["loaders"]} == {"lightning"}
    (logged,) = own["logged"]  # the trainer's own logger (CSVLogger) got the split once, at the end of fit
    assert float(logged["pipeprof/data_wait_share"]) == pytest.approx(called_back["fractions"]["data_wait"])
    assert float(logged["pipeprof/steps"]) == called_back["steps"]


@pytest.mark.integration
@pytest.mark.serial  # a data-wait share held within 3 points of the script's own timer: not beside other tests
def test_hf_callback_matches_pipeprof_profile(hf_runs):
    profiled, called_back, profiled_own, own = hf_runs
    assert called_back["status"] == "complete"
    assert called_back["steps"] == profiled["steps"] == own["steps"] - 5
    _same_wait(profiled, called_back, profiled_own, own)
    (train,) = called_back["loaders"]
    # The Trainer builds its loader before on_train_begin: named after its dataset, not "Trainer train loader"
    assert (train["framework"], train["batches"]) == ("transformers", 12)
    for logs in (own["recorded"], own["history"]):  # a later callback's on_log, and trainer.state.log_history
        assert logs["pipeprof/data_wait_share"] == pytest.approx(called_back["fractions"]["data_wait"])
        assert logs["pipeprof/samples_per_s"] == pytest.approx(called_back["samples_per_s"])
        assert "train_runtime" in logs


def test_hf_callback_adds_the_split_to_the_final_log_for_the_callbacks_after_it(tmp_path):
    pytest.importorskip("transformers")
    import torch
    from transformers.trainer_callback import CallbackHandler, TrainerCallback, TrainerControl, TrainerState

    from pipeprof.integrations.hf import PipeprofCallback

    class Reporter(TrainerCallback):  # a report_to integration: the Trainer puts those before the user's callbacks
        def __init__(self) -> None:
            self.logs: list[dict] = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.append(dict(logs or {}))

    clock = Clock()
    before, after = Reporter(), Reporter()
    profiler = PipeprofCallback(name="hf-unit", out=tmp_path, quiet=True, clock=clock, warmup_steps=0)
    handler = CallbackHandler([before, profiler, after], None, None, None, None)
    state, control = TrainerState(), TrainerControl()
    handler.on_train_begin(None, state, control)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for (x,) in torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 2)), batch_size=4):
        clock.t += 0.01
        model(x).sum().backward()
        optimizer.step()
        handler.on_log(None, state, control, {"loss": 1.0})  # a periodic log: training goes on
    assert profiler.folder is None and "pipeprof/steps" not in after.logs[-1]
    final = {"train_runtime": 1.0}
    state.log_history.append(dict(final))
    handler.on_log(None, state, control, final)
    handler.on_train_end(None, state, control)  # after the final log: nothing more
    assert profiler.folder is not None and profiler.folder.parent == tmp_path
    assert profiler.split["pipeprof/steps"] >= 3 and "pipeprof/data_wait_share" in profiler.split
    assert after.logs[-1] == {"train_runtime": 1.0, **profiler.split}
    assert state.log_history[-1] == {"train_runtime": 1.0, **profiler.split}
    assert before.logs[-1] == {"train_runtime": 1.0}  # called before it: hence "put it first" in the docs
