"""The summary's sections of a light run and of an attach, as typed records: summary.json ``light`` and ``sampled``.

``analysis.light_summary`` and ``attach.summary`` build them (they sit above ``analysis.summary``, which holds
these records: so they live here, below both); the renderers read them as these records, not as dicts.
``to_json`` is their summary.json form, unchanged; ``from_json`` reads a summary.json back (an older or a
partial one: a missing or wrong-typed value reads as None, never an error).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeprof.run_meta import JsonObject, as_int, as_number, as_object, as_str

SAMPLED_PARTS = ("data_wait", "h2d", "collective_wait", "compute", "other")  # an attach window's shares


@dataclass(frozen=True)
class LightWindow:
    """One window of ``light.timeline``: when it ran, its steps, their median and p90 step time (seconds),
    its data-wait share and the GPU's mean use (%), as windows.jsonl recorded them (None: not recorded)."""

    t_start_s: float | None = None
    t_end_s: float | None = None
    steps: int | None = None
    step_median_s: float | None = None
    step_p90_s: float | None = None
    data_wait_fraction: float | None = None
    gpu_util_pct_mean: float | None = None

    def to_json(self) -> JsonObject:
        return {"t_start_s": self.t_start_s, "t_end_s": self.t_end_s, "steps": self.steps,
                "step_median_s": self.step_median_s, "step_p90_s": self.step_p90_s,
                "data_wait_fraction": self.data_wait_fraction, "gpu_util_pct_mean": self.gpu_util_pct_mean}

    @classmethod
    def from_json(cls, data: Any) -> LightWindow:
        d = as_object(data)
        return cls(t_start_s=as_number(d.get("t_start_s")), t_end_s=as_number(d.get("t_end_s")),
                   steps=as_int(d.get("steps")), step_median_s=as_number(d.get("step_median_s")),
                   step_p90_s=as_number(d.get("step_p90_s")), data_wait_fraction=as_number(d.get("data_wait_fraction")),
                   gpu_util_pct_mean=as_number(d.get("gpu_util_pct_mean")))


@dataclass(frozen=True)
class LightChange:
    """``light.change_point``: the first window after the change (``index``), when it happened (``t_s``), the
    mean median step time before and after it (seconds), their ``ratio`` and the difference in standard errors."""

    index: int
    t_s: float | None
    before_s: float | None
    after_s: float | None
    ratio: float | None
    sigmas: float | None

    def to_json(self) -> JsonObject:
        return {"index": self.index, "before_s": self.before_s, "after_s": self.after_s, "sigmas": self.sigmas,
                "ratio": self.ratio, "t_s": self.t_s}

    @classmethod
    def from_json(cls, data: Any) -> LightChange | None:
        if not isinstance(data, dict):
            return None
        return cls(index=as_int(data.get("index")) or 0, t_s=as_number(data.get("t_s")),
                   before_s=as_number(data.get("before_s")), after_s=as_number(data.get("after_s")),
                   ratio=as_number(data.get("ratio")), sigmas=as_number(data.get("sigmas")))


@dataclass(frozen=True)
class LightSection:
    """summary.json ``light`` (``profile --light``): the window length (seconds, as run.json records it), the
    window count, the timeline, the change point (None: none passed the test) and the test in words."""

    window_s: float | None
    windows: int
    timeline: tuple[LightWindow, ...]
    change_point_test: str
    change_point: LightChange | None = None

    def to_json(self) -> JsonObject:
        return {"window_s": self.window_s, "windows": self.windows, "timeline": [w.to_json() for w in self.timeline],
                "change_point_test": self.change_point_test,
                "change_point": self.change_point.to_json() if self.change_point is not None else None}

    @classmethod
    def from_json(cls, data: Any) -> LightSection | None:
        if not isinstance(data, dict):
            return None
        timeline = data.get("timeline")
        return cls(window_s=as_number(data.get("window_s")), windows=as_int(data.get("windows")) or 0,
                   timeline=tuple(LightWindow.from_json(w) for w in timeline) if isinstance(timeline, list) else (),
                   change_point_test=as_str(data.get("change_point_test")) or "",
                   change_point=LightChange.from_json(data.get("change_point")))


@dataclass(frozen=True)
class SampledShare:
    """One class's share of the training threads' py-spy samples: ``fraction`` of ``of_samples``, and its
    Wilson 95% ``interval`` (None: no sample)."""

    fraction: float | None
    samples: int
    of_samples: int
    interval: tuple[float, float] | None

    def to_json(self) -> JsonObject:
        return {"fraction": self.fraction, "samples": self.samples, "of_samples": self.of_samples,
                "interval": list(self.interval) if self.interval is not None else None}

    @classmethod
    def from_json(cls, data: Any) -> SampledShare:
        d = as_object(data)
        interval = d.get("interval")
        low, high = (as_number(v) for v in interval) if isinstance(interval, list) and len(interval) == 2 else (None, None)
        return cls(fraction=as_number(d.get("fraction")), samples=as_int(d.get("samples")) or 0,
                   of_samples=as_int(d.get("of_samples")) or 0,
                   interval=(low, high) if low is not None and high is not None else None)


