"""What a sampled stack was doing: the training thread's and a DataLoader worker's classes.

Pure functions over ``stacks.StackLine`` frames (outermost first); the
source text of the innermost frame's line is passed in (read where the
stack was recorded), because a call into C (``x.to(device)``,
``loss.item()``) leaves no Python frame of its own: the line that makes it
is the only trace.

**Training thread** (a process's main thread), the first rule that applies:

1. ``collective`` — a frame in ``torch/distributed/`` (``all_reduce``,
   ``barrier``, ...). DDP's gradient all-reduce runs in C++ during backward
   and is not seen: it counts as compute.
2. ``data_wait`` — inside the DataLoader's iterator: ``__next__`` /
   ``__iter__`` of ``torch/utils/data/dataloader.py`` (its queue get, the
   pin-memory thread's handoff, and with ``num_workers = 0`` the making of
   the batch itself, as the hooks count it).
3. ``device_wait`` — ``synchronize`` under ``torch/cuda/``, or an innermost
   line calling ``.item()``, ``.cpu()``, ``.tolist()``, ``synchronize(``.
4. ``h2d`` — ``torch/utils/data/_utils/pin_memory.py``, a framework's
   batch mover (``send_to_device``, ``transfer_batch_to_device``,
   ``move_data_to_device``), or an innermost line calling ``.to(`` /
   ``.cuda(``.
5. ``compute`` — a frame the code-level view puts in compute
   (``analysis.hotspots.file_group``: ``torch/nn``, ``autograd``, ``optim``, ...).
6. ``other`` — the rest (the loop's own Python, logging, checkpoints).

**Worker** (a process whose stack holds ``_worker_loop``), frames below it:

* ``idle`` — not inside a fetcher's ``fetch``: waiting for an index (its
  prefetch slots are full), not working;
* ``collate`` — the fetcher's call after the samples (the frame under
  ``fetch`` is not ``__getitem__`` / ``__getitems__`` / a comprehension /
  ``__next__``), or ``torch/utils/data/_utils/collate.py``;
* ``transform`` — under a ``Compose`` (torchvision's or one with that
  name), or in ``torchvision/transforms/``; named by the leaf transform's class;
* ``decode`` — one of the decode calls the hooks time
  (``script.decode_hooks.DECODE_CALLS``: PIL, torchvision.io, numpy.load),
  named as the hooks name it; a decode inside a transform is the transform's,
  as in the hooks;
* ``fetch`` — the rest of making the samples (``__getitem__``, reading).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipeprof.analysis.hotspots import COMPUTE, file_group
from pipeprof.attach.stacks import Frame
from pipeprof.script.decode_hooks import DECODE_CALLS

COLLECTIVE, DATA_WAIT, DEVICE_WAIT, H2D, OTHER = "collective", "data_wait", "device_wait", "h2d", "other"
TRAINING_CLASSES = (DATA_WAIT, H2D, COLLECTIVE, DEVICE_WAIT, COMPUTE, OTHER)
FETCH, DECODE, TRANSFORM, COLLATE, IDLE = "fetch", "decode", "transform", "collate", "idle"
WORKER_CLASSES = (FETCH, DECODE, TRANSFORM, COLLATE, IDLE)

_DATALOADER = "torch/utils/data/dataloader.py"
_FETCHER = "torch/utils/data/_utils/fetch.py"
_WORKER_LOOP = ("torch/utils/data/_utils/worker.py", "_worker_loop")
_ITEM_SIDE = re.compile(r"(__getitem__|__getitems__|<listcomp>|<genexpr>|__next__)$")
_MOVERS = re.compile(r"(^|\.)(send_to_device|transfer_batch_to_device|move_data_to_device|_?batch_to_device)$")
_DEVICE_WAIT_LINE = re.compile(r"\.(item|cpu|tolist)\(\)|synchronize\(")
_H2D_LINE = re.compile(r"\.(to|cuda)\(")


def _path(file: str) -> str:
    return file.replace("\\", "/")


def is_worker(frames: Sequence[Frame]) -> bool:
    """A DataLoader worker's stack (forked workers also show their parent's frames above the loop)."""
    return _worker_index(frames) is not None


def _worker_index(frames: Sequence[Frame]) -> int | None:
    for i, f in enumerate(frames):
        if f.function.endswith(_WORKER_LOOP[1]) and _WORKER_LOOP[0] in _path(f.file):
            return i
    return None


def iterates_loader(frames: Sequence[Frame]) -> bool:
    """The stack is inside a DataLoader's iterator (which marks a training process, not a launcher)."""
    return any(_DATALOADER in _path(f.file) for f in frames)


def training_class(frames: Sequence[Frame], innermost_line: str = "") -> str:
    """The class of one training-thread sample (rules in the module docstring)."""
    paths = [_path(f.file) for f in frames]
    if any("torch/distributed/" in p and "torch/distributed/elastic/" not in p for p in paths):
        return COLLECTIVE
    if any(_DATALOADER in p and f.function.endswith(("__next__", "__iter__")) for p, f in zip(paths, frames)):
        return DATA_WAIT
    if any("torch/cuda/" in p and f.function.endswith("synchronize") for p, f in zip(paths, frames)):
        return DEVICE_WAIT
    if _DEVICE_WAIT_LINE.search(innermost_line):
        return DEVICE_WAIT
    if any("torch/utils/data/_utils/pin_memory.py" in p or _MOVERS.search(f.function) for p, f in zip(paths, frames)):
        return H2D
    if _H2D_LINE.search(innermost_line):
        return H2D
    if any(file_group(f.file) == COMPUTE for f in frames):
        return COMPUTE
    return OTHER


def worker_class(frames: Sequence[Frame]) -> tuple[str, str]:
    """``(class, name)`` of one worker sample; the name of a transform or decode call, else ""."""
    start = _worker_index(frames)
    below = list(frames[start + 1:] if start is not None else frames)
    fetch_at = next((i for i, f in enumerate(below) if f.function.endswith("fetch") and _FETCHER in _path(f.file)),
                    None)
    if fetch_at is None:
        return IDLE, ""
    inside = below[fetch_at + 1:]
    if inside and not _ITEM_SIDE.search(inside[0].function):
        return COLLATE, ""
    if any("torch/utils/data/_utils/collate.py" in _path(f.file) for f in inside):
        return COLLATE, ""
    name = _transform_name(inside)
    if name is not None:
        return TRANSFORM, name
    for f in inside:
        decode = decode_name(f)
        if decode is not None:
            return DECODE, decode
    return FETCH, ""


def _transform_name(frames: Sequence[Frame]) -> str | None:
    """The leaf transform under the outermost Compose (or in torchvision.transforms), by its class."""
    composes = [i for i, f in enumerate(frames) if f.function.split(".")[0] == "Compose"]
    if composes:
        after = frames[composes[-1] + 1:] if composes[-1] + 1 < len(frames) else ()
        # the first method below it that is not torch.nn's call machinery (a v2 transform is an nn.Module)
        leaf = next((f for f in after if "." in f.function and "torch/nn/" not in _path(f.file)), None)
        return leaf.function.split(".")[0] if leaf is not None else "Compose"
    for f in frames:
        if "torchvision/transforms/" in _path(f.file):
            return f.function.split(".")[0]
    return None


def decode_name(frame: Frame) -> str | None:
    """The hooks' name of a decode call (``DECODE_CALLS``) this frame is, or None."""
    path = _path(frame.file)
    for module, owner, attr, name in DECODE_CALLS:
        if module.replace(".", "/") not in path:
            continue
        if frame.function == (f"{owner}.{attr}" if owner else attr):
            return name
    return None
