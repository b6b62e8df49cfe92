"""run --verify: scenario variants, the child-process runner, the verification record, and a real re-run."""

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pipeprof import track_record
from pipeprof.analysis.intervals import RERUN_CV, Z_90
from pipeprof.analysis.verification import PRIOR_DF, rerun_noise, verification
from pipeprof.cli.main import main
from pipeprof.errors import UsageError
from pipeprof.pipeline.fresh_process import ChildRun, run_child
from pipeprof.pipeline.verify import first_change, verify
from pipeprof.render.verification_text import verification_words
from pipeprof.scenario import load_scenario, scenario_from_dict
from pipeprof.variants import to_toml, vary

IMAGES = """
name = "tiny-jpeg"
description = "tiny <script>alert(1)</script> jpegs"
[data]
storage = "images"
format = "jpeg"
quality = 80
samples = 1200
cache = "cold"
[loader]
batch_size = 50
num_workers = 1
prefetch_factor = 4
persistent_workers = false
[model]
hidden = [32]
[train]
epochs = 2
warmup_steps = 4
device = "cpu"
"""


def as_written(record, samples_per_s, interval=None):
    """summary.json's ``verification`` for run.json's ``record``: the typed record's JSON and, written at the
    edge, its sentence (``pipeline.derive.summary_document``)."""
    v = verification(record, samples_per_s, interval)
    return None if v is None else {**v.to_json(), "verdict_words": verification_words(v)}



@pytest.fixture
def images(tmp_path):
    path = tmp_path / "tiny-jpeg.toml"
    path.write_text(IMAGES)
    return load_scenario(path)


# ---- variants ------------------------------------------------------------------------------


def test_moving_images_to_ram_drops_the_keys_ram_has_no_use_for(images):
    v = vary(images, {"data.storage": "ram"}, "test")
    assert v.scenario.data.storage == "ram"
    assert v.scenario.data.cache == "warm"  # the default again
    assert "format" not in v.raw["data"] and "quality" not in v.raw["data"] and "cache" not in v.raw["data"]
    assert sorted(d.split(" =")[0] for d in v.dropped) == ["data.cache", "data.format", "data.quality"]
    assert "data.storage = 'ram' (was 'images')" in v.changes
    assert v.scenario.loader == images.loader and v.scenario.model == images.model


def test_no_workers_drops_the_worker_only_keys_and_steps_replace_epochs(images):
    v = vary(images, {"loader.num_workers": 0, "train.steps": 30}, "test")
    assert v.scenario.loader.num_workers == 0 and v.scenario.loader.prefetch_factor is None
    assert v.scenario.train.steps == 30 and v.scenario.train.epochs is None
    assert any(d.startswith("loader.prefetch_factor = 4") for d in v.dropped)
    assert not any("persistent_workers" in d for d in v.dropped)  # false is the default: nothing to say


def test_a_key_the_change_names_is_kept_and_validated(images):
    with pytest.raises(UsageError, match="prefetch_factor"):
        vary(images, {"loader.num_workers": 0, "loader.prefetch_factor": 2}, "test")


@pytest.mark.parametrize("change, match", [({"loader.bogus": 1}, "unknown key loader.bogus"),
                                           ({"nosection": 1}, "not a scenario key"),
                                           ({"loader.num_workers": -1}, "num_workers")])
def test_a_bad_change_is_one_usage_error_naming_where(images, change, match):
    with pytest.raises(UsageError, match=match) as e:
        vary(images, change, "--verify (x)")
    assert str(e.value).startswith("--verify (x)") and "\n" not in str(e.value)


def test_a_variant_written_as_toml_loads_back_to_the_same_scenario(images, tmp_path):
    v = vary(images, {"loader.num_workers": 2, "train.threads": 1}, "test", name="again")
    path = tmp_path / "v.toml"
    path.write_text(to_toml(v.raw))
    assert load_scenario(path) == v.scenario
    throttled = scenario_from_dict({"data": {"storage": "files", "throttle": "nfs", "samples": 100},
                                    "train": {"steps": 5, "warmup_steps": 1}}, "t")
    v = vary(throttled, {"loader.batch_size": 10}, "test")
    path.write_text(to_toml(v.raw))
    assert load_scenario(path) == v.scenario


# ---- the verification record ---------------------------------------------------------------


