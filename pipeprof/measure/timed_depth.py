"""How many timed calls run now in this process: a transform, a decode call (one inside another is not timed).

Its own module, free of torch, so that what reads a run folder (``attach.classify`` names the decode calls)
never imports torch: ``measure.transforms`` and ``script.decode_hooks`` share the one counter.
"""

from __future__ import annotations


class _Depth:
    """Timed calls running now in this process (a transform, a decode call): one inside another is not timed."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


DEPTH = _Depth()
