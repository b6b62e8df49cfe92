"""`pipeprof profile --verify -- python train.py`: the recommendation as flags, the re-run's record, a real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_verify import as_written

from pipeprof.pipeline.script_verify import Child, child_command, combined, report_lines, script_flags, verify_script
from pipeprof.script.overrides import LoaderOverride, Overrides, parse

FIXTURES = Path(__file__).parent / "fixtures"
SCENARIO_KEYS = {"status", "change", "set", "predicted_samples_per_s", "predicted_speedup", "measured_samples_per_s",
                 "reason", "exit_code", "folder", "measured_verdict", "recommendation_reason"}


def test_loader_and_thread_changes_become_flags_on_the_training_loader():
    overrides, why = script_flags({"loader.num_workers": 2, "loader.pin_memory": True, "train.threads": 1},
                                  "self.train_loader")
    assert why is None
    assert overrides.flags() == ["--loader", "self.train_loader.num_workers=2",
                                 "--loader", "self.train_loader.pin_memory=True", "--threads", "1"]
    assert parse(overrides.flags()[1::2][:2], 1) == overrides  # what the child parses back


def test_a_change_that_is_not_a_loader_or_thread_setting_is_not_applicable():
    overrides, why = script_flags({"data.storage": "device", "loader.num_workers": 0}, None)
    assert overrides is None and "data.storage" in why and "code" in why


def test_the_change_wins_over_the_first_runs_own_flags():
    base = parse(["num_workers=4", "pin_memory=True"], 2)
    change = Overrides((LoaderOverride("loader", "num_workers", 1),), None)
    assert combined(base, change) == Overrides(
        (LoaderOverride(None, "pin_memory", True), LoaderOverride("loader", "num_workers", 1)), 2)


def test_the_re_run_is_a_bounded_quiet_profile_of_the_same_command(tmp_path):
    argv = child_command(["--", "python", "train.py", "--lr", "1"], tmp_path, "train-verify",
                         parse(["num_workers=2"], None), steps=40, warmup_steps=3, sample_hz=5.0)
    assert argv[1:4] == ["-m", "pipeprof", "profile"]
    assert argv[argv.index("--steps") + 1] == "40" and argv[argv.index("--warmup-steps") + 1] == "3"
    assert argv[argv.index("--"):] == ["--", "python", "train.py", "--lr", "1"]
    assert "--quiet" in argv and argv[argv.index("--loader") + 1] == "num_workers=2"


def _summary(change: dict) -> dict:
    return {"scenario": "train", "samples_per_s": 100.0,
            "loaders": [{"name": "train_loader", "role": "train"}, {"name": "val_loader", "role": "eval"}],
            "recommendations": [{"change": change, "predicted_samples_per_s": 150.0, "predicted_speedup": 1.5,
                                 "reason": "more workers"}]}


def test_the_record_has_a_scenarios_keys_and_what_the_re_run_measured(tmp_path):
    seen = []

    def runner(argv):
        seen.append(argv)
        folder = tmp_path / "verify" / "run-1"
        return Child(0, folder, {"status": "complete", "samples_per_s": 120.0, "verdict": {"class": "compute"},
                                 "loaders": [{"name": "train_loader", "role": "train", "num_workers": 2}],
                                 "script": {"torch_threads": {"first step": 2}}}, "")
    record = verify_script(["python", "train.py"], _summary({"loader.num_workers": 2}), tmp_path, steps=40,
                           runner=runner)
    assert SCENARIO_KEYS <= set(record)
    assert record["status"] == "complete" and record["set"] == "--loader train_loader.num_workers=2"
    assert record["folder"] == str(Path("verify") / "run-1") and record["measured_loader"]["num_workers"] == 2
    # the script as run and with the change, alternately, 3 of each (fresh processes)
    names = [argv[argv.index("--name") + 1] for argv in seen]
    assert names == ["train-as-run", "train-verify"] * 3
    assert "train_loader.num_workers=2" in seen[1] and "train_loader.num_workers=2" not in seen[0]
    assert seen[1][seen[1].index("--steps") + 1] == "40" and seen[0][seen[0].index("--steps") + 1] == "40"
    assert record["base_runs_samples_per_s"] == [120.0] * 3 and record["measured_runs_samples_per_s"] == [120.0] * 3
    derived = as_written(record, 100.0)
    assert derived["prediction_error"] == pytest.approx(150 / 120 - 1)
    assert derived["measured_speedup"] == pytest.approx(1.0)  # against the runs as run, not the first run


def test_a_re_run_that_fails_is_recorded_with_its_reason(tmp_path):
    record = verify_script(["python", "train.py"], _summary({"loader.num_workers": 2}), tmp_path,
                           runner=lambda argv: Child(1, None, None, "pipeprof: failed: boom"))
    assert record["status"] == "failed" and record["reason"] == "pipeprof: failed: boom"
    assert record["folder"] is None and record["measured_samples_per_s"] is None


def test_a_storage_change_is_not_run(tmp_path):
    def runner(argv):
        raise AssertionError("no re-run for a code change")
    record = verify_script(["python", "train.py"], _summary({"data.storage": "ram"}), tmp_path, runner=runner)
    assert record["status"] == "not applicable" and "data.storage" in record["reason"]
    assert not (tmp_path / "verify").exists()


@pytest.mark.integration
@pytest.mark.serial  # its premise, a recommended change, needs the cores free: other tests beside it leave none
def test_verify_re_runs_the_plain_loop_with_the_recommendation_applied(tmp_path):
    out = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--out", str(out), "--quiet", "--verify",
                           "--verify-repeats", "1",
                           "--steps", "40", "--", sys.executable, str(FIXTURES / "plain_loop.py"), "--epochs", "1",
                           "--samples", "4096", "--collate-ms", "5"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    folder = Path(report_lines(proc.stdout, proc.stderr)[-1]).parent
    s = json.loads((folder / "summary.json").read_text())
    v = s["verification"]
    assert SCENARIO_KEYS <= set(v) and "prediction_error" in v and v["status"] == "complete", v
    assert v["change"] == next(r["change"] for r in s["recommendations"] if r["change"])
    child = json.loads((folder / v["folder"] / "summary.json").read_text())
    train = next(lo for lo in child["loaders"] if lo["role"] == "train")
    for key, value in v["change"].items():  # the re-run's loader and threads are the recommendation's
        if key.startswith("loader."):
            assert train[key[len("loader."):]] == value
        elif key == "train.threads":
            assert child["script"]["torch_threads"]["first step"] == value
    assert child["steps"] <= 40 and v["measured_samples_per_s"] == child["samples_per_s"]
    assert len(v["base_runs_samples_per_s"]) == 1  # --verify-repeats 1: the script as run once, then the change
    assert "verify: --loader" in proc.stderr
    assert "pipeprof profile --verify" in (folder / "report.html").read_text()  # the report's block, for a script
