"""torchdata: its ``StatefulDataLoader`` (a DataLoader subclass whose ``__iter__`` never calls DataLoader's: timed
as DataLoader's is) and its ``nodes`` pipelines.

A ``torchdata.nodes.Loader`` is no DataLoader: its samples are made inside its nodes (``ParallelMapper``'s threads
or processes, ``Batcher``, ``Prefetcher``, ``PinMemory``), which hand back no record of how a batch was made. So
the loop's ``next()`` on the ``Loader``'s iterator is what is timed (``Hooks.on_iter`` / ``on_next``, as for a
DataLoader: the data wait, the steps, ``--steps``), its samples are counted from the batch itself (the leading
dimension its tensors share), and its settings are read from its nodes under PyTorch's names (``batch_size`` and
``drop_last`` of the ``Batcher``, ``num_workers`` of the ``ParallelMapper``s, ``prefetch_factor`` of the
``Prefetcher``, ``pin_memory`` where a ``PinMemory`` node is). What happens inside the nodes (fetch, decode,
transforms, each worker's record) is recorded as absent, with that reason.

torchdata is never imported here: the hooks' finder calls ``patch_module`` once the script imports
``torchdata.nodes.loader``. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from pipeprof.adapters.base import Adapter
from pipeprof.script.patches import Patches, wraps

MODULE = "torchdata.nodes.loader"
NOT_TIMED = ("a torchdata.nodes pipeline makes its samples inside its nodes (ParallelMapper, Batcher...), which "
             "hand back no record of how a batch was made: only the loop's wait for each batch is timed")


def is_nodes_loader(loader: Any) -> bool:
    return type(loader).__module__ == MODULE and type(loader).__name__ == "Loader"


def _nodes(root: Any, limit: int = 100) -> list[Any]:
    """The nodes of a pipeline, from its root through each node's ``source`` (``root`` for the Loader)."""
    out: list[Any] = []
    node = root
    while node is not None and len(out) < limit:
        out.append(node)
        attrs = getattr(node, "__dict__", {})
        node = attrs.get("source")
    return out


def describe(loader: Any, number: int, name: str) -> dict[str, Any]:
    """The loader's settings as PyTorch names them, read from its nodes (None where no node says)."""
    nodes = _nodes(getattr(loader, "root", None))
    by_kind: dict[str, Any] = {}
    for node in nodes:
        by_kind.setdefault(type(node).__name__, node)
    batcher, mapper, prefetcher = (by_kind.get(k) for k in ("Batcher", "ParallelMapper", "Prefetcher"))
    workers = sum(int(getattr(n, "num_workers", 0) or 0) for n in nodes if type(n).__name__ == "ParallelMapper")
    return {
        "number": number, "name": name, "framework": "torchdata.nodes",
        "dataset": type(nodes[-1]).__name__ if nodes else None, "dataset_samples": None,
        "batch_size": getattr(batcher, "batch_size", None), "num_workers": workers,
        "pin_memory": "PinMemory" in by_kind,
        "prefetch_factor": getattr(prefetcher, "prefetch_factor", None),
        "persistent_workers": False, "drop_last": bool(getattr(batcher, "drop_last", False)),
        "multiprocessing_context": getattr(mapper, "method", None),
    }


def patch_module(module: ModuleType, patches: Patches, hooks: Any) -> None:
    """Time ``Loader.__iter__`` (a pass) and its iterator's ``__next__`` (each batch) through ``hooks``."""
    loader_cls, iterator_cls = getattr(module, "Loader", None), getattr(module, "LoaderIterator", None)
    if not isinstance(loader_cls, type) or not isinstance(iterator_cls, type):
        return

    def switched(on: Callable[[Any, Callable], Any]) -> Callable[[Callable], Callable]:
        def make(original: Callable) -> Callable:
            def method(obj: Any) -> Any:
                if hooks.live:
                    return on(obj, original)
                return original(obj)
            return wraps(method, original)
        return make

    patches.apply(loader_cls, "__iter__", switched(hooks.on_iter))
    patches.apply(iterator_cls, "__next__", switched(hooks.on_next))


ADAPTER = Adapter(
    name="torchdata",
    packages=("torchdata",),
    own_iter={"torchdata.stateful_dataloader.stateful_dataloader": ("StatefulDataLoader",)},
    loader_modules={MODULE: patch_module},
    recognise=is_nodes_loader,
    describe=describe,
    not_timed=NOT_TIMED,
    sees=("StatefulDataLoader as a DataLoader, workers included; a nodes Loader at the loop's next() (data wait, "
          "steps, --steps), its settings read from its nodes, what happens inside them absent"),
)
