"""pipeprof tune end to end on a tiny scenario, its snippets, and bad input."""

import json

import pytest
import tomllib
from tiny import tiny_file, tiny_toml

from pipeprof.analysis.tune import FINALISTS
from pipeprof.cli.main import main
from pipeprof.pipeline.tune import ROUNDS, toml_snippet
from pipeprof.render.script_text import dataloader_kwargs
from pipeprof.scenario import scenario_from_dict

TINY = tiny_toml("tiny-tune", "a tiny <script>alert(1)</script> tuning")


@pytest.fixture
def scenario_file(tmp_path):
    return tiny_file(tmp_path, "tiny-tune", "a tiny <script>alert(1)</script> tuning")


@pytest.mark.integration
def test_tune_measures_trials_confirms_the_best_in_a_fresh_process_and_prints_its_settings(tmp_path, scenario_file,
                                                                                          capsys, monkeypatch):
    import pipeprof.pipeline.tune as tune_pipeline

    probes = []
    real = tune_pipeline.profile_workload

    def profile_workload(work, **kwargs):
        probes.append(kwargs.get("what_ifs", True))
        return real(work, **kwargs)

    monkeypatch.setattr(tune_pipeline, "profile_workload", profile_workload)
    out, cache = tmp_path / "reports", tmp_path / "cache"
    status = main(["tune", str(scenario_file), "--max-evals", "3", "--window", "2", "--confirm-seconds", "1",
                   "--confirm-repeats", "1",
                   "--out", str(out), "--cache", str(cache), "--quiet"])
    assert status == 0
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    doc = json.loads((folder / "tune.json").read_text())
    assert doc["kind"] == "tune" and doc["status"] == "complete"
    trials = [p for p in doc["points"] if p["index"] >= 0]
    measured = [p for p in trials if p["status"] in ("complete", "failed")]
    final = [p for p in measured if p["why"].startswith("final round")]
    # --max-evals 3 in all, the final round's included; the compute ceiling is the first trial's own probe
    # (training steps on one batch on the device), not one more trial
    assert len(measured) <= 3 and len(measured) - len(final) >= 1 and 1 <= len(final) <= FINALISTS * ROUNDS
    assert not any(p["why"] == "the compute ceiling" for p in trials)
    finalists = doc["final_round"]["finalists"]
    assert [f["settings"] for f in finalists] == _unique([p["change"] for p in final])
    assert all(len(f["samples_per_s_per_window"]) >= 1 for f in finalists)
    assert doc["final_round"]["broad_window_s"] == 1.0 and doc["final_round"]["window_s"] == 2.0
    assert {p["window_s"] for p in measured if p["status"] == "complete"} <= {1.0, 2.0}
    assert trials[0]["why"] == "the scenario as given"
    assert probes[0] is True and not any(probes[1:])  # what-if probes only where the recommendations seed
    assert trials[0]["change"]["loader.num_workers"] == 0 and trials[0]["change"]["data.storage"] == "ram"
    confirm = doc["points"][-1]
    assert confirm["index"] == -1 and confirm["status"] == "complete" and (folder / confirm["report"]).exists()
    assert doc["best"]["samples_per_s"] == confirm["samples_per_s"]
    # the snippet is valid TOML that the scenario accepts back
    snippet = tomllib.loads(doc["toml_snippet"])
    base = tomllib.loads(TINY)
    for section, values in snippet.items():
        base.setdefault(section, {}).update(values)
    scenario_from_dict(base, "snippet")
    assert "DataLoader(dataset" in doc["dataloader_kwargs"] or "on the device" in doc["dataloader_kwargs"]
    assert doc["ceiling"]["samples_per_s"] > 0 and "compute ceiling" in doc["ceiling"]["words"]
    html = (folder / "tune.html").read_text()
    assert 'id="toml-snippet"' in html and "<script>alert(1)" not in html
    assert capsys.readouterr().out.strip().endswith(f"tune: {folder / 'tune.html'}")


def _unique(items):
    out = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


@pytest.mark.parametrize("extra, match", [(["--max-evals", "0"], "--max-evals 0"),
                                          (["--batch-sizes", "64,x"], "--batch-sizes 64,x"),
                                          (["--window", "-1"], "expected a number > 0")])
def test_bad_tune_arguments_are_one_line_and_exit_2(tmp_path, scenario_file, capsys, extra, match):
    assert main(["tune", str(scenario_file), "--out", str(tmp_path / "r"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err
    assert not (tmp_path / "r").exists()


def test_the_snippets_of_a_setting():
    settings = {"loader.num_workers": 2, "loader.prefetch_factor": 4, "loader.persistent_workers": True,
                "train.threads": 1, "data.storage": "ram"}
    assert tomllib.loads(toml_snippet(settings)) == {
        "loader": {"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True},
        "train": {"threads": 1}, "data": {"storage": "ram"}}
    text = dataloader_kwargs(settings)
    assert "DataLoader(dataset, num_workers=2, prefetch_factor=4, persistent_workers=True)" in text
    assert "torch.set_num_threads(1)" in text and "decode the data set once into RAM" in text
    device = dataloader_kwargs({"loader.num_workers": 0, "data.storage": "device", "train.threads": 2})
    assert "no DataLoader" in device and "DataLoader(" not in device


def test_the_search_space_follows_the_scenario_and_keep_storage(tmp_path):
    import torch

    from pipeprof.pipeline.tune import make_space
    from pipeprof.scenario import load_scenario

    ram = load_scenario(tiny_file(tmp_path))
    assert make_space(ram, torch.device("cpu"), ()).placements == ("ram", "device")
    disk = load_scenario(tiny_file(tmp_path, storage="memmap"))
    assert make_space(disk, torch.device("cpu"), ()).placements == ("memmap", "ram", "device")
    kept = make_space(disk, torch.device("cpu"), (64, 128), keep_storage=True)
    assert kept.placements == () and "data.storage" not in kept.dimensions()
    assert "loader.batch_size" in kept.dimensions() and "loader.pin_memory" not in kept.dimensions()
