"""summary.json's ``code_profile`` as typed records: cProfile's window, cost, processes and top functions, and
py-spy's file.

``analysis.hotspots.code_profile`` builds these records from the run's records; ``CodeView.from_json`` reads a
summary.json's back into them, which the renderers read as fields. ``to_json`` writes summary.json's form: keys a
section did not have stay out of it (``_present``), so a summary round-trips exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeprof.numbers import finite
from pipeprof.run_meta import JsonObject, as_object


def _present(**values: Any) -> JsonObject:
    """The keys whose value is not None (the dict forms leave a key out where they have nothing)."""
    return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class StepCost:
    """cProfile's cost in the training process: its median counted step inside the window over outside it."""

    median_step_in_window_s: float | None = None
    median_step_outside_s: float | None = None
    steps_in_window: int | None = None
    steps_outside: int | None = None
    ratio: float | None = None
    slowdown_fraction: float | None = None
    absent: str | None = None

    def to_json(self) -> JsonObject:
        return _present(absent=self.absent, median_step_in_window_s=self.median_step_in_window_s,
                        median_step_outside_s=self.median_step_outside_s, steps_in_window=self.steps_in_window,
                        steps_outside=self.steps_outside, ratio=self.ratio, slowdown_fraction=self.slowdown_fraction)

    @classmethod
    def from_json(cls, data: Any) -> StepCost:
        d = as_object(data)
        return cls(median_step_in_window_s=finite(d.get("median_step_in_window_s")),
                   median_step_outside_s=finite(d.get("median_step_outside_s")),
                   steps_in_window=d.get("steps_in_window"), steps_outside=d.get("steps_outside"),
                   ratio=finite(d.get("ratio")), slowdown_fraction=finite(d.get("slowdown_fraction")),
                   absent=d.get("absent"))


@dataclass(frozen=True)
class TopFunction:
    """One of a process's costliest functions by self time."""

    function: str
    file: str
    line: int
    name: str
    group: str
    self_s: float
    cum_s: float
    calls: int
    share: float

    def to_json(self) -> JsonObject:
        return {"function": self.function, "file": self.file, "line": self.line, "name": self.name,
                "group": self.group, "self_s": self.self_s, "cum_s": self.cum_s, "calls": self.calls,
                "share": self.share}

    @classmethod
    def from_json(cls, data: Any) -> TopFunction:
        d = as_object(data)
        share = finite(d.get("share"))
        return cls(function=str(d.get("function") or ""), file=str(d.get("file") or ""), line=int(d.get("line") or 0),
                   name=str(d.get("name") or ""), group=str(d.get("group") or ""),
                   self_s=float(d.get("self_s") or 0.0), cum_s=float(d.get("cum_s") or 0.0),
                   calls=int(d.get("calls") or 0), share=float("nan") if share is None else share)


@dataclass(frozen=True)
class ProfiledProcess:
    """One process kind's cProfile record (the training process, or the workers merged): its self time by
    group, or why it has none."""

    absent: str | None = None
    profiled_s: float | None = None
    functions: int | None = None
    groups: dict[str, float] = field(default_factory=dict)
    scope: str | None = None
    processes_started: int | None = None
    processes_profiled: int | None = None

    def to_json(self) -> JsonObject:
        if self.absent is not None:
            return {"absent": self.absent}
        return _present(profiled_s=self.profiled_s, functions=self.functions, groups=dict(self.groups),
                        scope=self.scope, processes_started=self.processes_started,
                        processes_profiled=self.processes_profiled)

    @classmethod
    def from_json(cls, data: Any) -> ProfiledProcess:
        d = as_object(data)
        if d.get("absent") is not None:
            return cls(absent=str(d["absent"]))
        return cls(profiled_s=finite(d.get("profiled_s")), functions=d.get("functions"),
                   groups={str(k): float(v) for k, v in as_object(d.get("groups")).items() if finite(v) is not None},
                   scope=d.get("scope"), processes_started=d.get("processes_started"),
                   processes_profiled=d.get("processes_profiled"))


@dataclass(frozen=True)
class CProfileView:
    """summary.json's ``code_profile.cprofile``: the profiled window (as recorded), its cost, each process's
    groups and top functions, the .prof files; or ``absent`` with its reason (and the window, where one was)."""

    absent: str | None = None
    window: JsonObject | None = None  # run.json's, as recorded
    overhead: StepCost | None = None
    processes: dict[str, ProfiledProcess] = field(default_factory=dict)
    top: dict[str, tuple[TopFunction, ...]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    overhead_note: str | None = None

    @property
    def first_step(self) -> Any:
        """The window's first profiled step, as recorded (None: no window)."""
        return (self.window or {}).get("first_step")

    @property
    def profiled_steps(self) -> Any:
        """How many steps the window profiled, as recorded (an older summary's ``steps``)."""
        window = self.window or {}
        return window.get("profiled_steps", window.get("steps"))

    def to_json(self) -> JsonObject:
        if self.absent is not None:
            return _present(absent=self.absent, window=self.window)
        return {"window": self.window or {}, "overhead": self.overhead.to_json() if self.overhead else {},
                "processes": {k: p.to_json() for k, p in self.processes.items()},
                "top": {k: [t.to_json() for t in rows] for k, rows in self.top.items()},
                "files": dict(self.files), "overhead_note": self.overhead_note}

    @classmethod
    def from_json(cls, data: Any) -> CProfileView:
        d = as_object(data)
        window = d.get("window") if isinstance(d.get("window"), dict) else None
        if d.get("absent") is not None:
            return cls(absent=str(d["absent"]), window=window)
        overhead = StepCost.from_json(d["overhead"]) if isinstance(d.get("overhead"), dict) else None
        return cls(window=window, overhead=overhead,
                   processes={str(k): ProfiledProcess.from_json(v) for k, v in as_object(d.get("processes")).items()},
                   top={str(k): tuple(TopFunction.from_json(t) for t in rows if isinstance(t, dict))
                        for k, rows in as_object(d.get("top")).items() if isinstance(rows, list)},
                   files={str(k): str(v) for k, v in as_object(d.get("files")).items()},
                   overhead_note=d.get("overhead_note"))


@dataclass(frozen=True)
class PySpyView:
    """summary.json's ``code_profile.pyspy``: py-spy's record as summary.json has it (``recorded``: its file,
    samples, rate and cost, which the report shows), with its ``file`` and ``absent`` reason as recorded (None:
    not there)."""

    recorded: JsonObject = field(default_factory=dict)
    file: Any = None
    absent: Any = None

    def to_json(self) -> JsonObject:
        return dict(self.recorded)

    @classmethod
    def from_json(cls, data: Any) -> PySpyView:
        d = dict(as_object(data))
        return cls(recorded=d, file=d.get("file"), absent=d.get("absent"))


@dataclass(frozen=True)
class CodeView:
    """summary.json's ``code_profile``: ``cprofile`` (``CProfileView``) and ``pyspy`` (``PySpyView``: py-spy's
    file, rate and cost, or its absence)."""

    cprofile: CProfileView
    pyspy: PySpyView

    def to_json(self) -> JsonObject:
        return {"cprofile": self.cprofile.to_json(), "pyspy": self.pyspy.to_json()}

    @classmethod
    def from_json(cls, data: Any) -> CodeView | None:
        """None for a summary without the section (an older one)."""
        if not isinstance(data, dict):
            return None
        return cls(cprofile=CProfileView.from_json(data.get("cprofile")), pyspy=PySpyView.from_json(data.get("pyspy")))
