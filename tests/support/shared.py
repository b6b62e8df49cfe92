"""What a session's test workers make once and share: real runs that several tests read.

Under pytest-xdist each worker is a session of its own, so a module- or session-scoped fixture is made again
by every worker that runs one of its tests (``xdist_group`` does not keep a file's tests on one worker under
pytest 9 with pytest-xdist 3.8: BENCHMARKS.md). ``made_once`` makes the thing under a file lock in the folder
all the workers' temporary folders share, records its result as JSON, and hands every later caller, in any
worker, that same result. Without xdist it is an ordinary once-a-session cache.

A build that raises records nothing: the next caller tries again and meets the same failure in its own test.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every worker of this session sees: the parent of a worker's own base folder under xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def made_once(where: pytest.TempPathFactory | Path, name: str, build: Callable[[Path], Any]) -> Any:
    """``build(folder)``'s JSON result, made by the first caller of the session (any worker) in a fresh
    ``folder`` of its own, and read back by every later one. ``name`` identifies it (any text: it is hashed).
    ``where``: the session's ``tmp_path_factory`` (its ``shared_root``), or a folder of the caller's own."""
    key = hashlib.sha256(name.encode()).hexdigest()[:16]
    root = (where if isinstance(where, Path) else shared_root(where)) / "made-once"
    root.mkdir(parents=True, exist_ok=True)
    result, folder = root / f"{key}.json", root / key
    with FileLock(str(root / f"{key}.lock")):
        if result.is_file():
            return json.loads(result.read_text(encoding="utf-8"))["value"]
        if folder.exists():  # an earlier build that raised
            shutil.rmtree(folder)
        folder.mkdir()
        value = build(folder)
        result.write_text(json.dumps({"name": name, "value": value}), encoding="utf-8")
        return value


def made_once_folders(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Every folder ``made_once`` made this session (for the end-of-session checks of what they hold)."""
    root = shared_root(tmp_path_factory) / "made-once"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
