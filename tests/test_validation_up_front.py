"""Bad settings refused up front, one line and exit status 2, before torch loads or a script starts.

Counts of workers and threads are bounded by what the machine can start
(``machine_limits``): these tests give the machine (a fake ``MachineLimits``),
so they say what a 2-core laptop and a 64-core node each allow.
"""

from __future__ import annotations

import json

import pytest

import pipeprof
from pipeprof import machine_limits
from pipeprof.cli.main import main
from pipeprof.cli.sweep_output import report_end
from pipeprof.cli.tune_cmd import answer_text
from pipeprof.errors import UsageError
from pipeprof.machine_limits import PER_CORE, MachineLimits
from pipeprof.scenario import SAMPLE_BYTES, scenario_from_dict
from pipeprof.script.overrides import parse

GIB = 2**30
BASE = {"name": "t", "train": {"steps": 20}}


@pytest.fixture
def machine(monkeypatch):
    """This test's machine: 4 usable cores, no task limit read, 8 GiB of memory (change it through the dict)."""
    spec = {"cores": 4, "tasks": None, "memory_bytes": 8 * GIB}
    monkeypatch.setattr(machine_limits, "current", lambda proc=None: MachineLimits(**spec))
    return spec


def refused(sets: list[str]) -> str:
    with pytest.raises(UsageError) as e:
        scenario_from_dict(json.loads(json.dumps(BASE)), "s.toml", sets)
    message = str(e.value)
    assert "\n" not in message
    return message


def test_worker_and_thread_counts_are_bounded_by_the_machine(machine):
    most = PER_CORE * 4
    scenario_from_dict(dict(BASE), "s.toml", [f"loader.num_workers={most}", f"train.threads={most}"])
    assert refused(["loader.num_workers=100000"]) == (
        f"s.toml: loader.num_workers = 100000 is not allowed: expected 0 to {most} on this machine "
        f"({PER_CORE} a core x 4 usable cores)")
    assert f"train.threads = {most + 1} is not allowed: expected 0 to {most}" in refused([f"train.threads={most + 1}"])
    machine["cores"] = 64  # a big node allows what a laptop does not
    scenario_from_dict(dict(BASE), "s.toml", [f"loader.num_workers={most + 1}"])
    machine["tasks"] = 10  # ... unless the user may start few more tasks (RLIMIT_NPROC, pid and thread limits)
    assert "expected 0 to 10 on this machine (16 a core x 64 usable cores, 10 more tasks allowed)" in refused(
        ["loader.num_workers=11"])


def test_a_job_s_ranks_share_the_workers_the_machine_can_start(machine):
    message = refused(["train.ranks=4", "loader.num_workers=17"])
    assert f"expected 0 to {PER_CORE * 4 // 4} a rank of 4 on this machine" in message


def test_data_held_in_memory_must_fit_the_machine(machine):
    fits = 8 * GIB // SAMPLE_BYTES
    scenario_from_dict(dict(BASE), "s.toml", [f"data.samples={fits}"])
    scenario_from_dict(dict(BASE), "s.toml", [f"data.samples={fits + 1}", "data.storage='memmap'"])  # on disk
    message = refused(["data.samples=999999999999"])
    assert message.startswith(f"s.toml: data.samples = 999999999999 is not allowed with data.storage = 'ram': "
                              f"expected 1 to {fits}, what this machine's 8.0 GiB of memory holds")


def test_an_empty_model_and_drop_last_with_too_few_samples(machine):
    assert "model.hidden = [] is not allowed: expected a non-empty list of layer widths" in refused(
        ["model.hidden=[]"])
    message = refused(["loader.drop_last=true", "data.samples=10", "loader.batch_size=64"])
    assert "loader.drop_last = true is not allowed with data.samples = 10 and loader.batch_size = 64: every batch " \
           "would be dropped (expected at least 64 samples, or drop_last = false)" in message
    assert "warmup" not in message


