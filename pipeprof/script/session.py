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

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pandas as pd

from pipeprof import adapters
from pipeprof.analysis.loading import core_wait_absence
from pipeprof.analysis.ranks import median_index
from pipeprof.measure import gpu as gpu_mod
from pipeprof.measure.clock import Clock, monotonic_clock
from pipeprof.measure.environment import describe_environment
from pipeprof.measure.gpu_set import GpuSet, NoGpu, on_gpu
from pipeprof.measure.sampler import WORKER, SystemSampler
from pipeprof.run_folder import Run, sample_tables
from pipeprof.script.event_steps import TRAIN, ScriptSteps, Uncounted, read_events, script_steps
from pipeprof.script.job import (
    Proc,
    event_files,
    is_job,
    job_processes,
    rank_processes,
    rank_samples,
    ranks_of,
    spawned_worker,
    tree_of,
    untraced,
)
from pipeprof.version import __version__

LOADER_KEYS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
NO_LOADER = "the script never iterated a torch.utils.data.DataLoader: there are no steps to attribute"
NOT_ARMED = "not measured: the what-if segments run in a script's own loop under `pipeprof profile --steps N` only"
RAN_TO_END = ("the script ran to its end before --steps ended it: the what-if segments run in the script's own "
              "loop after --steps N steps (give N below the script's own number of steps)")
NO_STEPS = ("no --steps: the what-if segments run in the script's own loop after --steps N ends the run; "
            "without them the predictions are estimates from what the run measured, or not predicted")
WHAT_IFS_OFF = "not measured: turned off (--no-what-ifs or PIPEPROF_WHAT_IFS=0; verify and tune trials run without them)"
CUT = "the script ended before the what-if segments were written (killed during them?)"
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
            f"not instrument ({shown}{more}): DataLoaders there ran unprofiled. Every Python process started "
            f"with the environment pipeprof gave the command gets the hooks (its PYTHONPATH start-up hook); one "
            f"started with an environment of its own (env=..., a container, a remote host) or that is not "
            f"Python does not")


def _command(cmdline: list[str], limit: int = 80) -> str:
    if any("multiprocessing.spawn import spawn_main" in w for w in cmdline):
        return "a multiprocessing spawn child"
    text = " ".join(Path(cmdline[0]).name if i == 0 else w for i, w in enumerate(cmdline)) or "?"
    return text if len(text) <= limit else text[: limit - 1] + "…"


NCCL_ABSENT = ("NCCL runs collectives on streams of its own: the host does not block in them, and pipeprof times the "
               "training stream, which waits for them inside the backward pass, so a rank's wait for the others is "
               "part of its compute (use PyTorch's profiler for NCCL's kernels)")


def rank_outcome(end: dict[str, Any] | None, job_status: str) -> tuple[str, str | None]:
    """(status, error) of one rank from its end record (its hooks wrote it at exit)."""
    how, detail = (end or {}).get("how"), (end or {}).get("detail")
    if end is None and job_status == "interrupted":  # the launcher passed the job's Ctrl-C or SIGTERM on
        return "interrupted", "ended by a signal when the job was interrupted"
    if end is None:
        return "failed", ("ended without an end record: killed by a signal (a launcher ends the other ranks "
                          "when one fails) or by os._exit")
    if how == "exception":
        return "failed", f"the rank raised {detail}"
    if how == "interrupted":
        return "interrupted", "interrupted by the user (Ctrl-C)"
    return ("complete", None) if job_status != "interrupted" else ("interrupted", None)


def job_launcher(script: dict[str, Any], idents: list[dict[str, Any]]) -> str | None:
    """What started the ranks: torchrun / torch.distributed.run, SLURM, or the script itself (multiprocessing)."""
    command = [str(w) for w in script.get("command") or []]
    if "torch.distributed.run" in command or "torch.distributed.launch" in command:
        return "torch.distributed.run"
    if command and Path(command[0]).name == "torchrun":
        return "torchrun"
    launchers = {str(i["launcher"]) for i in idents if i.get("launcher")}
    if launchers:
        return sorted(launchers)[0]
    return "multiprocessing"