def test_verification_compares_the_prediction_with_the_re_run():
    record = {"status": "complete", "predicted_samples_per_s": 2000.0, "predicted_speedup": 2.0,
              "measured_samples_per_s": 1600.0, "set": "--set loader.num_workers=2"}
    v = as_written(record, 1000.0)
    assert v["measured_speedup"] == pytest.approx(1.6)
    assert v["prediction_error"] == pytest.approx(0.25)
    assert "25% too high" in v["verdict_words"] and "beyond" in v["verdict_words"]
    low = as_written(dict(record, measured_samples_per_s=2100.0), 1000.0)
    assert low["prediction_error"] == pytest.approx(2000 / 2100 - 1)
    band = Z_90 * math.sqrt(2) * RERUN_CV  # no side ran twice: the prior's noise, and said so
    assert "too low" in low["verdict_words"] and f"within the ±{100 * band:.0f}% a re-run moves" in low["verdict_words"]
    assert "the prior sd 10%: no side ran twice" in low["verdict_words"]
    assert low["rerun_noise"] == {"cv": RERUN_CV, "measured_cv": None, "df": 0, "prior_cv": RERUN_CV}


def test_the_re_run_noise_is_what_the_checks_repeated_runs_spread_each_side_about_its_own_mean():
    # base runs 1000 and 1210 (ln spread 0.19), change runs 2000 and 2420: a spread of 0.135 sd a run
    record = {"status": "complete", "predicted_samples_per_s": 2000.0, "measured_samples_per_s": 2200.0,
              "base_runs_samples_per_s": [1000.0, 1210.0], "measured_runs_samples_per_s": [2000.0, 2420.0]}
    noise = rerun_noise(record)
    half = math.log(1.21) / 2
    ss = 4 * half ** 2  # each run half the spread from its side's mean, 4 runs: the change's 2x is not noise
    assert noise.df == 2 and noise.measured_cv == pytest.approx(math.sqrt(ss / 2))
    assert noise.cv == pytest.approx(math.sqrt((PRIOR_DF * RERUN_CV ** 2 + ss) / (PRIOR_DF + 2)))
    assert RERUN_CV < noise.cv < noise.measured_cv  # shrunk toward the prior, two runs a side say little
    quiet = rerun_noise(dict(record, base_runs_samples_per_s=[1000.0] * 6, measured_runs_samples_per_s=[2000.0] * 6))
    assert quiet.measured_cv == pytest.approx(0, abs=1e-12)
    assert quiet.cv == pytest.approx(RERUN_CV * math.sqrt(PRIOR_DF / (PRIOR_DF + 10)))  # 10 df of no spread
    v = as_written(record, 1000.0)
    assert v["rerun_noise"]["df"] == 2 and "these runs' own spread, sd 13% on 2 df" in v["verdict_words"]
    assert rerun_noise({"base_runs_samples_per_s": [1000.0, None, -1.0]}).df == 0  # nothing to pool



def test_a_failed_or_inapplicable_verification_says_so_without_numbers():
    assert verification(None, 1000.0) is None
    failed = as_written({"status": "failed", "reason": "RuntimeError: boom", "predicted_samples_per_s": 5.0},
                          1000.0)
    assert failed["measured_speedup"] is None and failed["prediction_error"] is None
    assert failed["verdict_words"] == "re-run failed: RuntimeError: boom"
    na = as_written({"status": "not applicable", "reason": "compute-bound"}, 1000.0)
    assert na["verdict_words"] == "nothing to verify: compute-bound"


def test_first_change_skips_code_changes_and_the_negative():
    code = {"change": {}, "code_change": "a __getitems__", "predicted_speedup": 1.9}
    setting = {"change": {"loader.num_workers": 2}, "predicted_speedup": 1.5}
    assert first_change([code, setting]) is setting
    assert first_change([{"change": {}, "reason": "compute-bound"}]) is None
    assert first_change(None) is None


def test_verify_without_an_applicable_change_runs_nothing(images, tmp_path):
    summary = {"recommendations": [{"change": {}, "code_change": "fetch whole batches", "reason": "r"}]}
    record = verify(images, summary, tmp_path)
    assert record["status"] == "not applicable" and "code change (fetch whole batches)" in record["reason"]
    assert not (tmp_path / "verify").exists()


