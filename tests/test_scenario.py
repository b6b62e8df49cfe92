"""Scenario loading and strict validation: one clear line per mistake."""

from pathlib import Path

import pytest

from pipeprof.errors import UsageError
from pipeprof.scenario import STORAGE_KINDS, load_scenario, parse_override

SCENARIOS = sorted(Path(__file__).parent.parent.joinpath("scenarios").glob("*.toml"))

GOOD = """
name = "t"
[data]
storage = "ram"
samples = 1000
[loader]
batch_size = 100
num_workers = 2
[train]
steps = 20
warmup_steps = 2
"""


def write(tmp_path, text, name="s.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path, overrides=()):
    with pytest.raises(UsageError) as info:
        load_scenario(path, list(overrides))
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_shipped_scenarios_are_valid(path):
    s = load_scenario(path)
    assert s.name and s.description
    assert s.total_steps() > s.train.warmup_steps


def test_quick_is_the_default_and_exists():
    assert any(p.name == "quick.toml" for p in SCENARIOS)


def test_defaults_and_values(tmp_path):
    s = load_scenario(write(tmp_path, GOOD))
    assert s.loader.num_workers == 2
    assert s.loader.prefetch_factor is None
    assert s.model.hidden == (256, 128)
    assert s.steps_per_epoch() == 10
    assert s.total_steps() == 20
    assert s.to_dict()["loader"]["batch_size"] == 100


def test_epochs_count_partial_batches(tmp_path):
    s = load_scenario(write(tmp_path, GOOD.replace("steps = 20", "epochs = 3").replace("samples = 1000", "samples = 1050")))
    assert s.steps_per_epoch() == 11
    assert s.total_steps() == 33
    s = load_scenario(write(tmp_path, GOOD), ["train.epochs=1", "loader.drop_last=true", "data.samples=1050"])
    assert s.total_steps() == 10


def test_unknown_key_names_file_key_and_suggestion(tmp_path):
    path = write(tmp_path, GOOD.replace("num_workers = 2", "num_worker = 2"))
    message = error_of(path)
    assert str(path) in message
    assert "loader.num_worker" in message
    assert "did you mean loader.num_workers" in message
    assert "prefetch_factor" in message  # lists what is allowed


def test_unknown_section(tmp_path):
    message = error_of(write(tmp_path, GOOD + "\n[dataloader]\nbatch_size = 2\n"))
    assert "dataloader" in message and "allowed" in message


@pytest.mark.parametrize(
    "old,new,key,bad",
    [
        ("num_workers = 2", "num_workers = -1", "loader.num_workers", "-1"),
        ("batch_size = 100", "batch_size = 0", "loader.batch_size", "0"),
        ("batch_size = 100", 'batch_size = "big"', "loader.batch_size", "'big'"),
        ("batch_size = 100", "batch_size = true", "loader.batch_size", "true"),
        ('storage = "ram"', 'storage = "tape"', "data.storage", "'tape'"),
        ("steps = 20", "steps = 2.5", "train.steps", "2.5"),
        ("steps = 20", "steps = 20\nmax_seconds = -1", "train.max_seconds", "-1"),
        ("steps = 20", "steps = 20\nsteady_cv = 1.5", "train.steady_cv", "1.5"),
        ("steps = 20", "steps = 20\nsteady_windows = 1", "train.steady_windows", "1"),
        ("steps = 20", 'steps = 20\nsteady = "yes"', "train.steady", "'yes'"),
    ],
)
def test_bad_values_name_the_key_value_and_what_is_allowed(tmp_path, old, new, key, bad):
    message = error_of(write(tmp_path, GOOD.replace(old, new)))
    assert f"{key} = {bad}" in message
    assert "expected" in message


def test_storage_error_lists_the_kinds(tmp_path):
    message = error_of(write(tmp_path, GOOD.replace('"ram"', '"tape"')))
    for kind in STORAGE_KINDS:
        assert repr(kind) in message


def test_missing_file_and_bad_toml(tmp_path):
    assert "scenario file not found" in error_of(tmp_path / "nope.toml")
    message = error_of(write(tmp_path, "name = \n"))
    assert "not valid TOML" in message and "line 1" in message


def test_worker_only_options_need_workers(tmp_path):
    message = error_of(write(tmp_path, GOOD), ["loader.num_workers=0", "loader.persistent_workers=true"])
    assert "loader.persistent_workers" in message and "num_workers" in message
    message = error_of(write(tmp_path, GOOD), ["loader.num_workers=0", "loader.prefetch_factor=4"])
    assert "loader.prefetch_factor = 4" in message


def test_steps_xor_epochs_and_warmup(tmp_path):
    assert "exactly one of steps or epochs" in error_of(write(tmp_path, GOOD.replace("steps = 20", "")))
    both = GOOD.replace("steps = 20", "steps = 20\nepochs = 1")
    assert "exactly one of steps or epochs" in error_of(write(tmp_path, both))
    assert "train.warmup_steps = 20" in error_of(write(tmp_path, GOOD), ["train.warmup_steps=20"])


def test_overrides_read_values_as_toml(tmp_path):
    path = write(tmp_path, GOOD)
    s = load_scenario(path, ["model.hidden=[64, 32, 16]", "loader.pin_memory=true", "data.storage=memmap",
                             "train.device='cpu'", "name=renamed", "profile.sample_hz=20"])
    assert s.model.hidden == (64, 32, 16)
    assert s.loader.pin_memory is True
    assert s.data.storage == "memmap"
    assert s.train.device == "cpu"
    assert s.name == "renamed"
    assert s.profile.sample_hz == 20.0


def test_override_epochs_replaces_steps(tmp_path):
    s = load_scenario(write(tmp_path, GOOD), ["train.epochs=2"])
    assert s.train.steps is None and s.total_steps() == 20


def test_bad_overrides_name_the_override(tmp_path):
    path = write(tmp_path, GOOD)
    message = error_of(path, ["loader.num_workers=-3"])
    assert message.startswith("--set loader.num_workers=-3")
    assert str(path) in message and "integer >= 0" in message
    assert "expected section.key=value" in error_of(path, ["loader.num_workers"])
    assert "unknown section [loaders]" in error_of(path, ["loaders.num_workers=1"])
    assert "model.hidden" in error_of(path, ["model.hidden=[0]"])
    assert "train.device = 'tpu'" in error_of(path, ["train.device=tpu"])


def test_parse_override_keeps_bare_words_as_strings():
    assert parse_override("data.storage=memmap") == ("data", "storage", "memmap")
    assert parse_override("loader.num_workers=4") == ("loader", "num_workers", 4)
    assert parse_override("name=x") == ("", "name", "x")


def test_a_sweep_table_is_not_a_setting_of_a_run(tmp_path):
    s = load_scenario(write(tmp_path, GOOD + "\n[sweep]\nloader.num_workers = [0, 1]\n"))
    assert s == load_scenario(write(tmp_path, GOOD))
