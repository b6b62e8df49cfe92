"""Each data library pipeprof knows is one adapter, and this is their registry.

An adapter says, as data and small functions, what pipeprof must know of one
library to measure a training loop that uses it:

* ``packages``: its top-level modules. Their frames are library code: never
  where a user names a loader, and their presence between a loader and the
  user's code names the ``framework`` that builds or iterates it.
* ``look_ahead``: its wrappers around a DataLoader that take a batch ahead of
  the loop (the loop's ``next()`` on them is what is timed).
* ``own_iter``: its DataLoader subclasses whose ``__iter__`` never calls
  DataLoader's (timed as DataLoader's is).
* ``own_step``: its optimizers that are no ``torch.optim.Optimizer`` (their
  ``step()`` ends a training step).
* ``loader_modules``, ``recognise``, ``describe``, ``not_timed``: loaders of
  its own that are no DataLoader, patched when their module is imported
  (``patch(module, patches, hooks)``), recognised, described under PyTorch's
  names, and why how their batches are made is unknown.
* ``builder``: a function of it that builds loaders, and the name a user of
  the library knows such a loader by.
* ``pipeline_datasets``, ``own_functions``, ``table_reads``: what of a
  sample's making cannot be timed apart, and why.
* ``write_change``: a settings change written as the library's own code.
* ``launchers``: its modules that launch a training script (``python -m ...``).
* ``stop_loop``: ends the library's own loop as its stop request does (``--steps``), where an exception would
  look like a crash to it.
* ``sees``: what pipeprof sees of a loop fed through it (the docs' table).

Nothing outside this package names a library: the hooks, the loader names,
the session and the renderers read the registry. Supporting a new library is
one module here (added to ``ADAPTERS``), one fixture and one test. A library
with no entry is still measured (its loop's batches, ``script.loop_feed``);
an adapter only adds what can be known of it.

Standard library only: the hooks import it inside the user's process.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pipeprof.adapters import (
    accelerate,
    fastai,
    hf,
    ignite,
    lightning,
    litdata,
    mosaic,
    ray,
    spdl,
    timm,
    torch_dataloader,
    torchdata,
    webdataset,
)
from pipeprof.adapters.base import Adapter

# Order matters where frameworks nest: the first whose packages are seen names the framework (the Hugging Face
# Trainer iterates through accelerate).
ADAPTERS: tuple[Adapter, ...] = tuple(m.ADAPTER for m in (
    torch_dataloader, hf, lightning, accelerate, timm, torchdata, webdataset, fastai, ignite, litdata, mosaic, spdl,
    ray))


def library_packages() -> frozenset[str]:
    """Every adapter's packages."""
    return frozenset(p for a in ADAPTERS for p in a.packages)


def framework_packages() -> tuple[tuple[str, str], ...]:
    """(package, framework) pairs, the first found winning."""
    return tuple((p, a.framework) for a in ADAPTERS if a.framework for p in a.framework_packages)


def _merged(attribute: str) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for a in ADAPTERS:
        for module, names in getattr(a, attribute).items():
            out[module] = out.get(module, ()) + tuple(names)
    return out


def look_ahead() -> dict[str, tuple[str, ...]]:
    return _merged("look_ahead")


def own_iter() -> dict[str, tuple[str, ...]]:
    return _merged("own_iter")


def own_step() -> dict[str, tuple[str, ...]]:
    return _merged("own_step")


def loader_modules() -> dict[str, Callable[[Any, Any, Any], None]]:
    return {module: patch for a in ADAPTERS for module, patch in a.loader_modules.items()}


def stop_loop(frame: Any) -> bool:
    """Ask a library's loop running on the stack to end as at its own stop request (``Adapter.stop_loop``)."""
    return any(a.stop_loop is not None and a.stop_loop(frame) for a in ADAPTERS)


def launchers() -> tuple[str, ...]:
    return tuple(m for a in ADAPTERS for m in a.launchers)


def own_loader(loader: Any) -> Adapter | None:
    """The adapter whose own loader (no DataLoader) ``loader`` is, or None."""
    return next((a for a in ADAPTERS if a.recognise is not None and a.recognise(loader)), None)


def builder_name(package: str, function: str) -> str | None:
    """The name a library's users know a loader by, when ``function`` of ``package`` built it."""
    for a in ADAPTERS:
        if a.builder is not None and a.builder[0] == package:
            match = re.match(a.builder[1], function)
            if match:
                return a.builder[2].format(match.group(1))
    return None


def pipeline_datasets() -> frozenset[str]:
    return frozenset(name for a in ADAPTERS for name in a.pipeline_datasets)


def stage_functions() -> frozenset[str]:
    return frozenset(name for a in ADAPTERS for name in a.stage_functions)


def own_functions() -> tuple[str, ...]:
    return tuple(prefix for a in ADAPTERS for prefix in a.own_functions)


def table_reads(dataset_module: str) -> str | None:
    """What a dataset of ``dataset_module`` reads in ``__getitem__`` that is not timed apart, or None."""
    return next((a.table_reads[1] for a in ADAPTERS
                 if a.table_reads is not None and dataset_module.startswith(a.table_reads[0])), None)


def write_change(framework: str | None, settings: Mapping[str, Any], built_in: str | None,
                 as_dataloader: str) -> str | None:
    """``settings`` written as the code of the library that built the loader (None: as DataLoader keywords)."""
    for a in ADAPTERS:
        if a.framework == framework and a.write_change is not None:
            return a.write_change(settings, built_in, as_dataloader)
    return None
