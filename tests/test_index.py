"""reports/index.html: fabricated folders of every kind, corrupt ones, links out, and the rebuild after commands."""

import json
import os
import re

import numpy as np
import pandas as pd
import pytest

import pipeprof.render.index as index_module
from pipeprof.cli.main import main
from pipeprof.render.index import index_entries, is_reports_folder, rebuild_index
from pipeprof.run_folder import STEP_COLUMNS, Run, save_run

EVIL = "<script>alert('x')</script>"


def write(folder, files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return folder


@pytest.fixture
def reports(tmp_path):
    root = tmp_path / "reports"
    write(root / "20261101T000000Z-quick", {
        "run.json": {"scenario": {"name": "quick"}, "status": "complete", "created_utc": "2026-11-01T00:00:00Z"},
        "summary.json": {"scenario": EVIL, "samples_per_s": 12345.6, "fractions": {"data_wait": 0.158},
                         "verdict": {"class": "input:main"}},
        "report.html": "<html></html>"})
    write(root / "20261102T000000Z-diagnose-quick", {
        "diagnosis.json": {"scenario": "quick", "status": "complete", "created_utc": "2026-11-02T00:00:00Z",
                           "fractions": {"fetch_stall": 0.4, "prep_stall": 0.1}},
        "diagnosis.html": "<html></html>"})
    write(root / "20261103T000000Z-compare-quick-vs-quick", {
        "compare.json": {"kind": "compare", "created_utc": "2026-11-03T00:00:00Z",
                         "runs": [{"label": "a", "scenario": "quick"}, {"label": "b", "scenario": "quick"}],
                         "comparisons": [{"run": 1, "throughput_ratio": {"ratio": 1.5}}]},
        "compare.html": "<html></html>"})
    write(root / "20261104T000000Z-sweep-quick", {
        "sweep.json": {"kind": "sweep", "scenario": "quick", "created_utc": "2026-11-04T00:00:00Z",
                       "status": "complete", "points": [{}, {}, {}],
                       "best": {"settings": {"loader.num_workers": 2, "data.storage": "memmap"},
                                "samples_per_s": 23456.0}},
        "sweep.html": "<html></html>"})
    write(root / "20261105T000000Z-tune-quick", {
        "tune.json": {"kind": "tune", "scenario": "quick", "created_utc": "2026-11-05T00:00:00Z",
                      "status": "running", "points": [], "best": None}})  # no tune.html yet
    write(root / "20261106T000000Z-broken", {"run.json": "{not json"})
    write(root / "20261107T000000Z-odd", {"summary.json": "[1, 2]", "run.json": "[]"})
    write(root / "notes", {"readme.txt": "mine"})
    write(root / ".20261108T000000Z-quick.abc.tmp", {"run.json": {}})  # being written: skipped
    (root / "stray.txt").write_text("a file, not a folder")
    outside = write(tmp_path / "elsewhere", {"run.json": {"scenario": {"name": "secret"}}})
    os.symlink(outside, root / "20261109T000000Z-link")
    return root


def test_entries_of_every_kind_newest_first(reports):
    entries = index_entries(reports)
    kinds = [(e["name"], e["kind"]) for e in entries]
    assert ("notes", "unknown") in kinds  # no timestamp in its name: sorted by its modification time
    assert [k for k in kinds if k[0] != "notes"] == [
        ("20261109T000000Z-link", "outside"),
        ("20261107T000000Z-odd", "unreadable"),
        ("20261106T000000Z-broken", "unreadable"),
        ("20261105T000000Z-tune-quick", "tune"),
        ("20261104T000000Z-sweep-quick", "sweep"),
        ("20261103T000000Z-compare-quick-vs-quick", "compare"),
        ("20261102T000000Z-diagnose-quick", "diagnosis"),
        ("20261101T000000Z-quick", "run"),
    ]
    by = {e["name"]: e for e in entries}
    assert len(entries) == 9  # hidden temp folder and plain files left out
    run = by["20261101T000000Z-quick"]
    assert run["samples_per_s"] == 12345.6 and run["data_wait"] == 0.158 and run["verdict"] == "input:main"
    assert run["link"] == "20261101T000000Z-quick/report.html" and run["status"] == "complete"
    assert by["20261102T000000Z-diagnose-quick"]["fetch_stall"] == 0.4
    assert by["20261103T000000Z-compare-quick-vs-quick"]["ratios"] == [1.5]
    sweep = by["20261104T000000Z-sweep-quick"]
    assert sweep["samples_per_s"] == 23456.0 and sweep["points"] == 3
    assert sweep["link"] == "20261104T000000Z-sweep-quick/sweep.html"
    tune = by["20261105T000000Z-tune-quick"]
    assert tune["samples_per_s"] is None and tune["link"] is None and tune["status"] == "running"
    assert "run.json" in by["20261106T000000Z-broken"]["problem"]
    assert "not followed" in by["20261109T000000Z-link"]["problem"] and by["20261109T000000Z-link"]["link"] is None


def test_sort_falls_back_to_the_modification_time(reports):
    os.utime(reports / "notes", (0, 0))  # 1970: oldest
    assert index_entries(reports)[-1]["name"] == "notes"


def test_page_escapes_and_links(reports):
    path = rebuild_index(reports)
    assert path == reports / "index.html"
    page = path.read_text()
    assert "<script" not in page and "&lt;script&gt;" in page
    assert 'href="20261101T000000Z-quick/report.html"' in page
    assert 'href="20261104T000000Z-sweep-quick/sweep.html"' in page
    assert "loader.num_workers=2" in page and "data.storage=memmap" in page and "23,456" in page
    assert "fetch stall 40.0%" in page and "×1.50" in page
    assert "secret" not in page  # the link out was not followed
    assert "not a pipeprof folder" in page and "notes" in page
    assert not re.search(r"(src|href)=\"https?:", page)  # nothing fetched
    assert [p.name for p in reports.iterdir() if p.name.endswith(".tmp") and "index" in p.name] == []


def test_a_symlinked_file_out_of_the_folder_is_not_read(tmp_path):
    root = tmp_path / "reports"
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"scenario": {"name": "secret"}}))
    folder = root / "20261101T000000Z-quick"
    folder.mkdir(parents=True)
    os.symlink(secret, folder / "run.json")
    (entry,) = index_entries(root)
    assert entry["kind"] == "unreadable" and "not followed" in entry["problem"]
    assert "secret" not in rebuild_index(root).read_text()


