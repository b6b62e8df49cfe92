"""A deterministic, learnable, FashionMNIST-shaped data set, generated once and cached.

No data set can be downloaded here, so pipeprof makes its own: N samples of
784 float32 values in [0, 1] (28x28 "images") in 10 classes. Each class has a
smooth prototype made of a few Gaussian blobs; a sample is its class's
prototype with a random contrast, a shift of up to two pixels and pixel noise,
so an MLP learns it well above chance within one epoch without it being trivial.

The arrays live as ``x.npy`` (N x 784 float32) and ``y.npy`` (N int64) in
``<cache>/synthetic-<key>/``, where the key hashes N, the seed and
``GENERATOR_VERSION`` (see ``materialize``): built in a temporary folder and
renamed, with a manifest, so a crash never leaves a half-written data set
that looks whole, and a damaged one is rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeprof import format as fmt
from pipeprof.errors import UsageError
from pipeprof.scenario import SAMPLE_FEATURES
from pipeprof.storage.materialize import Progress, materialize, read_manifest

GENERATOR_VERSION = 1  # bump whenever the generated values change: it is part of every cache key
FEATURES = SAMPLE_FEATURES
SIDE = 28
CLASSES = 10
_CHUNK = 8192  # generation chunk; fixed so the content never depends on memory
_MAX_SHIFT = 3
_NOISE = 0.6
_HASHED_BYTES = 1 << 16


@dataclass(frozen=True)
class SyntheticFiles:
    """Where a generated data set lives on disk."""

    folder: Path
    samples: int

    @property
    def x_path(self) -> Path:
        return self.folder / "x.npy"

    @property
    def y_path(self) -> Path:
        return self.folder / "y.npy"

    @property
    def nbytes(self) -> int:
        return self.samples * FEATURES * 4


def default_cache_root() -> Path:
    """``$PIPEPROF_CACHE``, else ``~/.cache/pipeprof``."""
    env = os.environ.get("PIPEPROF_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "pipeprof"


def prototypes(seed: int) -> np.ndarray:
    """Ten smooth 28x28 class prototypes (10 x 784 float32, values in [0, 1])."""
    rng = np.random.default_rng([seed, 0xC1A55])
    yy, xx = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32)
    protos = np.zeros((CLASSES, SIDE, SIDE), np.float32)
    for c in range(CLASSES):
        for _ in range(4):
            cy, cx = rng.uniform(5, SIDE - 5, size=2)
            sy, sx = rng.uniform(1.5, 5.0, size=2)
            protos[c] += rng.uniform(0.5, 1.0) * np.exp(-((yy - cy) ** 2 / (2 * sy**2) + (xx - cx) ** 2 / (2 * sx**2)))
        protos[c] /= protos[c].max()
    return protos.reshape(CLASSES, FEATURES)


def generate_chunk(seed: int, chunk: int, count: int, protos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Samples ``chunk*_CHUNK .. +count``; each chunk has its own seeded stream."""
    rng = np.random.default_rng([seed, chunk])
    y = rng.integers(0, CLASSES, size=count, dtype=np.int64)
    images = protos[y].reshape(count, SIDE, SIDE) * rng.uniform(0.6, 1.2, size=(count, 1, 1)).astype(np.float32)
    shifts = rng.integers(-_MAX_SHIFT, _MAX_SHIFT + 1, size=(count, 2))
    for dy in range(-_MAX_SHIFT, _MAX_SHIFT + 1):
        for dx in range(-_MAX_SHIFT, _MAX_SHIFT + 1):
            sel = (shifts[:, 0] == dy) & (shifts[:, 1] == dx)
            if sel.any():
                images[sel] = np.roll(images[sel], (dy, dx), axis=(1, 2))
    images += rng.normal(0.0, _NOISE, size=images.shape).astype(np.float32)
    np.clip(images, 0.0, 1.0, out=images)
    return images.reshape(count, FEATURES), y


def synthetic_params(samples: int, seed: int) -> dict:
    """What determines the arrays' bytes (the cache key of ``ensure_synthetic``)."""
    return {"kind": "synthetic", "samples": samples, "seed": seed, "generator": GENERATOR_VERSION}


