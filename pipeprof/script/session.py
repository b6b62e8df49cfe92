"""The measuring side of a profiled script or block: system sampler, GPU monitor, and the Run at the end.

``pipeprof profile`` samples the script's process tree from its own
process; ``pipeprof.profile()`` samples the process it runs in. Either way
``Session.finish`` reads the events the hooks wrote, cuts them into steps
(``script.event_steps``) and returns a ``Run`` with the same tables and
run.json keys as a scenario run, plus ``script`` (command, working folder,
exit), ``loaders`` (every DataLoader seen, training or evaluation) and
``step_source``. run.json's ``scenario`` holds what the analysis reads from
a scenario: the name, and the training loader's settings under ``loader``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pandas as pd

from pipeprof.measure import gpu as gpu_mod
from pipeprof.measure.clock import Clock, monotonic_clock
from pipeprof.measure.environment import describe_environment
from pipeprof.measure.sampler import SystemSampler
from pipeprof.run_folder import Run, sample_tables
from pipeprof.script.event_steps import TRAIN, ScriptSteps, read_events, script_steps
from pipeprof.version import __version__

LOADER_KEYS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
NO_LOADER = "the script never iterated a torch.utils.data.DataLoader: there are no steps to attribute"


def training_threads(threads: dict[str, Any]) -> int:
    """The threads torch used while the script trained: read at its first step end, else at its end, else
    before it ran (a script may call ``torch.set_num_threads`` itself)."""
    for at in ("first step", "end", "start"):
        if threads.get(at):
            return int(threads[at])
    return 1


class Session:
    """Samples a process tree from ``start(pid)`` to ``finish()``; ``finish`` builds the Run."""

    def __init__(self, name: str, events_path: Path, *, warmup_steps: int = 5, sample_hz: float = 10.0,
                 clock: Clock = monotonic_clock, cuda_available: bool | None = None) -> None:
        self.name = name
        self.events_path = Path(events_path)
        self.warmup_steps = warmup_steps
        self.sample_hz = sample_hz
        self.clock = clock
        self.cuda_available = cuda_available
        self.t0_s = 0.0
        self.sampler: SystemSampler | None = None
        self.monitor: Any = None
        self.absences: dict[str, str] = {}
        self._cut: ScriptSteps | None = None
        self._unreadable = 0

    def start(self, pid: int) -> None:
        """Start sampling ``pid`` and its descendants (a process already gone is recorded, not raised)."""
        self.t0_s = self.clock()
        if self.cuda_available is None:
            import torch
            self.cuda_available = torch.cuda.is_available()
        gpu = gpu_mod.open_gpu(0 if self.cuda_available else None)
        if isinstance(gpu, gpu_mod.Absent):
            reason = gpu.reason if self.cuda_available else "no CUDA device on this machine"
            self.absences["gpu"] = reason
        else:
            self.monitor = gpu
        try:
            sampler = SystemSampler(pid, self.sample_hz, clock=self.clock, t0_s=self.t0_s, gpu=self.monitor)
        except Exception as e:  # noqa: BLE001 - psutil.NoSuchProcess: the script ended before sampling began
            self.absences["samples"] = f"the process ended before sampling began ({type(e).__name__})"
            return
        try:
            sampler.start()
        except BaseException:  # nothing left running or open: the caller undoes the rest of its start
            if self.monitor is not None:
                self.monitor.close()
                self.monitor = None
            raise
        self.sampler = sampler

    def stop_sampling(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def records(self) -> ScriptSteps:
        """The events cut into steps (read once, after the script or block ended)."""
        if self._cut is None:
            events = read_events(self.events_path)
            self._unreadable = events.unreadable
            self._cut = script_steps(events, self.t0_s, self.warmup_steps)
        return self._cut

    def finish(self, status: str, error: str | None, script: dict[str, Any]) -> Run:
        """The Run: events cut into steps, the sampler's tables, and metadata (``script`` goes in as given)."""
        self.stop_sampling()
        cut, unreadable = self.records(), self._unreadable
        absences = dict(self.absences)
        notes = []
        if unreadable:
            notes.append(f"{unreadable} event line(s) could not be read (cut short when the script was killed?)")
        if cut.step_source is None:
            absences["steps"] = NO_LOADER
        elif cut.steps.empty:
            absences["steps"] = f"no complete training step (steps end at {cut.step_source})"
        train = next((loader for loader in cut.loaders if loader["role"] == TRAIN), None)
        if self.sampler is not None:
            absences.update(self.sampler.absences)
        gpu_meta: dict[str, Any] = {"available": self.monitor is not None}
        if self.monitor is not None:  # pragma: no cover - needs a GPU
            gpu_meta.update(self.monitor.info())
            self.monitor.close()
        else:
            gpu_meta["reason"] = absences.get("gpu")
        threads = {"start": cut.start.get("torch_threads"), **{t["at"]: t["torch_threads"] for t in cut.threads}}
        script = {**script, "started": cut.start, "ended": cut.end, "torch_threads": threads}
        meta: dict[str, Any] = {
            "pipeprof_version": __version__,
            "created_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "kind": "script",
            "scenario": {"name": self.name, "description": script.get("command_line"),
                         "loader": {k: train.get(k) for k in LOADER_KEYS} if train else {},
                         "train": {"warmup_steps": self.warmup_steps},
                         "profile": {"sample_hz": self.sample_hz}},
            "script": script,
            "loaders": cut.loaders,
            "step_source": cut.step_source,
            "loading_split": "thread-cpu-time",  # fetch = __getitem__ off the CPU, prep = on it (hooks)
            "device": "cuda" if cut.cuda_copies else "cpu",  # where its batches went
            "timing": {"method": "host-clock"},
            "environment": describe_environment(training_threads(threads)),
            "gpu": gpu_meta,
            "absences": absences,
            "notes": notes,
            "cache": {"mode": None, "dataset_bytes": 0, "drops": []},
            "status": status,
            "error": error,
            "compute_ceiling": None,
        }
        empty = pd.DataFrame()
        samples, processes = sample_tables(*(self.sampler.frames() if self.sampler else (empty, empty)),
                                           self.monitor is not None)
        return Run(meta=meta, steps=cut.steps, samples=samples, processes=processes, loading=cut.loading)
