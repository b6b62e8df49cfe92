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

from pipeprof.analysis.loading import core_wait_absence
from pipeprof.measure import gpu as gpu_mod
from pipeprof.measure.clock import Clock, monotonic_clock
from pipeprof.measure.environment import describe_environment
from pipeprof.measure.sampler import WORKER, SystemSampler
from pipeprof.run_folder import Run, sample_tables
from pipeprof.script.event_steps import TRAIN, ScriptSteps, read_events, script_steps
from pipeprof.version import __version__

LOADER_KEYS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
NO_LOADER = "the script never iterated a torch.utils.data.DataLoader: there are no steps to attribute"
CHILD = "child"  # a process the script started that is not a DataLoader worker of the profiled process
_SHOWN_CHILDREN = 3


def untraced_children(descendants: list[dict[str, Any]], root_pid: int | None) -> list[dict[str, Any]]:
    """The processes the script started itself (its direct children), when the script never iterated a
    DataLoader: they are not its DataLoader workers, and pipeprof's hooks were not in them."""
    return [d for d in descendants if (root_pid is None or d.get("ppid") == root_pid)
            and not any(helper in " ".join(d.get("cmdline") or []) for helper in _MULTIPROCESSING_HELPERS)]


# multiprocessing's own helper processes, which any script using it may start
_MULTIPROCESSING_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def untraced_message(children: list[dict[str, Any]]) -> str:
    """What happened when the DataLoaders ran in processes pipeprof did not instrument (torchrun ranks,
    ``torch.multiprocessing.spawn``, ``multiprocessing.Process``): said as it is, with the processes seen."""
    shown = "; ".join(f"pid {c['pid']}: {_command(c.get('cmdline') or [])}" for c in children[:_SHOWN_CHILDREN])
    more = f"; and {len(children) - _SHOWN_CHILDREN} more" if len(children) > _SHOWN_CHILDREN else ""
    return (f"the script never iterated a torch.utils.data.DataLoader in the process pipeprof instrumented, "
            f"but it started {len(children)} child process{'es' if len(children) != 1 else ''} that pipeprof did "
            f"not instrument ({shown}{more}): DataLoaders there (torchrun or torch.distributed.run ranks, "
            f"torch.multiprocessing.spawn, multiprocessing.Process) ran unprofiled. Profiling the ranks of a "
            f"multi-process job is not supported yet: profile one rank as `pipeprof profile -- python SCRIPT` "
            f"with RANK, LOCAL_RANK and WORLD_SIZE set")


def _command(cmdline: list[str], limit: int = 80) -> str:
    if any("multiprocessing.spawn import spawn_main" in w for w in cmdline):
        return "a multiprocessing spawn child"
    text = " ".join(Path(cmdline[0]).name if i == 0 else w for i, w in enumerate(cmdline)) or "?"
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
        children = untraced_children(self.sampler.descendants(), self.sampler.root_pid) \
            if self.sampler is not None and cut.step_source is None else []
        if cut.step_source is None:
            absences["steps"] = untraced_message(children) if children else NO_LOADER
        elif cut.steps.empty:
            absences["steps"] = f"no complete training step (steps end at {cut.step_source})"
        no_core_wait = core_wait_absence(cut.loading)
        if no_core_wait:
            absences["core_wait"] = no_core_wait
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
        # How it ended: the hooks' record, else (killed by a signal: no record) what the caller saw.
        script = {**script, "started": cut.start, "ended": cut.end or script.get("ended"), "torch_threads": threads}
        if children:
            script["untraced_children"] = [{k: c[k] for k in ("pid", "ppid", "cmdline")} for c in children]
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
            # prep = __getitem__ on the CPU; off it: waiting for a core (run-queue wait) and fetch (the rest)
            "loading_split": "thread-cpu-time",
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
        if cut.step_source is None and not processes.empty and "role" in processes:
            # No DataLoader in the profiled process: what it started are not its DataLoader workers.
            processes.loc[processes["role"] == WORKER, "role"] = CHILD
        return Run(meta=meta, steps=cut.steps, samples=samples, processes=processes, loading=cut.loading)
