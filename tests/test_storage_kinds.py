"""Every storage kind gives the same sample and label for the same index; files and images behave like real data sets."""

import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from pipeprof.errors import UsageError
from pipeprof.scenario import DataSpec
from pipeprof.storage import BUILDERS, device
from pipeprof.storage import files as files_kind
from pipeprof.storage import images as images_kind
from pipeprof.storage.synthetic import CLASSES, FEATURES, ensure_synthetic

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding:DeprecationWarning")

SAMPLES, SEED = 1500, 3
# JPEG at quality 90 on this noisy data (measured: mean 0.0099, max 0.079 over 3,000 samples).
JPEG90_MEAN_ABS, JPEG90_MAX_ABS = 0.015, 0.12


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return ensure_synthetic(SAMPLES, SEED, tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def arrays(synth):
    return np.load(synth.x_path), np.load(synth.y_path)


def spec(storage, **kw):
    return DataSpec(storage=storage, samples=SAMPLES, seed=SEED, **kw)


@pytest.fixture(scope="module")
def datasets(synth):
    built = {kind: BUILDERS[kind](spec(kind), synth) for kind in ("ram", "memmap", "files")}
    built["device"] = device.build(spec("device"), synth, device="cpu")
    built["png"] = images_kind.build(spec("images"), synth)
    built["jpeg"] = images_kind.build(spec("images", format="jpeg", quality=90), synth)
    return built


def test_files_and_images_are_registered(tmp_path, monkeypatch):
    # BUILDERS import a kind's module on first use; each entry calls that module's build.
    calls = []
    monkeypatch.setattr(files_kind, "build", lambda *a, **k: calls.append("files"))
    monkeypatch.setattr(images_kind, "build", lambda *a, **k: calls.append("images"))
    BUILDERS["files"](None, None)
    BUILDERS["images"](None, None)
    assert calls == ["files", "images"]


@pytest.mark.parametrize("index", [0, 1, 777, SAMPLES - 1])
def test_same_index_same_sample_in_every_kind(datasets, arrays, index):
    x, y = arrays
    expected = torch.from_numpy(x[index])
    for kind, dataset in datasets.items():
        got, label = dataset[index]
        assert len(dataset) == SAMPLES, kind
        assert got.dtype == torch.float32 and got.shape == (FEATURES,), kind
        assert label == y[index], kind
        if kind == "png":
            # Exactly round(x * 255) / 255: the only difference is 8-bit quantization.
            quantized = torch.from_numpy(np.rint(x[index] * 255).astype(np.uint8).astype(np.float32) / np.float32(255))
            assert torch.equal(got, quantized)
            assert (got - expected).abs().max() <= 0.5 / 255 + 1e-6
        elif kind == "jpeg":
            error = (got - expected).abs()
            assert error.mean() <= JPEG90_MEAN_ABS and error.max() <= JPEG90_MAX_ABS
        else:
            assert torch.equal(got, expected), kind


def test_image_labels_come_from_class_folders_and_equal_y(datasets, arrays):
    for kind in ("png", "jpeg"):
        dataset = datasets[kind]
        assert np.array_equal(dataset.labels, arrays[1])
        for index in (0, 500, SAMPLES - 1):
            path = dataset.paths()[index]
            assert path.parent.name == str(arrays[1][index]) and path.name == f"{index:06d}.{path.suffix[1:]}"


def test_images_load_with_torchvision_image_folder(datasets, arrays):
    from torchvision.datasets import ImageFolder

    folder = ImageFolder(str(datasets["png"].folder))
    assert folder.classes == [str(c) for c in range(CLASSES)] and len(folder) == SAMPLES
    for path, target in folder.samples:
        assert target == arrays[1][int(path.rsplit("/", 1)[1].split(".")[0])]
    image, target = folder[0]
    index = int(folder.samples[0][0].rsplit("/", 1)[1].split(".")[0])
    pixels = np.asarray(image.convert("L"), dtype=np.float32).reshape(FEATURES) / 255
    assert target == arrays[1][index] and np.allclose(pixels, datasets["png"][index][0].numpy(), atol=1e-6)


def test_files_layout_and_paths(datasets):
    dataset = datasets["files"]
    paths = dataset.paths()
    assert len(paths) == SAMPLES and paths[1234].relative_to(dataset.folder).as_posix() == "001/001234.bin"
    assert all(p.stat().st_size == FEATURES * 4 for p in paths[::97])
    assert dataset.fetch(5).nbytes == FEATURES * 4
    assert all(p.is_file() for p in datasets["png"].paths()[::97])


@pytest.mark.parametrize("kind", ["files", "png", "jpeg"])
def test_dataloader_with_two_workers_yields_correct_batches(datasets, kind):
    dataset, reference = datasets[kind], datasets["ram"]
    assert len(pickle.dumps(dataset)) < 100_000  # workers get paths and labels, never data
    loader = DataLoader(dataset, batch_size=100, num_workers=2, shuffle=False)
    seen = 0
    for batch, (x, y) in enumerate(loader):
        index = range(batch * 100, batch * 100 + len(y))
        assert torch.equal(y, torch.as_tensor(dataset.labels[index.start : index.stop]))
        expected = torch.stack([reference[i][0] for i in index])
        tolerance = {"files": 0.0, "png": 0.5 / 255 + 1e-6, "jpeg": JPEG90_MAX_ABS}[kind]
        assert (x - expected).abs().max() <= tolerance
        seen += len(y)
    assert seen == SAMPLES


def test_deleted_image_cache_gives_a_clear_error_and_build_recreates_it(tmp_path):
    import shutil

    synth = ensure_synthetic(300, SEED, tmp_path)
    dataset = images_kind.build(DataSpec(storage="images", samples=300, seed=SEED), synth)
    first = dataset[7][0]
    shutil.rmtree(dataset.folder)
    with pytest.raises(UsageError, match="gone") as caught:
        dataset[7]
    assert str(dataset.folder) in str(caught.value) and "\n" not in str(caught.value)
    again = images_kind.build(DataSpec(storage="images", samples=300, seed=SEED), synth)
    assert again.folder == dataset.folder and torch.equal(again[7][0], first)


def test_missing_or_truncated_sample_file_gives_a_clear_error(tmp_path):
    synth = ensure_synthetic(300, SEED, tmp_path)
    dataset = files_kind.build(DataSpec(storage="files", samples=300, seed=SEED), synth)
    dataset.paths()[10].write_bytes(b"\0" * 100)
    with pytest.raises(UsageError, match="100 bytes, expected 3136"):
        dataset[10]
    dataset.paths()[11].unlink()
    with pytest.raises(UsageError, match="missing from the files cache"):
        dataset[11]