def instrumented_note(procs: list[Proc]) -> str:
    """One line naming every process that got the hooks: its pid, its rank if it had one, what it ran."""
    def said(p: Proc) -> str:
        rank = p.identity().get("rank") if p.trained else None
        what = ("trained" + (f" as rank {rank}" if rank is not None else "") if p.trained
                else "its DataLoader worker" if spawned_worker(p, procs) else "no DataLoader")
        # a rank's start names its interpreter's whole command line; the script's (boot) its own argv
        argv = p.cut.start.get("orig_argv") or ["python", *p.argv]
        return f"pid {p.pid} ({_what_ran(argv)}: {what})"
    shown = ", ".join(said(p) for p in procs[:8])
    more = f", and {len(procs) - 8} more" if len(procs) > 8 else ""
    return f"pipeprof instrumented {len(procs)} Python processes of the command: {shown}{more}"


def _what_ran(argv: list[str]) -> str:
    """A process's program in a word: the interpreter's first argument — its script or command (torchrun)
    by file name, its ``-m`` module, or ``python -c``."""
    words = [str(w) for w in argv[1:]]
    for i, w in enumerate(words):
        if w == "-m" and i + 1 < len(words):
            return words[i + 1]
        if w == "-c" or w.startswith("-c"):
            return "python -c"
        if not w.startswith("-"):
            return Path(w).name
    return "python"


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
                 clock: Clock = monotonic_clock, cuda_available: bool | None = None,
                 events_dir: Path | None = None, what_ifs_absent: str | None = NOT_ARMED,
                 spool_dir: Path | None = None) -> None:
        self.name = name
        self.spool_dir = spool_dir  # the sampler's rows stream there (a long run in bounded memory); None: in memory
        self.what_ifs_absent = what_ifs_absent  # why no what-if segments were asked for (None: they were)
        self.events_path = Path(events_path)
        self.events_dir = events_dir  # where the other processes of the command wrote theirs (rank_boot)
        self.root_pid: int | None = None
        self.warmup_steps = warmup_steps
        self.sample_hz = sample_hz
        self.clock = clock
        self.cuda_available = cuda_available
        self.t0_s = 0.0
        self.sampler: SystemSampler | None = None
        self.monitor: GpuSet | None = None  # every GPU the command can see (the script picks its own)
        self.absences: dict[str, str] = {}
        self._cut: ScriptSteps | None = None
        self._unreadable = 0

    def start(self, pid: int) -> None:
        """Start sampling ``pid`` and its descendants (a process already gone is recorded, not raised)."""
        self.t0_s = self.clock()
        self.root_pid = pid
        if self.cuda_available is None:  # the driver's devices: importing torch here would take a core for
            inventory = gpu_mod.gpu_inventory()  # seconds while the script starts (its own torch says at start)
            self.cuda_available = not isinstance(inventory, gpu_mod.Absent) and len(inventory) > 0
        # Which GPU the script trains on is its own choice: sample every one it can see, pick after (gpu_set).
        gpus = gpu_mod.open_visible_gpus() if self.cuda_available else gpu_mod.Absent("no CUDA device on this machine")
        if isinstance(gpus, gpu_mod.Absent):
            self.absences["gpu"] = gpus.reason
        else:
            self.monitor = GpuSet(gpus)
        try:
            sampler = SystemSampler(pid, self.sample_hz, clock=self.clock, t0_s=self.t0_s, gpu=self.monitor,
                                    spool_dir=self.spool_dir)
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

    def processes(self) -> list[Proc]:
        """Every instrumented process: the one ``pipeprof profile`` started (its own event file), then the
        others of the command (``events-<pid>.jsonl``), each cut into steps on its own."""
        root = self.records()
        procs = [Proc(int(root.start.get("pid") or self.root_pid or 0), None, root, True, self._unreadable)] \
            if root.start or root.step_source is not None else []
        for path in event_files(self.events_dir) if self.events_dir is not None else []:
            events = read_events(path)
            cut = script_steps(events, self.t0_s, self.warmup_steps)
            pid = int(cut.start.get("pid") or 0)
            ppid = cut.start.get("ppid")
            procs.append(Proc(pid, int(ppid) if ppid is not None else None, cut, pid == self.root_pid,
                              events.unreadable))
        return procs

    def finish(self, status: str, error: str | None, script: dict[str, Any]) -> Run:
        """The Run: events cut into steps, the sampler's tables, and metadata (``script`` goes in as given).
        A command whose processes trained as the ranks of a job gives the job's run (``script.job``)."""
        self.stop_sampling()
        procs = self.processes()
        empty = pd.DataFrame()
        samples, processes = sample_tables(*(self.sampler.frames() if self.sampler else (empty, empty)),
                                           self.monitor is not None)
        try:
            run = self._sorted_run(procs, status, error, script, samples, processes)
        finally:
            if self.monitor is not None:
                self.monitor.close()
                self.monitor = None
        if len(procs) > 1:  # which processes of the command pipeprof instrumented, and what each did
            run.meta["notes"].append(instrumented_note(procs))
        return run

    def _sorted_run(self, procs: list[Proc], status: str, error: str | None, script: dict[str, Any],
                    samples: pd.DataFrame, processes: pd.DataFrame) -> Run:
        if is_job(procs):
            return self._job(procs, status, error, script, samples, processes)
        trained = [p for p in procs if p.trained]
        root = next((p for p in procs if p.root), None)
        main = trained[0] if trained else root
        if main is None or main.root:
            cut, unreadable = (main.cut, main.unreadable) if main is not None else (self.records(), self._unreadable)
            tree = processes["pid"].dropna().astype(int).tolist() if "pid" in processes else []
            return self._process_run(cut, unreadable, status, error, script, samples, processes,
                                     [*tree, *([self.root_pid] if self.root_pid else [])], children=True)
        # one process trained, started by the command (multiprocessing.Process, a subprocess): its own view
        workers = tree_of(main.pid, self._parents())[1:]
        run = self._process_run(main.cut, main.unreadable, status, error, script,
                                rank_samples(samples, processes, main.pid, workers),
                                rank_processes(processes, main.pid, workers), [main.pid, *workers], children=False)
        run.meta["notes"].append(f"the training ran in pid {main.pid}, a process the command started "
                                 f"({' '.join(main.argv)[:80] or '?'}): its steps are the run's")
        return run

    def _parents(self) -> dict[int, int | None]:
        return {int(d["pid"]): d.get("ppid") for d in (self.sampler.descendants() if self.sampler else [])}

    def _training_gpu(self, samples: pd.DataFrame, pids: list[int],
                      recorded: str) -> tuple[pd.DataFrame, dict[str, Any]]:
        """``samples`` with the series of the GPU these pids trained on as the run's ``gpu_*`` columns, and
        run.json's ``gpu`` (``available`` false with the ``reason`` when none was theirs)."""
        if self.monitor is None:
            return samples, {"available": False, "reason": self.absences.get("gpu")}
        chosen = self.monitor.training_gpu(pids, recorded)
        index = None if isinstance(chosen, NoGpu) else chosen
        self.monitor.select(index)  # its absences and info are the run's
        gpu_meta: dict[str, Any] = {"available": index is not None, **self.monitor.info()}
        if isinstance(chosen, NoGpu):
            gpu_meta["reason"] = chosen.reason
        return on_gpu(samples, index), gpu_meta

    def _job(self, procs: list[Proc], status: str, error: str | None, script: dict[str, Any],
             samples: pd.DataFrame, processes: pd.DataFrame) -> Run:
        """The job's run: a rank run per process that trained (each with its own transforms.csv rows and run.json
        ``transform_pipelines``, as ``_process_run`` makes them), the median rank's records at the top."""
        parents = self._parents()
        for p in procs:  # the sampler may have missed a short-lived process: the hooks' own record
            parents.setdefault(p.pid, p.ppid)
        ranked = ranks_of(procs)
        rank_runs = []
        worker_pids: set[int] = set()
        for ident, p in ranked:
            workers = tree_of(p.pid, parents)[1:]
            worker_pids.update(workers)
            rank_status, rank_error = rank_outcome(p.cut.end, status)
            run = self._process_run(p.cut, p.unreadable, rank_status, rank_error,
                                    {**script, "pid": p.pid, "argv": p.argv},
                                    rank_samples(samples, processes, p.pid, workers),
                                    rank_processes(processes, p.pid, workers), [p.pid, *workers], children=False)
            run.meta["rank"] = {**{k: ident.get(k) for k in ("rank", "local_rank", "world_size", "node",
                                                               "node_rank", "pid", "backend")},
                                "job_id": ident.get("job_id"), "status": rank_status, "error": rank_error}
            if ident.get("backend") == "nccl":
                run.meta["absences"]["collective_wait"] = NCCL_ABSENT
            rank_runs.append(run)
        middle = rank_runs[median_index(rank_runs, None)]  # analysis.ranks: the median rank, one rule
        idents = [ident for ident, _ in ranked]
        world = max([i.get("world_size") or 0 for i in idents] + [len(ranked)])
        meta = copy.deepcopy(middle.meta)  # the job's own: its notes are not the rank's
        meta.pop("rank", None)
        meta["status"], meta["error"] = status, error
        meta["script"] = {**script, **{k: meta["script"].get(k) for k in ("started", "ended",
                                                                                      "torch_threads")}}
        meta["job"] = {
            "id": next((i["job_id"] for i in idents if i.get("job_id")), None),
            "world_size": world,
            "ranks": [i.get("rank") for i in idents],
            "nodes": sorted({str(i.get("node")) for i in idents if i.get("node")}),
            "launcher": job_launcher(script, idents),
            "median_rank": middle.info.rank.rank if middle.info.rank is not None else None,
            "untraced": untraced(procs, world, idents),
        }
        rank_pids = {p.pid for _, p in ranked}
        if self.monitor is not None:  # the job's GPU series: the median rank's GPU, as its other records
            gpu = middle.info.gpu
            samples = on_gpu(samples, gpu.cuda_index if gpu.available else None)
        return Run(meta=meta, steps=middle.steps, samples=samples,
                   processes=job_processes(processes, rank_pids, worker_pids, self.root_pid, CHILD),
                   loading=middle.loading, transforms=middle.transforms, ranks=rank_runs)

    def _process_run(self, cut: ScriptSteps, unreadable: int, status: str, error: str | None,
                     script: dict[str, Any], samples: pd.DataFrame, processes: pd.DataFrame,
                     pids: list[int], *, children: bool) -> Run:
        """The run of one process's events, with these samples and processes tables; its GPU series are those
        of the GPU ``pids`` (the process and its workers) trained on."""
        device = cut.device or ("cuda" if cut.cuda_copies else "cpu")  # where its batches went: "cuda:1"
        samples, gpu_meta = self._training_gpu(samples, pids, device)
        absences = dict(self.absences)
        if not gpu_meta["available"] and gpu_meta.get("reason"):
            absences["gpu"] = gpu_meta["reason"]
        notes = []
        if unreadable:
            notes.append(f"{unreadable} event line(s) could not be read (cut short when the script was killed?)")
        untraced_kids = untraced_children(self.sampler.descendants(), self.sampler.root_pid) \
            if children and self.sampler is not None and cut.step_source is None else []
        if cut.step_source is None:
            absences["steps"] = untraced_message(untraced_kids) if untraced_kids else NO_LOADER
        elif cut.steps.empty:
            absences["steps"] = f"no complete training step (steps end at {cut.step_source})"
        if cut.uncounted is not None:
            absences["uncounted_batches"] = uncounted_message(cut.uncounted)
            notes.append(absences["uncounted_batches"])
        no_core_wait = core_wait_absence(cut.loading)
        if no_core_wait:
            absences["core_wait"] = no_core_wait
        train = next((loader for loader in cut.loaders if loader["role"] == TRAIN), None)
        pipelines, no_transforms = _timed_pipelines(cut.transform_pipelines, cut.transforms, train)
        if no_transforms:
            absences["transforms"] = no_transforms
        reads = untimed_reads(train)
        if reads:
            absences["reads"] = reads
        per_item = one_sample_an_item(train, cut.steps)
        if per_item:
            absences["samples_per_batch"] = per_item
        if self.sampler is not None:
            absences.update(self.sampler.absences)
        if not gpu_meta["available"]:  # no GPU is the run's: its GPU readings' own absences say nothing more
            absences = {k: v for k, v in absences.items() if k not in (gpu_mod.PROC_UTIL, gpu_mod.PROC_MEM)}
        threads = {"start": cut.start.get("torch_threads"), **{t["at"]: t["torch_threads"] for t in cut.threads}}
        # How it ended: the hooks' record, else (killed by a signal: no record) what the caller saw.
        script = {**script, "started": cut.start, "ended": cut.end or script.get("ended"), "torch_threads": threads}
        if untraced_kids:
            script["untraced_children"] = [{k: c[k] for k in ("pid", "ppid", "cmdline")} for c in untraced_kids]
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
            "device": device,
            "timing": cut.timing,  # which clock timed each part: the device's on CUDA (script.device_clock)
            "environment": describe_environment(training_threads(threads), cut.start),
            "gpu": dict(gpu_meta),
            "absences": absences,
            "notes": notes,
            "cache": {"mode": None, "dataset_bytes": 0, "drops": []},
            "status": status,
            "error": error,
            "compute_ceiling": None,
            "what_ifs": script_what_ifs(cut, self.what_ifs_absent),
            "transform_pipelines": pipelines,  # issue 18: each loader's timed leaves, in call order
            "worker_starts": cut.worker_starts,  # spawned / forkserver workers' start-up marks (worker_start)
        }
        if cut.step_source is None and not processes.empty and "role" in processes:
            # No DataLoader in the profiled process: what it started are not its DataLoader workers.
            processes.loc[processes["role"] == WORKER, "role"] = CHILD
        return Run(meta=meta, steps=cut.steps, samples=samples, processes=processes, loading=cut.loading,
                   device_memory=cut.device_memory, transforms=cut.transforms)


