"""Loaders that frameworks wrap around the user's DataLoader and that fetch ahead of the training loop, and
DataLoader subclasses that iterate without DataLoader's ``__iter__`` (torchdata's ``StatefulDataLoader``).

accelerate's ``DataLoaderShard`` and ``DataLoaderDispatcher`` (what
``accelerator.prepare`` and the Hugging Face ``Trainer`` hand the loop) take
batch k+1 from the DataLoader that the hooks time before they yield batch k,
to know whether k is the last. Timed at the DataLoader, the first ``next()``
of every pass would hold two batches, the last none, and every wait would be
credited one batch early. So the framework's own ``__iter__`` is wrapped:
each ``next()`` the loop makes on it is timed, and the DataLoader's batch
record (its samples, the worker's record of how it was made, the prefetch
queue reading) is written for the batch that ``next()`` yielded, with that
``next()``'s times (``Hooks.on_outer_batch``). The DataLoader's own ``next()``
calls inside it are held in the pass's ``OuterPass``, not written.

timm's ``PrefetchLoader`` is such a loader too (one batch ahead, its copy and normalisation started before
the current batch is yielded), and so is any one-ahead wrapper named in ``LOOK_AHEAD``. Any other wrapper
given to ``prof.wrap()`` (a user's own CUDA prefetcher) is timed the same way (``time_wrapper``), how many
batches it holds ahead read from each pass's first ``next()``: the DataLoader batches taken, less the one
yielded. A DataLoader subclass
in ``OWN_ITER`` has its ``__iter__`` timed as DataLoader's (``Hooks.on_iter``); its iterators are torch's.

accelerate is never imported here (it is slow to import and may be absent):
a ``sys.meta_path`` finder patches ``accelerate.data_loader`` right after
the script imports it, or at once if it was imported before the session
began. Everything goes through the session's ``Patches`` registry, so
``uninstall()`` removes the finder and puts every ``__iter__`` back.

Standard library only.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Generator, Iterator
from types import ModuleType
from typing import Any, Protocol

from pipeprof import adapters
from pipeprof.script.patches import Patches, wraps
from pipeprof.script.post_import import PostImport

# module -> its classes, from the adapters' registry (pipeprof.adapters): wrappers whose __iter__ keeps a batch
# of the wrapped DataLoader in hand (the loop waits for them in its next()), DataLoader subclasses whose own
# __iter__ never calls DataLoader.__iter__ (patched as it is), optimizers that are no torch.optim.Optimizer
# (torch's step post-hook never sees them: their step() ends a training step as torch.optim's does)
LOOK_AHEAD: dict[str, tuple[str, ...]] = adapters.look_ahead()
OWN_ITER: dict[str, tuple[str, ...]] = adapters.own_iter()
OWN_STEP: dict[str, tuple[str, ...]] = adapters.own_step()
OWN_LOADERS = adapters.loader_modules()  # module -> patch(module, patches, hooks): loaders that are no DataLoader


class OuterPass:
    """One pass of a look-ahead loader: the DataLoader's batches taken but not yet yielded to the loop."""

    __slots__ = ("ahead", "ended", "iter_t1_s", "number", "pending", "ready", "t0_s")

    def __init__(self, ahead: int | None = 1) -> None:
        self.ahead = ahead  # batches the wrapper holds ahead (None: read at the pass's first next())
        self.number: int | None = None  # the wrapped DataLoader's number, once its iter() ran inside this pass
        self.t0_s = 0.0  # when the loop's current next() began
        self.iter_t1_s: float | None = None  # the end of the DataLoader's iter() inside the current next()
        self.pending: deque[tuple[int, Any]] = deque()  # (samples, record) of batches taken, oldest first
        self.ready: float | None = None  # fewest batches ready before a DataLoader next() in the current next()
        self.ended = False  # the DataLoader's pass ended (StopIteration): nothing more is taken ahead

    def taken(self, samples: int, record: Any, ready: float | None) -> None:
        """The DataLoader handed over a batch (inside the loop's ``next()``)."""
        self.pending.append((samples, record))
        if ready is not None and (self.ready is None or ready < self.ready):
            self.ready = ready

    def begin(self, t0_s: float) -> None:
        self.t0_s, self.ready = t0_s, None

    def wait_start(self, t0_s: float) -> float:
        """Where the loop's wait in this ``next()`` begins: after the DataLoader's ``iter()`` if that ran in it
        (its ``I`` event holds that part, from ``t0_s``)."""
        iter_t1, self.iter_t1_s = self.iter_t1_s, None
        return t0_s if iter_t1 is None else max(t0_s, iter_t1)

    def yielded(self) -> tuple[int, Any] | None:
        """The (samples, record) of the batch the loop's ``next()`` just got: the one before the batch held
        ahead (none is held once the DataLoader's pass ended); older ones were skipped, never yielded
        (``skip_batches``). None when no batch was taken for it."""
        if self.ahead is None and self.pending:  # the pass's first batch: all taken but the one yielded
            self.ahead = len(self.pending) - 1
        ahead = 0 if self.ended else self.ahead or 0
        if len(self.pending) <= ahead:
            return None
        while len(self.pending) > ahead + 1:
            self.pending.popleft()
        return self.pending.popleft()


