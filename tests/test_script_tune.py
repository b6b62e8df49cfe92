"""pipeprof tune -- python train.py: the search and its document with a fake trial runner, bad input, and one
small real run of a fixture script."""

import json
import sys
from pathlib import Path

import pytest

from pipeprof.cli.main import main
from pipeprof.cli.tune_cmd import answer_text
from pipeprof.pipeline.script_tune import (
    ProfileRunner,
    ScriptBudget,
    TrialRun,
    override_args,
    read_trial,
    tune_script,
    written,
)

FIXTURES = Path(__file__).parent / "fixtures"
COMMAND = ["python", "train.py", "--epochs", "1"]


def summary(rate, *, workers=0, threads=2, recommendations=()):
    return {"status": "complete", "samples_per_s": rate, "error": None,
            "loaders": [{"role": "eval", "name": "val_loader", "num_workers": 0},
                        {"role": "train", "name": "train_loader", "dataset": "TensorDataset",
                         "num_workers": workers, "prefetch_factor": 2 if workers else None,
                         "persistent_workers": False, "pin_memory": False, "batch_size": 64}],
            "attribution": {"cpu": {"torch_threads": threads}},
            "script": {"started": {"cuda_available": False, "torch_threads": threads}},
            "recommendations": list(recommendations)}


class FakeRunner:
    """A script whose rate is a function of the overrides; records every call (change, steps)."""

    def __init__(self, rate, *, first_fails=False, recommendations=(), base_workers=0):
        self.rate, self.first_fails, self.calls = rate, first_fails, []
        self.recommendations, self.base_workers = recommendations, base_workers

    def __call__(self, change, steps, out):
        self.calls.append((dict(change), steps))
        folder = out / "run"
        folder.mkdir(parents=True)
        if self.first_fails:
            return TrialRun("failed", None, None, folder, "ValueError: sample 3 is corrupt")
        rate = self.rate(change, steps)
        return TrialRun("complete", rate, summary(rate, workers=self.base_workers,
                                                  recommendations=self.recommendations), folder)


def workers_help(change, steps):
    """2 workers are best (x3), threads=1 a little better with workers, everything else no effect."""
    workers = change.get("loader.num_workers", 0)
    rate = {0: 1000.0, 1: 2000.0, 2: 3000.0, 3: 2900.0, 4: 2800.0}.get(workers, 2500.0)
    if workers and change.get("train.threads") == 1:
        rate *= 1.10
    return rate


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        self.t += 1.5  # every reading 1.5 s later: each trial's wall_s is 1.5 s
        return self.t


def test_the_search_starts_from_the_scripts_settings_and_confirms_the_best_against_them(tmp_path):
    runner = FakeRunner(workers_help)
    doc, folder = tune_script(COMMAND, out=tmp_path, budget=ScriptBudget(20, 60, 12), run_trial=runner, cores=2,
                              clock=FakeClock())
    assert doc["status"] == "complete" and folder.name.endswith("-tune-train")
    assert json.loads((folder / "tune.json").read_text()) == json.loads(json.dumps(doc))
    first = doc["trials"][0]
    assert first["change"] == {} and first["why"] == "the script as written" and first["wall_s"] == pytest.approx(1.5)
    assert first["settings"] == {"loader.num_workers": 0, "train.threads": 2, "loader.prefetch_factor": None,
                                 "loader.persistent_workers": False}
    assert runner.calls[0] == ({}, 20)
    search = [t for t in doc["trials"] if t["phase"] == "search"]
    assert 2 <= len(search) <= 12 and all(t["steps"] == 20 for t in search)
    # a trial never re-measures the script as written, and its overrides are only what differs from it
    assert [c for c, _ in runner.calls].count({}) == 2  # the first trial and the base's confirming run
    confirm = [t for t in doc["trials"] if t["phase"] == "confirm"]
    assert {t["steps"] for t in confirm} == {60} and any(t["change"] == {} for t in confirm)
    best = doc["best"]
    assert best["confirmed"] and best["change"]["loader.num_workers"] == 2 and best["change"]["train.threads"] == 1
    assert best["samples_per_s"] == pytest.approx(3300.0) and doc["base"]["samples_per_s"] == 1000.0
    assert best["speedup"] == pytest.approx(3.3) and doc["base"]["confirmed"]
    assert "torch.set_num_threads(1)" in best["python"] and "num_workers=2" in best["python"]
    assert "train_loader: DataLoader(TensorDataset(...)" in best["python"] and "prefetch" not in best["python"]
    text = answer_text(doc)
    assert "best: x3.30" in text and "  torch.set_num_threads(1)\n" in text and "num_workers=2" in text
    for t in doc["trials"]:
        assert (folder / t["folder"]).is_dir()


