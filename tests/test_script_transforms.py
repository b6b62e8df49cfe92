"""A profiled script's transforms and decode calls (script.transform_hooks, script.decode_hooks): which pipelines are
found and timed once, which decode calls count, and how the per-batch parts become transforms.csv rows."""

from __future__ import annotations

import io
import pickle
import sys
import time
import types

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import ConcatDataset, Subset
from torchvision import transforms
from torchvision.datasets.vision import StandardTransform
from torchvision.transforms import v2

from pipeprof.measure.transforms import DEPTH, TransformTimer, take_table
from pipeprof.script import decode_hooks
from pipeprof.script.batches import Tagged
from pipeprof.script.event_file import Events
from pipeprof.script.event_steps import script_steps
from pipeprof.script.patches import Patches
from pipeprof.script.transform_hooks import TransformHooks, batch_parts, find_pipelines


class Add:
    def __init__(self, n):
        self.n = n

    def __call__(self, x):
        return x + self.n


class Folder(torch.utils.data.Dataset):  # shaped like torchvision's VisionDataset: transforms = StandardTransform
    def __init__(self, transform, target_transform=None):
        self.transform, self.target_transform = transform, target_transform
        self.transforms = StandardTransform(transform, target_transform)

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.transforms(torch.tensor(float(i)), i)


class Log:
    def __init__(self):
        self.events = []

    def add(self, event, now_s):
        self.events.append(event)


class Collate:
    transform_keys: tuple = ()


def test_pipelines_are_found_through_wrappers_and_a_shared_one_is_timed_once():
    pipeline = transforms.Compose([Add(1), transforms.RandomApply([Add(10)], p=1.0), Add(100)])
    bare = Add(1000)  # a bare target transform: wrapped, in both holders (the dataset and its StandardTransform)
    data = ConcatDataset([Subset(Folder(pipeline, bare), [0, 1]), Folder(pipeline)])
    found = find_pipelines(data)
    assert {id(p) for _, _, p in found} == {id(pipeline), id(bare)}
    patches, log, collate = Patches(), Log(), Collate()
    hooks = TransformHooks(patches, log, lambda: 0.0, "t")
    hooks.on_loader(type("L", (), {"dataset": data})(), 0, collate)
    assert log.events == [("F", 0, [{"name": "Add", "random": None}, {"name": "Add #2", "random": True},
                                    {"name": "Add #3", "random": None}, {"name": "Add #4", "random": None}])]
    x, y = data[0]
    assert (float(x), y) == (111.0, 1000)  # unchanged
    parts = {name: calls for _, name, calls, _, _ in batch_parts(collate.transform_keys)}
    assert parts == {"Add": 1, "Add #2": 1, "Add #3": 1, "Add #4": 1}  # each once, though reachable twice
    patches.undo()
    assert type(pipeline.transforms[0]) is Add and data.datasets[1].target_transform is None
    assert data.datasets[0].dataset.target_transform is bare and data.datasets[0].dataset.transforms.target_transform is bare
    assert take_table("t:0") == []


def test_a_v2_pipeline_pickled_to_a_spawned_worker_adds_into_that_process_table():
    pipeline = v2.Compose([v2.RandomHorizontalFlip(p=1.0), v2.Lambda(lambda t: t * 2)])
    timer = TransformTimer(key="spawn-test")
    timer.install(pipeline)
    copy = pickle.loads(pickle.dumps(pipeline.transforms[0]))  # what a spawned worker unpickles (its own table)
    copy(torch.zeros(1, 2, 2))
    pipeline(torch.zeros(1, 2, 2))
    calls = {name: c for name, c, _, _ in take_table("spawn-test")}
    assert calls["RandomHorizontalFlip(p=1.0)"] == 2  # here, the copy adds into the same key's table
    assert timer.leaves[0] == ("RandomHorizontalFlip(p=1.0)", True)
    timer.uninstall()


def _png() -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(out, format="PNG")
    return out.getvalue()


def test_decode_calls_count_once_inside_a_fetch_and_not_in_a_transform_or_outside():
    patches = Patches()
    decode_hooks.install(patches)
    try:
        data = _png()
        Image.open(io.BytesIO(data)).convert("L")  # outside a fetch: not timed
        decode_hooks.begin()
        Image.open(io.BytesIO(data)).convert("L")  # convert calls load: counted as convert only
        DEPTH.n += 1  # inside a timed transform: its time is the transform's
        Image.open(io.BytesIO(data)).convert("L")
        DEPTH.n -= 1
        decode_hooks.end()
        calls = {name: c for name, c, _, _ in decode_hooks.take()}
        assert calls == {"PIL.Image.open": 1, "PIL.Image.convert": 1}
        assert decode_hooks.take() == []
    finally:
        patches.undo()
    assert not getattr(Image.open, "_pipeprof_decode", False)