def test_which_folders_get_an_index(tmp_path):
    root = tmp_path / "reports"
    run = write(root / "20261101T000000Z-quick", {"run.json": {}})
    verify = run / "verify"
    verify.mkdir()
    diag = write(root / "20261102T000000Z-diagnose-q", {"diagnosis.json": {}})
    points = root / "20261103T000000Z-sweep-q" / "points"
    points.mkdir(parents=True)
    assert is_reports_folder(root)
    assert not is_reports_folder(run) and not is_reports_folder(verify) and not is_reports_folder(diag)
    assert not is_reports_folder(points)  # a sweep's points before its sweep.json exists
    assert not is_reports_folder(tmp_path / "missing")


def tiny_run():
    n = 20
    steps = pd.DataFrame({"step": range(n), "epoch": 0, "warmup": [i < 2 for i in range(n)],
                          "t_start_s": np.arange(n) * 0.01, "data_wait_s": 0.001, "h2d_s": 0.0, "compute_s": 0.009,
                          "step_s": 0.01, "host_wait_s": 0.001, "samples": 32, "loss": 1.0, "correct": 3,
                          "ready_batches": np.nan}, columns=STEP_COLUMNS)
    return Run(meta={"scenario": {"name": EVIL}, "device": "cpu", "gpu": {"available": False},
                     "status": "complete", "created_utc": "2026-11-01T00:00:00Z"}, steps=steps)


def test_report_rebuilds_the_index_of_the_runs_folder(tmp_path, capsys):
    root = tmp_path / "reports"
    folder = save_run(tiny_run(), root / "20261101T000000Z-evil")
    assert main(["report", str(folder), "--quiet"]) == 0
    page = (root / "index.html").read_text()
    assert "20261101T000000Z-evil/report.html" in page and "&lt;script&gt;" in page and "<script" not in page
    assert not (folder / "index.html").exists()


def test_a_failed_index_is_a_warning_never_a_changed_exit_status(tmp_path, capsys, monkeypatch):
    folder = save_run(tiny_run(), tmp_path / "reports" / "20261101T000000Z-evil")

    def broken(_):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(index_module, "rebuild_index", broken)  # the CLI imports it when it runs
    assert main(["report", str(folder), "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pipeprof: warning: could not rebuild") and "read-only" in err[0]


def test_a_script_tune_counts_its_trials(tmp_path):
    folder = tmp_path / "20261201T000000Z-tune-train"
    folder.mkdir()
    (folder / "tune.json").write_text(json.dumps({
        "kind": "tune", "status": "complete", "trials": [{"status": "complete"}] * 4,
        "best": {"samples_per_s": 5000.0, "settings": {"loader.num_workers": 2}}}))
    (entry,) = index_entries(tmp_path)
    assert entry["kind"] == "tune" and entry["points"] == 4 and entry["samples_per_s"] == 5000.0