def test_a_gain_that_does_not_hold_up_in_the_longer_run_gives_the_scripts_own_settings(tmp_path):
    def noisy(change, steps):  # workers look 20% faster in a short trial, are 1% slower in a long one
        if change.get("loader.num_workers"):
            return 1200.0 if steps == 20 else 990.0
        return 1000.0

    doc, _ = tune_script(COMMAND, out=tmp_path, budget=ScriptBudget(20, 60, 8), run_trial=FakeRunner(noisy),
                         cores=2)
    assert doc["searched_best"]["change"]["loader.num_workers"] >= 1
    assert len([t for t in doc["trials"] if t["phase"] == "confirm"]) == 3  # 2 finalists and the base
    assert doc["best"]["change"] == {} and doc["best"]["python"] == "" and not doc["best"]["confirmed"]
    assert doc["best"]["samples_per_s"] == doc["base"]["samples_per_s"] == 1000.0
    assert any("did not hold up" in n for n in doc["notes"])
    assert "keep the script's settings (no change was faster by more than 3% in 60-step confirming runs)" \
        in answer_text(doc)


def test_no_trial_beating_the_noise_means_no_confirming_run_and_no_change(tmp_path):
    runner = FakeRunner(lambda change, steps: 1000.0 + 10 * change.get("loader.num_workers", 0))  # +1%: noise
    doc, _ = tune_script(COMMAND, out=tmp_path, budget=ScriptBudget(20, 60, 6), run_trial=runner, cores=2)
    assert doc["best"]["change"] == {} and doc["best"]["speedup"] == 1.0
    assert not [t for t in doc["trials"] if t["phase"] == "confirm"]
    assert len([t for t in doc["trials"] if t["status"] == "complete"]) <= 6
    assert "in the trials)" in answer_text(doc) and "confirming" not in answer_text(doc)  # none ran


def test_the_recommendations_seed_the_search(tmp_path):
    rec = {"change": {"loader.num_workers": 3, "train.threads": 1}, "predicted_samples_per_s": 5000.0}
    runner = FakeRunner(workers_help, recommendations=[rec])
    doc, _ = tune_script(COMMAND, out=tmp_path, budget=ScriptBudget(20, 60, 6), run_trial=runner, cores=2)
    second = doc["trials"][1]
    assert second["why"] == "predicted by the recommendations"
    assert second["change"] == {"loader.num_workers": 3, "train.threads": 1, "loader.prefetch_factor": 2}
    # PyTorch's default prefetch factor, which the normalized settings write out, is not written in the script
    assert written(second["change"], doc["base"]["settings"]) == {"loader.num_workers": 3, "train.threads": 1}
    assert written({"loader.prefetch_factor": 4}, {"loader.prefetch_factor": None}) == {"loader.prefetch_factor": 4}


def test_going_to_no_workers_overrides_the_worker_only_settings(tmp_path):
    runner = FakeRunner(lambda change, steps: 3000.0 - 500 * change.get("loader.num_workers", 2), base_workers=2)
    doc, _ = tune_script(COMMAND, out=tmp_path, budget=ScriptBudget(20, 60, 12), run_trial=runner, cores=2)
    assert doc["best"]["change"] == {"loader.num_workers": 0, "loader.prefetch_factor": None}
    assert override_args(doc["best"]["change"]) == ["--loader", "num_workers=0", "--loader", "prefetch_factor=None"]
    assert override_args({"loader.persistent_workers": True, "train.threads": 1}) == [
        "--loader", "persistent_workers=True", "--threads", "1"]


def test_a_script_that_fails_as_written_is_reported_and_its_folder_kept(tmp_path):
    doc, folder = tune_script(COMMAND, out=tmp_path, budget=ScriptBudget(20, 60, 6),
                              run_trial=FakeRunner(workers_help, first_fails=True), cores=2)
    assert doc["status"] == "failed" and "sample 3 is corrupt" in doc["error"]
    assert doc["best"] is None and len(doc["trials"]) == 1
    assert json.loads((folder / "tune.json").read_text())["status"] == "failed"


def test_a_trials_run_folder_is_read_back(tmp_path):
    run = tmp_path / "20260101T000000Z-train"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps(summary(1234.5)))
    assert read_trial(tmp_path, 0, "").samples_per_s == 1234.5
    failed = read_trial(tmp_path, 1, "Traceback ...\nValueError: boom\n")
    assert failed.status == "failed" and "boom" in failed.error
    assert read_trial(tmp_path / "none", 2, "pipeprof: error: no such script\n").error.endswith("no such script")
    argv = ProfileRunner(COMMAND, warmup_steps=3).argv({"loader.num_workers": 2}, 40, tmp_path)
    assert argv[1:] == ["-m", "pipeprof", "profile", "--quiet", "--no-what-ifs", "--steps", "40", "--warmup-steps", "3",
                        "--out", str(tmp_path), "--loader", "num_workers=2", "--", *COMMAND]


