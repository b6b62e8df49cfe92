"""RunMeta: run.json read once into typed records; old, partial and wrong-typed run.json read as absent."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pipeprof.run_folder import STEP_COLUMNS, Run, load_run, save_run
from pipeprof.run_meta import Probe, RunMeta

RUNS = Path(__file__).parent / "fixtures" / "runs"


def test_golden_runs_read_typed() -> None:
    scenario = load_run(RUNS / "scenario-memmap-workers-cprofile").info
    assert (scenario.status, scenario.kind, scenario.is_script, scenario.device) == ("complete", None, False, "cpu")
    assert scenario.timing.method == "host-clock" and scenario.timing.parts is None
    assert scenario.environment.cpu_cores == 2 and not scenario.gpu.available
    assert scenario.gpu.reason == "no GPU in use: training device is cpu"
    assert scenario.compute_ceiling is not None and scenario.compute_ceiling.samples_per_s == pytest.approx(105599.888,
                                                                                                          rel=1e-6)
    assert set(scenario.code_profile) == {"cprofile"} and scenario.scenario_file == "tinyw.toml"
    failed = load_run(RUNS / "script-failed").info
    assert (failed.status, failed.is_script, failed.step_source) == ("failed", True, "optimizer")
    assert failed.error == "the script raised ValueError: sample 800 is corrupt"
    assert [d["dataset"] for d in failed.loaders] == ["Corrupt"] and failed.script is not None
    assert failed.compute_ceiling is None and failed.loading_split == "thread-cpu-time"


@pytest.mark.parametrize("meta", [{}, {"status": 3, "timing": "host-clock", "gpu": [], "environment": None,
                                       "rank": "0", "job": 5, "notes": "a note", "loaders": {"0": {}},
                                       "what_ifs": [1, 2], "compute_ceiling": 7, "script": "x"}])
def test_missing_or_wrong_typed_keys_read_as_absent(meta: dict) -> None:
    info = RunMeta.parse(meta)
    assert info.status is None and info.timing.method is None and not info.gpu.available
    assert info.environment.cpu_cores is None and info.rank is None and info.job is None
    assert info.notes == () and info.loaders == () and info.what_ifs.single == {}
    assert info.compute_ceiling is None and info.script is None and info.what_ifs.family("train_workers") == {}


def test_what_ifs_probes_typed() -> None:
    info = RunMeta.parse({"what_ifs": {
        "device_loop": {"samples_per_s": 900.0, "samples_per_s_per_window": [800.0, "x", 1000.0], "threads": 4},
        "ram_loader": {"absent": "the data is already in RAM"},
        "train_workers": {"2": {"samples_per_s": 500, "num_workers": 2, "startup_s": 0.4},
                          "many": {"samples_per_s": 1.0}, "4": {"absent": "not started"}},
        "budget": {"total_budget_s": 3.0}, "took_s": 2.5, "workers_wanted": 3}})
    what_ifs = info.what_ifs
    loop = what_ifs.probe("device_loop")
    assert loop is not None and loop.rate == 900.0 and loop.samples_per_s_per_window == (800.0, 1000.0)
    assert loop.threads == 4.0
    ram = what_ifs.probe("ram_loader")
    assert ram is not None and ram.rate is None and ram.absent == "the data is already in RAM"
    assert set(what_ifs.family("train_workers")) == {2, 4}  # "many" is no number of workers
    two = what_ifs.family("train_workers")[2]
    assert (two.rate, two.num_workers, two.startup_s) == (500.0, 2, 0.4)
    assert what_ifs.family("train_workers")[4].rate is None
    assert (what_ifs.budget, what_ifs.took_s, what_ifs.workers_wanted) == ({"total_budget_s": 3.0}, 2.5, 3)
    assert what_ifs.probe("loader_alone") is None and Probe.parse({"samples_per_s": True}).rate is None


def test_info_follows_changes_to_meta() -> None:
    run = Run(meta={"status": "complete", "notes": []}, steps=pd.DataFrame(columns=STEP_COLUMNS))
    first = run.info
    assert run.info is first  # parsed once while meta is unchanged
    run.meta["notes"].append("added while the run was assembled")
    run.meta["status"] = "failed"
    assert run.info.notes == ("added while the run was assembled",) and run.info.status == "failed"


def test_run_json_written_back_unchanged(tmp_path: Path) -> None:
    folder = RUNS / "script-plain-loop"
    run = load_run(folder)
    assert run.info.status == "complete"  # reading it typed changes nothing written
    save_run(run, tmp_path / "again")
    saved = json.loads((tmp_path / "again" / "run.json").read_text())
    # what was read is written back; the save adds each table's rows as written (run_check reads them back)
    assert saved.pop("rows") == {"steps": 64, "samples": len(run.samples), "processes": len(run.processes),
                                 "loading": 64, "functions": 0}
    assert saved == json.loads((folder / "run.json").read_text())
    save_run(load_run(tmp_path / "again"), tmp_path / "twice")
    assert (tmp_path / "twice" / "run.json").read_text() == (tmp_path / "again" / "run.json").read_text()


def test_info_holds_no_object_of_meta() -> None:
    run = Run(meta={"absences": {"gpu": "no GPU"}, "scenario": {"name": "a"}}, steps=pd.DataFrame(columns=STEP_COLUMNS))
    info = run.info
    assert info.absences == {"gpu": "no GPU"} and info.absences is not run.meta["absences"]
    assert info.scenario is not None and info.scenario is not run.meta["scenario"]


def test_an_older_runs_timing_names_every_part_with_its_method() -> None:
    older = RunMeta.parse({"timing": {"method": "host-clock"}}).timing.with_parts()
    assert older.to_json() == {"method": "host-clock", "reason": None,
                               "parts": {"data_wait": "host-clock", "h2d": "host-clock", "compute": "host-clock"}}
    mixed = RunMeta.parse({"timing": {"method": "mixed", "parts": {"h2d": "host-clock"}, "reason": "r"}}).timing
    assert mixed.with_parts() is mixed and mixed.to_json()["parts"] == {"h2d": "host-clock"}
