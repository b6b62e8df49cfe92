"""The probes' pace: how fast the seconds after a run ran against the run's own, and the probes read at the run's.

The what-if probes (``measure.what_if``) run in the few seconds after a run, and every one of them is a draw
from that moment of a shared machine: a neighbour's burst of work, or the process's state after the run, can
slow (or speed) all of them alike. quick at 0 workers and 1 thread made 10,525 samples/s; its probes then read
the loop on the device at 10,070 (three runs on the device made 12,505-12,756: -21%), the loop at 2 threads
at 14,034 (the runs at 2 threads made 16,523-16,768 with their loading: -26%) and the loop fed by 1 worker at
9,217 (10,570-10,578: -13%): one slow stretch of seconds, the largest errors of the stop 27 yardstick.

So one probe measures the run itself again: its own loop at its own settings (``what_ifs.train_as_run``, or
``device_loop`` for data on the device, which is that loop). Its samples/s over the run's is the *pace*; every
probe's rate is read divided by it (per-sample seconds multiplied by it): a prediction is then the run's own
samples/s times what the probes measured the change to do relative to the run, as a controlled experiment
reads a treatment against its control measured beside it. On the stop 27 yardstick's 48 runs with the data on
the device (whose ``device_loop`` is the run's own loop) the pace was 0.95-1.05 in 43, 0.91-1.16 in all
(median 1.006): read at the run's pace, a probe's prediction carries that much of the probe's own noise.

Not measured (``pace`` absent, the probes read as they are): a run with workers (their batches come in bursts,
which a probe of a third of a second reads as a burst or a gap, not the run's pace), data read cold (a short
probe right after the page-cache drop reads every page cold), a run whose probe is absent. Pure: no clock, no
torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# per-sample seconds: a slower probe period made them longer, read at the run's pace they are shorter
SECONDS_KEYS = ("receive_cpu_s_per_sample", "worker_cpu_s_per_sample")
RATE_KEYS = ("samples_per_s", "compute_samples_per_s")


@dataclass(frozen=True)
class Pace:
    """The run's own loop measured again after it (``probe_samples_per_s``, from the ``what_ifs`` entry
    ``source``) against the run's samples/s: ``factor`` = probe / run (below 1: the probes ran slow)."""

    factor: float
    probe_samples_per_s: float
    run_samples_per_s: float
    source: str

    def words(self) -> str:
        """How the probes were read, for a prediction's ``model``."""
        return (f"every probe read at the run's pace: its own loop measured again after it "
                f"(what_ifs.{self.source}) made {self.probe_samples_per_s:,.0f} samples/s where the run made "
                f"{self.run_samples_per_s:,.0f}, x{self.factor:.3f}, so each probe's rate is divided by that")


def probes_pace(what_ifs: dict[str, Any], storage: str | None, run_samples_per_s: float | None) -> Pace | None:
    """The pace of a run's probes (module docstring): ``device_loop`` for data on the device, else
    ``train_as_run``; None where not measured or the run made no samples."""
    source = "device_loop" if storage == "device" else "train_as_run"
    entry = what_ifs.get(source)
    rate = entry.get("samples_per_s") if isinstance(entry, dict) and entry.get("absent") is None else None
    if not _positive(rate) or not _positive(run_samples_per_s):
        return None
    assert isinstance(rate, (int, float)) and isinstance(run_samples_per_s, (int, float))
    return Pace(float(rate) / float(run_samples_per_s), float(rate), float(run_samples_per_s), source)


def paced(what_ifs: dict[str, Any], factor: float) -> dict[str, Any]:
    """``what_ifs`` with every probe read at the run's pace: each rate (``samples_per_s``,
    ``compute_samples_per_s`` and their ``_per_window`` lists) divided by ``factor``, each per-sample second
    multiplied by it; start-ups, thread counts and everything else as recorded. A new dict; nested entries
    (``loader_workers`` per k) likewise."""
    return {key: _paced_entry(value, factor) for key, value in what_ifs.items()}


def _paced_entry(value: Any, factor: float) -> Any:
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        scale = 1 / factor if _base(key) in RATE_KEYS else factor if _base(key) in SECONDS_KEYS else None
        if scale is None:
            out[key] = _paced_entry(item, factor)
        elif isinstance(item, list):
            out[key] = [x * scale if _number(x) else x for x in item]
        else:
            out[key] = item * scale if _number(item) else item
    return out


def _base(key: str) -> str:
    return key.removesuffix("_per_window")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: Any) -> bool:
    return _number(value) and value > 0
