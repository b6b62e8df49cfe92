"""The target that DataLoader workers run under ``pipeprof profile --cprofile``: torch's worker loop, profiled.

``pipeprof.script.code_profile.arm`` puts ``profiled_worker_loop`` in place of
``torch.utils.data._utils.worker._worker_loop``, the target every DataLoader
gives its worker processes. A forked worker inherits it; a spawned one
unpickles it by name, which imports this module. Standard library only at
import: a spawned worker may import it before torch, and torch's import arms
the hooks there (``script.rank_boot``), which import ``code_profile``; this
module importing torch (or ``code_profile``) would make that a cycle.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeprof.script.protocol import CPROFILE_ENV

# torch's own loop, kept by the process that replaced it (a forked worker inherits it; a spawned worker's own
# hooks keep it again when they arm)
_ORIGINAL: dict[str, Callable[..., Any]] = {}


def setting(environ: Any = os.environ) -> dict[str, Any] | None:
    """The setting ``pipeprof profile`` handed down (``{"first_step", "steps", "folder"}``), or None when
    cProfile was not asked for."""
    text = environ.get(CPROFILE_ENV)
    return json.loads(text) if text else None


def workers_folder(folder: str | Path, parent_pid: int) -> Path:
    """Where the workers of process ``parent_pid`` leave their markers and dumps."""
    return Path(folder, f"workers-{parent_pid}")


def replacing(original: Callable[..., Any]) -> Callable[..., Any]:
    """``profiled_worker_loop``, which will run ``original`` (a ``Patches.apply`` maker)."""
    _ORIGINAL["loop"] = original
    return profiled_worker_loop


def profiled_worker_loop(*args: Any, **kwargs: Any) -> Any:
    """torch's worker loop under cProfile for the worker's whole life, dumped at its normal exit
    (``measure.codeprofile.WorkerProfiler``: a marker at start, so a worker killed before its dump is counted)."""
    from torch.utils.data._utils import worker  # noqa: PLC0415 - torch is imported by now (see module docstring)

    from pipeprof.measure.codeprofile import WorkerProfiler  # noqa: PLC0415 - imports torch

    loop = worker._worker_loop
    if loop is profiled_worker_loop:
        loop = _ORIGINAL["loop"]
    found = setting()
    if found is not None:
        folder = workers_folder(found["folder"], os.getppid())
        folder.mkdir(parents=True, exist_ok=True)
        WorkerProfiler(str(folder))(0)  # no init function chained: the worker id is not used
    return loop(*args, **kwargs)