@pytest.mark.parametrize("argv, match", [
    ([], "expected a scenario file or `-- python SCRIPT"),
    (["--steps", "0", "--", "python", "train.py"], "--steps: expected a whole number >= 1"),
    (["--steps", "x", "--", "python", "train.py"], "--steps: expected a whole number"),
    (["--window", "2", "--", "python", "train.py"], "--window is not an option for a script"),
    (["--steps", "5", "s.toml"], "--steps is not an option for a scenario"),
    (["s.toml", "extra"], "unexpected words after the scenario file"),
    (["--steps", "5", "--warmup-steps", "5", "--", "python", "train.py"], "leaves none of --steps 5"),
    (["--", "python", "-m"], "no script or -m MODULE to run"),
])
def test_bad_script_tune_input_is_one_line_and_exit_2(tmp_path, capsys, argv, match):
    assert main(["tune", "--out", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err
    assert not (tmp_path / "r").exists()


@pytest.mark.integration
def test_a_script_failing_in_its_first_trial_exits_1_with_its_error(tmp_path, capsys):
    script = tmp_path / "broken.py"
    script.write_text("raise ValueError('the config file is missing')\n")
    assert main(["tune", "--quiet", "--steps", "10", "--out", str(tmp_path / "r"), "--",
                 sys.executable, str(script)]) == 1
    err = capsys.readouterr().err
    assert "the config file is missing" in err
    (folder,) = (tmp_path / "r").glob("*-tune-broken")
    assert json.loads((folder / "tune.json").read_text())["status"] == "failed"


@pytest.mark.integration
def test_tuning_a_real_script_writes_tune_json_and_prints_the_winning_python(tmp_path, capsys):
    # 3 ms of collate per batch with no workers: the loader is the bottleneck, workers can help
    out = tmp_path / "r"
    status = main(["tune", "--quiet", "--steps", "24", "--warmup-steps", "4", "--confirm-steps", "40",
                   "--max-evals", "2", "--out", str(out), "--", "python", str(FIXTURES / "plain_loop.py"),
                   "--epochs", "3", "--samples", "2048", "--collate-ms", "3"])
    printed = capsys.readouterr().out
    assert status == 0
    (folder,) = out.glob("*-tune-plain_loop")
    doc = json.loads((folder / "tune.json").read_text())
    assert {"base", "best", "trials", "command", "steps"} <= set(doc)
    assert {"change", "samples_per_s"} <= set(doc["base"]) and {"change", "samples_per_s"} <= set(doc["best"])
    assert doc["base"]["settings"]["loader.num_workers"] == 0
    assert doc["best"]["samples_per_s"] >= doc["base"]["samples_per_s"] > 0
    assert all(t["status"] == "complete" for t in doc["trials"])
    assert f"tune: {folder / 'tune.json'}" in printed
    for key, value in written(doc["best"]["change"], doc["base"]["settings"]).items():
        name = "torch.set_num_threads(" if key == "train.threads" else f"{key.partition('.')[2]}="
        assert f"{name}{value!r}" in printed or f"{name}{value})" in printed
    if not doc["best"]["change"]:
        assert "keep the script's settings" in printed


def test_an_interrupted_tune_keeps_the_trials_so_far_its_running_one_and_the_best_measured(tmp_path):
    runner = FakeRunner(workers_help)

    def interrupted(change, steps, out):
        if len(runner.calls) == 4:  # Ctrl-C while the fifth trial trains: its folder is there
            (out / "run" / "recording").mkdir(parents=True)
            raise KeyboardInterrupt
        return runner(change, steps, out)

    doc, folder = tune_script(COMMAND, out=tmp_path, budget=ScriptBudget(20, 60, 12), run_trial=interrupted,
                              cores=2)
    saved = json.loads((folder / "tune.json").read_text())
    assert saved["status"] == "interrupted" and len(saved["trials"]) == 5
    running = saved["trials"][-1]
    assert running["status"] == "interrupted" and running["folder"] == "trials/04" and (folder / "trials/04").is_dir()
    measured = [t for t in saved["trials"][:4] if t["change"]]
    fastest = max(measured, key=lambda t: t["samples_per_s"])
    assert fastest["samples_per_s"] > 1000.0  # 4 measured trials: one beat the script's own settings
    best = saved["best"]
    assert (best["change"], best["samples_per_s"], best["confirmed"]) == (fastest["change"],
                                                                         fastest["samples_per_s"], False)
    assert best["speedup"] == pytest.approx(fastest["samples_per_s"] / 1000.0) and best["python"]
    assert any(n.startswith("Interrupted after 4 measured trial(s): the best is the fastest trial so far, not "
                            "confirmed") for n in saved["notes"])
    assert "(a short trial, not confirmed)" in answer_text(saved)


def test_the_tuners_trials_check_the_first_runs_predictions(tmp_path):
    rec = {"change": {"loader.num_workers": 2}, "predicted_samples_per_s": 3300.0, "tier": "measured",
           "interval": {"samples_per_s": [2700.0, 3900.0]}}
    runner = FakeRunner(workers_help, recommendations=[rec])
    doc, _ = tune_script(COMMAND, out=tmp_path, budget=ScriptBudget(20, 60, 6), run_trial=runner, cores=2)
    rows = [r for r in doc["prediction_check"]["rows"] if r["from"] == "trial 0"]
    (row,) = [r for r in rows if r["change"] == {"loader.num_workers": 2}]
    # the first trial's prediction set beside the trial that ran those settings: 3,000 samples/s measured
    assert row["measured"] == 3000.0 and row["error"] == pytest.approx(0.1) and row["inside"] is True
    assert row["tier"] == "measured" and doc["prediction_check"]["summary"]["pairs"] >= 1
