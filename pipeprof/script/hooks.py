"""Instrumentation installed into a user's own training process (``pipeprof profile``, ``pipeprof.profile()``).

It runs inside the user's process and its DataLoader workers, so it imports
only the standard library and torch, and every record is a cheap tuple
written as a JSON line to one file at each step's end (``EventLog``), so a
script killed by a signal or ended by ``os._exit`` loses only the step it was in. ``pipeprof.script.event_steps`` turns the
events into steps; nothing here interprets them.

What ``install()`` patches, each through one ``Patches`` registry
(``pipeprof.script.patches``; ``uninstall()`` takes every one back, last
first, and so does a start that fails half-way):

* ``DataLoader.__init__``: notes where each loader is built (the user
  function that returns it, the library building it), for its name.
* ``DataLoader.__iter__``: registers the loader once (its settings, the name
  the user's code gives it: ``pipeprof.script.loader_names``), wraps its
  ``collate_fn`` in ``TimedCollate`` and tags the iterator with the loader's
  id; one ``I`` event per pass.
* ``_BaseDataLoaderIter.__next__``: host time blocked in ``next()`` (``N``,
  or ``E`` when the pass ends), and the worker's record of how the batch was
  made, which rode along with the batch (``Tagged``) and is removed before
  the script sees the batch.
* the map-style and iterable dataset fetchers' ``fetch``, in whichever
  process makes the batch (a worker or the training process): wall and
  thread CPU time of ``__getitem__`` over the batch, and of the collate
  (``pipeprof.script.batches``). On-CPU time (decode, transforms) is prep;
  off-CPU time is split by the thread's run-queue wait
  (``pipeprof.measure.schedstat``) into waiting for a core and fetch (the
  rest: storage, network, sleep): a user's dataset does all of it in one
  call, and the thread's clocks are what tell them apart.
* ``torch.Tensor.to`` and ``.cuda``: copies of tensors that came out of a
  loader (``C``); CUDA copies are timed with device events.
* on CUDA, the device's clock (``pipeprof.script.device_clock``): an event on
  the current stream before and after every ``iter()`` and ``next()`` and at
  every step end (``G``), resolved lazily, so that a step is timed as the GPU
  saw it: the wait is the time the GPU sat idle for want of the batch.
* PyTorch's global optimizer step post-hook: step ends (``O``).
* ``torch.autograd.backward`` (which ``Tensor.backward`` calls): backward
  passes (``B``), so that a script whose weights are updated without a
  ``torch.optim`` optimizer (a hand-written SGD, alone or beside a fit with
  one) still has steps and its training loader.
* ``torch.get_num_threads()`` read at the first step end and at the end
  (``T``): what the training thread uses, the script's own
  ``torch.set_num_threads`` included.
* accelerate's ``DataLoaderShard`` / ``DataLoaderDispatcher.__iter__`` (once
  the script imports ``accelerate.data_loader``: ``pipeprof.script.frameworks``):
  they take a batch ahead from the DataLoader, so the loop's own ``next()``
  on them is what is timed, and each batch's ``N`` is written for the
  ``next()`` that yielded it.
* timm's ``PrefetchLoader`` likewise (one batch ahead), torchdata's
  ``StatefulDataLoader.__iter__`` as DataLoader's, and a ``torchdata.nodes``
  ``Loader``'s pass and ``next()`` (``pipeprof.adapters.torchdata``: no
  record of how its batches are made, said as an absence).
* a spawned worker's first batch carries how the worker started (``U``:
  ``pipeprof.script.worker_start``).
* an ``atexit`` flush of the event log.

Each wrapper works for its own session only, while ``Hooks.live``: a
wrapper that outlives its session (someone patched over it, and their patch
calls it) passes straight through to the original.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from threading import get_ident
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DataLoader
from torch.utils.data import dataloader as _dataloader

from pipeprof import adapters
from pipeprof.measure.cuda_memory import CudaMemoryWindows  # standard library and torch
from pipeprof.measure.prefetch import ready_batches  # standard library only
from pipeprof.measure.schedstat import blocked_s, run_queue_wait
from pipeprof.script import frameworks
from pipeprof.script.batches import Tagged, TimedCollate, clock, cpu_clock, install_fetch
from pipeprof.script.device_clock import CudaDevice, Device, DeviceMarks
from pipeprof.script.frameworks import OuterPass
from pipeprof.script.loader_names import loader_name, note_built
from pipeprof.script.loaders import batch_samples, describe_loader, describe_loop_feed, tensors
from pipeprof.script.loop_feed import COPY, FORWARD, LoopFeed, Use
from pipeprof.script.own_frames import own_frames_trimmed
from pipeprof.script.patches import Patches, wraps
from pipeprof.script.segments import WhatIfSegments
from pipeprof.script.transform_hooks import TransformHooks

FLUSH_EVERY_S = 0.5
OWN_THREADS_GRACE_S = 2.0  # how long a script stopped by --steps waits for its own threads at exit
NO_LOADER_RECORD = ("the loop's batches come from no torch DataLoader on its thread: how each batch was made (fetch, "
                    "decode, transforms, workers) has no record; only the loop's wait for it is timed")
NO_LOADER_WHAT_IFS = ("no torch DataLoader feeds the training loop on its thread: the what-if segments vary a "
                      "DataLoader's settings, and there is none to vary")
STEP_ENDS = frozenset("OM")  # optimizer steps and marks: where a step's events are written
# a step's batch, copies, parts, collectives, device clock, memory and backward pass (a step end only where
# no optimizer step is seen: written as it comes until one is)
_INSIDE_A_STEP = frozenset("NCPKGYIB")
NO_RECORD = (None,) * 9  # a batch without its maker's record: N events keep one width (the reader's fast path)


def _host_clock() -> Callable[[], float]:
    """The module's clock as it is now (``time.perf_counter``; a test may put a fake one in its place)."""
    return clock


def started_facts() -> dict[str, Any]:
    """A process's start record ("S"): who it is and the torch it runs (``measure.environment`` reads the
    torch facts back for run.json, so pipeprof's own process need not import torch)."""
    return {"pid": os.getpid(), "cwd": os.getcwd(), "python": sys.executable, "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "cuda_available": cuda_seen(torch.cuda),
            "cuda_version": torch.version.cuda}


