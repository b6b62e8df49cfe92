"""How loaders are named (issue 14, item 2): by the user's own code, not a wrapper's parameter.

Unit cases run in this process under the real hooks (``DataLoader.__init__`` and ``__iter__`` patched) and
read the loaders' ``L`` events back; the fixtures in the styles real projects use are profiled whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler

from pipeprof.pipeline.script_verify import report_lines
from pipeprof.script import hooks
from pipeprof.script.loader_names import loader_name

FIXTURES = Path(__file__).parent / "fixtures"


class RandomDataset(Dataset):
    def __init__(self, n: int = 8) -> None:
        self.x = torch.randn(n, 3)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.x[i]


@contextmanager
def profiled(tmp_path: Path) -> Iterator[list[dict[str, Any]]]:
    """The real hooks installed in this process; the loaders they saw, in order, filled in at the end."""
    path = tmp_path / "events.jsonl"
    session = hooks.Hooks(hooks.EventLog(str(path)))
    session.install()
    seen: list[dict[str, Any]] = []
    try:
        yield seen
    finally:
        session.uninstall()
        events = [json.loads(line) for line in path.read_text().splitlines()]
        seen.extend(sorted((e[2] for e in events if e[0] == "L"), key=lambda d: d["number"]))


def names(seen: list[dict[str, Any]]) -> list[str]:
    return [d["name"] for d in seen]


# --- a generator wrapper (torchvision's MetricLogger.log_every) ---------------------------------------

class MetricLogger:
    def log_every(self, iterable, print_freq, header=None):
        for seen, obj in enumerate(iterable, 1):
            self.seen = seen
            yield obj


def train_one_epoch(model, data_loader, epoch):
    for batch in MetricLogger().log_every(data_loader, 10, f"Epoch: [{epoch}]"):
        model(batch)


def evaluate(model, data_loader):
    for batch in MetricLogger().log_every(data_loader, 10, "Test:"):
        model(batch)


def test_a_loader_passed_through_a_logging_generator_is_named_where_the_caller_holds_it(tmp_path):
    model = torch.nn.Linear(3, 1)
    with profiled(tmp_path) as seen:
        data_loader = DataLoader(RandomDataset(), batch_size=4)
        data_loader_test = DataLoader(RandomDataset(), batch_size=4)
        train_one_epoch(model, data_loader, 0)
        evaluate(model, data_loader_test)
    assert names(seen) == ["data_loader", "data_loader_test"]  # not "iterable" (the generator's parameter)


# --- a parameter passed down three frames --------------------------------------------------------------

def _run(model, loader):
    _epoch(model, loader)


def _epoch(model, images):
    _steps(model, images)


def _steps(model, loader):
    for batch in loader:
        model(batch)


def test_a_loader_passed_down_three_frames_is_named_by_the_frame_that_holds_it(tmp_path):
    model = torch.nn.Linear(3, 1)
    with profiled(tmp_path) as seen:
        train_batches = DataLoader(RandomDataset(), batch_size=4)
        _run(model, train_batches)
        _run(model, DataLoader(RandomDataset(), batch_size=4))  # held by no name: the telling parameter
    assert names(seen) == ["train_batches", "images"]  # "loader" says nothing: the next parameter out


# --- a dict of loaders, and a loader held by an object's attribute -----------------------------------------

def test_loaders_in_a_dict_are_named_by_their_key(tmp_path):
    with profiled(tmp_path) as seen:
        loaders = {"train": DataLoader(RandomDataset(), batch_size=4), "val": DataLoader(RandomDataset(), batch_size=8)}
        for phase in ("train", "val"):
            for _ in loaders[phase]:
                pass
    assert names(seen) == ["loaders['train']", "loaders['val']"]


class Fitter:
    def __init__(self, loader: DataLoader) -> None:
        self.train_loader = loader

    def fit(self) -> None:
        for _ in self.train_loader:
            pass


def test_an_attribute_names_the_loader_before_the_parameter_it_came_in_by(tmp_path):
    with profiled(tmp_path) as seen:
        fitter = Fitter(DataLoader(RandomDataset(), batch_size=4))
        fitter.fit()
    assert names(seen) == ["self.train_loader"]


# --- named where it is built: a loop over phases, a keyword, a builder's caller ------------------------------

def _phases(train_loader: DataLoader, scratch_loader: DataLoader) -> list[tuple[DataLoader, str]]:
    return [(train_loader, "torch.optim"), (scratch_loader, "by hand")]


def test_two_loaders_iterated_through_a_loop_variable_keep_the_names_they_were_built_under(tmp_path):
    # ``for loader, opt, fwd in phases:`` held both loaders under ``loader``: one line, "loader x2".
    with profiled(tmp_path) as seen:
        train_loader = DataLoader(RandomDataset(), batch_size=4)
        scratch_loader = DataLoader(RandomDataset(), batch_size=2)
        for loader, _how in _phases(train_loader, scratch_loader):
            for _ in loader:
                pass
    assert names(seen) == ["train_loader", "scratch_loader"]


def _phases_built_here() -> list[tuple[DataLoader, int]]:
    concise_loader = DataLoader(RandomDataset(), batch_size=4)
    scratch_loader = DataLoader(RandomDataset(), batch_size=2)
    return [(concise_loader, 1), (scratch_loader, 2)]


def test_loaders_no_frame_holds_but_a_loop_variable_are_named_by_their_assignment(tmp_path):
    with profiled(tmp_path) as seen:
        for loader, _lr in _phases_built_here():
            for _ in loader:
                pass
    assert names(seen) == ["concise_loader", "scratch_loader"]


class FakeTrainer:
    """Lightning's ``Trainer.fit(model, train_dataloaders=..., val_dataloaders=...)``, iterating what it is given."""

    def fit(self, model: Any, train_dataloaders: DataLoader, val_dataloaders: DataLoader) -> None:
        for loader in (train_dataloaders, val_dataloaders):
            for _ in loader:
                pass


