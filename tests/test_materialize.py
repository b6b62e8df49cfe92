"""Cached data sets: keyed by their parameters, deterministic, reused, rebuilt when damaged, built atomically."""

import errno
import hashlib
import json
import multiprocessing
import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeprof.errors import UsageError
from pipeprof.scenario import DataSpec
from pipeprof.storage import files as files_kind
from pipeprof.storage import images as images_kind
from pipeprof.storage import materialize
from pipeprof.storage.materialize import MANIFEST, cache_key
from pipeprof.storage.synthetic import ensure_synthetic

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding:DeprecationWarning")

SAMPLES, SEED = 400, 5
KINDS = {
    "files": (files_kind.build, DataSpec(storage="files", samples=SAMPLES, seed=SEED)),
    "png": (images_kind.build, DataSpec(storage="images", samples=SAMPLES, seed=SEED)),
    "jpeg": (images_kind.build, DataSpec(storage="images", samples=SAMPLES, seed=SEED, format="jpeg", quality=75)),
}


class Calls(list):
    def __call__(self, what, done, total):
        self.append((what, done, total))


def build(kind, root, progress=None):
    builder, spec = KINDS[kind]
    return builder(spec, ensure_synthetic(SAMPLES, SEED, root), progress=progress)


def digest_tree(folder):
    """SHA-1 of every file's relative path and bytes, the manifest included."""
    digest = hashlib.sha1()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()


