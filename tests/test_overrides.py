"""`pipeprof profile --loader KEY=VALUE --threads N`: parsing and checks, applying to a loader, and small real runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.profiled import FIXTURES
from support.profiled import profile as profile_into
from torch.utils.data import DataLoader, TensorDataset

from pipeprof.errors import UsageError
from pipeprof.script import overrides as ov
from pipeprof.script.overrides import (
    ALLOWED,
    LoaderOverride,
    Overrides,
    apply_settings,
    is_dataloader_argument,
    looks_like_training,
    parse,
)

# --- parsing and checks -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("num_workers=2", LoaderOverride(None, "num_workers", 2)),
    ("pin_memory=True", LoaderOverride(None, "pin_memory", True)),
    ("prefetch_factor=None", LoaderOverride(None, "prefetch_factor", None)),
    ("train_loader.batch_size=128", LoaderOverride("train_loader", "batch_size", 128)),
    ("self.train_loader.persistent_workers=False", LoaderOverride("self.train_loader", "persistent_workers", False)),
    ("multiprocessing_context=spawn", LoaderOverride(None, "multiprocessing_context", "spawn")),
    ("timeout=2.5", LoaderOverride(None, "timeout", 2.5)),
])
def test_a_flag_parses_to_its_loader_key_and_literal(text, expected):
    assert ov.parse_one(text) == expected


@pytest.mark.parametrize("text, words", [
    ("nu_workers=2", "'nu_workers' is not an argument of torch.utils.data.DataLoader"),
    ("num_workers=-1", "num_workers must be a whole number >= 0"),
    ("num_workers=two", "num_workers must be a whole number >= 0"),
    ("num_workers=True", "num_workers must be a whole number >= 0"),
    ("batch_size=0", "batch_size must be a whole number >= 1"),
    ("prefetch_factor=0", "prefetch_factor must be a whole number >= 1, or None"),
    ("pin_memory=1", "pin_memory must be True or False"),
    ("multiprocessing_context=threads", "multiprocessing_context must be fork, spawn, forkserver or None"),
    ("collate_fn=None", "collate_fn takes an object"),
    ("num_workers", "expected KEY=VALUE or NAME.KEY=VALUE"),
])
def test_a_bad_flag_is_one_line_naming_it_and_what_is_allowed(text, words):
    with pytest.raises(UsageError) as e:
        ov.parse_one(text)
    message = str(e.value)
    assert words in message and "\n" not in message and repr(text) in message


def test_workers_off_with_a_worker_only_setting_is_refused():
    with pytest.raises(UsageError, match="prefetch_factor needs worker processes"):
        parse(["num_workers=0", "prefetch_factor=4"], None)
    assert parse(["num_workers=0", "train_loader.prefetch_factor=4"], None)  # different loaders: no clash


def test_the_request_round_trips_through_the_environment_and_back_to_flags():
    request = parse(["num_workers=2", "val_loader.pin_memory=True"], 3)
    again = ov.from_environment(json.dumps(request.to_json()))
    assert again == request
    assert request.to_json() == {"loader": [{"loader": None, "key": "num_workers", "value": 2},
                                            {"loader": "val_loader", "key": "pin_memory", "value": True}],
                                 "threads": 3}
    assert again.flags() == ["--loader", "num_workers=2", "--loader", "val_loader.pin_memory=True", "--threads", "3"]
    assert not ov.from_environment(None) and not ov.from_environment("{not json")


# --- applying to a loader -----------------------------------------------------------------------------------------

def _loader(**kwargs) -> DataLoader:
    return DataLoader(TensorDataset(torch.arange(40.0)), **kwargs)


def test_settings_the_dataloader_refuses_after_construction_are_set_and_the_batches_follow():
    loader = _loader(batch_size=4, shuffle=True)
    with pytest.raises(ValueError):
        loader.batch_size = 8  # what DataLoader.__setattr__ does: the reason for object.__setattr__
    entry = apply_settings(loader, {"batch_size": 10, "drop_last": True, "num_workers": 1})
    assert entry["changed"] == {"batch_size": 10, "drop_last": True, "num_workers": 1, "prefetch_factor": 2}
    assert entry["script"] == {"batch_size": 4, "drop_last": False, "num_workers": 0, "prefetch_factor": None}
    assert [len(b[0]) for b in loader] == [10] * 4
    assert loader.num_workers == 1 and loader.prefetch_factor == 2  # DataLoader.__init__'s default for workers
    assert isinstance(loader.sampler, torch.utils.data.RandomSampler)  # its own sampler kept


def test_going_to_no_workers_drops_the_worker_only_settings():
    loader = _loader(batch_size=8, num_workers=2, prefetch_factor=4, persistent_workers=True)
    entry = apply_settings(loader, {"num_workers": 0})
    assert entry["dropped"] == ["prefetch_factor", "persistent_workers"]
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (0, None, False)
    assert sum(len(b[0]) for b in loader) == 40


def test_a_loader_with_its_own_batch_sampler_keeps_it_and_says_so():
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(40)), 5, False)
    loader = DataLoader(TensorDataset(torch.arange(40.0)), batch_sampler=sampler)
    entry = apply_settings(loader, {"batch_size": 20, "pin_memory": True})
    assert "batch_size" in entry["not_applied"] and entry["set"] == {"pin_memory": True}
    assert loader.batch_sampler is sampler and loader.pin_memory is True


@pytest.mark.parametrize("name, grad, training", [
    ("loader", True, True), ("train_loader", True, True), ("self.train_loader", True, True),
    ("train_dataloader", True, True), ("val_loader", True, False), ("self.test_loader", True, False),
    ("eval_dataloader", True, False), ("loader", False, False), ("validate", True, True),
])
def test_which_loaders_look_like_training_at_their_first_iter(name, grad, training):
    assert looks_like_training(name, grad_enabled=grad) is training


def test_the_applier_changes_the_training_loader_and_the_named_one_once(tmp_path):
    record = tmp_path / "overrides-1.jsonl"
    applier = ov.Applier(parse(["num_workers=1", "val_loader.batch_size=20"], None), str(record))
    train_loader = _loader(batch_size=4, shuffle=True)
    val_loader = _loader(batch_size=4)
    applier.on_first_iter(train_loader)
    with torch.no_grad():
        applier.on_first_iter(val_loader)
    train_loader.num_workers = 0  # the script's own change after the first iter() is left alone
    applier.on_first_iter(train_loader)
    assert train_loader.num_workers == 0 and val_loader.num_workers == 0 and val_loader.batch_size == 20
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(e["name"], e["changed"]) for e in lines] == [
        ("train_loader", {"num_workers": 1, "prefetch_factor": 2}), ("val_loader", {"batch_size": 20})]


def test_the_outcome_notes_what_was_overridden_and_a_name_never_iterated():
    request = Overrides((LoaderOverride(None, "num_workers", 2), LoaderOverride("test_loader", "batch_size", 8)),
                        2).to_json()
    records = [{"pid": 7, "kind": "threads", "set": 2, "script": 4},
               {"pid": 7, "kind": "threads_asked", "asked": 1, "kept": 2},
               {"pid": 7, "kind": "loader", "name": "train_loader", "set": {"num_workers": 2},
                "changed": {"num_workers": 2}, "script": {"num_workers": 0}, "dropped": [], "not_applied": {}}]
    loaders = [{"name": "train_loader", "role": "train"}, {"name": "val_loader", "role": "eval"}]
    record, notes = ov.outcome(request, records, loaders, 7)
    assert record["threads_applied"] == {"set": 2, "script": 4, "script_asked": [1]}
    assert record["applied"][0]["name"] == "train_loader" and record["loader"] == request["loader"]
    assert notes[0] == "overridden: train_loader num_workers=2 (script: 0)"
    assert notes[1] == "overridden: torch threads 2 (script: 4); the script's own torch.set_num_threads(1) kept at 2"
    assert "never iterated a loader named 'test_loader'" in notes[2] and "nothing was changed" in notes[2]
    wrong = [{**records[2], "name": "val_loader"}]
    assert "but the training loader was train_loader" in ov.outcome(request, wrong, loaders, 7)[1][-1]


# --- small real runs ------------------------------------------------------------------------------------------------

def profile(tmp_path: Path, options: list[str], *command: str) -> tuple[subprocess.CompletedProcess, Path | None]:
    proc, folder, _, _ = profile_into(tmp_path / "reports", sys.executable, *command, options=options)
    return proc, folder


def _read(folder: Path) -> tuple[dict, dict]:
    return (json.loads((folder / "summary.json").read_text()), json.loads((folder / "run.json").read_text()))


@pytest.mark.integration
def test_plain_loop_runs_with_the_workers_and_threads_set_from_outside(tmp_path):
    script = FIXTURES / "plain_loop.py"
    before = script.read_bytes()
    proc, folder = profile(tmp_path, ["--loader", "num_workers=1", "--loader", "prefetch_factor=3", "--threads", "1",
                                      "--steps", "30"],
                           str(script), "--epochs", "1", "--samples", "2048", "--threads", "2")
    assert proc.returncode == 0, proc.stderr
    s, meta = _read(folder)
    train = [lo for lo in s["loaders"] if lo["role"] == "train"]
    assert [(lo["name"], lo["num_workers"], lo["prefetch_factor"]) for lo in train] == [("loader", 1, 3)]
    assert meta["overrides"]["loader"] == [{"loader": None, "key": "num_workers", "value": 1},
                                           {"loader": None, "key": "prefetch_factor", "value": 3}]
    assert meta["overrides"]["threads_applied"]["script_asked"] == [2]  # the script's --threads 2, not obeyed
    assert meta["script"]["torch_threads"]["first step"] == 1
    assert s["script"]["overrides"] == meta["overrides"]
    assert "overridden: loader num_workers=1 (script: 0) prefetch_factor=3 (script: None)" in proc.stdout
    assert script.read_bytes() == before
    assert "overridden: loader num_workers=1 (script: 0)" in (folder / "report.html").read_text()  # its notes


@pytest.mark.integration
def test_a_trainer_class_gets_it_on_its_training_loader_only_and_a_named_one_never_made_is_a_note(tmp_path):
    proc, folder = profile(tmp_path, ["--loader", "num_workers=1", "--loader", "test_loader.batch_size=8",
                                      "--steps", "20"],
                           str(FIXTURES / "trainer_class.py"), "--epochs", "1")
    assert proc.returncode == 0, proc.stderr
    s, meta = _read(folder)
    by_name = {lo["name"]: lo for lo in s["loaders"]}
    assert by_name["self.train_loader"]["num_workers"] == 1 and by_name["self.train_loader"]["role"] == "train"
    assert [r["name"] for r in meta["overrides"]["applied"]] == ["self.train_loader"]
    assert any("never iterated a loader named 'test_loader'" in n for n in meta["notes"])


def test_a_bad_key_exits_2_with_one_line_before_anything_runs(tmp_path):
    proc, folder = profile(tmp_path, ["--loader", "nworkers=2"], str(FIXTURES / "plain_loop.py"))
    assert proc.returncode == 2 and folder is None
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'nworkers' is not an argument of torch.utils.data.DataLoader" in lines[0]
    assert not (tmp_path / "reports").exists()


@pytest.mark.integration
def test_a_lightning_train_dataloader_gets_it_and_the_sanity_check_loader_does_not(tmp_path):
    proc, folder = profile(tmp_path, ["--loader", "num_workers=1", "--steps", "20"],
                           str(FIXTURES / "lightning_mlp.py"))
    assert proc.returncode == 0, proc.stderr
    s, meta = _read(folder)
    assert {(lo["name"], lo["role"], lo["num_workers"]) for lo in s["loaders"]} == {
        ("train_dataloader", "train", 1), ("val_dataloader", "eval", 0)}  # validation runs under no_grad
    assert [r["name"] for r in meta["overrides"]["applied"]] == ["train_dataloader"]


def test_every_key_settable_from_outside_is_an_argument_of_this_torchs_dataloader():
    # parse() takes an allowed key without importing torch (the profile's parent never needs it): that holds
    # only while each allowed key is one of DataLoader.__init__'s parameters
    assert all(is_dataloader_argument(key) for key in ALLOWED)
    assert not is_dataloader_argument("num_wrokers") and not is_dataloader_argument("self")
