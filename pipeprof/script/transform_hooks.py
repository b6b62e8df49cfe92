"""A profiled script's transform pipelines, timed where its samples are made (issue 18, items 1-3).

Part of the hooks (``pipeprof.script.hooks``); standard library and torch
only. At a loader's first ``iter()`` (``TransformHooks.on_loader``) its
dataset is searched for transform pipelines: through wrappers (an object's
``dataset``, ``ConcatDataset.datasets``, any dataset it holds) to the
attributes datasets call (``transform``, ``target_transform``,
``transforms``, and any other holding a pipeline: ``self.tf``,
``self.aug``, ``self.preprocess``; an object holding pipelines itself, like
torchvision's ``StandardTransform`` or the reference scripts'
``ClassificationPresetTrain``, is searched in turn), a Hugging Face
``Dataset``'s ``with_transform`` / ``set_transform`` function (its format
arguments' ``transform``), and the user's functions in a WebDataset
pipeline's ``map`` / ``map_tuple`` stages. Each pipeline found is timed
once, whichever attribute reaches it
(``measure.transforms.TransformTimer``, keyed by the loader: the totals
land in the table of the process that made the sample), and the decode
calls are patched (``pipeprof.script.decode_hooks``). The loader's
``TimedCollate`` carries the keys, so the timed fetch of any process
(the training process, a forked or a spawned worker) reads what the batch
spent (``batch_parts``) and sends it back with the batch (``Tagged.parts``).

Events written in the training process:

* ``("F", loader, leaves)``: the loader's timed leaves in call order,
  ``[{"name", "random"}]`` (or ``{"absent": reason}`` when timing could not
  be installed);
* ``("Q", index, kind, name)``: the first time a part is seen;
* ``("P", loader, made_t0_s, index, calls, wall_s, cpu_s)``: per batch and
  part, joined to the batch's ``N`` by loader and ``made_t0_s`` (the
  maker's start time in its record).
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset

from pipeprof import adapters
from pipeprof.measure.transforms import TransformTimer, drop_table, is_container, take_table
from pipeprof.script import decode_hooks
from pipeprof.script.patches import Patches

PIPELINE_ATTRS = ("transform", "target_transform", "transforms")
TRANSFORM, DECODE = "transform", "decode"
SEARCH_MAX = 1000  # objects looked at in one dataset (a deep chain of wrappers)


def batch_parts(keys: tuple[str, ...]) -> list[tuple[str, str, int, float, float]] | None:
    """What this process's timed transforms (under ``keys``) and decode calls spent since the last call:
    ``(kind, name, calls, wall_s, cpu_s)``, or None when nothing is timed."""
    parts = [(TRANSFORM, *row) for key in keys for row in take_table(key)]
    parts.extend((DECODE, *row) for row in decode_hooks.take())
    return parts or None


# Attribute names that say "transform" whatever the object (a user's function under ``self.preprocess``).
_PIPELINE_NAME = re.compile(r"(^|_)(tf|tfs|tfm|tfms|transforms?|augs?|augment\w*|augmentations?|preprocess\w*|"
                            r"preprocessing|pipeline|preset)$", re.IGNORECASE)


def find_pipelines(dataset: Any) -> list[tuple[Any, str, Any]]:
    """``(holder, attribute, pipeline)`` of every transform pipeline reachable from ``dataset``, in the order
    found (a pipeline held under two names appears twice, with its two holders).

    Through wrappers (an object's ``dataset``, ``ConcatDataset.datasets``), each object's attributes are
    looked at whatever their names: the usual ones first (``transform``, ``target_transform``,
    ``transforms``), then any holding a pipeline (``pipeline_like``: ``self.tf``, ``self.aug``,
    ``self.preprocess``). An object that holds pipelines itself (torchvision's ``StandardTransform``, the
    reference scripts' ``ClassificationPresetTrain`` holding a ``transforms`` Compose) is opened and
    searched in turn, so its leaves are timed, not it as one."""
    found: list[tuple[Any, str, Any]] = []
    seen: set[int] = set()
    queue = [dataset]
    while queue and len(seen) < SEARCH_MAX:
        obj = queue.pop(0)
        attrs = getattr(obj, "__dict__", None)
        if id(obj) in seen or not isinstance(attrs, dict):
            continue
        seen.add(id(obj))
        names = [a for a in PIPELINE_ATTRS if a in attrs] + \
            [a for a in attrs if a not in PIPELINE_ATTRS and (pipeline_like(a, attrs[a]) or _transform_list(a, attrs[a]))]
        for attr in names:
            value: Any = attrs.get(attr)
            if _transform_list(attr, value):  # a list of transforms the dataset applies in turn
                found.extend((Slot(obj, attr, i), "", f) for i, f in enumerate(value))
                continue
            if value is None or not callable(value) or isinstance(value, type):
                continue
            if holds_pipelines(value):
                queue.append(value)
            else:
                found.extend(_opened(obj, attr, value))
        formatted = attrs.get("_format_kwargs")  # a Hugging Face Dataset's with_transform / set_transform
        if isinstance(formatted, dict) and callable(formatted.get("transform")):
            found.extend(_opened(Slot(formatted, "transform"), "", formatted["transform"]))
        found.extend(_stage_functions(attrs.get("pipeline")))
        inner = attrs.get("dataset")
        if inner is not None:
            queue.append(inner)
        many = attrs.get("datasets")
        if isinstance(many, (list, tuple)):
            queue.extend(many)
        # a wrapper holding its dataset under another name (``self.base``, ``self.source``)
        queue.extend(v for a, v in attrs.items() if a not in ("dataset", "datasets") and _is_dataset(v))
    return found


# Pipeline stages that call the user's functions on each sample (.map(f), .map_tuple(f, g, ...)), and the
# modules of a library's own stage functions (its decoding, not a transform): pipeprof.adapters
STAGE_FUNCTIONS = adapters.stage_functions()
OWN_FUNCTIONS = adapters.own_functions()


class Slot:
    """Where a pipeline is held that is no attribute: a dict's item (a Hugging Face Dataset's format arguments)
    or an item of a tuple or list attribute (the functions a WebDataset stage calls, ``args``; a dataset's
    ``transform`` list, applied in turn, as litdata's ``StreamingDataset`` holds it)."""

    def __init__(self, owner: Any, key: Any, index: int | None = None) -> None:
        self.owner, self.key, self.index = owner, key, index

    def get(self) -> Any:
        if self.index is None:
            return self.owner.get(self.key)
        return getattr(self.owner, self.key)[self.index]

    def set(self, value: Any) -> None:
        if self.index is None:
            self.owner[self.key] = value
            return
        held = getattr(self.owner, self.key)
        if isinstance(held, list):  # a list stays the list its owner holds (litdata checks it is one)
            held[self.index] = value
            return
        items = list(held)
        items[self.index] = value
        setattr(self.owner, self.key, tuple(items))


def _stage_functions(pipeline: Any) -> list[tuple[Any, str, Any]]:
    """The user's functions in a pipeline's ``map`` / ``map_tuple`` stages (a library's own, such as its
    ``Decoder``, are its decoding, not a transform)."""
    found: list[tuple[Any, str, Any]] = []
    if not isinstance(pipeline, list):
        return found
    for stage in pipeline:
        attrs = getattr(stage, "__dict__", None)
        f, args = (attrs.get("f"), attrs.get("args")) if isinstance(attrs, dict) else (None, None)
        if getattr(f, "__name__", None) not in STAGE_FUNCTIONS or not isinstance(args, tuple):
            continue
        for i, function in enumerate(args):
            module = getattr(type(function), "__module__", "") or ""
            if callable(function) and not module.startswith(OWN_FUNCTIONS):
                found.append((Slot(stage, "args", i), "", function))
    return found


def pipeline_like(attr: str, value: Any) -> bool:
    """Whether a dataset's attribute ``attr`` holds a transform pipeline, whatever its name: a container
    (``Compose``-like), a torchvision transform, an ``nn.Module``, an object holding pipelines, or a callable
    under a name that says so (``tf``, ``aug``, ``preprocess``...). Not a dataset (a wrapper's, searched as
    such), not a class, not another DataLoader-side callable under a plain name (``self.loader``: decode)."""
    if value is None or isinstance(value, type) or not callable(value) or _is_dataset(value):
        return False
    if _PIPELINE_NAME.search(attr.lstrip("_")):
        return True
    module = type(value).__module__ or ""
    return is_container(value) or module.startswith("torchvision.transforms") or \
        isinstance(value, torch.nn.Module) or holds_pipelines(value)


def _opened(holder: Any, attr: str, function: Any) -> list[tuple[Any, str, Any]]:
    """A function of the user's that applies pipelines of its own (``def apply_tf(batch): ... tf(image) ...``,
    as Hugging Face ``set_transform`` functions are written): those pipelines, timed leaf by leaf where they are
    held (its module's globals, its closure), and not the function as one opaque transform (its other work,
    a PIL ``convert``, is then decode, or the sample's other); anything else: the function itself."""
    if not isinstance(function, types.FunctionType):
        return [(holder, attr, function)]
    inner: list[tuple[Any, str, Any]] = []
    for name in _global_names(function.__code__):
        value = function.__globals__.get(name)
        if _applies(value):
            inner.append((Slot(function.__globals__, name), "", value))
    for cell in function.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if is_container(value):  # timed in place: a cell holding a bare transform cannot be replaced
            inner.append((cell, "cell_contents", value))
    return inner or [(holder, attr, function)]


def _global_names(code: types.CodeType) -> list[str]:
    """The global names a function's code reads, its comprehensions' and inner functions' included (in 3.11 a
    list comprehension is a code object of its own)."""
    names: list[str] = []
    todo = [code]
    while todo:
        c = todo.pop()
        names.extend(n for n in c.co_names if n not in names)
        todo.extend(const for const in c.co_consts if isinstance(const, types.CodeType))
    return names


def _applies(value: Any) -> bool:
    """A transform pipeline a function may apply: a container (``Compose``) or a torchvision transform."""
    if value is None or isinstance(value, type) or not callable(value):
        return False
    return is_container(value) or (type(value).__module__ or "").startswith("torchvision.transforms")


def _transform_list(attr: str, value: Any) -> bool:
    """A list or tuple of callables under a transform's name (``self.transform = [resize, normalize]``)."""
    return isinstance(value, (list, tuple)) and bool(value) and bool(_PIPELINE_NAME.search(attr.lstrip("_"))) \
        and all(callable(f) and not isinstance(f, type) for f in value)


def holds_pipelines(value: Any) -> bool:
    """An object that is no container itself but holds pipelines in its attributes: torchvision's
    ``StandardTransform(transform, target_transform)``, a preset class whose ``transforms`` is a Compose."""
    attrs = getattr(value, "__dict__", None)
    if not isinstance(attrs, dict) or is_container(value) or isinstance(value, torch.nn.Module):
        return False
    if any(callable(attrs.get(a)) for a in ("transform", "target_transform")):
        return True
    return any(is_container(v) for v in attrs.values() if callable(v) and not isinstance(v, type))


def _is_dataset(value: Any) -> bool:
    return isinstance(value, (Dataset, IterableDataset)) or "datasets" in (getattr(value, "__dict__", None) or {})


class TransformHooks:
    """One session's transform and decode timing: each loader's pipelines, the names of the parts logged."""

    def __init__(self, patches: Patches, log: Any, clock: Callable[[], float], session: str) -> None:
        self.patches, self.log, self.clock = patches, log, clock
        self.session = session  # tells this session's tables from another's in the same process
        self.installed: dict[int, tuple[str, list[dict[str, Any]]]] = {}  # id(pipeline) -> (key, its leaves)
        self.indexes: dict[tuple[str, str], int] = {}  # (kind, name) -> index in P events

    def on_loader(self, loader: Any, number: int, collate: Any) -> None:
        """Time the pipelines of ``loader``'s dataset and the decode calls; ``collate`` (the loader's
        ``TimedCollate``) is given the keys its batches' parts are read under; one ``F`` event."""
        try:
            decode_hooks.install(self.patches)
            keys, leaves = self._install(loader.dataset, number)
        except (AttributeError, TypeError, ValueError, RuntimeError) as e:  # an object we could not time
            self.log.add(("F", number, {"absent": f"transforms not timed: {type(e).__name__}: {e}"}), self.clock())
            return
        collate.transform_keys = tuple(keys)
        self.log.add(("F", number, leaves), self.clock())

    def _install(self, dataset: Any, number: int) -> tuple[list[str], list[dict[str, Any]]]:
        key = f"{self.session}:{number}"
        timer = TransformTimer(key=key)
        keys: list[str] = []
        leaves: list[dict[str, Any]] = []
        wrapped: dict[int, Any] = {}  # id(pipeline) -> what its holders call now
        for holder, attr, pipeline in find_pipelines(dataset):
            if id(pipeline) in wrapped:  # the same pipeline under another name (StandardTransform's)
                self._replace(holder, attr, pipeline, wrapped[id(pipeline)])
                continue
            if id(pipeline) in self.installed:  # timed for another loader: its table holds the times
                other, its_leaves = self.installed[id(pipeline)]
                keys.append(other)
                leaves.extend(its_leaves)
                wrapped[id(pipeline)] = pipeline
                continue
            first = len(timer.leaves)
            timed = wrapped[id(pipeline)] = timer.install(pipeline)
            mine = [{"name": name, "random": random} for name, random in timer.leaves[first:]]
            self.installed[id(pipeline)] = (key, mine)
            leaves.extend(mine)
            self._replace(holder, attr, pipeline, timed)
        if timer.leaves:
            keys.append(key)
            self.patches.on_undo(lambda: drop_table(key))
            self.patches.on_undo(timer.uninstall)
        return keys, leaves

    def _replace(self, holder: Any, attr: str, pipeline: Any, timed: Any) -> None:
        if timed is pipeline:  # timed in place (a container's entries)
            return
        if isinstance(holder, Slot):  # a Hugging Face Dataset's format arguments, a WebDataset stage's function
            holder.set(timed)

            def undo_slot() -> None:
                if holder.get() is timed:
                    holder.set(pipeline)
            self.patches.on_undo(undo_slot)
            return
        setattr(holder, attr, timed)

        def undo() -> None:
            if getattr(holder, attr, None) is timed:
                setattr(holder, attr, pipeline)
        self.patches.on_undo(undo)

    def on_batch(self, number: int, record: list, parts: list[tuple[str, str, int, float, float]],
                 now_s: float) -> None:
        """``P`` events for a batch of loader ``number`` (``record``: its maker's; ``Q`` for a new part)."""
        made_t0_s = record[2]
        add, indexes = self.log.add, self.indexes
        for kind, name, calls, wall_s, cpu_s in parts:
            index = indexes.get((kind, name))
            if index is None:
                index = indexes[(kind, name)] = len(indexes)
                add(("Q", index, kind, name), now_s)
            add(("P", number, made_t0_s, index, calls, wall_s, cpu_s), now_s)
