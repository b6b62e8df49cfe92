"""What a loader and a batch are: a DataLoader's settings, its name (``loader_names``) and framework; a batch's tensors."""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Sized
from types import FrameType
from typing import Any

from torch.utils.data import DataLoader

from pipeprof.script.batches import tensors
from pipeprof.script.loader_names import build_site, framework, loader_name


def batch_samples(data: Any, record: list | None) -> int:
    if record is not None:
        return int(record[7])
    found = tensors(data)
    return int(found[0].shape[0]) if found and found[0].dim() else 1


LOOP, LOOP_EVALUATION = "loop", "loop evaluation"  # a loader entry's ``feed``: the loop's own batches
_LIBRARY_ROOTS = tuple(os.path.realpath(p) + os.sep for p in {sysconfig.get_paths()["purelib"],
                                                                 sysconfig.get_paths()["platlib"],
                                                                 sysconfig.get_paths()["stdlib"]})
_OWN = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep  # pipeprof itself


def _library(frame: FrameType) -> str | None:
    """The installed package a frame's code belongs to (its top-level module), or None for the user's own code."""
    path = os.path.realpath(frame.f_code.co_filename)
    if not path.startswith(_LIBRARY_ROOTS) and "site-packages" not in path:
        return None
    return str(frame.f_globals.get("__name__") or "?").split(".")[0]


def describe_loop_feed(number: int, evaluation: bool) -> dict[str, Any]:
    """A loader entry for the loop's own batches (no DataLoader on its thread handed them over): where the loop
    uses them (the first frame outside pipeprof and torch, in the user's code or the library that runs the loop),
    and that library (``framework``); PyTorch's loader settings are unknown (None)."""
    frame: FrameType | None = sys._getframe(1)
    caller = user = None
    while frame is not None and user is None:
        path = os.path.realpath(frame.f_code.co_filename)
        if not path.startswith(_OWN) and str(frame.f_globals.get("__name__") or "").split(".")[0] != "torch":
            caller = caller or frame
            user = frame if _library(frame) is None else None
        frame = frame.f_back
    framework = _library(caller) if caller is not None else None
    site = user or caller
    where = (f"{site.f_code.co_name} ({os.path.basename(site.f_code.co_filename)}:{site.f_lineno})"
             if site is not None else "?")
    where = f"{framework}, from {where}" if framework else f"in {where}"
    return {
        "number": number,
        "name": f"the loop's evaluation passes ({where})" if evaluation else f"the loop's batches ({where})",
        "feed": LOOP_EVALUATION if evaluation else LOOP,
        "framework": framework, "built_in": None, "dataset": None, "dataset_module": None,
        "dataset_samples": None, "batch_size": None, "num_workers": None, "pin_memory": None,
        "prefetch_factor": None, "persistent_workers": None, "drop_last": None, "multiprocessing_context": None,
    }


def describe_loader(loader: DataLoader, number: int) -> dict[str, Any]:
    """The loader's settings as PyTorch names them, the name the user's code gives it, and the framework
    (``lightning``, ``transformers``, ``accelerate`` or None) that builds or iterates it."""
    dataset = loader.dataset
    try:
        size = len(dataset) if isinstance(dataset, Sized) else None
    except TypeError:  # an IterableDataset without __len__
        size = None
    return {
        "number": number,
        "name": loader_name(loader),
        "framework": framework(loader),
        "built_in": _built_in(loader),
        "dataset": type(dataset).__name__,
        "dataset_module": type(dataset).__module__,
        "dataset_samples": size,
        "batch_size": _batch_size(loader),
        "num_workers": loader.num_workers,
        "pin_memory": bool(loader.pin_memory),
        "prefetch_factor": loader.prefetch_factor if loader.num_workers else None,
        "persistent_workers": bool(loader.persistent_workers),
        "drop_last": bool(loader.drop_last),
        "multiprocessing_context": _context_name(loader),
    }


def _built_in(loader: DataLoader) -> str | None:
    """The user function that built and returned the loader (Lightning's ``train_dataloader()``), or None."""
    site = build_site(loader)
    return site.built_in if site is not None else None


def _context_name(loader: DataLoader) -> str | None:
    context = loader.multiprocessing_context
    if context is None:
        return None
    return context if isinstance(context, str) else context.get_start_method()


def _batch_size(loader: DataLoader) -> int | None:
    """The loader's batch size, or its batch sampler's (accelerate and the Hugging Face Trainer build loaders on a
    batch sampler, where ``loader.batch_size`` is None; accelerate's ``BatchSamplerShard`` wraps another)."""
    if loader.batch_size is not None:
        return int(loader.batch_size)
    sampler = loader.batch_sampler
    for _ in range(3):
        size = getattr(sampler, "batch_size", None)
        if isinstance(size, int):
            return size
        sampler = getattr(sampler, "batch_sampler", None)
        if sampler is None:
            break
    return None