def leftovers(root):
    return [p.name for p in root.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_cache_key_is_order_free_and_changes_with_the_bytes():
    assert cache_key({"a": 1, "b": 2}) == cache_key({"b": 2, "a": 1})
    assert len(cache_key({"a": 1})) == 12 and cache_key({"a": 1}) != cache_key({"a": 2})


def test_key_folders_differ_by_format_and_quality_but_png_ignores_quality(tmp_path):
    synth = ensure_synthetic(SAMPLES, SEED, tmp_path)
    png = images_kind.images_params(synth, "png", 90)
    assert png == images_kind.images_params(synth, "png", 50)
    assert images_kind.images_params(synth, "jpeg", 90) != images_kind.images_params(synth, "jpeg", 50)
    assert cache_key(png) != cache_key(images_kind.images_params(synth, "jpeg", 90))
    assert synth.folder.name.startswith("synthetic-") and synth.folder.parent == tmp_path


@pytest.mark.parametrize("kind", list(KINDS))
def test_rebuild_is_deterministic(kind, tmp_path):
    first = build(kind, tmp_path / "a")
    before = digest_tree(first.folder)
    shutil.rmtree(first.folder)
    again = build(kind, tmp_path / "a")
    other_root = build(kind, tmp_path / "b")
    assert again.folder.name == other_root.folder.name == first.folder.name
    assert digest_tree(again.folder) == before == digest_tree(other_root.folder)


def test_synthetic_rebuild_is_deterministic(tmp_path):
    synth = ensure_synthetic(SAMPLES, SEED, tmp_path / "a")
    x = synth.x_path.read_bytes()
    shutil.rmtree(synth.folder)
    assert ensure_synthetic(SAMPLES, SEED, tmp_path / "a").x_path.read_bytes() == x
    assert ensure_synthetic(SAMPLES, SEED, tmp_path / "b").x_path.read_bytes() == x


@pytest.mark.parametrize("kind", list(KINDS))
def test_reuse_does_not_rebuild_or_write(kind, tmp_path):
    calls = Calls()
    dataset = build(kind, tmp_path, calls)
    assert calls and calls[-1][1:] == (SAMPLES, SAMPLES) and " again" not in calls[-1][0]
    assert len(calls) <= SAMPLES // 500 + 4  # every few hundred items, not per item
    manifest = dataset.folder / MANIFEST
    stamps = (manifest.stat().st_mtime_ns, dataset.paths()[3].stat().st_mtime_ns)
    entries = sorted(p.name for p in tmp_path.iterdir())
    again = Calls()
    reused = build(kind, tmp_path, again)
    assert again == [] and reused.folder == dataset.folder
    assert (manifest.stat().st_mtime_ns, reused.paths()[3].stat().st_mtime_ns) == stamps
    assert sorted(p.name for p in tmp_path.iterdir()) == entries  # not even a lock file: a read-only cache works


def _truncate_last(dataset):
    path = dataset.paths()[-1]
    path.write_bytes(path.read_bytes()[:-10])


def _truncate_spot(dataset):
    path = dataset.paths()[materialize.spot_indices(len(dataset))[5]]
    path.write_bytes(path.read_bytes()[:-1])


def _delete_some(dataset):
    for path in dataset.paths()[100:105]:
        path.unlink()


def _garbage_manifest(dataset):
    (dataset.folder / MANIFEST).write_text("{not json")


def _other_params(dataset):
    manifest = json.loads((dataset.folder / MANIFEST).read_text())
    manifest["params"]["seed"] += 1
    (dataset.folder / MANIFEST).write_text(json.dumps(manifest))


def _no_manifest(dataset):
    (dataset.folder / MANIFEST).unlink()


DAMAGE = [_truncate_last, _truncate_spot, _delete_some, _garbage_manifest, _other_params, _no_manifest]


@pytest.mark.parametrize("kind", ["files", "png"])
@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_damaged_cache_is_detected_and_rebuilt(kind, damage, tmp_path):
    dataset = build(kind, tmp_path)
    good = digest_tree(dataset.folder)
    damage(dataset)
    assert digest_tree(dataset.folder) != good
    calls = Calls()
    rebuilt = build(kind, tmp_path, calls)
    assert calls and " again: " in calls[0][0], "damage went unnoticed"
    assert rebuilt.folder == dataset.folder and digest_tree(rebuilt.folder) == good
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("damage", ["truncate_x", "header", "y_changed", "manifest"])
def test_damaged_synthetic_arrays_are_rebuilt(damage, tmp_path):
    synth = ensure_synthetic(SAMPLES, SEED, tmp_path)
    x, y = synth.x_path.read_bytes(), synth.y_path.read_bytes()
    if damage == "truncate_x":
        synth.x_path.write_bytes(x[: len(x) // 2])
    elif damage == "header":
        np.save(synth.x_path, np.zeros((SAMPLES, 10), np.float32))
    elif damage == "y_changed":
        labels = np.load(synth.y_path)
        labels[0] = (labels[0] + 1) % 10
        np.save(synth.y_path, labels)
    else:
        (synth.folder / MANIFEST).write_text("[]")
    calls = Calls()
    again = ensure_synthetic(SAMPLES, SEED, tmp_path, progress=calls)
    assert calls and " again: " in calls[0][0]
    assert again.x_path.read_bytes() == x and again.y_path.read_bytes() == y


def _fail_midway(what, done, total):
    if done >= SAMPLES // 2:
        raise RuntimeError("disk pulled out")


@pytest.fixture
def frequent_progress(monkeypatch):
    monkeypatch.setattr(materialize, "PROGRESS_EVERY", 50)  # so that "mid-way" comes before the end


def test_failed_build_leaves_other_caches_intact_and_no_temporaries(tmp_path, frequent_progress):
    good = build("png", tmp_path)
    before = digest_tree(good.folder)
    with pytest.raises(RuntimeError, match="disk pulled out"):
        build("jpeg", tmp_path, _fail_midway)
    assert digest_tree(good.folder) == before
    assert leftovers(tmp_path) == [] and not list(tmp_path.glob("images-*/*/*.jpg"))


def test_failed_rebuild_leaves_the_old_folder_until_a_build_succeeds(tmp_path, frequent_progress):
    dataset = build("files", tmp_path)
    good = digest_tree(dataset.folder)
    _delete_some(dataset)
    damaged = digest_tree(dataset.folder)
    with pytest.raises(RuntimeError, match="disk pulled out"):
        build("files", tmp_path, _fail_midway)
    assert digest_tree(dataset.folder) == damaged and leftovers(tmp_path) == []
    assert digest_tree(build("files", tmp_path).folder) == good


def test_stale_temporary_folders_of_a_crashed_build_are_removed(tmp_path):
    synth = ensure_synthetic(SAMPLES, SEED, tmp_path)
    name = f"files-{cache_key(files_kind.files_params(synth))}"
    (tmp_path / f".{name}.tmp-otherhost-99999" / "000").mkdir(parents=True)
    build("files", tmp_path)
    assert leftovers(tmp_path) == []


def test_unwritable_cache_root_is_a_usage_error_naming_it(tmp_path):
    (tmp_path / "file.txt").write_text("a file, not a folder")
    root = tmp_path / "file.txt" / "cache"  # fails for root too, unlike chmod
    with pytest.raises(UsageError, match="not writable") as caught:
        ensure_synthetic(SAMPLES, SEED, root)
    assert str(root) in str(caught.value) and "\n" not in str(caught.value)


def test_permission_denied_in_the_cache_root_is_a_usage_error(tmp_path, monkeypatch):
    synth = ensure_synthetic(SAMPLES, SEED, tmp_path)
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if ".tmp-" in self.name:  # what a read-only folder does to a non-root user
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(UsageError, match=f"cache folder {tmp_path} is not writable \\(Permission denied\\)"):
        files_kind.build(KINDS["files"][1], synth)


def test_disk_full_mid_build_is_a_usage_error_and_leaves_nothing(tmp_path, monkeypatch):
    synth = ensure_synthetic(SAMPLES, SEED, tmp_path)
    written = []

    def open_until_full(path, mode="r", *args, **kwargs):
        if "w" in mode and len(written) >= 200:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        written.append(path)
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(files_kind, "open", open_until_full, raising=False)
    with pytest.raises(UsageError, match="No space left on device"):
        files_kind.build(KINDS["files"][1], synth)
    assert leftovers(tmp_path) == [] and not list(tmp_path.glob("files-*"))


def _build_in_child(root):
    build("files", root)


def test_concurrent_builders_share_one_build(tmp_path):
    ensure_synthetic(SAMPLES, SEED, tmp_path)
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_build_in_child, args=(tmp_path,)) for _ in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    assert [child.exitcode for child in children] == [0, 0]
    assert len(list(tmp_path.glob("files-*"))) == 1 and leftovers(tmp_path) == []
    assert len(build("files", tmp_path)) == SAMPLES
