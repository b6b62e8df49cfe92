"""What a loader and a batch are: a DataLoader's settings and the name the calling code gives it; a batch's tensors."""

from __future__ import annotations

import sys
from collections.abc import Sized
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

if TYPE_CHECKING:
    from types import FrameType


def tensors(data: Any, depth: int = 0) -> list[torch.Tensor]:
    """The tensors of a batch: itself, or in a tuple / list / dict, two levels deep."""
    if isinstance(data, torch.Tensor):
        return [data]
    if depth >= 2:
        return []
    if isinstance(data, (list, tuple)):
        return [t for item in data for t in tensors(item, depth + 1)]
    if isinstance(data, dict):
        return [t for item in data.values() for t in tensors(item, depth + 1)]
    return []


def batch_samples(data: Any, record: list | None) -> int:
    if record is not None:
        return int(record[7])
    found = tensors(data)
    return int(found[0].shape[0]) if found and found[0].dim() else 1


def describe_loader(loader: DataLoader, number: int) -> dict[str, Any]:
    """The loader's settings as PyTorch names them, and the name the calling code gives it."""
    dataset = loader.dataset
    try:
        size = len(dataset) if isinstance(dataset, Sized) else None
    except TypeError:  # an IterableDataset without __len__
        size = None
    return {
        "number": number,
        "name": _variable_name(loader) or f"loader{number}",
        "dataset": type(dataset).__name__,
        "dataset_samples": size,
        "batch_size": loader.batch_size,
        "num_workers": loader.num_workers,
        "pin_memory": bool(loader.pin_memory),
        "prefetch_factor": loader.prefetch_factor if loader.num_workers else None,
        "persistent_workers": bool(loader.persistent_workers),
        "drop_last": bool(loader.drop_last),
        "multiprocessing_context": _context_name(loader),
    }


def _context_name(loader: DataLoader) -> str | None:
    context = loader.multiprocessing_context
    if context is None:
        return None
    return context if isinstance(context, str) else context.get_start_method()


_SKIP_MODULES = ("torch", "tqdm", "pipeprof", "contextlib", "runpy", "threading")


def _variable_name(loader: DataLoader) -> str | None:
    """``train_loader`` or ``self.val_loader``: where the first frame outside torch/tqdm/pipeprof keeps it."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "") or ""
        if module.split(".")[0] not in _SKIP_MODULES:
            break
        frame = frame.f_back
    if frame is None:
        return None
    found = _attribute_holding(frame.f_locals.get("self"), loader)  # self.train_loader says more than an alias
    if found:
        return f"self.{found}"
    for scope in (frame.f_locals, frame.f_globals):
        for name, value in scope.items():
            if value is loader and not name.startswith("_"):
                return name
    for name, value in frame.f_locals.items():  # an attribute of any other local object
        found = _attribute_holding(value, loader)
        if found:
            return f"{name}.{found}"
    return None


def _attribute_holding(obj: Any, loader: DataLoader) -> str | None:
    attrs = getattr(obj, "__dict__", None) if obj is not None else None
    if isinstance(attrs, dict):
        for attr, held in attrs.items():
            if held is loader:
                return attr
    return None