def test_a_formats_own_load_is_timed_whole_as_pil_image_load():
    """A WebP image decodes in WebPImageFile.load, before ImageFile.load: timing only the latter missed it."""
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (512, 512, 3), dtype=np.uint8)).save(out, "WEBP")
    image = Image.open(io.BytesIO(out.getvalue()))
    assert "load" in vars(type(image))  # the format's own load
    patches = Patches()
    decode_hooks.install(patches)
    try:
        decode_hooks.begin()
        c0 = time.thread_time()
        image.load()  # explicit, as Hugging Face datasets' Image feature does
        cpu_s = time.thread_time() - c0
        decode_hooks.end()
        (row,) = decode_hooks.take()
        assert row[:2] == ("PIL.Image.load", 1)
        # the whole decode, not the tail in ImageFile.load: in CPU time, which a loaded machine does not stretch
        assert row[3] >= 0.9 * cpu_s
    finally:
        patches.undo()
    assert not getattr(type(image).load, "_pipeprof_decode", False)


def test_opencv_reads_are_decode_calls(monkeypatch):
    """cv2 may be absent: a stand-in module with its functions shows they are patched by name, and restored."""
    fake = types.ModuleType("cv2")
    fake.imread = lambda path: ("read", path)
    fake.imdecode = lambda buf, flags: ("decoded", flags)
    monkeypatch.setitem(sys.modules, "cv2", fake)
    patches = Patches()
    decode_hooks.install(patches)
    try:
        decode_hooks.begin()
        assert fake.imread("a.jpg") == ("read", "a.jpg") and fake.imdecode(b"", 1) == ("decoded", 1)
        decode_hooks.end()
        assert sorted((name, calls) for name, calls, _, _ in decode_hooks.take()) == [("cv2.imdecode", 1),
                                                                                       ("cv2.imread", 1)]
    finally:
        patches.undo()
    assert not getattr(fake.imread, "_pipeprof_decode", False)


def test_parts_become_rows_of_the_step_that_took_the_batch_and_old_tagged_records_still_read():
    record = [1, 99, 10.0, 10.5, 0.1, 0.3, 0.01, 4, 0.0]
    events = [["L", 0, {"number": 0, "name": "train"}], ["I", 0, 9.0, 9.1],
              ["N", 0, 10.0, 10.6, 4, record, None], ["O", 11.0],
              ["Q", 0, "transform", "Add"], ["Q", 1, "decode", "PIL.Image.open"], ["F", 0, [{"name": "Add", "random": None}]],
              ["P", 0, 10.0, 0, 4, 0.2, 0.1], ["P", 0, 10.0, 1, 4, 0.05, 0.01]]
    cut = script_steps(Events.of(events), 0.0)
    rows = cut.transforms
    assert rows[["step", "loader", "worker", "kind", "name", "calls"]].values.tolist() == [
        [0, 0, 1, "batch", "", 4], [0, 0, 1, "decode", "PIL.Image.open", 4], [0, 0, 1, "transform", "Add", 4]]
    batch = rows[rows["kind"] == "batch"].iloc[0]
    assert (batch["wall_s"], batch["cpu_s"]) == (pytest.approx(0.4), pytest.approx(0.3))  # fetch + core + prep; prep
    assert cut.transform_pipelines == {"0": [{"name": "Add", "random": None}]}
    old = pickle.loads(pickle.dumps(Tagged("b", record)))
    assert old.parts is None and old.record == record
    assert script_steps(Events.of(events[:4]), 0.0).transforms.empty  # an old event log: no rows