class OuterHooks(Protocol):
    """What the wrapper needs of the session (``pipeprof.script.hooks.Hooks``)."""

    live: bool

    @property
    def stop_now(self) -> bool: ...  # --steps reached and no what-if segments to run: SystemExit at next()
    outer: OuterPass | None

    def on_outer_batch(self, state: OuterPass, t0_s: float, t1_s: float, batch: Any) -> None: ...

    def on_outer_end(self, state: OuterPass, t0_s: float, t1_s: float) -> None: ...

    def on_iter(self, loader: Any, original: Callable[[Any], Any]) -> Any: ...  # DataLoader.__iter__, timed

    def on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None: ...  # a training step ended


def timed_pass(inner: Iterator[Any], hooks: OuterHooks, clock: Callable[[], float],
               ahead: int | None = 1) -> Generator[Any, None, None]:
    """The framework's pass ``inner``, each ``next()`` on it timed and reported to ``hooks`` (``ahead``: the
    batches it holds ahead; None: read at its first ``next()``)."""
    state = OuterPass(ahead)
    try:
        while hooks.live:  # a pass that outlives its session goes on untimed
            if hooks.stop_now:
                raise SystemExit(0)
            previous, hooks.outer = hooks.outer, state
            t0 = clock()
            state.begin(t0)
            try:
                batch = next(inner)
            except StopIteration:
                hooks.on_outer_end(state, t0, clock())
                return
            finally:  # the enclosing pass (if any) is the one running again
                hooks.outer = previous
            hooks.on_outer_batch(state, t0, clock(), batch)
            yield batch
        yield from inner
    finally:
        close = getattr(inner, "close", None)
        if close is not None:
            close()


def _look_ahead_iter(original: Callable[[Any], Iterator[Any]], hooks: OuterHooks,
                     clock: Callable[[], float], ahead: int | None = 1) -> Callable[[Any], Iterator[Any]]:
    def __iter__(loader: Any) -> Iterator[Any]:
        if not hooks.live:
            return original(loader)
        return timed_pass(original(loader), hooks, clock, ahead)
    timed = wraps(__iter__, original)
    timed._pipeprof_outer = True  # type: ignore[attr-defined]
    return timed


def time_wrapper(wrapper: Any, patches: Patches, hooks: OuterHooks, clock: Callable[[], float]) -> None:
    """Time the loop's ``next()`` on ``wrapper`` (an object around a DataLoader, given to ``prof.wrap()``) as a
    look-ahead loader's, how far ahead read per pass: the ``__iter__`` of the class in its MRO that defines
    one, patched through ``patches`` (once; a class of ``LOOK_AHEAD`` is already)."""
    owner = next((c for c in type(wrapper).__mro__ if "__iter__" in vars(c)), None)
    if owner is None or owner is object or getattr(vars(owner)["__iter__"], "_pipeprof_outer", False):
        return
    patches.apply(owner, "__iter__", lambda original: _look_ahead_iter(original, hooks, clock, ahead=None))


def _own_iter(original: Callable[[Any], Iterator[Any]], hooks: OuterHooks) -> Callable[[Any], Iterator[Any]]:
    def __iter__(loader: Any) -> Iterator[Any]:
        if not hooks.live:
            return original(loader)
        return hooks.on_iter(loader, original)
    return wraps(__iter__, original)


def patch_module(module: ModuleType, patches: Patches, hooks: OuterHooks, clock: Callable[[], float]) -> None:
    """Wrap ``__iter__`` of the look-ahead loader classes that ``module`` defines, and of its DataLoader
    subclasses with an ``__iter__`` of their own (timed as DataLoader's is)."""
    for name in LOOK_AHEAD.get(module.__name__, ()):
        cls = getattr(module, name, None)
        if isinstance(cls, type) and "__iter__" in vars(cls):
            patches.apply(cls, "__iter__", lambda original: _look_ahead_iter(original, hooks, clock))
    for name in OWN_ITER.get(module.__name__, ()):
        cls = getattr(module, name, None)
        if isinstance(cls, type) and "__iter__" in vars(cls):
            patches.apply(cls, "__iter__", lambda original: _own_iter(original, hooks))
    for name in OWN_STEP.get(module.__name__, ()):
        cls = getattr(module, name, None)
        if isinstance(cls, type) and "step" in vars(cls):
            patches.apply(cls, "step", lambda original: _own_step(original, hooks))


def _own_step(original: Callable[..., Any], hooks: OuterHooks) -> Callable[..., Any]:
    def step(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(optimizer, *args, **kwargs)
        if hooks.live:
            hooks.on_optimizer_step(optimizer, args, kwargs)
        return out
    return wraps(step, original)


def install(patches: Patches, hooks: OuterHooks, clock: Callable[[], float]) -> None:
    """Patch the look-ahead loaders now where their module is imported, else right after it is."""
    def then(module: ModuleType) -> None:
        if module.__name__ in OWN_LOADERS:  # a library's own loader (no DataLoader): timed as a loader
            OWN_LOADERS[module.__name__](module, patches, hooks)
            return
        patch_module(module, patches, hooks, clock)

    modules = [*LOOK_AHEAD, *OWN_ITER, *OWN_STEP, *OWN_LOADERS]
    finder = PostImport(modules, then)
    sys.meta_path.insert(0, finder)
    patches.on_undo(lambda: sys.meta_path.remove(finder) if finder in sys.meta_path else None)
    for name in modules:
        module = sys.modules.get(name)
        if module is not None:
            then(module)
