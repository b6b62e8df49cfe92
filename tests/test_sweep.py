"""pipeprof sweep: grid parsing and checking, the sweep analysis, and small real sweeps end to end."""

import csv
import json

import pytest
from tiny import tiny_file

from pipeprof import track_record
from pipeprof.analysis.sweep import SweepPoint, best_point, interval, near_best, point_record
from pipeprof.cli.main import main
from pipeprof.errors import UsageError
from pipeprof.grid import axes_from_table, build_axes, parse_axis, plan
from pipeprof.pipeline import sweep
from pipeprof.pipeline.progress import OK, Progress
from pipeprof.render.sweep import series
from pipeprof.scenario import load_scenario


@pytest.fixture
def scenario_file(tmp_path):
    return tiny_file(tmp_path, "tiny-sweep", "a tiny <script>alert(1)</script> sweep")


# ---- the grid ------------------------------------------------------------------------------


@pytest.mark.parametrize("text, key, values", [
    ("loader.num_workers=0,1,2", "loader.num_workers", [0, 1, 2]),
    ("data.storage=ram,memmap", "data.storage", ["ram", "memmap"]),
    ("model.hidden=[256,128],[64]", "model.hidden", [[256, 128], [64]]),
    ("loader.pin_memory=true,false", "loader.pin_memory", [True, False]),
    ("data.throttle='hdd',{latency_ms=1,bandwidth_mb_s=50}", "data.throttle",
     ["hdd", {"latency_ms": 1, "bandwidth_mb_s": 50}]),
])
def test_grid_values_are_read_like_set(text, key, values):
    assert parse_axis(text) == (key, values)


