"""``images``: one encoded PNG or JPEG per sample, in an ImageFolder layout.

Sample ``i`` of class ``c`` is ``<folder>/<c>/<i:06d>.png`` (or ``.jpg``): a
28x28 grayscale 8-bit image of ``round(x * 255)``, so
``torchvision.datasets.ImageFolder(folder)`` reads the same data set. Each
read opens one file; each decode runs torchvision's PNG or JPEG decoder —
the per-sample CPU cost that makes image data sets decode-bound.

Labels come from the class folders, found by listing them when the dataset
is built (that listing is also the cache's file count check). Decoded
values equal the other storage kinds' up to quantization: exactly
``round(x * 255) / 255`` for PNG (within 0.5/255 of ``x``); for JPEG within
the lossy codec's error (see ``tests/test_storage_kinds.py`` for the bound).

The tree is materialized once from the synthetic arrays into
``<cache_root>/images-<key>/``, keyed by format and (JPEG) quality too.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import torchvision
from torchvision.io import ImageReadMode, decode_jpeg, decode_png, encode_jpeg, encode_png

from pipeprof.scenario import DataSpec
from pipeprof.storage.base import Progress, SampleDataset, Throttle, Transform
from pipeprof.storage.files import missing_error
from pipeprof.storage.materialize import check_files, materialize, tick, tree_facts
from pipeprof.storage.synthetic import CLASSES, FEATURES, SIDE, SyntheticFiles, source_params

LAYOUT_VERSION = 1  # bump when the layout or the encoder settings change: it is part of the cache key
EXTENSIONS = {"png": "png", "jpeg": "jpg"}
_ENCODE_CHUNK = 1000  # samples converted to uint8 at once while encoding
_MAX_PIXEL = np.float32(255.0)


def relpath(index: int, label: int, fmt: str) -> str:
    """Sample ``index``'s image, relative to the tree's folder."""
    return f"{label}/{index:06d}.{EXTENSIONS[fmt]}"


def to_pixels(x: np.ndarray) -> np.ndarray:
    """Float samples in [0, 1] (N x 784) as 8-bit images (N x 28 x 28): ``round(x * 255)``."""
    return np.rint(np.asarray(x, np.float32) * 255.0).astype(np.uint8).reshape(-1, SIDE, SIDE)


class ImagesDataset(SampleDataset):
    def __init__(self, folder: Path, labels: np.ndarray, fmt: str, transform: Transform | None = None,
                 throttle: Throttle | None = None) -> None:
        super().__init__(labels, transform, throttle)
        self.folder = Path(folder)
        self.format = fmt
        self.decoder = f"torchvision.io.decode_{'png' if fmt == 'png' else 'jpeg'}"
        self._prefix = str(self.folder) + "/"  # plain string joins: Path arithmetic costs µs per sample

    def read(self, index: int) -> tuple[bytes, int]:
        path = self._prefix + relpath(index, int(self.labels[index]), self.format)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise missing_error(self.folder, path, "images") from None
        return data, len(data)

    def decode(self, payload: bytes) -> torch.Tensor:
        encoded = torch.frombuffer(bytearray(payload), dtype=torch.uint8)  # a writable copy: no warning
        decoder = decode_png if self.format == "png" else decode_jpeg
        pixels = decoder(encoded, mode=ImageReadMode.GRAY).numpy().reshape(FEATURES)
        # numpy's divide costs half of two torch ops at this size, and gives the same float32 values.
        return torch.from_numpy(np.divide(pixels, _MAX_PIXEL, dtype=np.float32))

    def paths(self) -> list[Path]:
        return [self.folder / relpath(i, int(c), self.format) for i, c in enumerate(self.labels)]


def images_params(files: SyntheticFiles, fmt: str, quality: int) -> dict:
    """What determines the images' bytes (their cache key); quality only matters for JPEG."""
    params = {"kind": "images", **source_params(files), "layout": LAYOUT_VERSION, "format": fmt}
    if fmt == "jpeg":
        params["quality"] = quality
    return params


def scan_labels(folder: Path, samples: int, fmt: str) -> np.ndarray:
    """Each sample's label from the class folder holding it; ValueError unless every sample is there once."""
    labels = np.full(samples, -1, np.int64)
    suffix = "." + EXTENSIONS[fmt]
    names = {entry.name for entry in os.scandir(folder)}
    if extra := names - {str(c) for c in range(CLASSES)} - {"manifest.json"}:
        raise ValueError(f"unexpected entries {sorted(extra)[:3]}")
    for c in range(CLASSES):
        for entry in os.scandir(folder / str(c)):
            stem, _, ext = entry.name.partition(".")
            index = int(stem) if stem.isdigit() and "." + ext == suffix else -1
            if not 0 <= index < samples or labels[index] != -1:
                raise ValueError(f"unexpected or duplicate image {c}/{entry.name}")
            labels[index] = c
    if (missing := int((labels < 0).sum())) > 0:
        raise ValueError(f"{missing} of {samples} images missing")
    return labels


def ensure_images(files: SyntheticFiles, fmt: str = "png", quality: int = 90,
                  progress: Progress | None = None) -> tuple[Path, np.ndarray]:
    """The folder of the image tree for ``files`` (encoded first if absent or damaged) and its labels."""
    samples = files.samples
    params = images_params(files, fmt, quality)

    def write(folder: Path, progress: Progress | None) -> dict:
        x = np.load(files.x_path, mmap_mode="r")
        y = np.load(files.y_path)
        for c in range(CLASSES):
            (folder / str(c)).mkdir()  # every class folder, so ImageFolder's class indices are the labels
        total_bytes, prefix = 0, f"{folder}/"
        for start in range(0, samples, _ENCODE_CHUNK):
            pixels = torch.from_numpy(to_pixels(x[start : start + _ENCODE_CHUNK]))
            for offset, image in enumerate(pixels):
                index = start + offset
                encoded = encode_png(image[None]) if fmt == "png" else encode_jpeg(image[None], quality=quality)
                data = encoded.numpy().tobytes()
                with open(prefix + relpath(index, int(y[index]), fmt), "wb") as f:
                    f.write(data)
                total_bytes += len(data)
                tick(progress, f"images ({fmt})", index + 1, samples)
        facts = tree_facts(folder, samples, total_bytes, lambda i: relpath(i, int(y[i]), fmt))
        # For the record only (not in the key): a newer libjpeg may encode slightly different bytes.
        return {**facts, "encoder": f"torchvision {torchvision.__version__}"}

    scanned: dict[str, np.ndarray] = {}

    def check(folder: Path, manifest: dict) -> str | None:
        labels = scan_labels(folder, samples, fmt)  # raises ValueError, which means "rebuild"
        scanned["labels"] = labels
        return check_files(folder, manifest, lambda i: relpath(i, int(labels[i]), fmt))

    label = f"images ({fmt}{f' q{quality}' if fmt == 'jpeg' else ''}, {samples} samples)"
    folder = materialize(files.folder.parent, params, write, check, progress, label=label)
    # materialize returns only after check() passed on the folder's files as they are now
    # (on reuse, or on the fresh build before its rename), so the labels it scanned are these.
    return folder, scanned["labels"]


def build(spec: DataSpec, files: SyntheticFiles, transform: Transform | None = None,
          throttle: Throttle | None = None, progress: Progress | None = None) -> ImagesDataset:
    """Materialize the images (once) and return the dataset over them, labels from the class folders."""
    folder, labels = ensure_images(files, spec.format, spec.quality, progress)
    return ImagesDataset(folder, labels, spec.format, transform, throttle)