def test_a_scripts_training_loader_without_timed_transforms_says_why():
    import pandas as pd

    from pipeprof.run_folder import TRANSFORM_COLUMNS
    from pipeprof.script.session import _timed_pipelines

    train = {"number": 1, "dataset": "TensorDataset", "role": "train"}
    none = pd.DataFrame(columns=TRANSFORM_COLUMNS)
    leaves = [{"name": "Normalize", "random": False}]
    # nothing found on the dataset
    timed, why = _timed_pipelines({}, none, train)
    assert timed == {} and why.startswith("the training loader's dataset (TensorDataset) has no transform pipeline")
    # timing could not be installed: the hooks' reason; the failure is kept out of transform_pipelines
    timed, why = _timed_pipelines({"1": {"absent": "transforms not timed: TypeError: x"}, "0": leaves}, none, train)
    assert timed == {"0": leaves} and why == "transforms not timed: TypeError: x"
    # a pipeline, but no row for the training loader (another loader's rows do not count)
    other = pd.DataFrame([[3, 0, -1, "transform", "Normalize", 8, 0.1, 0.1]], columns=TRANSFORM_COLUMNS)
    assert _timed_pipelines({"1": leaves}, other, train)[1].startswith("no batch of the training loader")
    # rows for it: nothing absent; no training loader: nothing said
    mine = other.assign(loader=1)
    assert _timed_pipelines({"1": leaves}, mine, train) == ({"1": leaves}, None)
    assert _timed_pipelines({}, none, None) == ({}, None)


class Tiles(torch.utils.data.Dataset):
    """Keeps its pipelines under the names real datasets use besides ``transform``, and a decode function."""

    def __init__(self, tf, aug, preprocess):
        self.tf, self.aug, self.preprocess = tf, aug, preprocess
        self.loader = _read  # ImageFolder's pil_loader: decode, timed as such, never a transform
        self.samples = [(f"{i}.png", i) for i in range(4)]

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.preprocess(self.aug(self.tf(self.loader(i)))), i


def _read(i):
    return torch.tensor(float(i))


def _scale(x):
    return x * 2


class Cached(torch.utils.data.Dataset):
    """A user's wrapper keeping its dataset under a name of its own."""

    def __init__(self, base):
        self.base = base

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        return self.base[i]


def test_pipelines_under_any_attribute_name_are_found_through_subset_and_concat():
    tf, aug = transforms.Compose([Add(1), Add(10)]), Add(100)
    data = ConcatDataset([Subset(Tiles(tf, aug, _scale), [0, 1]), Cached(Tiles(tf, aug, _scale))])
    found = {(attr, id(p)) for _, attr, p in find_pipelines(data)}
    assert found == {("tf", id(tf)), ("aug", id(aug)), ("preprocess", id(_scale))}
    patches, log, collate = Patches(), Log(), Collate()
    TransformHooks(patches, log, lambda: 0.0, "any").on_loader(type("L", (), {"dataset": data})(), 0, collate)
    assert [leaf["name"] for leaf in log.events[0][2]] == ["Add", "Add #2", "Add #3", "_scale"]
    assert float(data[0][0]) == (0 + 1 + 10 + 100) * 2  # unchanged
    assert {name: calls for _, name, calls, _, _ in batch_parts(collate.transform_keys)} == \
        {"Add": 1, "Add #2": 1, "Add #3": 1, "_scale": 1}
    patches.undo()
    assert data.datasets[1].base.aug is aug and data.datasets[1].base.preprocess is _scale


class ClassificationPresetTrain:
    """torchvision's references/classification/presets.py: a class holding its ``transforms`` Compose."""

    def __init__(self, *, crop_size, hflip_prob=0.5):
        trans = [transforms.RandomResizedCrop(crop_size, antialias=True)]
        if hflip_prob > 0:
            trans.append(transforms.RandomHorizontalFlip(hflip_prob))
        trans.extend([transforms.ConvertImageDtype(torch.float), transforms.Normalize(mean=(0.5,), std=(0.25,))])
        self.transforms = transforms.Compose(trans)

    def __call__(self, img):
        return self.transforms(img)


class Images(torch.utils.data.Dataset):
    def __init__(self, transform):
        self.transform = transform

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.transform(torch.zeros(1, 12, 12, dtype=torch.uint8)), i


def test_a_preset_holding_a_compose_is_opened_and_its_leaves_timed():
    # It showed as one opaque leaf, and RandomResizedCrop and the rest were never named.
    data = Images(ClassificationPresetTrain(crop_size=8))
    patches, log, collate = Patches(), Log(), Collate()
    TransformHooks(patches, log, lambda: 0.0, "preset").on_loader(type("L", (), {"dataset": data})(), 0, collate)
    names = [leaf["name"] for leaf in log.events[0][2]]
    assert len(names) == 4 and names[0].startswith("RandomResizedCrop") and names[1].startswith("RandomHorizontalFlip")
    assert not any("ClassificationPresetTrain" in n for n in names)
    assert data[0][0].shape == (1, 8, 8)
    assert sorted(calls for _, _, calls, _, _ in batch_parts(collate.transform_keys)) == [1, 1, 1, 1]
    patches.undo()


