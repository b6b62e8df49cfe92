"""Every change pipeprof makes to someone else's objects, recorded so that it can be undone exactly.

The hooks of a profiled script or block replace attributes of torch's classes
(``DataLoader.__iter__``, ``Tensor.to``, the fetchers' ``fetch``...) and of
the user's loaders (``collate_fn``), and register callbacks (an optimizer
hook, an ``atexit`` flush). Each goes through one ``Patches`` registry, and
``undo()`` takes them back in reverse order. An attribute is restored only
where it still holds pipeprof's wrapper: if the user or a library patched
over it meanwhile, their patch stays, and pipeprof's wrapper (which their
patch may call) is left to pass through to the original, because each
wrapper consults its session, which has ended (``Hooks.live``).

Standard library only: a spawned DataLoader worker imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MISSING: Any = object()  # "not in the owner's own __dict__": the attribute was inherited (or absent)


def wraps(wrapper: Callable, original: Callable) -> Callable:
    """``wrapper`` named and documented as ``original``, which it keeps as ``__wrapped__`` (``inspect`` and a
    later patch see through it)."""
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    wrapper.__name__ = original.__name__
    wrapper.__qualname__ = getattr(original, "__qualname__", original.__name__)
    wrapper.__doc__ = original.__doc__
    return wrapper


def own_value(owner: Any, name: str) -> Any:
    """What ``owner`` holds under ``name`` itself (a class's own ``__dict__`` entry), or ``MISSING``.

    A class's own entry, not ``getattr``: ``Tensor.to`` is inherited from
    ``torch._C.TensorBase``, so putting it back means deleting pipeprof's
    entry, not writing the inherited value onto ``Tensor``.
    """
    attrs = getattr(owner, "__dict__", None)
    if attrs is None:  # an object with __slots__: what it holds is what getattr finds
        return getattr(owner, name, MISSING)
    return attrs.get(name, MISSING)


@dataclass(frozen=True)
class Patch:
    """``owner.name`` replaced by ``wrapper``; ``before`` is what the owner held itself (or ``MISSING``)."""

    owner: Any
    name: str
    original: Any  # what getattr(owner, name) gave: the wrapper calls this
    wrapper: Any
    before: Any

    def is_ours(self) -> bool:
        """Whether the attribute still holds pipeprof's wrapper (nobody patched over it)."""
        return own_value(self.owner, self.name) is self.wrapper

    def restore(self) -> None:
        if self.before is MISSING:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.before)


class Patches:
    """The patches and callbacks of one profiling session, undone last-first by ``undo()``."""

    def __init__(self) -> None:
        self._undo: list[Patch | Callable[[], object]] = []
        self.stranded: list[Patch] = []  # patches someone else patched over: left in place by undo()

    def apply(self, owner: Any, name: str, make: Callable[[Any], Any]) -> Patch:
        """Set ``owner.name`` to ``make(original)`` and record it; returns the record."""
        before = own_value(owner, name)
        original = getattr(owner, name)
        wrapper = make(original)
        setattr(owner, name, wrapper)
        patch = Patch(owner, name, original, wrapper, before)
        self._undo.append(patch)
        return patch

    def retire(self, patch: Patch) -> None:
        """Take one patch back now, before the others (a wrapper the session no longer needs): restored if it is
        still ours, left if someone patched over it (its wrapper passes through once the session ends)."""
        if patch in self._undo:
            self._undo.remove(patch)
            if patch.is_ours():
                patch.restore()
            else:
                self.stranded.append(patch)

    def on_undo(self, undo: Callable[[], object]) -> None:
        """Run ``undo()`` at its turn in ``undo()`` (a hook's handle ``remove``, an ``atexit.unregister``)."""
        self._undo.append(undo)

    def applied(self) -> list[Patch]:
        """The attribute patches still recorded, in the order they were made."""
        return [entry for entry in self._undo if isinstance(entry, Patch)]

    def undo(self) -> None:
        """Take back everything, last first. An error in one step does not stop the others; the first is raised
        once all have run."""
        first: BaseException | None = None
        while self._undo:
            entry = self._undo.pop()
            try:
                if not isinstance(entry, Patch):
                    entry()
                elif entry.is_ours():
                    entry.restore()
                else:
                    self.stranded.append(entry)
            except Exception as e:  # noqa: BLE001 - raised below, after the other steps had their turn
                if first is None:
                    first = e
        if first is not None:
            raise first