# Iterable datasets that apply a sample's transforms as stages of one pipeline (pipeprof.adapters)
PIPELINE_DATASETS = adapters.pipeline_datasets()


def one_sample_an_item(train: dict[str, Any] | None, steps: pd.DataFrame) -> str | None:
    """Why the training loader's samples are counted one a batch (``absences.samples_per_batch``): it hands over
    ready-made items (``batch_size=None``) whose tensors show no leading dimension they share (None: counted)."""
    if train is None or train.get("batch_size") is not None or steps.empty or "samples" not in steps:
        return None
    if (steps["samples"] > steps.get("batches", 1)).any():
        return None  # the batches showed their leading dimension
    return (f"{train.get('name') or 'the training loader'} hands over ready-made items (batch_size=None) whose "
            "tensors show no leading dimension they share: each item is counted as one sample")


# Datasets whose __getitem__ reads its rows from a table pipeprof does not time apart (pipeprof.adapters): the
# reads' time lands in the split's "other" (on the CPU) or "fetch" (waiting for storage), never in decode.
def untimed_reads(loader: dict[str, Any] | None) -> str | None:
    """``absences.reads`` where the loader's dataset reads rows from a table whose reads are not timed apart (a
    Hugging Face ``Dataset``'s Arrow table), else None."""
    module = str((loader or {}).get("dataset_module") or "")
    what = adapters.table_reads(module)
    if what is None:
        return None
    return (f"{(loader or {}).get('name') or 'the training loader'}'s dataset is {what} in __getitem__ are not "
            "timed apart: loading.split counts them in other (on the CPU) or fetch (waiting for storage), never in "
            "decode")