def test_an_evaluation_loaders_batches_after_the_last_step_have_their_transform_rows():
    record = [0, 99, 10.0, 10.5, 0.1, 0.3, 0.01, 4, 0.0]
    test_record = [0, 99, 20.0, 20.5, 0.1, 0.3, 0.01, 4, 0.0]
    events = [["L", 0, {"number": 0, "name": "data_loader"}], ["L", 1, {"number": 1, "name": "data_loader_test"}],
              ["I", 0, 9.0, 9.1], ["N", 0, 10.0, 10.6, 4, record, None], ["O", 11.0], ["E", 0, 11.1, 11.2],
              ["I", 1, 19.0, 19.1], ["N", 1, 20.0, 20.6, 4, test_record, None], ["E", 1, 21.0, 21.1],
              ["Q", 0, "transform", "Resize"],
              ["P", 0, 10.0, 0, 4, 0.2, 0.1], ["P", 1, 20.0, 0, 4, 0.1, 0.05]]
    cut = script_steps(Events.of(events), 0.0)
    rows = cut.transforms[cut.transforms["kind"] == "transform"]
    assert rows[["step", "loader", "name"]].values.tolist() == [[-1, 1, "Resize"], [0, 0, "Resize"]]


def _in_library(obj, module: str):
    obj.__module__ = module
    return obj


def test_a_transform_keeping_its_own_steps_in_transforms_is_one_transform_not_four():
    """albumentations' ColorJitter holds its brightness/contrast/saturation/hue functions in ``transforms`` (it
    applies them in a random order): one transform, and the costliest when it is, not four small ones."""
    def adjust(x):
        return x + 1
    steps = [_in_library(types.FunctionType(adjust.__code__, {}, name), "albu.functional")
             for name in ("adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue")]
    jitter_cls = _in_library(type("ColorJitter", (), {"__call__": lambda self, x: x}), "albu.transforms")
    compose_cls = _in_library(type("Compose", (), {"__call__": lambda self, x: x}), "albu.core.composition")
    jitter = jitter_cls()
    jitter.transforms = steps
    blur = _in_library(type("GaussianBlur", (), {"__call__": lambda self, x: x}), "albu.transforms")()
    pipeline = compose_cls()
    pipeline.transforms = [jitter, blur]
    timer = TransformTimer()
    timer.install(pipeline)
    assert [name for name, _ in timer.leaves] == ["ColorJitter", "GaussianBlur"]
    assert jitter.transforms == steps  # its own steps untouched
    timer.uninstall()


def test_a_pipeline_of_the_users_own_functions_is_still_a_container():
    def to_tensor(x):
        return x

    def normalize(x):
        return x
    pipeline = transforms.Compose([to_tensor, normalize])
    timer = TransformTimer()
    timer.install(pipeline)
    assert [name for name, _ in timer.leaves] == ["to_tensor", "normalize"]
    timer.uninstall()


def test_a_list_of_transforms_a_dataset_applies_in_turn_is_timed_and_stays_a_list():
    """litdata's StreamingDataset(transform=fn) keeps ``self.transform`` as a list and checks it is one."""
    def resize(x):
        return x * 2

    def scale(x):
        return x + 1

    class Streaming(torch.utils.data.Dataset):
        def __init__(self):
            self.transform = [resize, scale]

        def __len__(self):
            return 4

        def __getitem__(self, i):
            item = torch.tensor(float(i))
            if isinstance(self.transform, list):
                for t in self.transform:
                    item = t(item)
            return item

    dataset = Streaming()
    assert [(attr, f) for _, attr, f in find_pipelines(dataset)] == [("", resize), ("", scale)]
    patches = Patches()
    hooks = TransformHooks(patches, _Log(), lambda: 0.0, "s")
    keys, leaves = hooks._install(dataset, 0)
    try:
        assert [leaf["name"] for leaf in leaves] == ["resize", "scale"]
        assert isinstance(dataset.transform, list) and dataset[3].item() == 7.0
        calls = {name: c for name, c, _, _ in take_table(keys[0])}
        assert calls == {"resize": 1, "scale": 1}
    finally:
        patches.undo()
    assert dataset.transform == [resize, scale]


class _Log:
    def add(self, event, now_s):
        pass