def cuda_seen(cuda: Any) -> bool:
    """Whether the script's torch has a CUDA device, found without initializing CUDA in its process.

    ``torch.cuda.is_available()`` runs ``cuInit`` (through the device count), which marks every child forked
    afterwards "in bad fork" and fixes the visible devices before the script sets ``CUDA_VISIBLE_DEVICES``: a
    profiler must not change what the script does. So: torch's own answer once the script has initialized
    CUDA, else the devices NVML lists (``torch.cuda._device_count_nvml``, which honours
    ``CUDA_VISIBLE_DEVICES`` and never touches the CUDA driver; -1 when NVML cannot be read)."""
    if cuda.is_initialized():
        return bool(cuda.is_available())
    count = getattr(cuda, "_device_count_nvml", None)
    try:
        return count is not None and int(count()) > 0
    except Exception:  # noqa: BLE001 - a private helper: any failure reads as no device seen
        return False


class EventLog:
    """Writes event tuples to ``path`` as JSON lines, with one ``write`` a training step.

    The lines of a step's events wait for its end (an optimizer step or a
    mark: ``STEP_ENDS``), then go to the file in one ``write``, into the
    kernel's page cache; every other event is written as it comes, and so is
    every event until a step end has been seen (a script whose steps are its
    backward passes or its batches). A process that ends without its exit
    handlers (``os._exit``, a signal, pipeprof killed and the script with it)
    so loses at most the events of the step it was in, which no step counts.
    The device's events wait until they are resolved (``flush``, every
    ``FLUSH_EVERY_S``).
    """

    def __init__(self, path: str, clock: Callable[[], float] | None = None) -> None:
        self.path = path
        self.pid = os.getpid()
        self.clock = clock or _host_clock()
        self._fd: int | None = None
        self._pending: list[str] = []  # the lines of the step under way
        self._steps_end = False  # a step end has been seen: the events inside a step may wait for it
        self._last_flush_s = self.clock()
        self._lock = threading.Lock()  # flush() runs from the training thread and at exit
        self.device = DeviceMarks()  # device events not yet resolved
        self.muted = False  # while the what-if segments run (script.segments): none of their events is the run's
        self.lost: str | None = None  # why the events stopped being written (a full disk)

    def open(self) -> None:
        """Create the file now: an unwritable path fails at the start, not later."""
        self._file()

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        return self._fd

    def add(self, event: tuple, now_s: float) -> None:
        if self.muted or self.pid != _PID[0]:  # a forked child holds a copy: only the process that made it writes
            return
        self._pending.append(_line(event))
        kind = event[0]
        if kind in STEP_ENDS:
            self._steps_end = True
        elif kind in _INSIDE_A_STEP and self._steps_end:
            if now_s - self._last_flush_s >= FLUSH_EVERY_S:
                self.flush(now_s)
            return
        self._write()
        if now_s - self._last_flush_s >= FLUSH_EVERY_S and len(self.device):
            self.flush(now_s)

    def _write(self) -> None:
        lines, self._pending = self._pending, []
        if not lines or self.lost is not None:
            return
        try:
            os.write(self._fd if self._fd is not None else self._file(), "".join(lines).encode())
        except OSError as e:  # a full disk: the script goes on, its records end here, and it is said once
            self.lost = f"{e.strerror or e}"
            print(f"pipeprof: warning: cannot write the events to {self.path} ({self.lost}): the run's records "
                  "end here; the script goes on", file=sys.stderr)

    def add_device_copy(self, t0_s: float, t1_s: float, nbytes: int, start: Any, end: Any,
                        overlapped: bool = False) -> None:
        if not self.muted:
            self.device.copy(t0_s, t1_s, nbytes, start, end, overlapped)

    def add_device_mark(self, t_s: float, event: Any) -> None:
        if not self.muted:
            self.device.mark(t_s, event)

    def settle_device(self) -> None:
        """Resolve every pending device event now (waiting for the last), keeping the tuples to write; not if a
        flush is under way (a signal handler may have interrupted it: the final flush resolves them then)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if len(self.device):
                self._pending.extend(map(_line, self.device.resolve(final=True)))
        finally:
            self._lock.release()

    def flush(self, now_s: float | None = None, final: bool = False, wait: bool = True) -> None:
        """Write what is pending and the device's events resolved so far (``final``: every one); ``wait``
        False: not if a flush is under way (a signal handler, which may have interrupted that very flush)."""
        if self.pid != _PID[0]:
            return
        if not self._lock.acquire(blocking=wait):
            return
        try:
            self._last_flush_s = self.clock() if now_s is None else now_s
            self._pending.extend(map(_line, self.device.resolve(final) if len(self.device) else []))
            self._file()
            self._write()
        finally:
            self._lock.release()


def _without_own_frames(original: Callable) -> Callable:
    """``ExceptionWrapper.__init__`` formatting the traceback without the hooks' own frames (the fetch wrapped in
    a worker): the "Original Traceback" reads as it would without pipeprof."""
    def init(wrapper: Any, exc_info: Any = None, where: str = "in background") -> None:
        kind, value, tb = sys.exc_info() if exc_info is None else exc_info
        original(wrapper, (kind, value, own_frames_trimmed(tb)), where)
    return wraps(init, original)


_PID = [os.getpid()]  # this process's pid, kept by an at-fork hook: cheaper than os.getpid() per event


def _forked() -> None:
    _PID[0] = os.getpid()


os.register_at_fork(after_in_child=_forked)


def _plain(obj: Any) -> Any:
    return obj.item() if hasattr(obj, "item") else str(obj)


# The kinds written for every batch and step, formatted by hand: json.dumps takes about 5 µs an event, a
# quarter of what the hooks cost a fast training step; these take 0.5-2 µs and write the same JSON (times
# to the nanosecond). Fields of other types (a numpy number, None where a number belongs) go through json.
_FORMATS = {
    "N": '["N", %d, %.9f, %.9f, %d, [%d, %d, %.9f, %.9f, %.9f, %.9f, %.9f, %d, %.9f], %s]\n',
    "H": '["H", %d, %.9f, %.9f, %d, [%d, %d, %.9f, %.9f, %.9f, %.9f, %.9f, %d, %.9f], %s]\n',
    # a batch without its maker's record (the loop's own feed, a loader that hands none): its times written as
    # every other event's, so that a wait that begins at a step's end is read back in the next step
    "n": '["N", %d, %.9f, %.9f, %d, [null, null, null, null, null, null, null, null, null], %s]\n',
    "h": '["H", %d, %.9f, %.9f, %d, [null, null, null, null, null, null, null, null, null], %s]\n',
    "C": '["C", %.9f, %.9f, %d, %s, %d]\n',  # the last: 1 on a side stream (device_clock.DeviceMarks)
    "I": '["I", %d, %.9f, %.9f]\n',
    "E": '["E", %d, %.9f, %.9f]\n',
    "O": '["O", %.9f]\n',
    "B": '["B", %.9f, %.9f]\n',
    "K": '["K", %.9f, %.9f, %.9f]\n',
    "M": '["M", %.9f]\n',
    "G": '["G", %.9f, %.9f]\n',
    "Y": '["Y", %.9f, %d, %d, %d, %d]\n',
    "P": '["P", %d, %.9f, %d, %d, %.9f, %.9f]\n',  # per batch, a transform's or decode call's part (transform_hooks)
}
_FLOAT_TYPES = (float, int)


def _number_or_null(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) in _FLOAT_TYPES:
        return "%.9f" % value  # noqa: UP031 - %-format is the fastest here (hooks run per batch)
    raise TypeError(value)  # not a plain number: json writes it


def _line(event: tuple) -> str:
    """One event as a JSON line."""
    kind, line = event[0], None
    try:
        if kind == "N" or kind == "H":
            if event[5] is NO_RECORD:
                line = _FORMATS[kind.lower()] % (*event[1:5], _number_or_null(event[6]))
            else:
                line = _FORMATS[kind] % (*event[1:5], *event[5], _number_or_null(event[6]))
        elif kind == "C":
            line = _FORMATS["C"] % (*event[1:4], _number_or_null(event[4]), event[5] if len(event) > 5 else 0)
        elif kind in _FORMATS:
            line = _FORMATS[kind] % event[1:]
    except (TypeError, ValueError, OverflowError):
        pass
    if line is None or "nan" in line or "inf" in line:  # not JSON: json writes NaN, Infinity
        line = json.dumps(event, default=_plain) + "\n"
    return line


# --- the training process ---------------------------------------------------------------------------

class Hooks:
    """The patches of one profiling session (only one at a time in a process)."""

    def __init__(self, log: EventLog, stop_after_steps: int | None = None, *,
                 clock: Callable[[], float] | None = None, device: Device | None = None,
                 memory: CudaMemoryWindows | None = None) -> None:
        self.log = log
        self.clock = clock or _host_clock()  # host seconds (perf_counter; a fake one in the simulated-device tests)
        self.device: Device = device if device is not None else CudaDevice()
        # Y, read at step ends on the training device (None until a batch names it)
        self.memory = memory if memory is not None else CudaMemoryWindows(torch.cuda, device=self._device_index)
        self.step_stream: Any = None  # the stream of the last next()'s device marks
        self.stop_after_steps = stop_after_steps
        self.loaders: dict[int, int] = {}  # id(loader) -> loader number
        self._keep: list[Any] = []  # the loaders themselves, so id() is never reused while profiling
        self._passes: weakref.WeakSet = weakref.WeakSet()  # the iterators tagged, to untag at uninstall()
        self.batch_refs: dict[int, Any] = {}  # id(tensor) -> weakref, for the last batch's tensors
        self.optimizer_steps = 0
        self.marks = 0
        self.backwards = 0
        # Steps ended at optimizer steps and backward passes (event_steps' rule, as far as it can be applied
        # as they come). A stretch of training runs from one iter() of a training (or new) loader to the next.
        # A backward pass ends a step where no optimizer step is expected (a new loader's first stretch, or one
        # after a stretch that had none: a fit by hand, d2l's ``param -= lr * param.grad``); an optimizer step
        # right after a backward pass that ended one is part of that step. Where one is expected (the loader's
        # last stretch had them), backward passes wait for it (gradient accumulation), and a stretch that ends
        # without one has them counted then, as its steps.
        self.steps_ended = 0
        self.expect_optimizer = False  # backward passes in this stretch are taken to lead to an optimizer step
        self.stretch_optimized = False  # an optimizer step in this stretch
        self.pending_backwards = 0  # backward passes of this stretch waiting for an optimizer step
        self.trained: set[int] = set()  # loaders whose batch came last before a backward pass or optimizer step
        self.step_at_backward = False  # the last step ended at a backward pass, and no batch came since
        self.steps_told = 0  # the most steps the listeners were told of
        self.step_ends_s: list[float] = []  # host time of each step's end as counted: the segments' budget
        self.waits_s: dict[int, list[float]] = {}  # loader number -> each next()'s wait: the segments' plan
        self.threads_read = False  # torch's thread count read at the first step end (T)
        self.threads_ended = False  # ... and at the end
        self.batches: dict[int, int] = {}  # loader number -> batches (stops a script without an optimizer)
        self.stopping = False
        # after --steps: the script's loop goes on fed by variants of its training loader (script.segments)
        self.segments: WhatIfSegments | None = None
        self.last_batch_loader: int | None = None  # the loader of the last batch a step was timed waiting for
        # called with the steps ended so far at each step end, by whatever the steps are counted by (code_profile)
        self.step_listeners: list[Callable[[int], None]] = []
        self.ended = False  # the end (X) is written (a rank's excepthook: pipeprof.script.rank_boot)
        self.rank_read = False  # the process group read (R) at the first step end
        self._collective_depth = 0  # inside a timed torch.distributed call (one that calls another is one)
        self.outer: OuterPass | None = None  # the look-ahead loader pass whose next() is running (frameworks.py)
        self.live = False  # True from the end of a successful install() to uninstall(): the wrappers' switch
        self.patches = Patches()
        self.transforms = TransformHooks(self.patches, self.log, self.clock, str(id(self)))  # issue 18
        # The training loop's thread: the one its steps end on (the main thread until one does). A DataLoader
        # iterated on any other thread hands its batches to a thread of the loader's own (a prefetch thread):
        # its next() is the loader's busy time (H), never the loop's wait.
        self.loop_thread = threading.main_thread().ident
        # The loop's batches when no DataLoader on its thread hands them over (script.loop_feed): a generator,
        # a queue, a third-party loader; their "loader" is the loop itself (a number of its own, ``loop_number``).
        self.feed = LoopFeed()
        self.loop_number: int | None = None
        self.loop_eval_number: int | None = None  # the evaluation passes seen between its training steps
        self.loader_fed = False  # a DataLoader on the loop's thread fed a training step: the feed is not watched
        self._module_calls: Any = None  # the nn.Module.__call__ patch, retired once a DataLoader feeds the loop

    def _device_index(self) -> int | None:
        return self.device.index

    # DataLoader.__iter__
    def loader_number(self, loader: DataLoader) -> int:
        number = self.loaders.get(id(loader))
        if number is None:
            number = self.loaders[id(loader)] = len(self.loaders)
            self._keep.append(loader)
            own = adapters.own_loader(loader)
            if own is not None and own.describe is not None:  # a library's own loader: no DataLoader inside to time
                now = self.clock()
                self.log.add(("L", number, own.describe(loader, number, loader_name(loader))), now)
                self.log.add(("F", number, {"absent": own.not_timed}), now)
                self.read_rank()
                return number
            self.patches.on_undo(lambda: _end_persistent_workers(loader))  # after its collate is restored
            if not isinstance(loader.collate_fn, TimedCollate):
                self.patches.apply(loader, "collate_fn", TimedCollate)
            self.log.add(("L", number, describe_loader(loader, number)), self.clock())
            self.transforms.on_loader(loader, number, loader.collate_fn)  # its dataset's transforms, timed
            self.read_rank()
        return number

    def _feed_number(self, evaluation: bool) -> int:
        """The number of the loop's own feed (or of its evaluation passes), registered at its first batch."""
        number = self.loop_eval_number if evaluation else self.loop_number
        if number is None:
            number = len(self.loaders)
            self.loaders[-1 - number] = number  # a key no id() takes
            self._keep.append(None)
            if evaluation:
                self.loop_eval_number = number
            else:
                self.loop_number = number
            self.log.add(("L", number, describe_loop_feed(number, evaluation)), self.clock())
            self.log.add(("F", number, {"absent": NO_LOADER_RECORD}), self.clock())
        return number

    def on_iter(self, loader: DataLoader, original: Callable) -> Any:
        new = id(loader) not in self.loaders
        number = self.loader_number(loader)
        if get_ident() != self.loop_thread:  # a pass on a thread of the loader's own: not the loop's wait
            iterator = original(loader)
            iterator._pipeprof_loader = number
            iterator._pipeprof_outer = None
            self._passes.add(iterator)
            return iterator
        start = self.device.mark()
        t0 = self.clock()
        iterator = original(loader)
        t1 = self.clock()
        if start is not None:
            self._bracket(start, t0, t1)
        iterator._pipeprof_loader = number
        if self.stopping and self.segments is not None:  # after --steps: the script's new pass, its own length
            self.segments.new_pass(number, iterator)
        if new or number in self.trained:  # a known validation loader's pass leaves the stretch as it is
            self._end_stretch(new)
        outer = iterator._pipeprof_outer = self.outer  # iterated inside a look-ahead loader's next() (or None)
        self._passes.add(iterator)
        if outer is not None:  # the loop's wait began at that next(): the pass's start holds it up to here
            outer.number, outer.iter_t1_s, t0 = number, t1, min(t0, outer.t0_s)
        self.log.add(("I", number, t0, t1), t1)
        return iterator

    # _BaseDataLoaderIter.__next__
    def on_next(self, iterator: Any, original: Callable) -> Any:
        number = getattr(iterator, "_pipeprof_loader", None)
        if number is None:  # an iterator made before install(), or by an __iter__ not timed: its batch untouched
            data = original(iterator)
            return data.batch if type(data) is Tagged else data
        if get_ident() != self.loop_thread:
            return self._off_thread(iterator, number, original)
        if self.stopping:
            try:
                return self._after_stop(iterator, number, original)
            except SystemExit:
                if adapters.stop_loop(sys._getframe(1)):  # the framework's own loop ends as at its stop request
                    raise StopIteration from None
                raise
        outer = getattr(iterator, "_pipeprof_outer", None)  # a framework's look-ahead pass it runs in, if any
        ready = ready_batches(iterator)  # before the clock: the step timer does the same
        start = self.device.mark()  # the GPU reaches it when done with what is queued: the wait starts then
        t0 = self.clock()
        watching = self.feed.awaiting  # module calls watched: its transforms' (a torchvision one) are no use
        if watching:
            self.feed.depth += 1
        try:
            data = original(iterator)
        except StopIteration:
            t1 = self.clock()
            if start is not None:
                self._bracket(start, t0, t1)
            if outer is None:
                self.log.add(("E", number, t0, t1), t1)
            else:  # the look-ahead loader's next() that saw it reports the pass's end
                outer.ended = True
            raise
        finally:
            if watching:
                self.feed.depth -= 1
        t1 = self.clock()
        if start is not None:
            self._bracket(start, t0, t1)
        record = None
        if type(data) is Tagged:
            data, record = self._unwrap(number, data, t1)
        self._remember(data)
        if outer is not None:  # taken ahead by a framework's loader: written when the loop's next() yields it
            outer.taken(batch_samples(data, record), record, None if ready != ready else ready)
            return data
        self._batch(number, t0, t1, batch_samples(data, record), record, ready)
        return data

    def _off_thread(self, iterator: Any, number: int, original: Callable) -> Any:
        """``H``: a batch the loader handed to a thread of its own (a prefetch thread that passes batches to the
        loop through a queue): the loader's busy time, with the worker's record of how it was made. After
        ``--steps``, the pass ends there (the thread's loop ends as at the end of an epoch)."""
        if self.stopping:
            raise StopIteration
        t0 = self.clock()
        data = original(iterator)
        t1 = self.clock()
        record = None
        if type(data) is Tagged:
            data, record = self._unwrap(number, data, t1)
        self.log.add(("H", number, t0, t1, batch_samples(data, record), NO_RECORD if record is None else record,
                      None), t1)
        return data

    def _unwrap(self, number: int, tagged: Tagged, t1: float) -> tuple[Any, Any]:
        """A worker's batch and its record: how a spawned worker started (``U``, its first batch) and what the
        samples spent in transforms and decode calls (``P``) written for loader ``number``."""
        if tagged.start is not None:  # a spawned worker's first batch: how long the worker took to start
            self.log.add(("U", number, tagged.record[0], tagged.record[1], tagged.start), t1)
        if tagged.parts:  # what its samples spent in transforms and decode calls
            self.transforms.on_batch(number, tagged.record, tagged.parts, t1)
        return tagged.batch, tagged.record

    # nn.Module.__call__ and Tensor.to / .cuda while the loop waits for a batch no DataLoader on its thread gave
    def on_module_call(self, module: Any, original: Callable, args: tuple, kwargs: dict) -> Any:
        # a module without parameters (a torchvision transform a generator applies) is no model using a batch
        if get_ident() != self.loop_thread or self.feed.depth or next(module.parameters(), None) is None:
            return original(module, *args, **kwargs)
        if torch.is_grad_enabled():  # the training step uses its batch
            self._loop_batch(batch_samples((args, kwargs), None))
            return original(module, *args, **kwargs)
        self.feed.depth += 1  # a call without gradients: a frozen part of the step, or an evaluation pass
        t0 = self.clock()
        try:
            out = original(module, *args, **kwargs)
        finally:
            self.feed.depth -= 1
        if self.feed.awaiting:
            self.feed.add(Use(FORWARD, t0, self.clock(), batch_samples((args, kwargs), None)))
        return out

    def on_loop_copy(self, tensor: torch.Tensor, original: Callable, args: tuple, kwargs: dict) -> Any:
        if get_ident() != self.loop_thread or self.feed.depth:
            return original(tensor, *args, **kwargs)
        t0 = self.clock()
        out = original(tensor, *args, **kwargs)
        t1 = self.clock()
        if out is not tensor and isinstance(out, torch.Tensor):
            self.device.holds(out)  # the first copy to CUDA names the training device
            self.feed.add(Use(COPY, t0, t1, int(tensor.shape[0]) if tensor.dim() else 1,
                              out.element_size() * out.nelement()))
        return out

    def _loop_batch(self, samples: int) -> None:
        """The loop used a batch that no DataLoader on its thread handed over: its wait since the last step's
        end (``N`` of the loop's own feed), the evaluation pass in between and the batch's copies (``C``)."""
        if self.stopping:
            self._stop_loop()  # SystemExit, or a framework's loop asked to end: this batch is not the run's
            return
        fed = self.feed.resolve(self.clock(), samples)
        number = self._feed_number(False)
        if fed.eval_span is not None:
            evaluation = self._feed_number(True)
            self.log.add(("I", evaluation, fed.eval_span[0], fed.eval_span[0]), fed.eval_span[0])
            self.log.add(("E", evaluation, fed.eval_span[1], fed.eval_span[1]), fed.eval_span[1])
        for copy in fed.copies:
            self.log.add(("C", copy.t0_s, copy.t1_s, copy.nbytes, None), copy.t1_s)
        self._batch(number, fed.t0_s, fed.t1_s, fed.samples, None, None)

    def _stop_loop(self) -> None:
        """``--steps`` reached in a loop no DataLoader on its thread feeds: it ends at its next batch's first use,
        as at a DataLoader's ``next()``; the what-if segments, which vary a DataLoader, do not run."""
        if self.segments is not None and not self.segments.begun:
            self.segments.decline(NO_LOADER_WHAT_IFS)
            self.end_segments("")
        self.log.flush()
        if adapters.stop_loop(sys._getframe(1)):  # a framework's loop: it ends as at its own stop request
            return
        _end_own_threads_at_exit()
        raise SystemExit(0)

    def _after_stop(self, iterator: Any, number: int, original: Callable) -> Any:
        """A ``next()`` after ``--steps`` ended the run: the what-if segments' batch (another loader's own batch,
        untimed), else ``SystemExit(0)``."""
        segments = self.segments
        if segments is None:
            raise SystemExit(0)
        if not segments.begun:
            loader = self._keep[number] if 0 <= number < len(self._keep) else None
            segments.training_device = self.device.index
            segments.begin(loader, number if number == self.last_batch_loader else None, iterator,
                           step_ends_s=self.step_ends_s, waits_s=self.waits_s.get(number, []))
        if segments.serves(number, iterator):
            return segments.next_batch()
        data = original(iterator)  # another loader's batch (a validation pass): the script's own, untimed
        return data.batch if type(data) is Tagged else data

    @property
    def stop_now(self) -> bool:
        """``--steps`` reached, and no what-if segments run after it: the script ends at its next ``next()``."""
        return self.stopping and self.segments is None

    def end_segments(self, why: str) -> None:
        """The script ends: the what-if segments' event written if they began (``why`` a running one was cut)."""
        if self.segments is not None:
            self.segments.finish(why)

    def _step_end(self, t_s: float) -> None:
        """A step ended at host time ``t_s``: its device event, and torch.cuda's memory once a window."""
        self._mark(t_s)
        row = self.memory.read(t_s)
        if row is not None:
            self.log.add(("Y", *row), t_s)

    def _mark(self, t_s: float) -> None:
        """A device event for host time ``t_s`` (just read), when the device's clock can be read."""
        event = self.device.mark()
        if event is not None:
            self.log.add_device_mark(t_s, event)

    def _bracket(self, start: Any, t0_s: float, t1_s: float) -> None:
        """A call from ``t0_s`` to ``t1_s`` on the host: ``start`` (recorded just before ``t0_s``) and an event now."""
        self.log.add_device_mark(t0_s, start)
        self._mark(t1_s)
        self.step_stream = self.device.stream()

    def _batch(self, number: int, t0: float, t1: float, samples: int, record: Any, ready: float | None) -> None:
        """``N``: the loop waited ``t0``..``t1`` for a batch of loader ``number``."""
        self.last_batch_loader = number
        self.step_at_backward = False
        if self.feed.awaiting:
            self.feed.fed()
        if self.segments is not None:
            self.waits_s.setdefault(number, []).append(t1 - t0)
        self.log.add(("N", number, t0, t1, samples, NO_RECORD if record is None else record,
                      None if ready is None or ready != ready else ready), t1)  # NaN (no queue) as null
        if (self.stop_after_steps is not None or self.step_listeners) and \
                not (self.optimizer_steps or self.marks or self.backwards):
            batches = self.batches[number] = self.batches.get(number, 0) + 1
            self._maybe_stop(batches)  # no optimizer (yet): a step is a batch

    # a look-ahead loader's next() (pipeprof.script.frameworks)
    def on_outer_batch(self, state: OuterPass, t0: float, t1: float, batch: Any) -> None:
        """The loop's ``next()`` on a framework's loader yielded ``batch``: the DataLoader's record of it, with
        this ``next()``'s times and the prefetch queue as the DataLoader ``next()`` calls inside it found it."""
        if state.number is None:  # no profiled DataLoader under it (its pass began before the session)
            return
        taken = state.yielded()
        samples, record = taken if taken is not None else (batch_samples(batch, None), None)
        for t in tensors(batch):  # copies the loop makes of the batch it got (besides the one held ahead)
            self.batch_refs[id(t)] = weakref.ref(t)
        self._batch(state.number, state.wait_start(t0), t1, samples, record, state.ready)

    def on_outer_end(self, state: OuterPass, t0: float, t1: float) -> None:
        if state.number is not None:
            self.log.add(("E", state.number, state.wait_start(t0), t1), t1)

    def _remember(self, data: Any) -> None:
        found = tensors(data)
        self.batch_refs = {id(t): weakref.ref(t) for t in found}
        if self.device.index is None:  # a loader that yields CUDA tensors names the training device
            for t in found:
                if self.device.holds(t):
                    break

    def _end_passes(self) -> None:
        """Passes begun in the session that go on after it: untagged (a later session leaves them alone), and
        a pass whose workers started with the timed fetch (they go on tagging) has its batches unwrapped."""
        for iterator in list(self._passes):
            iterator.__dict__.pop("_pipeprof_loader", None)
            if getattr(iterator, "_workers", None) and not getattr(iterator, "_shutdown", True):
                _unwrap_worker_batches(iterator)

    # Tensor.to / Tensor.cuda
    def on_copy(self, tensor: torch.Tensor, original: Callable, args: tuple, kwargs: dict) -> Any:
        ref = self.batch_refs.get(id(tensor))
        if ref is None or ref() is not tensor:
            return original(tensor, *args, **kwargs)
        start = self.device.mark()
        t0 = self.clock()
        out = original(tensor, *args, **kwargs)
        t1 = self.clock()
        if out is tensor:  # no copy (already there): nothing to time
            return out
        nbytes = out.element_size() * out.nelement()
        on_device = self.device.holds(out)  # the first copy to CUDA names the training device
        end = self.device.mark() if start is not None and on_device else None
        if end is not None:
            # The host only queued the copy (asynchronous from pinned memory): device events time it, on the
            # stream it was issued on; one on another stream than the step's (a prefetcher's) overlaps compute.
            stream = self.device.stream()
            overlapped = stream is not None and self.step_stream is not None and stream != self.step_stream
            self.log.add_device_copy(t0, t1, nbytes, start, end, overlapped)
        else:
            self.log.add(("C", t0, t1, nbytes, None), t1)
        return out

    # optimizer.step() post-hook and prof.step()
    def on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.optimizer_steps += 1
        now = self.clock()
        self.log.add(("O", now), now)
        self._loop_step_end(now)
        ends_step = not self.marks and not self.step_at_backward  # prof.step() marks end the steps when any
        self.stretch_optimized, self.expect_optimizer, self.step_at_backward = True, True, False
        self.pending_backwards = 0
        if ends_step:
            self._step_end(now)
        if not self.threads_read:
            self.read_threads("first step")
            self.read_rank()
        if ends_step:
            self.steps_ended += 1
            self._maybe_stop(self.steps_ended)

    # torch.autograd.backward
    def on_backward(self, t0: float) -> None:
        self.backwards += 1
        now = self.clock()
        self.log.add(("B", t0, now), now)
        ends_step = not (self.expect_optimizer or self.marks)  # no optimizer step expected in this stretch
        self._loop_step_end(now, wants=ends_step)
        if self.expect_optimizer and not (self.stretch_optimized or self.marks):
            self.pending_backwards += 1  # counted at the stretch's end if no optimizer step comes
        if ends_step:
            self._step_end(now)
        if not self.threads_read:
            self.read_threads("first step")
        if ends_step:
            self.step_at_backward = True
            self.steps_ended += 1
            self._maybe_stop(self.steps_ended)

    # torch.distributed: a rank's blocking in collectives
    def on_collective(self, t0: float, t1: float, blocked_s: float) -> None:
        """``K``: ``t0``..``t1`` held ``blocked_s`` seconds blocked in collectives (waiting for the other ranks,
        and the transfer)."""
        self.log.add(("K", t0, t1, blocked_s), t1)

    def read_rank(self) -> None:
        """``R``: the process group as torch.distributed sees it now (rank, world size, backend), if one is up."""
        view = rank_view()
        if view is not None:
            self.rank_read = True
            now = self.clock()
            self.log.add(("R", now, view), now)

    def read_threads(self, at: str) -> None:
        """``T``: the threads torch's intra-op pool uses now, as the script set them (``at``: when)."""
        self.threads_read = True
        self.threads_ended = self.threads_ended or at == "end"
        now = self.clock()
        self.log.add(("T", now, {"at": at, "torch_threads": torch.get_num_threads()}), now)

    def declare_training(self, loader: DataLoader) -> None:
        """``prof.wrap(loader)``: this loader feeds the training steps, whatever else is iterated."""
        now = self.clock()
        self.log.add(("W", self.loader_number(loader)), now)

    def mark_step(self) -> None:
        self.marks += 1
        now = self.clock()
        self.log.add(("M", now), now)
        self._loop_step_end(now)
        self._step_end(now)
        if not self.threads_read:
            self.read_threads("first step")
        self._maybe_stop(self.marks)

    def _loop_step_end(self, now: float, wants: bool = True) -> None:
        """A step end (or a backward pass) on the loop's thread: its batch's loader trained; from ``now`` the
        loop wants its next batch (``wants``), watched unless a DataLoader on its thread feeds it."""
        self.loop_thread = get_ident()
        if self.last_batch_loader is not None:
            self.trained.add(self.last_batch_loader)
            if not self.loader_fed and self.last_batch_loader != self.loop_number:
                self.loader_fed = True  # a DataLoader on the loop's thread feeds it: module calls are not watched
                if self._module_calls is not None:
                    self.patches.retire(self._module_calls)
                    self._module_calls = None
        if wants and not self.loader_fed:
            self.feed.want(now)

    def _end_stretch(self, new_loader: bool) -> None:
        """A stretch of training ends: backward passes that waited in vain for an optimizer step were its
        steps (the next stretch expects none); a new loader's stretch expects none either."""
        if self.pending_backwards and not self.stretch_optimized and not self.marks:
            self.steps_ended += self.pending_backwards
            self.expect_optimizer = False
            self._maybe_stop(self.steps_ended)
        if new_loader:
            self.expect_optimizer = False
        self.stretch_optimized, self.pending_backwards = False, 0

    def _maybe_stop(self, steps: int) -> None:
        if self.stopping and self.segments is not None and self.segments.begun:
            return  # the what-if segments' steps are not the run's (stopping first: every step reads it)
        if steps <= self.steps_told:  # counted already (a batch counted as a step before its backward pass)
            return
        self.steps_told = steps
        if self.segments is not None:
            self.step_ends_s.append(self.clock())
        for listener in self.step_listeners:
            listener(steps)
        # Stop at the next next(): the step's own bookkeeping after optimizer.step() still runs.
        if self.stop_after_steps is not None and steps >= self.stop_after_steps:
            self.stopping = True

    def install(self) -> None:
        """Patch this process. All or nothing: if a step fails, what was done is undone and the error raised."""
        global _ACTIVE
        if _ACTIVE is not None:
            raise RuntimeError("pipeprof is already profiling this process")
        try:
            self.patches.on_undo(self._end_passes)  # last: after the persistent workers ended
            self.log.open()
            install_fetch(self.patches, self)
            self.patches.apply(DataLoader, "__init__", lambda original: _built_method(original, self))
            self.patches.apply(DataLoader, "__iter__", lambda original: _switched(original, self, self.on_iter))
            self.patches.apply(_dataloader._BaseDataLoaderIter, "__next__",
                               lambda original: _switched(original, self, self.on_next))
            for name in ("to", "cuda"):
                self.patches.apply(torch.Tensor, name, lambda original: _copy_method(original, self))
            # a worker's exception reaches the loop as its "Original Traceback" text, made in the worker
            self.patches.apply(torch._utils.ExceptionWrapper, "__init__", _without_own_frames)
            self._module_calls = self.patches.apply(torch.nn.Module, "__call__",
                                                    lambda original: _module_call(original, self))
            frameworks.install(self.patches, self, self.clock)  # accelerate's loaders, when the script imports it
            # Tensor.backward calls torch.autograd.backward: one patch sees both, each pass once.
            self.patches.apply(torch.autograd, "backward", lambda original: _backward_function(original, self))
            install_collectives(self.patches, self)
            handle = register_optimizer_step_post_hook(self.on_optimizer_step)
            self.patches.on_undo(handle.remove)
            atexit.register(self.log.flush, final=True)
            self.patches.on_undo(lambda: atexit.unregister(self.log.flush))
        except BaseException:
            self.patches.undo()
            raise
        self.live = True
        _ACTIVE = self

    def uninstall(self) -> None:
        """Take back every patch, last first (those someone patched over stay, their wrappers pass through);
        the loaders work as before: their own collate, no persistent workers left tagging batches."""
        global _ACTIVE
        self.end_segments("the script ended during the what-if segments")
        if self.live and not self.threads_ended:
            self.read_threads("end")
        if self.live:
            self.read_rank()
            row = self.memory.final(self.clock())
            if row is not None:
                self.log.add(("Y", *row), row[0])
            self._device_end()
        self.live = False
        try:
            self.log.flush(final=True)
        finally:
            try:
                self.patches.undo()
            finally:
                if _ACTIVE is self:
                    _ACTIVE = None
                if self.stopping:
                    end_process_group()


    def _device_end(self) -> None:
        """``D``: the training device, and the device events lost (refused in a CUDA-graph capture, or not
        resolvable), so that a step timed on the host for want of them is said, not silently so."""
        index = self.device.index
        if index is None:
            return
        self.log.settle_device()  # every event resolved now: the dropped ones are counted
        now = self.clock()
        self.log.add(("D", now, {"device": f"cuda:{index}", "refused_in_graph_capture":
                                 int(getattr(self.device, "refused", 0)), "unresolved": self.log.device.dropped}),
                     now)


