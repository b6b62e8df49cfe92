"""The whole program, with small real runs (a few seconds each) and its error paths."""

import atexit
import gc
import json
import signal
import subprocess
import sys

import pandas as pd
import pytest

from pipeprof.cli import main as main_module
from pipeprof.cli.main import main

TINY = """
name = "tiny"
description = "a few seconds of training <b>for tests</b>"
[data]
storage = "{storage}"
samples = 3000
[loader]
batch_size = 50
num_workers = {workers}
[model]
hidden = [64]
lr = 0.1
[train]
epochs = 1
warmup_steps = 5
device = "cpu"
[profile]
sample_hz = 50
"""

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


NO_PROBES = ("--set", "profile.what_ifs=false")  # for the tests whose subject is not the predictions: ~3 s a run


def run_tiny(tmp_path, cache, storage="ram", workers=0, extra=()):
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY.format(storage=storage, workers=workers))
    out = tmp_path / "reports"
    status = main(["run", str(scenario), "--out", str(out), "--cache", str(cache), "--quiet", *extra])
    folders = [p for p in out.iterdir() if not p.name.startswith(".") and p.name != "index.html"]
    assert len(folders) == 1
    return status, folders[0]


def test_run_writes_a_complete_consistent_run_folder(tmp_path, cache, capsys):
    status, folder = run_tiny(tmp_path, cache)
    assert status == 0
    assert capsys.readouterr().out.strip().endswith("report.html")
    for name in ("run.json", "steps.csv", "samples.csv", "processes.csv", "summary.json", "report.html"):
        assert (folder / name).is_file(), name
    meta = json.loads((folder / "run.json").read_text())
    assert meta["status"] == "complete" and meta["device"] == "cpu"
    assert meta["timing"]["method"] == "host-clock"
    assert meta["environment"]["cpu_cores"] >= 1 and meta["environment"]["torch"]
    assert meta["gpu"]["available"] is False and meta["gpu"]["reason"]
    assert meta["scenario"]["loader"]["batch_size"] == 50

    steps = pd.read_csv(folder / "steps.csv")
    summary = json.loads((folder / "summary.json").read_text())
    counted = steps[~steps.warmup]
    assert len(steps) == 60 and summary["steps"] == 55 and summary["warmup_steps"] == 5
    assert summary["samples"] == counted.samples.sum() == 55 * 50
    assert summary["samples_per_s"] == pytest.approx(counted.samples.sum() / counted.step_s.sum())
    assert sum(summary["fractions"].values()) == pytest.approx(1.0, abs=0.01)
    assert summary["bottleneck"] in ("input", "compute", "balanced")
    # the phases fit inside each step, measured on one clock
    assert (steps.data_wait_s + steps.h2d_s + steps.compute_s <= steps.step_s + 1e-9).all()
    # learnable: well above chance (10%) within one epoch
    assert summary["accuracy"] > 0.5
    assert summary["final_loss"] < steps.loss.iloc[0]

    samples = pd.read_csv(folder / "samples.csv")
    assert len(samples) >= 3 and samples.t_s.is_monotonic_increasing
    assert (samples.main_rss_bytes.dropna() > 0).all()
    assert summary["memory"]["peak_rss_bytes"] > 0
    assert summary["memory"]["uss_bytes"]["main"] > 0  # the snapshot at the end
    assert summary["gpu"] is None and "gpu" in summary["absences"]
    html = (folder / "report.html").read_text()
    assert "<svg" in html and "&lt;b&gt;for tests&lt;/b&gt;" in html


def test_workers_are_sampled_separately(tmp_path, cache):
    status, folder = run_tiny(tmp_path, cache, storage="memmap", workers=2,
                              extra=["--set", "loader.persistent_workers=true", "--set", "profile.tree_refresh_s=0.1",
                                     *NO_PROBES])
    assert status == 0
    processes = pd.read_csv(folder / "processes.csv")
    assert set(processes.role) == {"main", "worker"}
    assert processes[processes.role == "worker"].pid.nunique() == 2
    samples = pd.read_csv(folder / "samples.csv")
    assert samples.workers.max() == 2
    assert json.loads((folder / "run.json").read_text())["scenario"]["data"]["storage"] == "memmap"


def test_report_rerenders_from_raw_records(tmp_path, cache, capsys):
    _, folder = run_tiny(tmp_path, cache, extra=NO_PROBES)
    summary_before = json.loads((folder / "summary.json").read_text())
    (folder / "report.html").unlink()
    (folder / "summary.json").unlink()
    assert main(["report", str(folder), "--quiet"]) == 0
    assert (folder / "report.html").is_file()
    assert json.loads((folder / "summary.json").read_text()) == summary_before


