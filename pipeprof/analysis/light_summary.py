"""summary.json of a light run (``profile --light``): the windows pooled, the timeline and its change point.

Pure. A light run keeps no step (run.json ``light``; its windows in
``windows.jsonl``, ``measure.light``). ``light_summary(run)`` starts from
``summary_record(run)`` (the sampler's sections as for any run) and adds:

* ``steps``, ``samples``, ``duration_s`` (counted step time), ``samples_per_s``
  and ``step_time_s.mean``: the windows' sums; the median and p90 of the whole
  run are absent (each window keeps its own quantiles: ``light.timeline``);
* ``fractions``: each share weighted by the windows' step time;
* ``verdict`` / ``bottleneck``: ``analysis.verdict`` on those shares;
* ``light``: the window count, the timeline (per window: start, end, steps,
  median and p90 step time, data-wait share, GPU use) and ``change_point``
  (``analysis.change_point`` on the windows' median step times, with the time
  it happened), or null with the test's words in ``change_point_test``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from pipeprof.analysis.attribution import attribution
from pipeprof.analysis.change_point import MIN_RELATIVE_CHANGE, MIN_SIDE, THRESHOLD_SIGMAS, change_point
from pipeprof.analysis.evidence import StepShares
from pipeprof.analysis.sections import LightChange, LightSection, LightWindow
from pipeprof.analysis.steps import StepTime
from pipeprof.analysis.summary import Summary, summary_record
from pipeprof.analysis.verdict import verdict_from_attribution
from pipeprof.numbers import finite
from pipeprof.run_folder import Run
from pipeprof.run_meta import as_int, as_number, as_object

CHANGE_POINT_TEST = (f"two-segment split of the windows' median step times: the best split (at least {MIN_SIDE} "
                     f"windows a side) is a change when its difference of means is at least {THRESHOLD_SIGMAS:g} "
                     f"standard errors (pooled within-side deviation) and {100 * MIN_RELATIVE_CHANGE:.0f}% of the "
                     "level before")
PARTS = ("data_wait", "h2d", "compute", "collective_wait")


def is_light(run: Run) -> bool:
    return run.info.light is not None


@dataclass(frozen=True)
class WindowAggregate:
    """One line of windows.jsonl (``measure.light.window_aggregate``) as the light summary reads it: when the
    window ran (seconds since the run began), its counted steps and samples, its step times' mean, median and
    p90 (seconds), its shares of step time (``PARTS``) and the GPU's mean use (%); None: not recorded."""

    t_start_s: float | None = None
    t_end_s: float | None = None
    steps: int | None = None
    samples: float = 0.0
    step_mean_s: float | None = None
    step_median_s: float | None = None
    step_p90_s: float | None = None
    fractions: dict[str, float | None] = field(default_factory=dict)
    gpu_util_pct_mean: float | None = None

    @classmethod
    def from_json(cls, data: Any) -> WindowAggregate:
        d = as_object(data)
        step_s, fractions = as_object(d.get("step_s")), as_object(d.get("fractions"))
        return cls(t_start_s=as_number(d.get("t_start_s")), t_end_s=as_number(d.get("t_end_s")),
                   steps=as_int(d.get("steps")), samples=float(d.get("samples") or 0.0),
                   step_mean_s=finite(step_s.get("mean")), step_median_s=as_number(step_s.get("median")),
                   step_p90_s=as_number(step_s.get("p90")),
                   fractions={part: as_number(fractions.get(part)) for part in PARTS},
                   gpu_util_pct_mean=as_number(d.get("gpu_util_pct_mean")))

    @property
    def step_time_s(self) -> float:
        """The window's counted step time: its mean step time times its steps (0 where not recorded)."""
        return (self.step_mean_s or 0.0) * (self.steps or 0)


def windows_of(run: Run) -> list[WindowAggregate]:
    """The run's windows, oldest first (``windows.1.jsonl`` then ``windows.jsonl``)."""
    out = []
    for name in ("windows.1.jsonl", "windows.jsonl"):
        for line in run.attachments.get(name, b"").decode("utf-8", errors="replace").splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(WindowAggregate.from_json(value))
    return out


def light_summary(run: Run) -> Summary:
    """The summary of a light run (see module docstring)."""
    summary = summary_record(run)
    windows = windows_of(run)
    steps = sum(w.steps or 0 for w in windows)
    total_s = sum(w.step_time_s for w in windows)
    samples = sum(w.samples for w in windows)
    fractions: dict[str, float] = {}
    for part in PARTS:
        weighted = [(w.fractions[part], w.step_time_s) for w in windows]
        known = [(f, t) for f, t in weighted if f is not None and t > 0]
        fractions[part] = sum(f * t for f, t in known) / sum(t for _, t in known) if known else math.nan
    fractions["other"] = max(0.0, 1.0 - sum(v for v in fractions.values() if not math.isnan(v))) \
        if not math.isnan(fractions["data_wait"]) else math.nan
    attr = attribution(run)
    step = StepShares(steps=steps, data_wait_fraction=finite(fractions["data_wait"]),
                      h2d_fraction=finite(fractions["h2d"]), collective_wait_fraction=finite(fractions["collective_wait"]),
                      compute_fraction=finite(fractions["compute"]), other_fraction=finite(fractions["other"]),
                      step_mean_s=total_s / steps if steps else None)
    judged = verdict_from_attribution(dataclasses.replace(attr, step=step, fractions=fractions))
    timeline = [LightWindow(t_start_s=w.t_start_s, t_end_s=w.t_end_s, steps=w.steps, step_median_s=w.step_median_s,
                            step_p90_s=w.step_p90_s, data_wait_fraction=w.fractions["data_wait"],
                            gpu_util_pct_mean=w.gpu_util_pct_mean) for w in windows]
    medians = [(t, finite(t.step_median_s)) for t in timeline]
    with_steps = [t for t, m in medians if m is not None]
    cp = change_point([m for _, m in medians if m is not None])
    absences = dict(summary.absences)
    absences["step_time_quantiles"] = ("light: each window keeps its own step-time quantiles (light.timeline), "
                                       "not the run's")
    return dataclasses.replace(
        summary, steps=steps, samples=round(samples), duration_s=total_s,
        samples_per_s=samples / total_s if total_s else None,
        step_time_s=StepTime(mean=total_s / steps if steps else None),
        fractions=fractions, attribution=dataclasses.replace(summary.attribution, step=step), verdict=judged,
        absences=absences,
        light=LightSection(window_s=as_number((run.info.light or {}).get("window_s")), windows=len(windows),
                           timeline=tuple(timeline), change_point_test=CHANGE_POINT_TEST,
                           change_point=None if cp is None else LightChange(
                               index=cp.index, t_s=with_steps[cp.index].t_start_s, before_s=cp.before_s,
                               after_s=cp.after_s, ratio=cp.ratio, sigmas=cp.sigmas)))