def source_params(files: SyntheticFiles) -> dict:
    """The parameters the arrays in ``files`` were built with, from their manifest.

    Data derived from the arrays (``files``, ``images``) puts these in its own
    cache key, so it is rebuilt whenever the arrays' bytes would differ.
    """
    manifest = read_manifest(files.folder)
    if manifest is None or manifest.get("kind") != "synthetic":
        raise UsageError(f"{files.folder}: not a synthetic data set built by ensure_synthetic (no manifest)")
    return {key: manifest["params"][key] for key in ("samples", "seed", "generator")}


def ensure_synthetic(samples: int, seed: int, cache_root: Path | None = None,
                     progress: Progress | None = None) -> SyntheticFiles:
    """Return the cached data set, generating it first if it is absent or damaged.

    ``progress(what, done, total)`` is called once per generated chunk of
    samples. Raises ``UsageError`` when the cache folder is not writable.
    """
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    params = synthetic_params(samples, seed)

    def write(folder: Path, progress: Progress | None) -> dict:
        _check_room(samples, folder)
        return _write_arrays(SyntheticFiles(folder, samples), seed, progress)

    def check(folder: Path, manifest: dict) -> str | None:
        return _check_arrays(SyntheticFiles(folder, samples), manifest)

    folder = materialize(root, params, write, check, progress, label=f"synthetic data ({samples} samples)")
    return SyntheticFiles(folder, samples)


def arrays_bytes(samples: int) -> int:
    """The bytes the arrays of ``samples`` samples take on disk (float32 features, int64 labels; headers aside)."""
    return samples * (FEATURES * 4 + 8)


def _check_room(samples: int, folder: Path) -> None:
    """Refuse, before writing, a data set the cache folder's file system cannot hold: one line naming
    ``data.samples`` and how many fit, not an error from deep in numpy (a file larger than the file system
    allows) or a disk filled to its last block."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return  # unknown: the write itself says what goes wrong
    if arrays_bytes(samples) > free:
        fits = free // arrays_bytes(1)
        raise UsageError(f"data.samples = {samples} is not allowed here: its arrays take "
                         f"{fmt.byte_size(arrays_bytes(samples))} and the cache folder {folder.parent} has "
                         f"{fmt.byte_size(free)} free: expected 1 to {fits} (or another cache: --cache or "
                         "$PIPEPROF_CACHE)")


def _write_arrays(files: SyntheticFiles, seed: int, progress: Progress | None) -> dict:
    samples = files.samples
    x = np.lib.format.open_memmap(files.x_path, mode="w+", dtype=np.float32, shape=(samples, FEATURES))
    y = np.empty(samples, np.int64)
    protos = prototypes(seed)
    for chunk, start in enumerate(range(0, samples, _CHUNK)):
        count = min(_CHUNK, samples - start)
        x[start : start + count], y[start : start + count] = generate_chunk(seed, chunk, count, protos)
        if progress is not None:
            progress("synthetic", start + count, samples)  # one call per chunk: generation is vectorized
    x.flush()
    del x
    np.save(files.y_path, y)
    return {"count": samples, "total_bytes": files.x_path.stat().st_size + files.y_path.stat().st_size,
            "checksum": _arrays_checksum(files)}


def _check_arrays(files: SyntheticFiles, manifest: dict) -> str | None:
    """Headers say the right shape and dtype, sizes match them, and the checksum holds."""
    for path, shape, dtype in ((files.x_path, (files.samples, FEATURES), np.float32),
                               (files.y_path, (files.samples,), np.int64)):
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            header_shape, fortran, header_dtype = read_header(f)
            offset = f.tell()
        if header_shape != shape or header_dtype != np.dtype(dtype) or fortran:
            return f"{path.name} holds {header_dtype} {header_shape}, expected {np.dtype(dtype)} {shape}"
        expected = offset + int(np.prod(shape)) * np.dtype(dtype).itemsize
        if path.stat().st_size != expected:
            return f"{path.name} has {path.stat().st_size} bytes, expected {expected}"
    if _arrays_checksum(files) != manifest["checksum"]:
        return "checksum differs"
    return None


def _arrays_checksum(files: SyntheticFiles) -> str:
    """SHA-1 of all of y.npy and the first and last 64 KiB of x.npy: milliseconds, not a full pass."""
    digest = hashlib.sha1(files.y_path.read_bytes())
    size = files.x_path.stat().st_size
    with open(files.x_path, "rb") as f:
        digest.update(f.read(_HASHED_BYTES))
        f.seek(max(0, size - _HASHED_BYTES))
        digest.update(f.read(_HASHED_BYTES))
    return digest.hexdigest()
