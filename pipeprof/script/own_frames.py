"""pipeprof's own frames in a traceback the user reads: the hooks' wrappers (``pipeprof/script/``, the data
libraries' adapters) and runpy in front of the script are not the user's code, wherever they sit in it: the
script's uncaught exception (``boot``) and a DataLoader worker's "Original Traceback" (``hooks``) leave them out.
"""

from __future__ import annotations

import os
import runpy
from types import TracebackType


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
