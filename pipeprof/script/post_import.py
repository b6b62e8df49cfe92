"""Run code right after a module is imported: a ``sys.meta_path`` finder that wraps the module's own loader.

Used by the hooks for accelerate's loaders (``frameworks``) and by every process of a profiled command,
which installs the hooks once it imports torch (``rank_boot``). Standard library only, and light: no
``importlib.abc``, no dataclasses — it is imported at start-up by every Python process the command starts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


class ThenLoader:
    """A module's own loader, then ``then(module)`` once the module has executed."""

    def __init__(self, loader: Any, then: Callable[[ModuleType], None]) -> None:
        self._loader, self._then = loader, then

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The module keeps its own loader (inspect, importlib.resources and linecache ask it for its source).
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._then(module)


class PostImport:
    """Calls ``then(module)`` right after any of ``names`` is imported (each time it executes; ``once``: the
    first time only, the finder then leaving ``sys.meta_path``)."""

    def __init__(self, names: Sequence[str], then: Callable[[ModuleType], None], once: bool = False) -> None:
        self.names, self.then, self.once = frozenset(names), then, once

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname not in self.names:
            return None
        if self.once and self in sys.meta_path:
            sys.meta_path.remove(self)  # its submodules and a second import are not ours
        for finder in sys.meta_path:  # the finders that would have found it without this one
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = ThenLoader(spec.loader, self.then)
                return spec
        return None
