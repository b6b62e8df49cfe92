"""pipeprof diagnose end to end: three tiny real runs, the diagnosis folder, bad input and a failing sub-run."""

import json
import os
import signal

import pandas as pd
import pytest
from tiny import tiny_toml

from pipeprof.cli import diagnose_cmd
from pipeprof.cli import main as main_module
from pipeprof.cli.main import main
from pipeprof.pipeline import diagnose as diagnose_pipeline

TINY = tiny_toml("tiny", "a tiny <b>diagnosis</b>", storage="memmap", samples=3000)

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def diagnose_registered(monkeypatch):
    monkeypatch.setitem(main_module.COMMANDS, "diagnose", diagnose_cmd)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def diagnose(tmp_path, cache, scenario, *extra):
    out = tmp_path / "reports"
    status = main(["diagnose", str(scenario), "--out", str(out), "--cache", str(cache), "--quiet", *extra])
    folders = [p for p in out.iterdir() if p.name != "index.html"] if out.exists() else []
    return status, folders


def test_diagnose_writes_three_runs_and_the_diagnosis(tmp_path, cache, scenario, capsys):
    status, folders = diagnose(tmp_path, cache, scenario)
    assert status == 0
    assert len(folders) == 1 and folders[0].name.endswith("-diagnose-tiny")  # no temp folder left behind
    folder = folders[0]
    assert capsys.readouterr().out.strip() == f"diagnosis: {folder / 'diagnosis.html'}"
    assert sorted(p.name for p in folder.iterdir()) == ["compute", "diagnosis.html", "diagnosis.json", "prep", "real"]
    for role in ("compute", "prep", "real"):
        for name in ("run.json", "steps.csv", "summary.json", "report.html"):
            assert (folder / role / name).is_file(), (role, name)

    text = (folder / "diagnosis.json").read_text()
    d = json.loads(text)
    assert list(d) == sorted(d)  # sorted keys
    assert {"schema_version", "scenario", "status", "runs", "samples_per_s", "seconds_per_sample", "fractions",
            "unclamped", "clamped", "null_reasons", "cross_check", "steps_per_run"} <= set(d)
    assert d["status"] == "complete" and d["scenario"] == "tiny" and d["steps_per_run"] == 30
    storages = {role: json.loads((folder / role / "run.json").read_text())["scenario"]["data"]["storage"]
                for role in ("compute", "prep", "real")}
    assert storages == {"compute": "device", "prep": "ram", "real": "memmap"}
    for role, r in d["runs"].items():
        assert r["status"] == "complete" and r["error"] is None and r["folder"] == role
        summary = json.loads((folder / role / "summary.json").read_text())
        assert summary["steps"] == 25  # 30 steps, 5 warm-up
        assert d["samples_per_s"][role] == pytest.approx(summary["samples_per_s"])
    assert set(d["fractions"]) == {"fetch_stall", "prep_stall", "stall", "compute"}
    assert all(0.0 <= v <= 1.0 for v in d["fractions"].values())
    assert d["null_reasons"] == {}
    c = d["cross_check"]
    assert c["tolerance"] == 0.10
    real = json.loads((folder / "real" / "summary.json").read_text())
    assert c["data_wait"]["direct"] == pytest.approx(real["fractions"]["data_wait"])
    assert c["data_wait"]["agree"] in (True, False)
    assert all(rate > 0 for rate in d["samples_per_s"].values())
    # The ceiling is not slower than the real memmap run. Other processes on a shared 2-core machine can
    # slow a whole run several-fold, so compare the fastest counted steps, which bursts of load leave alone.
    fastest = {role: pd.read_csv(folder / role / "steps.csv").query("not warmup").step_s.min()
               for role in ("compute", "real")}
    assert fastest["compute"] <= 1.5 * fastest["real"]

    html = (folder / "diagnosis.html").read_text()
    assert 'href="compute/report.html"' in html and 'href="real/report.html"' in html
    assert "a tiny &lt;b&gt;diagnosis&lt;/b&gt;" in html  # autoescaped
    assert "<script" not in html and "http" not in html.replace("http-equiv", "")