def test_loaders_built_in_keyword_arguments_are_named_by_the_keyword(tmp_path):
    with profiled(tmp_path) as seen:
        FakeTrainer().fit(None, train_dataloaders=DataLoader(RandomDataset(), batch_size=4),
                          val_dataloaders=DataLoader(RandomDataset(), batch_size=8))
    assert names(seen) == ["train_dataloaders", "val_dataloaders"]


class DataModule:
    def get_dataloader(self, train: bool) -> DataLoader:
        return DataLoader(RandomDataset(), batch_size=4 if train else 8)


def _prepare(data: DataModule) -> list[DataLoader]:
    train_iter = data.get_dataloader(True)
    return [train_iter]


def test_a_loader_a_helper_returns_is_named_where_its_caller_stores_it(tmp_path):
    with profiled(tmp_path) as seen:
        data = DataModule()
        for loader in _prepare(data):
            for _ in loader:
                pass
        for _ in data.get_dataloader(False):  # stored nowhere: named after the function that returned it
            pass
    assert names(seen) == ["train_iter", "get_dataloader"]


# --- a DataLoader subclass iterating itself --------------------------------------------------------------

class EpochLoader(DataLoader):
    def __init__(self, dataset: Dataset, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)

    def run_epoch(self) -> int:
        return sum(1 for _ in self)


def test_a_subclass_iterating_itself_is_named_by_the_variable_holding_it(tmp_path):
    with profiled(tmp_path) as seen:
        shapes = EpochLoader(RandomDataset(), batch_size=2)
        assert shapes.run_epoch() == 4
    assert names(seen) == ["shapes"]  # not "self"


# --- built in a function and returned; built where it is iterated; the dataset's class ------------------------

def make_val_loader() -> DataLoader:
    return DataLoader(RandomDataset(), batch_size=4)


def _iterate_a_new_loader() -> None:
    for _ in DataLoader(RandomDataset(), batch_size=4):
        pass


def test_a_loader_held_by_no_name_is_named_after_the_function_that_returned_it(tmp_path):
    with profiled(tmp_path) as seen:
        for _ in make_val_loader():
            pass
        _iterate_a_new_loader()  # built where it is iterated: that function did not return it
    assert names(seen) == ["make_val_loader", "RandomDataset"]


def test_a_loader_the_user_never_names_is_named_after_its_dataset_class(tmp_path):
    with profiled(tmp_path) as seen:
        for _ in DataLoader(RandomDataset(), batch_size=4):
            pass
    assert names(seen) == ["RandomDataset"]
    assert seen[0]["framework"] is None


# --- a library's wrapper: accelerate's DataLoaderShard over the loader it built ---------------------------------

