"""pipeprof's own frames in a traceback the user reads: the hooks' wrappers (``pipeprof/script/``, the data
libraries' adapters) and runpy in front of the script are not the user's code, wherever they sit in it: the
script's uncaught exception (``boot``) and a DataLoader worker's "Original Traceback" (``hooks``) leave them out.
"""

from __future__ import annotations

import os
import runpy
from collections.abc import Callable
from types import TracebackType

ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], object]


def own_frames_trimmed(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the frames of pipeprof's hooks (boot.py and runpy in front of the script, the wrappers
    around ``next()`` and the dataset's fetch: ``pipeprof/script/``), wherever they are in it; all of it if
    nothing else is left. The frames kept are linked to each other in place."""
    first, kept = tb, []
    while tb is not None:
        if not _is_own_frame(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    if not kept:
        return first
    for here, after in zip(kept, [*kept[1:], None]):
        here.tb_next = after
    return kept[0]


# the hooks' packages: this one and the data libraries' adapters (a library's own loader's wrappers)
_OWN_PACKAGES = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), name) + os.sep
                      for name in ("script", "adapters"))


def _is_own_frame(filename: str) -> bool:
    return filename.startswith(_OWN_PACKAGES) or filename in (runpy.__file__, "<frozen runpy>")


def trimming(hook: ExceptHook) -> ExceptHook:
    """``hook`` (an excepthook) given the exception with pipeprof's frames left out of its traceback and of every
    exception chained to it ("During handling of the above exception...")."""
    def trimmed(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> object:
        tb = own_frames_trimmed(tb)
        seen, chained = {id(value)}, value.__cause__ or value.__context__
        while chained is not None and id(chained) not in seen:
            seen.add(id(chained))
            chained.with_traceback(own_frames_trimmed(chained.__traceback__))
            chained = chained.__cause__ or chained.__context__
        return hook(kind, value.with_traceback(tb), tb)  # the interpreter's hook prints value.__traceback__
    return trimmed
