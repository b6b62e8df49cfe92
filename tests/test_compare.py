"""pipeprof compare: the analysis from hand-made runs, the page, and the command on two tiny real runs."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tiny import tiny_toml

from pipeprof.analysis.compare import (
    FRACTION_NOISE_PP,
    compare_runs,
    differing_settings,
    flatten_settings,
    fraction_changes,
    throughput_ratio,
)
from pipeprof.cli.main import main
from pipeprof.pipeline.compare import comparison_name, run_labels
from pipeprof.pipeline.derive import summarize
from pipeprof.render.compare import compare_table, render_compare_html
from pipeprof.run_folder import STEP_COLUMNS, Run

# ---- the analysis -------------------------------------------------------------------------


def windows(mean, cv, k):
    """A throughput dict of k equal windows whose rates vary by ``cv``: se = std / sqrt(k)."""
    return {"mean": mean, "cv": cv, "se": cv * mean / math.sqrt(k), "windows": k}


def test_throughput_ratio_interval_and_noise():
    # cv 0.05 over 10 windows each: se = sqrt(2 * 0.05**2 / 10), Welch df = 18, t = 2.1009
    se = math.sqrt(2 * 0.05**2 / 10)
    r = throughput_ratio({"throughput": windows(1000, 0.05, 10)}, {"throughput": windows(1100, 0.05, 10)})
    assert r.ratio == pytest.approx(1.1) and r.df == pytest.approx(18)
    assert r.low == pytest.approx(1.1 * math.exp(-2.1009 * se), rel=1e-4)
    assert r.high == pytest.approx(1.1 * math.exp(2.1009 * se), rel=1e-4)
    assert r.within_noise is False and r.reason is None

    close = throughput_ratio({"throughput": windows(1000, 0.05, 10)}, {"throughput": windows(1020, 0.05, 10)})
    assert close.low < 1 < close.high and close.within_noise is True

    flat = throughput_ratio({"throughput": windows(1000, 0.0, 5)}, {"throughput": windows(1000, 0.0, 5)})
    assert flat.ratio == flat.low == flat.high == 1 and flat.within_noise is True


def test_throughput_ratio_without_windows_has_no_interval():
    base = {"samples_per_s": 1000.0, "throughput": {"mean": None, "reason": "only 7 counted steps: ..."}}
    r = throughput_ratio(base, {"samples_per_s": 1500.0, "throughput": windows(1500, 0.02, 5)})
    assert r.ratio == pytest.approx(1.5) and r.low is None and r.high is None
    assert r.within_noise is None and "the baseline: only 7 counted steps" in r.reason
    old = throughput_ratio({"samples_per_s": 1000.0}, {"samples_per_s": None})  # summaries from before windows
    assert old.ratio is None and old.within_noise is None


def test_fraction_changes_in_points_with_the_noise_threshold():
    a = {"fractions": {"data_wait": 0.30, "h2d": 0.01, "compute": 0.60, "other": 0.09}}
    b = {"fractions": {"data_wait": 0.281, "h2d": 0.01, "compute": 0.621, "other": None}}
    f = fraction_changes(a, b)
    assert f["data_wait"].delta_pp == pytest.approx(-1.9) and f["data_wait"].within_noise is True
    assert f["compute"].delta_pp == pytest.approx(2.1) and f["compute"].within_noise is False
    assert f["h2d"].delta_pp == pytest.approx(0) and f["h2d"].within_noise is True
    assert f["other"].to_json() == {"baseline": 0.09, "value": None, "delta_pp": None, "within_noise": None}
    assert FRACTION_NOISE_PP == 2.0


def test_settings_are_flattened_and_only_differences_listed():
    a = {"name": "q", "data": {"storage": "ram", "throttle": None}, "loader": {"num_workers": 0, "batch_size": 64},
         "model": {"hidden": [512, 256]}}
    b = {"name": "q", "data": {"storage": "ram", "throttle": None}, "loader": {"num_workers": 2, "batch_size": 64},
         "model": {"hidden": [256]}, "train": {"threads": 2}}
    assert flatten_settings(a)["model.hidden"] == [512, 256] and flatten_settings(a)["name"] == "q"
    assert [d.to_json() for d in differing_settings([a, b])] == [
        {"key": "loader.num_workers", "values": [0, 2], "absent_in": []},
        {"key": "model.hidden", "values": [[512, 256], [256]], "absent_in": []},
        {"key": "train.threads", "values": [None, 2], "absent_in": [0]},
    ]
    assert differing_settings([a, a]) == []


def fake_run(name, step_s, num_workers=0, wait_s=0.004, samples=64, n=60):
    """A hand-made run: n steps (5 warm-up) of about ``step_s`` with ``wait_s`` data wait, a little noise."""
    rng = np.random.default_rng(len(name) + num_workers)
    s = step_s * rng.uniform(0.98, 1.02, n)
    steps = pd.DataFrame({"step": range(n), "epoch": 0, "warmup": [i < 5 for i in range(n)],
                          "t_start_s": np.concatenate([[0.0], np.cumsum(s)[:-1]]), "data_wait_s": wait_s,
                          "h2d_s": 0.0, "compute_s": s - wait_s, "step_s": s, "host_wait_s": wait_s,
                          "samples": samples, "loss": 1.0, "correct": 10, "ready_batches": np.nan},
                         columns=STEP_COLUMNS)
    meta = {"scenario": {"name": name, "loader": {"num_workers": num_workers, "batch_size": samples}},
            "device": "cpu", "gpu": {"available": False}, "status": "complete", "created_utc": "2026-11-30T00:00:00Z"}
    return Run(meta=meta, steps=steps)


def compare_fakes(*runs):
    return compare_runs([(f"run{i}", f"/x/run{i}", r, summarize(r)) for i, r in enumerate(runs)],
                        created_utc="2026-11-30T01:00:00Z")


def test_compare_runs_shapes_and_verdicts():
    c = compare_fakes(fake_run("q", 0.010), fake_run("q", 0.005, num_workers=2, wait_s=0.0001),
                      fake_run("q", 0.0101))
    assert {"schema_version", "kind", "created_utc", "baseline", "runs", "comparisons", "settings",
            "noise"} <= set(c)
    assert c["kind"] == "compare" and c["baseline"] == 0 and len(c["runs"]) == 3
    assert [x["run"] for x in c["comparisons"]] == [1, 2]
    faster, same = c["comparisons"]
    assert faster["throughput_ratio"]["ratio"] == pytest.approx(2.0, rel=0.03)
    assert faster["throughput_ratio"]["within_noise"] is False and "throughput" in faster["beyond_noise"]
    assert faster["settings"] == ["loader.num_workers"]
    assert faster["fractions"]["data_wait"]["within_noise"] is False
    assert faster["verdict"]["baseline"] != faster["verdict"]["value"] and faster["verdict"]["changed"]
    assert same["settings"] == [] and "h2d" in same["within_noise"]
    assert c["settings"] == [{"key": "loader.num_workers", "values": [0, 2, 0], "absent_in": []}]
    run = c["runs"][0]
    assert {"label", "folder", "scenario", "status", "samples_per_s", "throughput", "fractions", "verdict"} <= set(run)
    assert run["throughput"]["windows"] >= 3
    json.dumps(c, allow_nan=False)  # plain JSON, no NaN


def test_compare_needs_two_runs():
    with pytest.raises(ValueError):
        compare_fakes(fake_run("q", 0.01))


def test_page_and_table_escape_names():
    evil = "<script>alert(1)</script>"
    c = compare_fakes(fake_run(evil, 0.01), fake_run("q", 0.005, num_workers=1))
    c["runs"][0]["report"] = "../a%20b/report.html"
    c["runs"][1]["report"] = None
    page = render_compare_html(c, folder_name="f")
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'href="../a%20b/report.html"' in page and "no report.html" in page
    assert "http://" not in page and "https://" not in page and "<link" not in page  # self-contained
    assert "loader.num_workers" in page and "beyond noise" in page
    from rich.console import Console
    console = Console(record=True, width=100)
    console.print(compare_table(c, "out/f"))
    text = console.export_text()
    assert evil in text and "loader.num_workers" in text and "baseline" in text


def test_labels_and_folder_names():
    assert run_labels([Path("a/x"), Path("b/x"), Path("c/y")]) == ["x", "x (2)", "y"]
    assert comparison_name(["quick", "quick"]) == "compare-quick-vs-quick"
    assert comparison_name(["a", "b", "c", "d"]) == "compare-a-vs-b-and-2-more"


# ---- the command on two tiny real runs ----------------------------------------------------

TINY = tiny_toml("tiny", "a tiny run for the compare tests")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    scenario = tmp / "tiny.toml"
    scenario.write_text(TINY)
    out, cache = tmp / "reports", tmp / "cache"
    common = ["--out", str(out), "--cache", str(cache), "--quiet", "--set", "profile.what_ifs=false"]  # no probes:
    assert main(["run", str(scenario), *common]) == 0  # the comparison of two runs is the subject
    assert main(["run", str(scenario), "--set", "loader.num_workers=1", *common]) == 0
    folders = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(folders) == 2
    return out, folders


@pytest.mark.integration
def test_compare_two_real_runs(two_runs, capsys):
    out, (a, b) = two_runs
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "loader.num_workers" in printed and "ratio to A" in printed
    (folder,) = [p for p in out.iterdir() if "-compare-" in p.name]
    assert folder.name.endswith("-compare-tiny-vs-tiny") and printed.strip().endswith(str(folder / "compare.html"))
    assert sorted(p.name for p in folder.iterdir()) == ["compare.html", "compare.json"]

    c = json.loads((folder / "compare.json").read_text())
    assert list(c) == sorted(c)
    assert c["settings"] == [{"key": "loader.num_workers", "values": [0, 1], "absent_in": []}]
    (cmp,) = c["comparisons"]
    assert cmp["settings"] == ["loader.num_workers"]
    ratio = cmp["throughput_ratio"]
    sa, sb = (json.loads((f / "summary.json").read_text())["samples_per_s"] for f in (a, b))
    assert ratio["ratio"] == pytest.approx(sb / sa, rel=1e-9)  # the windows' mean is samples/s
    assert ratio["low"] <= ratio["ratio"] <= ratio["high"]
    assert ratio["within_noise"] == (ratio["low"] <= 1 <= ratio["high"])
    assert set(cmp["fractions"]) == {"data_wait", "h2d", "collective_wait", "compute", "other"}
    assert sorted(cmp["within_noise"] + cmp["beyond_noise"]) == sorted(
        ["throughput", "data_wait", "h2d", "collective_wait", "compute", "other"])
    for run, f in zip(c["runs"], (a, b)):
        assert run["throughput"]["windows"] == 3 and run["status"] == "complete"
        assert (folder / run["report"]).resolve() == (f / "report.html").resolve()

    page = (folder / "compare.html").read_text()
    assert f'href="../{a.name}/report.html"' in page and "loader.num_workers" in page
    index = (out / "index.html").read_text()
    assert folder.name in index and a.name in index and b.name in index


@pytest.mark.integration
def test_compare_bad_input_is_one_line_and_exit_2(two_runs, tmp_path, capsys):
    out, (a, _) = two_runs
    missing = tmp_path / "nope"
    assert main(["compare", str(a), str(missing), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err and "not a run folder" in err
    assert not (tmp_path / "r").exists()  # nothing written before the inputs are known good
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "run.json").write_text("{not json")
    assert main(["compare", str(a), str(corrupt), "--out", str(tmp_path / "r")]) == 2
    assert "corrupt run metadata" in capsys.readouterr().err
    assert main(["compare", str(a)]) == 2  # one run is not a comparison
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    assert main(["compare", str(a), str(a), "--out", str(not_a_folder)]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err
