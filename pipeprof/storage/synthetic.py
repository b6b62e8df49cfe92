"""A deterministic, learnable, FashionMNIST-shaped data set, generated once and cached.

No data set can be downloaded here, so pipeprof makes its own: N samples of
784 float32 values in [0, 1] (28x28 "images") in 10 classes. Each class has a
smooth prototype made of a few Gaussian blobs; a sample is its class's
prototype with a random contrast, a shift of up to two pixels and pixel noise,
so an MLP learns it well above chance within one epoch without it being trivial.

The arrays live as ``x.npy`` (N x 784 float32) and ``y.npy`` (N int64) in
``<cache>/synthetic-n<N>-seed<S>/``, written to a temporary name and renamed,
so a crash never leaves a half-written data set that looks whole.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FEATURES = 784
SIDE = 28
CLASSES = 10
_CHUNK = 8192  # generation chunk; fixed so the content never depends on memory
_MAX_SHIFT = 3
_NOISE = 0.6


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


def ensure_synthetic(samples: int, seed: int, cache_root: Path | None = None) -> SyntheticFiles:
    """Return the cached data set, generating it first if it is not there yet."""
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    files = SyntheticFiles(root / f"synthetic-n{samples}-seed{seed}", samples)
    if files.x_path.exists() and files.y_path.exists():
        return files
    files.folder.mkdir(parents=True, exist_ok=True)
    tag = f".tmp-{os.getpid()}"
    x_tmp, y_tmp = files.folder / f"x{tag}.npy", files.folder / f"y{tag}.npy"
    try:
        x = np.lib.format.open_memmap(x_tmp, mode="w+", dtype=np.float32, shape=(samples, FEATURES))
        y = np.empty(samples, np.int64)
        protos = prototypes(seed)
        for chunk, start in enumerate(range(0, samples, _CHUNK)):
            count = min(_CHUNK, samples - start)
            x[start : start + count], y[start : start + count] = generate_chunk(seed, chunk, count, protos)
        x.flush()
        del x
        np.save(y_tmp, y)
        # y first: x.npy's presence is what marks the data set complete.
        os.replace(y_tmp, files.y_path)
        os.replace(x_tmp, files.x_path)
    finally:
        x_tmp.unlink(missing_ok=True)
        y_tmp.unlink(missing_ok=True)
    return files
