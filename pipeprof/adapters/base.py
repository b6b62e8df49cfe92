"""The adapter record: what pipeprof must know of one data library (``pipeprof.adapters`` describes each field).

Standard library only."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Classes = Mapping[str, tuple[str, ...]]  # module -> class names defined there


@dataclass(frozen=True)
class Adapter:
    """One library, as pipeprof needs to know it (module docstring)."""

    name: str  # as users name it: "Hugging Face datasets and Trainer"
    packages: tuple[str, ...] = ()
    framework: str | None = None  # the ``framework`` of a loader it builds or iterates
    framework_packages: tuple[str, ...] = ()  # the packages whose frames name that framework
    look_ahead: Classes = field(default_factory=dict)
    own_iter: Classes = field(default_factory=dict)
    own_step: Classes = field(default_factory=dict)
    loader_modules: Mapping[str, Callable[[Any, Any, Any], None]] = field(default_factory=dict)
    builder: tuple[str, str, str] | None = None  # (package, function name pattern, the name "{}" filled)
    pipeline_datasets: frozenset[str] = frozenset()  # dataset classes applying transforms in pipeline stages
    stage_functions: frozenset[str] = frozenset()  # its pipeline stages' callables that apply the user's functions
    own_functions: tuple[str, ...] = ()  # module prefixes of its own stage functions (not the user's transforms)
    table_reads: tuple[str, str] | None = None  # (dataset module prefix, what is read there untimed)
    # (settings "loader.key" -> value, the function that built the loader or None, the change as DataLoader
    # keywords) -> the change written as this library's code, or None where it has no way of its own
    write_change: Callable[[Mapping[str, Any], str | None, str], str | None] | None = None
    # a loader of its own that is no DataLoader (the hooks time the loop's next() on it): whether an object is
    # one, its settings under PyTorch's names (loader, number, name), and why how its batches are made is unknown
    recognise: Callable[[Any], bool] | None = None
    describe: Callable[[Any, int, str], dict[str, Any]] | None = None
    not_timed: str = ""
    # ask the library's own loop running on the stack (from this frame out) to end as at its own stop request,
    # rather than by an exception it would take for a crash; whether one was asked (the data then ends there)
    stop_loop: Callable[[Any], bool] | None = None
    launchers: tuple[str, ...] = ()  # its modules that launch a training script given as an argument (-m)
    sees: str = ""