def test_accelerate_prepare_is_named_by_the_users_variable_and_batch_size_read_from_the_batch_sampler(tmp_path):
    accelerate = pytest.importorskip("accelerate")
    accelerator = accelerate.Accelerator(cpu=True)
    with profiled(tmp_path) as seen:
        train_dataloader = DataLoader(RandomDataset(16), batch_size=4, shuffle=True)
        train_dataloader = accelerator.prepare(train_dataloader)
        for _ in train_dataloader:
            pass
        eval_loader = DataLoader(RandomDataset(16), batch_size=8)
        prepared = accelerator.prepare(eval_loader)  # the user's own loader over the same dataset still held
        for _ in prepared:
            pass
    assert names(seen) == ["train_dataloader", "prepared"]  # the holder iterated, not "self.base_dataloader"
    assert [d["batch_size"] for d in seen] == [4, 8]  # the base loader's own batch_size is None
    assert [d["framework"] for d in seen] == ["accelerate", "accelerate"]


def test_a_user_loader_over_the_same_dataset_names_a_loader_a_library_built_from_it(tmp_path):
    accelerate = pytest.importorskip("accelerate")
    accelerator = accelerate.Accelerator(cpu=True)
    with profiled(tmp_path) as seen:
        val_loader = DataLoader(RandomDataset(16), batch_size=8)
        for _ in accelerator.prepare(val_loader):  # the wrapper held by no name
            pass
    assert names(seen) == ["val_loader"]


# --- a loader a library builds and iterates itself (the Hugging Face Trainer's get_train_dataloader) -----------

_TRAINER_SOURCE = """
from torch.utils.data import DataLoader

class Trainer:
    def __init__(self, train_dataset, eval_dataset):
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset

    def get_train_dataloader(self):
        return DataLoader(self.train_dataset, batch_size=4)

    def get_eval_dataloader(self):
        return DataLoader(self.eval_dataset, batch_size=8)

    def train(self):
        for _ in self.get_train_dataloader():
            pass
        for _ in self.get_eval_dataloader():
            pass
"""


def test_a_loader_the_trainer_builds_is_named_after_its_builder_and_framework_is_transformers(tmp_path):
    # The rule goes by the module's top-level package: code run as transformers.trainer is transformers' own.
    library: dict[str, Any] = {"__name__": "transformers.trainer"}
    exec(compile(_TRAINER_SOURCE, "<transformers.trainer>", "exec"), library)
    trainer = library["Trainer"](RandomDataset(8), RandomDataset(8))
    with profiled(tmp_path) as seen:
        trainer.train()
    assert names(seen) == ["Trainer train loader", "Trainer eval loader"]
    assert [d["framework"] for d in seen] == ["transformers", "transformers"]


_REBUILDING_LOOP = """
from torch.utils.data import DataLoader

def fit(module):
    user_loader = module.predict_dataloader()
    rebuilt = DataLoader(user_loader.dataset, batch_size=user_loader.batch_size)  # a sampler swapped in, say
    for _ in rebuilt:
        pass
"""


class Predictor:
    def predict_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(8), batch_size=4)


def test_a_loader_a_library_rebuilds_from_the_users_hook_is_named_after_the_hook(tmp_path):
    library: dict[str, Any] = {"__name__": "lightning.pytorch.loops.fake"}
    exec(compile(_REBUILDING_LOOP, "<lightning.fake>", "exec"), library)
    with profiled(tmp_path) as seen:
        library["fit"](Predictor())
    assert names(seen) == ["predict_dataloader"]  # not "RandomDataset": the library's copy of the hook's loader
    assert seen[0]["framework"] == "lightning"
    assert seen[0]["built_in"] == "predict_dataloader"  # the advice's "the DataLoader built in predict_dataloader()"


_FIT_LOOP = """
def fit(model, train_dataloaders=None, val_dataloaders=None):
    for _ in train_dataloaders:
        pass
"""


def test_a_loader_a_script_hands_to_a_librarys_fit_is_named_by_its_variable_and_built_in_no_hook(tmp_path):
    library: dict[str, Any] = {"__name__": "lightning.pytorch.trainer.fake"}
    exec(compile(_FIT_LOOP, "<lightning.fake>", "exec"), library)
    with profiled(tmp_path) as seen:
        train_loader = DataLoader(RandomDataset(8), batch_size=4)
        library["fit"](None, train_dataloaders=train_loader)
    assert names(seen) == ["train_loader"]
    assert seen[0]["framework"] == "lightning" and seen[0]["built_in"] is None


def test_batch_size_of_a_loader_built_on_a_batch_sampler(tmp_path):
    ds = RandomDataset(16)
    with profiled(tmp_path) as seen:
        by_sampler = DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 4, drop_last=False))
        for _ in by_sampler:
            pass
    assert seen[0]["batch_size"] == 4