WHY_UNCOUNTED = {
    "before": "before the first step began",
    "between": "between steps (no step end came after them before the next step began)",
    "after": "after the last step's end (the script ended, or was stopped, before another step ended)",
}


def uncounted_message(u: Uncounted) -> str:
    """absences.uncounted_batches (and a note): how many training batches no step holds, and why."""
    where = "; ".join(WHY_UNCOUNTED[w] for w in u.where)
    return (f"{u.batches} of {u.of_batches} training batches are in no counted step: they came {where}; "
            f"steps end at {u.step_source}")


def script_what_ifs(cut: ScriptSteps, absent: str | None) -> dict[str, Any]:
    """run.json ``what_ifs`` of a script's run: the what-if segments' (``script.segments``), else why none."""
    if cut.what_ifs is not None:
        return cut.what_ifs
    if absent is not None:
        return {"absent": absent}
    return {"absent": CUT if (cut.end or {}).get("how") == "stopped" else RAN_TO_END}


def _timed_pipelines(pipelines: dict[str, Any], transforms: pd.DataFrame,
                     train: dict[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """run.json ``transform_pipelines`` (the loaders whose leaves were timed) and why the training loader has
    no transforms.csv rows (``absences.transforms``; None when it has some, or trained no loader)."""
    timed = {n: leaves for n, leaves in pipelines.items() if isinstance(leaves, list)}
    if train is None:
        return timed, None
    number = str(train.get("number"))
    if not transforms.empty and ((transforms["loader"].astype(int).astype(str) == number)
                                 & (transforms["kind"] == "transform" if "kind" in transforms else True)).any():
        return timed, None  # a transform of its own timed (decode calls alone are not its pipeline)
    failed = pipelines.get(number)
    if isinstance(failed, dict) and failed.get("absent"):
        return timed, str(failed["absent"])
    if not timed.get(number) and train.get("dataset") in PIPELINE_DATASETS:
        return timed, (f"the training loader's dataset ({train.get('dataset')}) applies its transforms inside its "
                       "pipeline's stages (map, map_tuple): they run in one call with the reading and decoding, "
                       "and pipeprof cannot time them apart")
    if not timed.get(number):
        return timed, (f"the training loader's dataset ({train.get('dataset')}) has no transform pipeline pipeprof "
                       "could find: no attribute of it or of the datasets it wraps holds a transform container, "
                       "a torchvision transform, an nn.Module or a callable named as a transform (transform, tf, "
                       "aug, preprocess...)")
    return timed, "no batch of the training loader with its transforms timed reached a counted step"