def test_a_failing_sub_run_is_reported_and_the_rest_kept(tmp_path, cache, scenario, capsys, monkeypatch):
    real_build = diagnose_pipeline.build_workload

    def build(scenario, *args, **kwargs):
        if scenario.data.storage == "device":
            raise RuntimeError("no room on the device <for> this")
        return real_build(scenario, *args, **kwargs)

    monkeypatch.setattr(diagnose_pipeline, "build_workload", build)
    status, folders = diagnose(tmp_path, cache, scenario, "--steps", "12")
    assert status == 1
    folder, = folders
    err = capsys.readouterr().err
    assert "the compute run" in err and "no room on the device" in err
    assert sorted(p.name for p in folder.iterdir()) == ["diagnosis.html", "diagnosis.json", "prep", "real"]
    d = json.loads((folder / "diagnosis.json").read_text())
    assert d["status"] == "failed" and d["steps_per_run"] == 12
    compute = d["runs"]["compute"]
    assert compute["status"] == "failed" and compute["folder"] is None and compute["report"] is None
    assert compute["error"] == "building the workload: RuntimeError: no room on the device <for> this"
    assert d["runs"]["prep"]["status"] == d["runs"]["real"]["status"] == "complete"
    assert d["samples_per_s"]["compute"] is None and d["samples_per_s"]["real"] > 0
    f = d["fractions"]
    assert f["prep_stall"] is None and f["compute"] is None and f["stall"] is None
    assert f["fetch_stall"] is not None  # prep and real are enough for it
    assert "compute run (failed: building the workload: RuntimeError" in d["null_reasons"]["prep_stall"]
    assert d["cross_check"]["data_wait"]["agree"] is None
    html = (folder / "diagnosis.html").read_text()
    assert "no room on the device &lt;for&gt; this" in html and 'id="failed-runs"' in html


@pytest.mark.parametrize("sig, exit_status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_keeps_what_ran_skips_the_rest_and_exits_130_or_143(tmp_path, cache, scenario, capsys,
                                                                               monkeypatch, sig, exit_status):
    real_build = diagnose_pipeline.build_workload

    def build(scenario, *args, **kwargs):
        if scenario.data.storage == "ram":
            os.kill(os.getpid(), sig)  # a real signal, to pipeprof's own handler (cli.main), as it builds
        return real_build(scenario, *args, **kwargs)

    monkeypatch.setattr(diagnose_pipeline, "build_workload", build)
    status, folders = diagnose(tmp_path, cache, scenario, "--steps", "8")
    assert status == exit_status
    folder, = folders
    d = json.loads((folder / "diagnosis.json").read_text())
    assert d["status"] == "interrupted"
    assert [d["runs"][r]["status"] for r in ("compute", "prep", "real")] == ["complete", "interrupted", "skipped"]
    assert (folder / "compute" / "summary.json").is_file() and not (folder / "real").exists()
    assert d["fractions"]["fetch_stall"] is None and "real run (skipped: not run" in d["null_reasons"]["stall"]


@pytest.mark.parametrize("extra, message", [
    (["--set", "loader.num_workers=-1"], "loader.num_workers = -1 is not allowed"),
    (["--set", "data.storag=ram"], "did you mean data.storage"),
    (["--steps", "5"], "--steps 5"),
    (["--steps", "0"], "expected an integer >= 1"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, cache, scenario, capsys, extra, message):
    status, folders = diagnose(tmp_path, cache, scenario, *extra)
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("pipeprof: error:")
    assert folders == []  # nothing written, not even a temporary folder


def test_a_missing_scenario_file_is_exit_2(tmp_path, cache, capsys):
    status, _ = diagnose(tmp_path, cache, tmp_path / "nope.toml")
    assert status == 2 and "scenario file not found" in capsys.readouterr().err
