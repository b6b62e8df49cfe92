"""The run folder: atomic writes, round trips, one-line errors for bad folders."""

import datetime as dt
import json
import os

import numpy as np
import pandas as pd
import pytest

from pipeprof.errors import UsageError
from pipeprof.run_folder import (
    LOADING_COLUMNS,
    STEP_COLUMNS,
    Run,
    load_run,
    new_run_folder,
    save_run,
    to_json,
)
from pipeprof.run_meta import DataSettings, LoaderSettings, RunSettings

STEPS = pd.DataFrame([{"step": 0, "epoch": 0, "warmup": True, "t_start_s": 0.0, "data_wait_s": 0.1, "h2d_s": 0.0,
                       "compute_s": 0.2, "step_s": 0.3, "host_wait_s": 0.1, "samples": 8, "loss": 2.3, "correct": 1},
                      {"step": 1, "epoch": 0, "warmup": False, "t_start_s": 0.3, "data_wait_s": 0.1, "h2d_s": 0.0,
                       "compute_s": 0.2, "step_s": 0.3, "host_wait_s": 0.1, "samples": 8, "loss": 2.1, "correct": 2}],
                     columns=STEP_COLUMNS)


def test_round_trip(tmp_path):
    run = Run(meta={"scenario": {"name": "rt"}, "x": [1, 2]}, steps=STEPS)
    folder = save_run(run, tmp_path / "r", {"summary.json": "{}\n"})
    loaded = load_run(folder)
    assert loaded.meta["x"] == [1, 2] and loaded.meta["format_version"] == 1
    assert loaded.name == "rt"
    pd.testing.assert_frame_equal(loaded.steps, STEPS, check_dtype=False)
    assert loaded.steps["warmup"].dtype == bool
    assert (folder / "summary.json").read_text() == "{}\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left behind


LOADING = pd.DataFrame([{"batch": 0, "step": 0, "worker": 1, "pid": 4242, "t_start_s": 0.05, "t_end_s": 0.09,
                         "fetch_s": 0.02, "prep_s": 0.015, "collate_s": 0.004, "samples": 8, "nbytes": 25088,
                         "fetch_max_s": 0.003}], columns=LOADING_COLUMNS)


def test_round_trip_with_loading(tmp_path):
    folder = save_run(Run(meta={}, steps=STEPS, loading=LOADING), tmp_path / "r")
    assert (folder / "loading.csv").read_text().splitlines()[0] == ",".join(LOADING_COLUMNS)
    pd.testing.assert_frame_equal(load_run(folder).loading, LOADING, check_dtype=False)


def test_a_run_without_loading_records_round_trips_empty(tmp_path):
    folder = save_run(Run(meta={}, steps=STEPS), tmp_path / "r")
    loading = load_run(folder).loading
    assert loading.empty and list(loading.columns) == LOADING_COLUMNS


def test_older_runs_without_loading_csv_still_load(tmp_path):
    folder = save_run(Run(meta={}, steps=STEPS, loading=LOADING), tmp_path / "r")
    (folder / "loading.csv").unlink()  # what a run folder from before worker-side timing looks like
    run = load_run(folder)
    assert run.loading.empty and list(run.loading.columns) == LOADING_COLUMNS
    from pipeprof.pipeline.derive import summarize

    assert summarize(run)["loading"] is None


def test_a_failed_save_leaves_nothing_that_looks_like_a_run(tmp_path):
    run = Run(meta={"bad": object()}, steps=STEPS)  # not JSON-serializable
    with pytest.raises(TypeError):
        save_run(run, tmp_path / "r")
    assert list(tmp_path.iterdir()) == []


def test_missing_and_corrupt_folders_give_one_line(tmp_path):
    with pytest.raises(UsageError, match="no such directory"):
        load_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="run.json is missing"):
        load_run(tmp_path / "empty")
    folder = save_run(Run(meta={}, steps=STEPS), tmp_path / "r")
    (folder / "run.json").write_text("{not json")
    with pytest.raises(UsageError, match="corrupt run metadata"):
        load_run(folder)
    (folder / "run.json").write_text("{}")
    (folder / "steps.csv").write_text("step,epoch\n0,0\n")
    with pytest.raises(UsageError, match="missing columns") as info:
        load_run(folder)
    assert "\n" not in str(info.value)
    (folder / "steps.csv").unlink()
    with pytest.raises(UsageError, match="steps.csv is missing"):
        load_run(folder)