@pytest.mark.parametrize("cli, match", [
    (["loader.num_wrkers=0,1"], "unknown key loader.num_wrkers (did you mean loader.num_workers?)"),
    (["loader.num_workers=0,two"], "loader.num_workers = 'two' is not allowed: expected an integer >= 0"),
    (["loader.num_workers=1,1"], "value 1 is repeated"),
    (["loader.num_workers="], "no values"),
    (["num_workers"], "expected section.key=value,value"),
    (["bogus.key=1"], "not a scenario key"),
    ([], "empty grid"),
])
def test_a_bad_grid_is_refused_before_anything_runs(cli, match):
    with pytest.raises(UsageError, match=match.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        build_axes([], [parse_axis(c) for c in cli], "tiny.toml")


@pytest.mark.parametrize("key", ["loader.num_workers", "train.threads"])
def test_a_grid_value_past_what_this_machine_starts_is_refused_before_anything_runs(key):
    from pipeprof import machine_limits

    beyond = machine_limits.current().most_workers() + 1  # whatever the machine: one more than it can start
    with pytest.raises(UsageError, match=f"{key} = {beyond} is not allowed: expected 0 to {beyond - 1} on this "
                                         "machine"):
        build_axes([], [parse_axis(f"{key}=0,{beyond}")], "tiny.toml")


def test_the_sweep_table_gives_axes_and_the_command_line_replaces_one():
    table = {"loader": {"num_workers": [0, 1]}, "data.storage": ["ram", "memmap"]}
    axes = build_axes(axes_from_table(table, "f.toml"), [parse_axis("loader.num_workers=2,4")], "f.toml")
    assert axes == [("loader.num_workers", [2, 4]), ("data.storage", ["ram", "memmap"])]
    with pytest.raises(UsageError, match="expected a list of values"):
        axes_from_table({"loader.num_workers": 2}, "f.toml")


def test_combinations_invalid_together_are_skipped_with_the_reason(scenario_file):
    base = load_scenario(scenario_file)
    axes = build_axes([], [parse_axis("loader.num_workers=0,2"), parse_axis("loader.prefetch_factor=4")], "t")
    points = plan(base, axes, "t", {"train.steps": 20})
    assert [p.label for p in points] == ["num_workers=0 prefetch_factor=4", "num_workers=2 prefetch_factor=4"]
    assert points[0].variant is None and "needs worker processes" in points[0].skipped
    assert points[1].variant.scenario.loader.prefetch_factor == 4
    assert points[1].variant.scenario.train.steps == 20


# ---- the analysis --------------------------------------------------------------------------


def summary(rate, low=None, high=None, wait=0.1, verdict="compute"):
    return {"samples_per_s": rate, "throughput": {"ci95_low": low, "ci95_high": high, "windows": 5},
            "fractions": {"data_wait": wait, "h2d": 0.0, "compute": 1 - wait, "other": 0.0},
            "verdict": {"class": verdict}, "step_time_s": {"median": 0.01}}


def test_the_best_point_and_those_within_its_noise():
    points = [point_record(0, "a", {"loader.num_workers": 0}, "complete", summary=summary(100, 95, 105)),
              point_record(1, "b", {"loader.num_workers": 1}, "complete", summary=summary(200, 190, 210)),
              point_record(2, "c", {"loader.num_workers": 2}, "complete", summary=summary(195, 180, 191)),
              point_record(3, "d", {"loader.num_workers": 4}, "failed", reason="boom")]
    best = best_point(points)
    assert best["index"] == 1
    assert near_best(points, best) == [1, 2]
    assert points[3]["samples_per_s"] is None and points[3]["report"] is None
    read = [SweepPoint.from_json(p) for p in points]  # sweep.json's points, read back
    assert series(read, "loader.num_workers", None) == {"": [(0, 100, 95, 105), (1, 200, 190, 210),
                                                            (2, 195, 180, 191)]}
    assert best_point([points[3]]) is None


def test_the_interval_falls_back_to_the_steady_windows():
    s = {"samples_per_s": 10.0, "steady": {"window_samples_per_s": [9.0, 11.0, 10.0]}}
    assert interval(s) == (9.0, 11.0, "min-max over the last 3 steady-state windows")
    assert interval({"samples_per_s": 10.0}) == (None, None, None)


# ---- end to end ----------------------------------------------------------------------------


@pytest.mark.integration
def test_a_small_sweep_runs_every_point_in_its_own_process_and_writes_the_comparison(tmp_path, scenario_file,
                                                                                      capsys):
    out, cache = tmp_path / "reports", tmp_path / "cache"
    status = main(["sweep", str(scenario_file), "--grid", "loader.num_workers=0,1", "--grid",
                   "loader.persistent_workers=true", "--max-seconds", "2", "--out", str(out), "--cache",
                   str(cache), "--quiet"])
    assert status == 0
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    assert folder.name.endswith("-sweep-tiny-sweep")
    doc = json.loads((folder / "sweep.json").read_text())
    assert doc["kind"] == "sweep" and doc["status"] == "complete"
    by_label = {p["label"]: p for p in doc["points"]}
    skipped = by_label["num_workers=0 persistent_workers=true"]
    assert skipped["status"] == "skipped" and "needs worker processes" in skipped["reason"]
    done = by_label["num_workers=1 persistent_workers=true"]
    assert done["status"] == "complete" and done["samples_per_s"] > 0
    assert doc["best"]["settings"] == {"loader.num_workers": 1, "loader.persistent_workers": True}
    run = json.loads((folder / done["folder"] / "run.json").read_text())
    assert run["scenario"]["loader"]["num_workers"] == 1
    assert run["steady"]["max_seconds"] == 2 and run["steady"]["stopped"] in ("stable", "budget")
    assert (folder / done["report"]).exists()
    assert len(track_record.read()) == len(doc["prediction_check"]["rows"])  # each check kept on this machine
    rows = list(csv.DictReader((folder / "points.csv").open()))
    assert [r["status"] for r in rows] == ["skipped", "complete"]
    html = (folder / "sweep.html").read_text()
    assert 'id="best"' in html and done["report"] in html and "<script>alert(1)" not in html
    assert capsys.readouterr().out.strip() == f"sweep: {folder / 'sweep.html'}"


@pytest.mark.integration
def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path, scenario_file):
    out, cache = tmp_path / "reports", tmp_path / "cache"
    # cuda:7 passes the schema but the child refuses it at run time (no such device here): the point is
    # recorded with the child's one-line error and the next point still runs.
    status = main(["sweep", str(scenario_file), "--grid", "train.device=cpu,cuda:7", "--fixed-steps",
                   "--set", "profile.what_ifs=false",  # the failure is the subject: no probes after the points
                   "--out", str(out), "--cache", str(cache), "--quiet"])
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    doc = json.loads((folder / "sweep.json").read_text())
    by_label = {p["label"]: p for p in doc["points"]}
    assert by_label["device=cpu"]["status"] == "complete"
    bad = by_label["device=cuda:7"]
    assert bad["status"] == "invalid" and "cuda:7" in bad["reason"]
    assert status == 0 and doc["best"]["settings"] == {"train.device": "cpu"}


