"""Whole-program runs of training loops that no torch DataLoader feeds on the training thread: a plain generator
(``generator_loop.py``), a producer thread and a ``queue.Queue`` (``queue_loop.py``), a DataLoader iterated on a
prefetch thread (``background_loader.py``), fastai's own DataLoader and ``Learner.fit`` (``fastai_learner.py``)
and an SPDL pipeline (``spdl_pipeline.py``). A step is the training loop's own (its optimizer step or backward
pass), whatever feeds it: each fixture is profiled once (module-scoped) and its steps, data-wait share and
samples/s are checked against the script's own count and its own ``perf_counter`` clock."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_data_library_fixtures import Profiled, _profile

pytestmark = pytest.mark.integration
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def generator_run(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    return _profile(tmp_path_factory, "generator_loop.py")


@pytest.fixture(scope="module")
def queue_run(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    return _profile(tmp_path_factory, "queue_loop.py")


@pytest.fixture(scope="module")
def background_run(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    return _profile(tmp_path_factory, "background_loader.py")


@pytest.fixture(scope="module")
def prefetch_run(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    return _profile(tmp_path_factory, "prefetch_wrapper.py")


@pytest.fixture(scope="module")
def fastai_run(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    pytest.importorskip("fastai", reason="fastai could not be installed here (44 packages, ~110 MB: scipy, "
                                         "scikit-learn, spaCy; not in the test extra): pip install fastai")
    return _profile(tmp_path_factory, "fastai_learner.py")


@pytest.fixture(scope="module")
def spdl_run(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    pytest.importorskip("spdl.pipeline", reason="spdl could not be installed here (the test extra has it): "
                                                "pip install spdl")
    return _profile(tmp_path_factory, "spdl_pipeline.py")


def _same_as_the_loops_own_clock(run: Profiled) -> None:
    """Every optimizer step counted (warm-up included), each with the samples of its batch, and the wait share
    and samples/s of the counted steps as the script's own clock has them."""
    own, s = run.own, run.summary
    assert s["steps"] + s["warmup_steps"] == own["steps"]
    assert run.steps["samples"].sum() == own["samples"]
    assert s["fractions"]["data_wait"] == pytest.approx(own["data_wait_share"], abs=0.05)
    assert s["samples_per_s"] == pytest.approx(own["samples_per_s"], rel=0.10)


def test_generator_fed_loop_steps_and_wait_from_the_loop_itself(generator_run):
    _same_as_the_loops_own_clock(generator_run)


def test_queue_fed_loop_waits_only_in_its_q_get(queue_run):
    _same_as_the_loops_own_clock(queue_run)


def test_dataloader_on_a_prefetch_thread_is_a_background_loader_not_the_loops_wait(background_run):
    """The DataLoader iterated on the prefetch thread is listed, as a background loader, with its own next()
    time; the loop's wait is its time blocked in q.get(), much less than that."""
    own, meta = background_run.own, background_run.meta
    assert own["loader_next_s"] > 1.5 * own["loop_wait_s"]  # the fixture's premise, by its own clock
    _same_as_the_loops_own_clock(background_run)
    (loader,) = [d for d in meta["loaders"] if d["role"] not in ("train", "eval")]  # "train": the loop's own feed
    assert loader["role"] == "background" and loader["name"] == "train_loader"  # the script's name for it
    assert loader["number"] in {d["number"] for d in background_run.summary["loaders"]}
    loop_wait_s = background_run.steps["data_wait_s"].sum()
    assert loop_wait_s < loader["busy_s"] <= 1.1 * own["loader_next_s"]


def test_fastai_learner_fit_with_fastais_own_dataloader(fastai_run):
    _same_as_the_loops_own_clock(fastai_run)


def test_spdl_pipeline_fed_loop(spdl_run):
    _same_as_the_loops_own_clock(spdl_run)


def test_a_one_ahead_wrapper_of_the_users_own_keeps_every_step_and_is_named_as_the_loop_holds_it(prefetch_run):
    """A prefetcher pipeprof knows by no name: the pass's last step waits only for the pass's end (its batch was
    taken in the step before), and still counts; the DataLoader is named as the loop holds the wrapper."""
    own = prefetch_run.own
    assert own["steps"] == 3 * own["len_loader"]
    s = prefetch_run.summary
    assert s["steps"] + s["warmup_steps"] == own["steps"]
    assert s["fractions"]["data_wait"] == pytest.approx(own["data_wait_share"], abs=0.05)
    assert s["samples_per_s"] == pytest.approx(own["samples_per_s"], rel=0.10)
    assert prefetch_run.train()["name"] == "loader_train"


def test_steps_ends_an_ignite_run_as_its_own_terminate_does_never_as_a_crash(tmp_path):
    """ignite's Engine catches whatever its run raises and runs its EXCEPTION_RAISED handlers (a save-on-crash
    checkpoint): --steps must end the run as engine.terminate() does, and the script goes on from there."""
    pytest.importorskip("ignite", reason="pytorch-ignite could not be installed here (the test extra has it)")
    out = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--quiet", "--steps", "12", "--no-what-ifs",
                           "--out", str(out), "--", sys.executable, str(FIXTURES / "ignite_trainer.py")],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "terminating due to exception" not in proc.stderr
    own = json.loads(proc.stdout.strip().splitlines()[-1])
    assert own == {"steps": 12, "epochs": 0, "crash_handler": False, "terminated": True, "completed": True}
    (folder,) = [p for p in out.iterdir() if (p / "run.json").is_file()]
    meta = json.loads((folder / "run.json").read_text())
    assert meta["script"]["ended"] == {"how": "stopped", "detail": 12}
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["steps"] + summary["warmup_steps"] == 12