def test_verify_with_a_change_the_scenario_refuses_is_invalid_and_runs_nothing(images, tmp_path):
    summary = {"recommendations": [{"change": {"loader.num_workers": 0, "loader.persistent_workers": True},
                                    "predicted_samples_per_s": 10.0, "predicted_speedup": 2.0}]}
    record = verify(images, summary, tmp_path)
    assert record["status"] == "invalid" and "persistent_workers" in record["reason"]
    assert not (tmp_path / "verify").exists()


class FakeChildren:
    """A stand-in for ``run_child``: each call's scenario file and samples/s, in order."""

    def __init__(self, base_rates, change_rates, tmp_path):
        self.rates = {"base.toml": list(base_rates), "scenario.toml": list(change_rates)}
        self.calls: list[str] = []
        self.tmp_path = tmp_path

    def __call__(self, scenario_file, out, cache=None):
        name = scenario_file.name
        self.calls.append(name)
        folder = out / f"run-{len(self.calls)}"
        folder.mkdir(parents=True)
        return ChildRun(0, folder, {"samples_per_s": self.rates[name].pop(0), "verdict": {"class": "compute"}}, None)


def interleaved(images, tmp_path, base_rates, change_rates, *, predicted=2000.0):
    summary = {"recommendations": [{"change": {"loader.num_workers": 2}, "predicted_samples_per_s": predicted,
                                    "predicted_speedup": predicted / 1000.0, "reason": "r"}]}
    children = FakeChildren(base_rates, change_rates, tmp_path)
    record = verify(images, summary, tmp_path, runner=children, repeats=len(change_rates))
    return record, children


def test_verify_runs_the_base_and_the_change_alternately_and_compares_their_medians(images, tmp_path):
    record, children = interleaved(images, tmp_path, [1000.0, 1100.0, 1050.0], [2000.0, 2300.0, 2100.0])
    assert children.calls == ["base.toml", "scenario.toml"] * 3  # A B A B A B, fresh processes each
    assert record["status"] == "complete"
    assert record["measured_samples_per_s"] == 2100.0 and record["base_samples_per_s"] == 1050.0
    v = as_written(record, 1200.0)  # this run's own 1,200: not what the change is read against
    assert v["measured_speedup"] == pytest.approx(2100.0 / 1050.0) and v["base_disturbed"] is False
    assert "medians of 3 runs as run (1,000–1,100 samples/s) and 3 with the change (2,000–2,300)" \
        in v["verdict_words"]
    base = load_scenario(tmp_path / "verify" / "base.toml")
    assert base.loader.num_workers == images.loader.num_workers


def test_a_disturbed_base_is_flagged_not_trusted(images, tmp_path):
    # the base measured 118 samples/s in one trial and 506 in the next
    record, _ = interleaved(images, tmp_path, [118.0, 506.0, 480.0], [500.0, 510.0, 505.0])
    v = as_written(record, 500.0)
    assert v["base_disturbed"] is True and "the base was disturbed" in v["verdict_words"]
    assert v["measured_speedup"] == pytest.approx(505.0 / 480.0)  # the median, not the disturbed one


# ---- the child process ---------------------------------------------------------------------


def stand_in(body: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(body)]


def test_a_child_that_completes_comes_back_with_its_folder_and_summary(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "older-run").mkdir()  # there before: not the child's
    child = run_child(tmp_path / "x.toml", out, command=stand_in(f"""
        import json, pathlib
        f = pathlib.Path({str(out)!r}) / "20261130T000000Z-x"
        f.mkdir()
        (f / "summary.json").write_text(json.dumps({{"samples_per_s": 123.0}}))
        (pathlib.Path({str(out)!r}) / ".hidden.tmp").mkdir()
        """))
    assert child.status == "complete" and child.folder.name == "20261130T000000Z-x"
    assert child.summary == {"samples_per_s": 123.0} and child.error is None


@pytest.mark.parametrize("code, stderr, status, error", [
    (2, "pipeprof: error: x.toml: unknown key loader.bogus", "invalid", "x.toml: unknown key loader.bogus"),
    (1, "Traceback\\nRuntimeError: boom", "failed", "RuntimeError: boom"),
    (130, "pipeprof: interrupted: 3 steps saved", "interrupted", "pipeprof: interrupted: 3 steps saved"),
])
def test_a_child_that_fails_comes_back_with_its_status_and_error_line(tmp_path, code, stderr, status, error):
    child = run_child(tmp_path / "x.toml", tmp_path / "out", command=stand_in(f"""
        import sys
        print("{stderr}", file=sys.stderr)
        sys.exit({code})
        """))
    assert (child.status, child.error, child.folder, child.summary) == (status, error, None, None)