def test_list_calls_an_empty_model_invalid(tmp_path, capsys, machine):
    (tmp_path / "bad.toml").write_text('name = "bad"\n[model]\nhidden = []\n[train]\nsteps = 20\n')
    main(["list", str(tmp_path)])
    assert "model.hidden = [] is not allowed" in capsys.readouterr().out


def test_profile_refuses_steps_within_the_warm_up_before_the_script_starts(tmp_path, capsys):
    script = tmp_path / "never.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    for flags in (["--steps", "5"], ["--steps", "3", "--warmup-steps", "3"], ["--steps", "4"]):
        assert main(["profile", *flags, "-o", str(tmp_path / "out"), "--", "python", str(script)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "--steps" in err and "warm-up steps, so some steps are counted" in err
    assert not (tmp_path / "ran").exists() and not (tmp_path / "out").exists()


def test_loader_overrides_a_repeated_key_and_counts_past_the_machine(machine):
    with pytest.raises(UsageError, match=r"--loader 'num_workers=4': num_workers is already set by --loader "
                                         r"'num_workers=2'; give each key once"):
        parse(["num_workers=2", "pin_memory=True", "num_workers=4"], None)
    parse(["num_workers=2", "val_loader.num_workers=4"], None)  # two loaders: one value each
    with pytest.raises(UsageError, match=rf"num_workers must be 0 to {PER_CORE * 4} on this machine"):
        parse(["num_workers=100000"], None)
    with pytest.raises(UsageError, match=rf"--threads 100000: expected 1 to {PER_CORE * 4} on this machine"):
        parse([], 100000)


def test_the_machine_s_limits_are_read_from_it(tmp_path):
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "threads-max").write_text("500\n")
    (tmp_path / "sys" / "kernel" / "pid_max").write_text("4194304\n")
    (tmp_path / "loadavg").write_text("0.50 0.40 0.30 2/120 4242\n")
    limits = machine_limits.current(tmp_path)
    assert limits.cores >= 1 and limits.memory_bytes and limits.memory_bytes > 0
    assert limits.tasks is not None and limits.tasks <= 500 - 120


def test_sweep_refuses_max_seconds_with_fixed_steps(tmp_path, capsys):
    scenario = tmp_path / "s.toml"
    scenario.write_text('name = "s"\n[train]\nsteps = 20\n')
    assert main(["sweep", str(scenario), "--fixed-steps", "--max-seconds", "5", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("pipeprof: error: --max-seconds 5 is not used with --fixed-steps (each point runs the "
                   "scenario's own steps or epochs): give one of them")


@pytest.mark.parametrize("sizes", ["", " ", "64,,128"])
def test_tune_refuses_an_empty_batch_size_list(tmp_path, capsys, sizes):
    scenario = tmp_path / "s.toml"
    scenario.write_text('name = "s"\n[train]\nsteps = 20\n')
    assert main(["tune", str(scenario), "--batch-sizes", sizes, "--out", str(tmp_path / "out")]) == 2
    assert "--batch-sizes" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_profile_api_names_its_out_argument(tmp_path):
    file = tmp_path / "a-file"
    file.write_text("")
    with pytest.raises(ValueError, match=r"^pipeprof.profile\(out='.*a-file'\): exists and is not a folder$"):
        with pipeprof.profile(out=file):
            pass


def _tune_doc(status: str, index: int) -> dict:
    return {"kind": "tune", "status": status, "points": [{"status": "complete"}, {"status": "complete"}],
            "best": {"index": index, "label": "loader.num_workers=2", "samples_per_s": 50580.0}}


def test_an_interrupted_tune_says_its_best_is_unconfirmed(tmp_path, capsys):
    from rich.console import Console

    console = Console(stderr=True, width=200)
    assert report_end(_tune_doc("interrupted", 3), tmp_path, console) == 130
    err = capsys.readouterr().err
    assert err.startswith("interrupted: best trial so far, not confirmed: loader.num_workers=2: 50,580")
    assert "tune interrupted after 2 complete points; no best was confirmed" in err
    assert report_end(_tune_doc("complete", -1), tmp_path, console) == 0
    assert capsys.readouterr().err.startswith("best: loader.num_workers=2")


def test_a_script_tune_s_unconfirmed_best_says_so():
    doc = {"base": {"samples_per_s": 1000.0}, "confirm_steps": 60,
           "best": {"change": {"loader.num_workers": 2}, "speedup": 1.2, "samples_per_s": 1200.0,
                    "confirmed": False, "python": "num_workers=2"}}
    assert "best: x1.20: 1,200 samples/s (a short trial, not confirmed)" in answer_text(doc)


def test_profile_refuses_a_what_ifs_budget_that_is_not_a_finite_number_of_seconds(tmp_path, capsys):
    script = tmp_path / "never.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    for value in ("0", "-1", "inf", "nan", "soon"):
        assert main(["profile", "--steps", "20", "--what-ifs-seconds", value, "-o", str(tmp_path / "out"), "--",
                     "python", str(script)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "--what-ifs-seconds" in err and "expected a number > 0" in err, err
    assert not (tmp_path / "ran").exists() and not (tmp_path / "out").exists()


def test_an_interrupted_script_tune_says_so_on_the_terminal(tmp_path, monkeypatch, capsys):
    """`pipeprof tune -- python train.py` stopped during its confirming runs: its best, from a short trial, is
    said unconfirmed, and stderr says the tune was interrupted and where it is saved; exit 130."""
    from pipeprof.pipeline import script_tune

    doc = {"status": "interrupted", "confirm_steps": 60, "base": {"samples_per_s": 1000.0},
           "trials": [{"status": "complete"}, {"status": "complete"}, {"status": "interrupted"}],
           "best": {"change": {"loader.num_workers": 2}, "speedup": 1.2, "samples_per_s": 1200.0,
                    "confirmed": False, "python": "num_workers=2"}}
    monkeypatch.setattr(script_tune, "tune_script", lambda *a, **k: (doc, tmp_path / "tuned"))
    assert main(["tune", "--quiet", "-o", str(tmp_path), "--", "python", "train.py"]) == 130
    out, err = capsys.readouterr()
    assert "best: x1.20: 1,200 samples/s (a short trial, not confirmed)" in out
    assert err.strip() == (f"pipeprof: tune interrupted after 2 complete trials; no best was confirmed; saved in "
                           f"{tmp_path / 'tuned'}")


def test_data_on_disk_must_fit_the_cache_folder(tmp_path, monkeypatch, capsys):
    """The synthetic arrays every storage kind is made from go to the cache folder first: a data set its file
    system cannot hold is one line naming data.samples and how many fit, before anything is written."""
    from collections import namedtuple

    from pipeprof.storage import synthetic

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(synthetic.shutil, "disk_usage", lambda path: usage(2**30, 2**30 - 10**6, 10**6))
    fits = 10**6 // synthetic.arrays_bytes(1)
    with pytest.raises(UsageError) as e:
        synthetic.ensure_synthetic(fits + 1, 0, tmp_path / "cache")
    assert str(e.value) == (f"data.samples = {fits + 1} is not allowed here: its arrays take 979 KiB and the cache "
                            f"folder {tmp_path / 'cache'} has 977 KiB free: expected 1 to {fits} (or another cache: "
                            "--cache or $PIPEPROF_CACHE)")
    assert not [p for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")]  # nothing half-built
    synthetic.ensure_synthetic(fits, 0, tmp_path / "cache")  # what fits is built
    monkeypatch.undo()
    scenario = tmp_path / "s.toml"  # through the command, on this machine's disk: petabytes fit no cache here
    scenario.write_text('name = "s"\n[data]\nstorage = "memmap"\nsamples = 999999999999\n[train]\nsteps = 20\n')
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "data.samples = 999999999999 is not allowed here" in err, err