_ACTIVE: Hooks | None = None


def end_process_group() -> None:
    """Destroy the default process group of a process pipeprof stopped (``--steps``), as the script would have
    at its end: one left to interpreter teardown can abort the rank (gloo's threads: SIGABRT, "terminate
    called without an active exception", pytorch#190489). Called at a ``next()``, where no collective of the
    rank is in flight; a failure to destroy is said, never raised over the exit."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - the stop goes on; the rank may still abort at teardown
        print(f"pipeprof: warning: could not end the stopped rank's process group: {type(e).__name__}: {e}",
              file=sys.stderr)


def _switched(original: Callable, hooks: Hooks, on: Callable[[Any, Callable], Any]) -> Callable:
    """A one-argument method (``__iter__``, ``__next__``) handed to ``on(obj, original)`` while ``hooks.live``;
    ``on`` is bound once, so the switch costs what the method lookup did before."""
    def method(obj: Any) -> Any:
        if hooks.live:
            return on(obj, original)
        return original(obj)
    return wraps(method, original)


def _built_method(original: Callable, hooks: Hooks) -> Callable:
    """``DataLoader.__init__``, noting where the loader is built (``loader_names.note_built``: once per loader)."""
    def __init__(self: DataLoader, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if hooks.live:
            note_built(self)
    return wraps(__init__, original)


def _copy_method(original: Callable, hooks: Hooks) -> Callable:
    feed = hooks.feed

    def method(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if not hooks.live:
            return original(self, *args, **kwargs)
        if feed.awaiting:
            return hooks.on_loop_copy(self, original, args, kwargs)
        if not hooks.batch_refs:
            return original(self, *args, **kwargs)
        return hooks.on_copy(self, original, args, kwargs)
    return wraps(method, original)


def _module_call(original: Callable, hooks: Hooks) -> Callable:
    """``nn.Module.__call__``: one flag read a call, except between a step's end and the next batch's first
    use in a loop no DataLoader on its thread feeds (``Hooks.on_module_call``)."""
    feed = hooks.feed

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if feed.awaiting and hooks.live:
            return hooks.on_module_call(self, original, args, kwargs)
        return original(self, *args, **kwargs)
    return wraps(__call__, original)


def _end_own_threads_at_exit() -> None:
    """A script stopped by ``--steps`` whose own threads would never end (a producer blocked on a full queue that
    no one reads now) would hang at exit waiting for them: once the interpreter starts to shut down, wait a
    moment for them, then end the process with the event log written. Threads that end by themselves, and
    daemon threads, are left as they are."""
    register = getattr(threading, "_register_atexit", None)  # runs before the interpreter joins its threads
    if register is None:
        return

    def end() -> None:
        deadline = time.monotonic() + OWN_THREADS_GRACE_S
        for t in threading.enumerate():
            if t is not threading.current_thread() and not t.daemon and t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))
        if any(t is not threading.current_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
            hooks = active()
            if hooks is not None:
                hooks.uninstall()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
    try:
        register(end)
    except RuntimeError:  # the interpreter is already shutting down
        pass


def _backward_function(original: Callable, hooks: Hooks) -> Callable:
    on_backward, on_collective, clock = hooks.on_backward, hooks.on_collective, hooks.clock
    initialized = _process_group_up()

    def backward(*args: Any, **kwargs: Any) -> Any:
        if not hooks.live:
            return original(*args, **kwargs)
        if not initialized():
            t0 = clock()
            out = original(*args, **kwargs)
            on_backward(t0)
            return out
        # In a process group, DDP's reducer waits for the gradient all-reduce at the end of backward, off the
        # CPU (gloo's wait): the backward's off-CPU time, less waiting for a core, is collective wait.
        q0, c0, t0 = run_queue_wait(), cpu_clock(), clock()
        out = original(*args, **kwargs)
        t1, c1, q1 = clock(), cpu_clock(), run_queue_wait()
        on_collective(t0, t1, blocked_s(t1 - t0, c1 - c0, q0, q1))
        on_backward(t0)
        return out
    return wraps(backward, original)


# torch.distributed's blocking calls: timed whole (waiting for the other ranks, and the transfer) when synchronous
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
               "all_to_all_single", "barrier", "broadcast", "broadcast_object_list", "gather", "gather_object",
               "monitored_barrier", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
               "scatter_object_list")


def _process_group_up() -> Callable[[], bool]:
    """A cheap check that a default process group exists (torch.distributed.is_initialized), or always False."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return lambda: False
    return dist.is_initialized