def test_ctrl_c_in_the_parent_lets_the_child_save_and_returns_interrupted(tmp_path):
    """A real SIGINT to a parent process only (not its group): it is passed on and the child saves."""
    out, ready = tmp_path / "out", tmp_path / "ready"
    child_code = textwrap.dedent(f"""
        import pathlib, signal, sys, time
        def save(*_):
            f = pathlib.Path({str(out)!r}) / "partial"
            f.mkdir()
            (f / "summary.json").write_text('{{"samples_per_s": 7.0}}')
            sys.exit(130)
        signal.signal(signal.SIGINT, save)
        pathlib.Path({str(ready)!r}).touch()
        time.sleep(60)
        """)
    parent_code = textwrap.dedent(f"""
        import json, sys
        from pipeprof.pipeline.fresh_process import ChildRun, run_child
        c = run_child(None, {str(out)!r}, command=[sys.executable, "-c", {child_code!r}])
        print(json.dumps({{"status": c.status, "folder": c.folder.name, "summary": c.summary}}))
        """)
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists()
    os.kill(parent.pid, signal.SIGINT)
    stdout, _ = parent.communicate(timeout=60)
    assert parent.returncode == 0
    assert json.loads(stdout) == {"status": "interrupted", "folder": "partial", "summary": {"samples_per_s": 7.0}}


# ---- end to end ----------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.serial  # its premise, a recommended change, needs the cores free: other tests beside it leave none
def test_run_verify_re_runs_the_top_recommendation_in_a_fresh_process(tmp_path, capsys):
    scenario = tmp_path / "tiny-jpeg.toml"
    scenario.write_text(IMAGES.replace('cache = "cold"\n', "").replace("num_workers = 1", "num_workers = 0")
                        .replace("prefetch_factor = 4\n", ""))
    out, cache = tmp_path / "reports", tmp_path / "cache"
    status = main(["run", str(scenario), "--out", str(out), "--cache", str(cache), "--quiet", "--verify",
                   "--verify-repeats", "1", "--set", "profile.what_ifs=false"])  # the re-run is the subject
    assert status == 0
    (folder,) = [p for p in out.iterdir() if p.name != "index.html"]
    summary = json.loads((folder / "summary.json").read_text())
    v = summary["verification"]
    top = first_change(summary["recommendations"])
    assert v["change"] == top["change"] and v["status"] == "complete"
    assert v["predicted_samples_per_s"] == pytest.approx(top["predicted_samples_per_s"])
    assert v["measured_samples_per_s"] > 0
    assert v["measured_speedup"] == pytest.approx(v["measured_samples_per_s"] / v["base_samples_per_s"])
    assert len(v["base_runs_samples_per_s"]) == len(v["measured_runs_samples_per_s"]) == 1  # --verify-repeats 1
    rerun = folder / v["folder"]
    assert rerun.parent.name == "verify" and (rerun / "report.html").exists()
    again = load_scenario(folder / "verify" / "scenario.toml")
    for key, value in v["change"].items():
        section, _, name = key.partition(".")
        assert getattr(getattr(again, section), name) == value
    assert json.loads((folder / "run.json").read_text())["verification"]["folder"] == v["folder"]
    (kept,) = track_record.read()  # the check, in this machine's track record
    assert (kept["source"], kept["tier"], kept["predicted_samples_per_s"], kept["measured_samples_per_s"]) == \
        ("verify", top["tier"], v["predicted_samples_per_s"], v["measured_samples_per_s"])
    html = (folder / "report.html").read_text()
    assert 'id="verification"' in html and f'href="{v["folder"]}/report.html"' in html
    assert "<script>alert(1)</script>" not in html
    err = capsys.readouterr().err
    assert f"verify: {v['set']}: predicted ×" in err
    # re-deriving the report from the raw records keeps the verification
    assert main(["report", str(folder)]) == 0
    assert json.loads((folder / "summary.json").read_text())["verification"] == v