def test_list_shows_scenarios(tmp_path, capsys):
    (tmp_path / "a.toml").write_text(TINY.format(storage="ram", workers=0))
    (tmp_path / "b.toml").write_text("name = 1")
    assert main(["list", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "invalid" in out


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pipeprof", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


@pytest.mark.parametrize("args,needle", [
    (["run", "missing.toml"], "missing.toml: scenario file not found"),
    (["run", "scenarios/quick.toml", "--set", "loader.num_workers=-1"], "loader.num_workers = -1"),
    (["run", "scenarios/quick.toml", "--set", "train.device=cuda:7"], "train.device"),
    (["report", "no/such/run"], "not a run folder"),
    (["run"], "required"),
    (["frobnicate"], "invalid choice"),
    ([], "a command is needed"),
])
def test_bad_input_is_one_line_and_exit_status_2(args, needle):
    from pathlib import Path

    result = cli(*args, cwd=Path(__file__).parent.parent)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in lines[0] and "Traceback" not in result.stderr


REFUSED_BEFORE_TORCH = """
import json, sys
from pipeprof.cli.main import main
out = []
for command in ("run", "sweep", "tune", "diagnose"):
    for args in (["missing.toml"], ["scenarios/quick.toml", "--set", "loader.num_workers=-1"]):
        out.append([command, main([command, *args]), "torch" in sys.modules])
print(json.dumps(out))
"""


def test_bad_input_is_refused_before_torch_loads():
    """A missing scenario or a bad --set exits 2 without importing torch (seconds on a busy machine)."""
    from pathlib import Path

    result = subprocess.run([sys.executable, "-c", REFUSED_BEFORE_TORCH], capture_output=True, text=True,
                            cwd=Path(__file__).parent.parent, timeout=120)
    seen = json.loads(result.stdout)
    assert len(seen) == 8 and all(status == 2 and not torch for _, status, torch in seen), seen


@pytest.mark.parametrize("storage", ["device", "files", "images"])
def test_every_storage_kind_trains_end_to_end(tmp_path, cache, storage):
    status, folder = run_tiny(tmp_path, cache, storage=storage, extra=NO_PROBES)
    assert status == 0
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["steps"] == 55 and summary["accuracy"] > 0.4
    if storage == "device":
        assert summary["loading"] is None  # no DataLoader, nothing loaded per sample
    else:
        loading = pd.read_csv(folder / "loading.csv")
        assert len(loading) == 60 and (loading.worker == -1).all()
        parts = summary["loading"]
        # A batch's wait for a core is taken out of its fetch first, then its prep (measure.loading): on a busy
        # machine a fetch of a few µs (images' bytes from RAM) can be all waiting, read as 0 beside the wait
        waited = (parts["core_wait_per_sample_s"] or 0) > 0  # None: not read, and fetch and prep keep it all
        assert (parts["fetch_per_sample_s"] > 0 or waited) and (parts["prep_per_sample_s"] > 0 or waited), parts


def test_cold_cache_reads_the_data_set_from_disk_every_epoch(tmp_path, cache):
    status, folder = run_tiny(tmp_path, cache, storage="memmap",
                              extra=["--set", "data.cache=cold", "--set", "train.epochs=2", *NO_PROBES])
    assert status == 0
    summary = json.loads((folder / "summary.json").read_text())
    check = summary["cache"]
    assert check["cache"] == "cold"
    if not all(d["dropped"] for d in check["drops"]):
        pytest.skip(f"the kernel kept the pages: {check['drops'][0]['reason']}")
    assert check["verified"] is True, check["reason"]
    assert len(check["epochs"]) == 2
    for epoch in check["epochs"]:
        assert epoch["read_fraction"] >= 0.8


def test_only_a_process_of_its_own_skips_the_final_collections(monkeypatch, capsys):
    """``pipeprof`` / ``python -m pipeprof`` (argv None) freeze the collector at exit; ``main([...])`` in a
    caller's process never does (the caller's objects live on)."""
    registered = []
    monkeypatch.setattr(main_module.atexit, "register", registered.append)
    assert main(["list", "scenarios"]) == 0
    assert registered == []
    monkeypatch.setattr(sys, "argv", ["pipeprof", "list", "scenarios"])
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        assert main() == 0
    finally:  # a process of its own ignores signals once its status is decided: this one is pytest's
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    assert registered == [gc.freeze]
    assert main_module.atexit is atexit