def rank_view() -> dict[str, Any] | None:
    """``{rank, world_size, backend}`` of the default process group, or None when there is none."""
    if not _process_group_up()():
        return None
    dist = torch.distributed
    try:
        return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": str(dist.get_backend())}
    except (RuntimeError, ValueError):  # a group being torn down
        return None


def install_collectives(patches: Patches, hooks: Hooks) -> None:
    """Time torch.distributed's blocking calls, in ``torch.distributed`` and ``distributed_c10d`` both (the
    package re-exports the module's functions: a script may call either name)."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return
    from torch.distributed import distributed_c10d
    for name in COLLECTIVES:
        original = getattr(distributed_c10d, name, None)
        if original is None:
            continue
        wrapper = _collective_function(original, hooks)

        def same(_original: Callable, w: Callable = wrapper) -> Callable:
            return w
        for owner in (distributed_c10d, dist):
            if getattr(owner, name, None) is original:
                patches.apply(owner, name, same)


def _collective_function(original: Callable, hooks: Hooks) -> Callable:
    on_collective, clock = hooks.on_collective, hooks.clock

    def collective(*args: Any, **kwargs: Any) -> Any:
        if not hooks.live or kwargs.get("async_op") or hooks._collective_depth:
            return original(*args, **kwargs)  # asynchronous: the wait is the caller's work.wait(), not timed
        hooks._collective_depth += 1
        t0 = clock()
        try:
            return original(*args, **kwargs)
        finally:
            t1 = clock()
            hooks._collective_depth -= 1
            on_collective(t0, t1, t1 - t0)
    return wraps(collective, original)


def _unwrap_worker_batches(iterator: Any) -> None:
    """The batches of ``iterator``'s running workers reach the caller without their record, for the rest of
    the pass (torch hands every worker batch to ``_process_data``; the instance's own comes first)."""
    process = type(iterator)._process_data
    ref = weakref.ref(iterator)  # no cycle: the iterator (and its workers) still ends when dropped

    def _process_data(data: Any, *args: Any) -> Any:
        return process(ref(), data.batch if type(data) is Tagged else data, *args)
    iterator._process_data = _process_data


def _end_persistent_workers(loader: DataLoader) -> None:
    """Persistent workers hold the timed collate and the timed fetch: end them (the next pass starts new ones)."""
    iterator = getattr(loader, "_iterator", None)  # a StatefulDataLoader keeps its pass here whatever its workers
    if iterator is not None and loader.persistent_workers and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
        loader._iterator = None


def active() -> Hooks | None:
    return _ACTIVE