def test_loader_name_without_the_hooks_looks_out_from_its_caller():
    held_here = DataLoader(RandomDataset(), batch_size=4)
    assert loader_name(held_here) == "held_here"
    assert loader_name(DataLoader(RandomDataset(), batch_size=4)) == "RandomDataset"


# --- whole programs: the fixtures in the styles real projects use -------------------------------------------

def _profile(tmp_path: Path, script: str, *args: str, options: tuple[str, ...] = ()) -> tuple[Any, dict, dict]:
    out = tmp_path / "reports"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--out", str(out), "--quiet", *options,
                           "--", "python", str(FIXTURES / script), *args],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = Path(report_lines(proc.stdout, proc.stderr)[-1]).parent
    return proc, json.loads((folder / "summary.json").read_text()), json.loads((folder / "run.json").read_text())


def _own(stdout: str) -> dict[str, Any]:
    """The fixture's own measurement: its last JSON line."""
    return json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])


@pytest.mark.integration
def test_logging_generator_fixture_names_both_loaders_and_matches_its_own_wait(tmp_path):
    proc, s, meta = _profile(tmp_path, "logging_generator.py", "--epochs", "2", "--samples", "512",
                             "--test-samples", "128", "--getitem-ms", "0.4")
    own = _own(proc.stdout)
    loaders = {d["name"]: d for d in s["loaders"]}
    assert set(loaders) == {"data_loader", "data_loader_test"}
    assert loaders["data_loader"]["role"] == "train" and loaders["data_loader_test"]["role"] == "eval"
    assert loaders["data_loader_test"]["passes"] == 2
    assert s["steps"] + s["warmup_steps"] == own["steps"] == 2 * 512 // 32
    assert all(d["framework"] is None for d in s["loaders"])
    assert s["fractions"]["data_wait"] == pytest.approx(own["data_wait_share"], abs=0.05)
    assert s["attribution"]["cpu"]["torch_threads"] == own["torch_threads"]  # what the training thread used


@pytest.mark.integration
def test_lightning_fixture_names_its_loaders_after_the_hooks_that_build_them(tmp_path):
    pytest.importorskip("lightning")
    proc, s, meta = _profile(tmp_path, "lightning_mlp.py", "--epochs", "2", "--batches", "16",
                             "--val-batches", "3", "--getitem-ms", "1")
    own = _own(proc.stdout)
    # The fixture's clock in Lightning's hooks sees the real wait: at least the 16 samples' 1 ms sleeps a batch.
    assert own["wait_per_step_s"] >= 16 * 0.001
    loaders = {d["name"]: d for d in s["loaders"]}
    assert set(loaders) == {"train_dataloader", "val_dataloader"}
    assert loaders["train_dataloader"]["role"] == "train" and loaders["val_dataloader"]["role"] == "eval"
    assert {d["framework"] for d in s["loaders"]} == {"lightning"}
    assert s["steps"] + s["warmup_steps"] == own["steps"] == 32
    assert s["fractions"]["data_wait"] == pytest.approx(own["data_wait_share"], abs=0.05)
    assert s["attribution"]["cpu"]["torch_threads"] == own["torch_threads"]  # what the training thread used


@pytest.mark.integration
def test_loader_subclass_fixture_is_named_by_its_variable_and_stops_at_steps(tmp_path):
    proc, s, meta = _profile(tmp_path, "loader_subclass.py", "--getitem-ms", "0.5", options=("--steps", "12"))
    loaders = {d["name"]: d for d in s["loaders"]}
    assert "train_batches" in loaders and "self" not in loaders
    assert loaders["train_batches"]["role"] == "train"
    assert s["steps"] + s["warmup_steps"] == 12  # stopped there, in the first of 2 epochs of 32 batches


@pytest.mark.integration
def test_loader_subclass_fixture_wait_matches_its_own_clock(tmp_path):
    proc, s, meta = _profile(tmp_path, "loader_subclass.py", "--epochs", "2", "--samples", "640",
                             "--getitem-ms", "0.5")
    own = _own(proc.stdout)
    assert {d["name"]: d["role"] for d in s["loaders"]} == {"train_batches": "train", "holdout": "eval"}
    assert s["steps"] + s["warmup_steps"] == own["steps"] == 2 * 640 // 32
    assert s["fractions"]["data_wait"] == pytest.approx(own["data_wait_share"], abs=0.05)
    assert s["attribution"]["cpu"]["torch_threads"] == own["torch_threads"]  # what the training thread used