@dataclass(frozen=True)
class SampledWindow:
    """One window of ``sampled.timeline``: when it ran, the training threads' samples in it, each class's share
    of them (``SAMPLED_PARTS``) and the workers' mean busy share (None: no worker sampled)."""

    t_start_s: float | None
    t_end_s: float | None
    training_samples: int
    data_wait_fraction: float | None = None
    h2d_fraction: float | None = None
    collective_wait_fraction: float | None = None
    compute_fraction: float | None = None
    other_fraction: float | None = None
    worker_busy_mean_fraction: float | None = None

    def to_json(self) -> JsonObject:
        return {"t_start_s": self.t_start_s, "t_end_s": self.t_end_s, "training_samples": self.training_samples,
                **{f"{k}_fraction": getattr(self, f"{k}_fraction") for k in SAMPLED_PARTS},
                "worker_busy_mean_fraction": self.worker_busy_mean_fraction}

    @classmethod
    def from_json(cls, data: Any) -> SampledWindow:
        d = as_object(data)
        return cls(t_start_s=as_number(d.get("t_start_s")), t_end_s=as_number(d.get("t_end_s")),
                   training_samples=as_int(d.get("training_samples")) or 0,
                   data_wait_fraction=as_number(d.get("data_wait_fraction")),
                   h2d_fraction=as_number(d.get("h2d_fraction")),
                   collective_wait_fraction=as_number(d.get("collective_wait_fraction")),
                   compute_fraction=as_number(d.get("compute_fraction")),
                   other_fraction=as_number(d.get("other_fraction")),
                   worker_busy_mean_fraction=as_number(d.get("worker_busy_mean_fraction")))


@dataclass(frozen=True)
class SampledSection:
    """summary.json ``sampled`` (``pipeprof attach``): the training threads' samples and each class's share of
    them (``training``), the timeline of windows, the attach's settings (run.json ``attach``, as recorded) and
    the loader's settings the stacks show (``loader``); ``shares`` holds the shares' other keys as written (per
    training process, each worker's busy share and parts, the frames' names, the interval method)."""

    training_samples: int
    training: dict[str, SampledShare]
    timeline: tuple[SampledWindow, ...] = ()
    attach: JsonObject = field(default_factory=dict)
    loader: JsonObject = field(default_factory=dict)
    shares: JsonObject = field(default_factory=dict)

    @property
    def rate_hz(self) -> Any:
        """py-spy's sampling rate, as the attach recorded it."""
        return self.attach.get("rate_hz")

    @property
    def sampled_s(self) -> float | None:
        """How long the attach sampled, seconds."""
        return as_number(self.attach.get("sampled_s"))

    def to_json(self) -> JsonObject:
        return {**self.shares, "training_samples": self.training_samples,
                "training": {k: s.to_json() for k, s in self.training.items()},
                "timeline": [w.to_json() for w in self.timeline], "attach": self.attach, "loader": self.loader}

    @classmethod
    def from_json(cls, data: Any) -> SampledSection | None:
        if not isinstance(data, dict):
            return None
        timeline = data.get("timeline")
        return cls(training_samples=as_int(data.get("training_samples")) or 0,
                   training={str(k): SampledShare.from_json(v) for k, v in as_object(data.get("training")).items()},
                   timeline=tuple(SampledWindow.from_json(w) for w in timeline) if isinstance(timeline, list) else (),
                   attach=as_object(data.get("attach")), loader=as_object(data.get("loader")),
                   shares={k: v for k, v in data.items()
                           if k not in ("training_samples", "training", "timeline", "attach", "loader")})


@dataclass(frozen=True)
class Steady:
    """summary.json ``steady`` (run.json's, as the steady-state stop recorded it): whether the loop stopped at a
    steady rate (``steady``), the test (``cv_threshold`` over the last ``windows`` windows of ``window_s``
    seconds), the budget (``max_seconds``), why it stopped, the last ``cv``, the windows measured, the first step
    the statistics count from and the last windows' rates (samples/s; None: a window of no time)."""

    steady: bool | None = None
    cv_threshold: float | None = None
    windows: int | None = None
    window_s: float | None = None
    max_seconds: float | None = None
    stopped: str | None = None
    cv: float | None = None
    windows_measured: int | None = None
    counted_from_step: int | None = None
    window_samples_per_s: tuple[float | None, ...] = ()

    def to_json(self) -> JsonObject:
        return {"steady": self.steady, "cv_threshold": self.cv_threshold, "windows": self.windows,
                "window_s": self.window_s, "max_seconds": self.max_seconds, "stopped": self.stopped, "cv": self.cv,
                "windows_measured": self.windows_measured, "counted_from_step": self.counted_from_step,
                "window_samples_per_s": list(self.window_samples_per_s)}

    @classmethod
    def from_json(cls, data: Any) -> Steady | None:
        if not isinstance(data, dict):
            return None
        steady, rates = data.get("steady"), data.get("window_samples_per_s")
        return cls(steady=steady if isinstance(steady, bool) else None, cv_threshold=as_number(data.get("cv_threshold")),
                   windows=as_int(data.get("windows")), window_s=as_number(data.get("window_s")),
                   max_seconds=as_number(data.get("max_seconds")), stopped=as_str(data.get("stopped")),
                   cv=as_number(data.get("cv")), windows_measured=as_int(data.get("windows_measured")),
                   counted_from_step=as_int(data.get("counted_from_step")),
                   window_samples_per_s=tuple(as_number(r) for r in rates) if isinstance(rates, list) else ())
