"""``files``: one small file per sample in a folder tree — the many-small-files case.

Sample ``i`` is ``<folder>/<i // 1000:03d>/<i:06d>.bin``: its 784 float32
values as raw little-endian bytes (3,136 bytes), so there is no decoding cost
and what is measured is the per-file cost of storage: an ``open``, a
``read`` and a ``close`` per sample, as with a real data set of small files.
Subfolders of 1,000 files keep directory lookups cheap, as data set
layouts usually do. Labels come from the synthetic ``y.npy``.

The tree is materialized once from the synthetic arrays into
``<cache_root>/files-<key>/`` (see ``materialize``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pipeprof.errors import UsageError
from pipeprof.scenario import DataSpec
from pipeprof.storage.base import Progress, SampleDataset, Throttle, Transform
from pipeprof.storage.materialize import check_files, materialize, tick, tree_facts
from pipeprof.storage.synthetic import FEATURES, SyntheticFiles, source_params

LAYOUT_VERSION = 1  # bump when the file layout or encoding changes: it is part of the cache key
RECORD_BYTES = FEATURES * 4
PER_FOLDER = 1000


def relpath(index: int) -> str:
    """Sample ``index``'s file, relative to the tree's folder."""
    return f"{index // PER_FOLDER:03d}/{index:06d}.bin"


class FilesDataset(SampleDataset):
    def __init__(self, folder: Path, labels: np.ndarray, transform: Transform | None = None,
                 throttle: Throttle | None = None) -> None:
        super().__init__(labels, transform, throttle)
        self.folder = Path(folder)
        self._prefix = str(self.folder) + "/"  # plain string joins: Path arithmetic costs µs per sample

    def read(self, index: int) -> tuple[bytes, int]:
        path = self._prefix + relpath(index)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise missing_error(self.folder, path, "files") from None
        if len(data) != RECORD_BYTES:
            raise UsageError(f"{path}: {len(data)} bytes, expected {RECORD_BYTES}: the files cache is damaged; "
                             f"run again to rebuild it")
        return data, len(data)

    def decode(self, payload: bytes) -> torch.Tensor:
        # astype copies out of the immutable bytes (and swaps bytes on a big-endian machine).
        return torch.from_numpy(np.frombuffer(payload, dtype="<f4").astype(np.float32))

    def paths(self) -> list[Path]:
        return [self.folder / relpath(i) for i in range(len(self))]


def missing_error(folder: Path, path: str, kind: str) -> UsageError:
    """A clear error for a cache deleted or damaged after it was built."""
    if not folder.is_dir():
        return UsageError(f"the {kind} cache folder {folder} is gone (deleted after it was built); "
                          f"run again to rebuild it")
    return UsageError(f"{path} is missing from the {kind} cache; run again to rebuild it")


def files_params(files: SyntheticFiles) -> dict:
    """What determines the tree's bytes (its cache key): the arrays' parameters and the layout."""
    return {"kind": "files", **source_params(files), "layout": LAYOUT_VERSION}


def count_files(folder: Path) -> int:
    """Files in the tree's subfolders: one directory listing each, no per-file stat."""
    return sum(1 for sub in folder.iterdir() if sub.is_dir() for _ in sub.iterdir())


def ensure_files(files: SyntheticFiles, progress: Progress | None = None) -> Path:
    """The folder of the tree for ``files``, written first if absent or damaged."""
    samples = files.samples
    params = files_params(files)

    def write(folder: Path, progress: Progress | None) -> dict:
        x = np.load(files.x_path, mmap_mode="r")
        prefix = f"{folder}/"
        for start in range(0, samples, PER_FOLDER):
            (folder / relpath(start)).parent.mkdir()
            block = np.ascontiguousarray(x[start : start + PER_FOLDER], dtype="<f4")
            for offset, row in enumerate(block):
                with open(prefix + relpath(start + offset), "wb") as f:
                    f.write(row.tobytes())
                tick(progress, "files", start + offset + 1, samples)
        return tree_facts(folder, samples, samples * RECORD_BYTES, relpath)

    def check(folder: Path, manifest: dict) -> str | None:
        if (found := count_files(folder)) != manifest["count"] or found != samples:
            return f"{found} files, expected {samples}"
        return check_files(folder, manifest, relpath)

    return materialize(files.folder.parent, params, write, check, progress, label=f"files ({samples} samples)")


def build(spec: DataSpec, files: SyntheticFiles, transform: Transform | None = None,
          throttle: Throttle | None = None, progress: Progress | None = None) -> FilesDataset:
    """Materialize the tree (once) and return the dataset over it."""
    folder = ensure_files(files, progress)
    return FilesDataset(folder, np.load(files.y_path), transform, throttle)
