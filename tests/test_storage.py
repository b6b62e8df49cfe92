"""Synthetic data and storage kinds: deterministic, cached, the same sample everywhere."""

import numpy as np
import pytest
import torch

from pipeprof.scenario import STORAGE_KINDS, DataSpec
from pipeprof.storage import BUILDERS, build_dataset
from pipeprof.storage.synthetic import CLASSES, FEATURES, ensure_synthetic


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return ensure_synthetic(3000, seed=7, cache_root=tmp_path_factory.mktemp("cache"))


def test_every_scenario_storage_kind_has_a_builder():
    assert set(BUILDERS) == set(STORAGE_KINDS)


def test_shape_range_and_balance(files):
    x = np.load(files.x_path, mmap_mode="r")
    y = np.load(files.y_path)
    assert x.shape == (3000, FEATURES) and x.dtype == np.float32
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    counts = np.bincount(y, minlength=CLASSES)
    assert counts.min() > 200  # every class present, roughly balanced
    assert files.nbytes == 3000 * FEATURES * 4


def test_generation_is_deterministic_and_cached(files, tmp_path):
    again = ensure_synthetic(3000, seed=7, cache_root=tmp_path)
    assert np.array_equal(np.load(again.x_path), np.load(files.x_path))
    mtime = again.x_path.stat().st_mtime_ns
    assert ensure_synthetic(3000, seed=7, cache_root=tmp_path).x_path.stat().st_mtime_ns == mtime
    other = ensure_synthetic(3000, seed=8, cache_root=tmp_path)
    assert not np.array_equal(np.load(other.x_path), np.load(files.x_path))
    assert not [p for p in again.folder.iterdir() if "tmp" in p.name]


def test_all_storage_kinds_yield_the_same_sample(files):
    datasets = {kind: build_dataset(DataSpec(storage=kind, samples=3000, seed=7), files) for kind in STORAGE_KINDS}
    for index in (0, 1234, 2999):
        reference_x, reference_y = datasets["ram"][index]
        for kind, dataset in datasets.items():
            x, y = dataset[index]
            assert len(dataset) == 3000
            assert x.dtype == torch.float32 and x.shape == (FEATURES,)
            if kind == "images":  # 8-bit PNG: equal up to quantization (exact check in test_storage_kinds.py)
                assert (x - reference_x).abs().max() <= 0.5 / 255 + 1e-6, kind
            else:
                assert torch.equal(x, reference_x), kind
            assert y == reference_y, kind


def test_memmap_dataset_pickles_without_its_map(files):
    import pickle

    dataset = build_dataset(DataSpec(storage="memmap", samples=3000, seed=7), files)
    dataset[0]  # opens the map
    clone = pickle.loads(pickle.dumps(dataset))
    assert clone._x is None and torch.equal(clone[5][0], dataset[5][0])