def test_older_runs_without_optional_tables_still_load(tmp_path):
    folder = save_run(Run(meta={}, steps=STEPS), tmp_path / "r")
    (folder / "processes.csv").unlink()
    assert load_run(folder).processes.empty


def test_new_run_folder_is_unique_and_safe(tmp_path):
    now = dt.datetime(2026, 11, 29, 12, 0, 5, tzinfo=dt.timezone.utc)
    first = new_run_folder(tmp_path, "my scenario/x", now)
    assert first.name == "20261129T120005Z-my_scenario_x"
    first.mkdir()
    assert new_run_folder(tmp_path, "my scenario/x", now).name == "20261129T120005Z-my_scenario_x-2"


def test_json_has_no_nan_and_sorted_keys():
    text = to_json({"b": float("nan"), "a": [np.float32(1.5), float("inf")], "c": np.int64(3)})
    assert json.loads(text) == {"a": [1.5, None], "b": None, "c": 3}
    assert text.index('"a"') < text.index('"b"')


def test_settings_read_back_from_run_json_for_a_scenario():
    meta = {"device": "cuda:0", "scenario": {
        "name": "s", "description": "d", "data": {"storage": "memmap", "samples": 2000, "cache": "cold", "throttle": "hdd"},
        "loader": {"batch_size": 50, "num_workers": 2, "prefetch_factor": 4, "pin_memory": True}}}
    s = RunSettings.from_meta(meta)
    assert (s.name, s.description, s.kind, s.device) == ("s", "d", "scenario", "cuda:0")
    assert s.loader == LoaderSettings(batch_size=50, num_workers=2, prefetch_factor=4, pin_memory=True)
    assert s.data == DataSettings(storage="memmap", samples=2000, cache="cold", throttle="hdd")
    assert Run(meta=meta, steps=STEPS).settings == s and Run(meta=meta, steps=STEPS).name == "s"


def test_settings_of_a_script_and_of_older_or_odd_run_json():
    script = RunSettings.from_meta({"kind": "script", "scenario": {"name": "train", "loader": {"num_workers": 0}}})
    assert script.kind == "script" and script.data.storage is None  # a script's data is its own: no storage kind
    assert script.loader.num_workers == 0 and script.loader.prefetch_factor is None
    old = RunSettings.from_meta({"scenario": {"loader": {"num_workers": "2", "pin_memory": "yes"}}})
    assert old.name == "run" and old.device == "cpu" and old.data.storage == "ram"  # a scenario's default storage
    assert old.loader.num_workers is None and old.loader.pin_memory is False  # wrong types read as absent
    assert RunSettings.from_meta(None) == RunSettings.from_meta({"scenario": []}) == RunSettings(
        data=DataSettings(storage="ram"))
    assert RunSettings.from_meta({"scenario": {"loader": {"num_workers": True}}}).loader.num_workers is None


def test_an_output_the_user_named_that_is_a_pipe_is_written_into_never_replaced(tmp_path):
    """`export -o /dev/stdout`, `-o pipe`: the device or pipe is written into (a rename over it would put a
    regular file in its place: as root, in /dev); a run folder's own files are replaced, a link never followed."""
    import stat
    import threading

    from pipeprof.run_folder import write_output, write_text

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_text()), daemon=True)
    reader.start()
    write_output(pipe, "trace\n")
    reader.join(10)
    assert got == ["trace\n"] and stat.S_ISFIFO(os.stat(pipe).st_mode)
    outside, link = tmp_path / "outside.html", tmp_path / "report.html"
    outside.write_text("theirs")
    link.symlink_to(outside)
    write_text(link, "ours")
    assert not link.is_symlink() and link.read_text() == "ours" and outside.read_text() == "theirs"