def test_a_sweep_whose_every_point_is_invalid_is_bad_input(tmp_path, scenario_file, capsys):
    status = main(["sweep", str(scenario_file), "--grid", "loader.prefetch_factor=2,4",
                   "--out", str(tmp_path / "r"), "--quiet"])
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "every point of the grid is invalid" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.integration
def test_ctrl_c_keeps_the_finished_points_and_exits_130(tmp_path, scenario_file):
    """SIGINT to the sweep's whole process group (what a terminal's Ctrl-C does) during the second point."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out, cache = tmp_path / "reports", tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-m", "pipeprof", "sweep", str(scenario_file), "--grid",
                             "train.steps=40,200000,41", "--fixed-steps", "--set", "profile.what_ifs=false",
                             "--out", str(out), "--cache",
                             str(cache), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    doc = {}
    while time.monotonic() < deadline and proc.poll() is None:
        docs = list(out.glob("*/sweep.json"))
        if docs:
            try:
                doc = json.loads(docs[0].read_text())
            except ValueError:
                doc = {}
            if len(doc.get("points", [])) == 1 and any(
                    len(p.read_text().splitlines()) > 40 and not (p.parents[1] / "run.json").exists()
                    for p in out.rglob("recording/steps.*.csv")):
                break  # the second point's child (200,000 steps) is training: its steps stream into its folder
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    doc = json.loads((folder / "sweep.json").read_text())
    assert doc["status"] == "interrupted"
    statuses = [p["status"] for p in doc["points"]]
    assert statuses[0] == "complete" and statuses[1] == "interrupted" and statuses[2] == "not run"
    assert doc["best"]["index"] == 0 and (folder / "sweep.html").exists()
    assert "Traceback" not in err


# ---- the pipeline reports through the Progress it is given, and prints nothing ----------------


class RecordingProgress(Progress):
    def __init__(self):
        self.calls = []

    def task(self, title, total):
        self.calls.append(("task", title, total))
        return "bar"

    def update(self, task, *, completed=None, title=None, tone=OK):
        self.calls.append(("update", task, title))

    def advance(self, task):
        self.calls.append(("advance", task))

    def line(self, text, *, end="\n"):
        self.calls.append(("line", text))


def test_run_points_reports_through_its_progress_and_prints_nothing(tmp_path, scenario_file, capsys, monkeypatch):
    base = load_scenario(scenario_file)
    axes = build_axes([], [parse_axis("loader.num_workers=0,2"), parse_axis("loader.prefetch_factor=4")], "t")
    points = plan(base, axes, "t", {})  # the first is invalid together: skipped, never run
    rates = iter([1234.0])
    monkeypatch.setattr(sweep, "run_point", lambda point, folder, cache: point_record(
        point.index, point.label, point.change, "complete", summary=summary(next(rates))))
    doc = sweep.new_document("sweep", base, scenario_file=str(scenario_file), overrides=[], axes=axes,
                             measure=sweep.Measure(max_seconds=1.0))
    progress = RecordingProgress()
    assert sweep.run_points(doc, points, tmp_path, None, progress) == "complete"
    assert progress.calls == [("task", "tiny-sweep", 1),
                              ("update", "bar", "tiny-sweep: num_workers=2 prefetch_factor=4"),
                              ("line", "  num_workers=2 prefetch_factor=4: 1,234 samples/s"),
                              ("advance", "bar")]
    assert capsys.readouterr() == ("", "")
    assert [p["status"] for p in doc["points"]] == ["skipped", "complete"]
    assert json.loads((tmp_path / "sweep.json").read_text())["points"][1]["samples_per_s"] == 1234.0
