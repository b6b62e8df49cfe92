"""Samples counted from what a loader hands over: ready-made batches (``batch_size=None``) by their leading
dimension, and where the batch shows none, one an item, said in ``absences``.

In-process sessions (no subprocess): the hooks installed around a few passes of small loaders.
"""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from pipeprof.analysis.attribution import _samples_per_call
from pipeprof.analysis.reasons import Reason
from pipeprof.render.cause_text import cause_words
from pipeprof.script import hooks
from pipeprof.script.batches import leading_samples
from pipeprof.script.event_file import read_events
from pipeprof.script.session import one_sample_an_item


class ReadyBatches(Dataset):
    """Items that are whole batches already: (inputs [64, 8], targets [64]), as a sharded loader yields them."""

    def __init__(self, items: int, per_item: int = 64) -> None:
        self.x = torch.randn(items, per_item, 8)
        self.y = torch.randint(0, 4, (items, per_item))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


class ShardBatches(IterableDataset):
    """An iterable of batches as WebDataset's ``.batched(16)`` makes them: a dict-free tuple with a key list."""

    def __iter__(self):
        for i in range(3):
            yield torch.randn(16, 3, 4, 4), torch.arange(16), [f"key{i}-{j}" for j in range(16)]


def test_leading_samples_reads_the_dimension_the_tensors_share():
    assert leading_samples((torch.zeros(64, 8), torch.zeros(64))) == 64
    assert leading_samples({"image": torch.zeros(16, 3, 4, 4), "label": torch.zeros(16)}) == 16
    assert leading_samples([torch.zeros(16, 3), [torch.zeros(16), "a"]]) == 16  # two levels deep


@pytest.mark.parametrize("item", [
    torch.zeros(3, 32, 32),  # one image: no batch dimension to read
    (torch.zeros(3, 32, 32), torch.tensor(1)),  # a sample with a scalar label
    (torch.zeros(3, 32, 32), torch.zeros(10)),  # dimensions that differ
    ("text", 3),
])
def test_items_that_show_no_batch_dimension_count_one(item):
    assert leading_samples(item) == 1


def _profiled(tmp_path, loader, monkeypatch) -> tuple[list[int], dict]:
    session = hooks.Hooks(hooks.EventLog(str(tmp_path / "events.jsonl")))
    session.install()
    try:
        for _ in loader:
            pass
    finally:
        session.uninstall()
    events = read_events(tmp_path / "events.jsonl")
    return events.tables["N"]["samples"].tolist(), events


def test_ready_made_batches_are_counted_by_their_leading_dimension(tmp_path, monkeypatch):
    samples, _ = _profiled(tmp_path, DataLoader(ReadyBatches(5), batch_size=None, shuffle=True), monkeypatch)
    assert samples == [64] * 5  # not 1 a batch: 64x too few samples/s


def test_batched_iterable_in_a_worker_is_counted_by_its_leading_dimension(tmp_path, monkeypatch):
    samples, _ = _profiled(tmp_path, DataLoader(ShardBatches(), batch_size=None, num_workers=1), monkeypatch)
    assert samples == [16] * 3


def test_a_batch_size_still_counts_the_samples_collated(tmp_path, monkeypatch):
    samples, _ = _profiled(tmp_path, DataLoader(ReadyBatches(5, per_item=2), batch_size=2), monkeypatch)
    assert samples == [2, 2, 1]  # three items of two samples each collated: items, not their inner rows


def test_items_counted_one_each_are_said_in_absences():
    ready = {"name": "shard_loader", "batch_size": None}
    said = one_sample_an_item(ready, pd.DataFrame({"samples": [1, 1, 1]}))
    assert said is not None and "shard_loader" in said and "batch_size=None" in said
    assert one_sample_an_item(ready, pd.DataFrame({"samples": [64, 64]})) is None  # counted by the batch
    assert one_sample_an_item({"name": "x", "batch_size": 1}, pd.DataFrame({"samples": [1, 1]})) is None


def test_a_ready_made_batch_is_timed_per_call_as_well_as_per_sample():
    train = {"name": "shard_loader", "role": "train", "batch_size": None}
    loading = SimpleNamespace(samples=640, batches=10)
    assert _samples_per_call(loading, SimpleNamespace(loaders=(train,))) == 64  # each batch one __getitem__ call
    assert _samples_per_call(loading, SimpleNamespace(loaders=({**train, "batch_size": 64},))) is None  # collated
    assert _samples_per_call(loading, SimpleNamespace(loaders=({"name": "x", "role": "train"},))) is None  # unknown
    assert _samples_per_call(SimpleNamespace(samples=10, batches=10), SimpleNamespace(loaders=(train,))) is None
    part = Reason("part", {"part": "prep", "time_s": 146e-6, "off_cpu_split": True, "core_wait_told_apart": True,
                           "samples_per_call": 64.0})
    assert cause_words(part) == ("CPU work in __getitem__ — decoding and transforms (9.34 ms per __getitem__ call, "
                                 "a ready-made batch of 64 samples: 146 µs per sample)")
    assert cause_words(Reason("part", {**part.values, "samples_per_call": None})).endswith("(146 µs per sample)")
