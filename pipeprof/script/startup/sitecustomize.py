"""Run by every Python process that ``pipeprof profile`` starts, directly or through a launcher.

``pipeprof profile`` puts this folder in front of ``PYTHONPATH``, so the
interpreter's ``site`` imports this module at start-up in the profiled
command and in every Python process it starts with that environment:
torchrun's ranks, ``torch.multiprocessing.spawn``'s, ``multiprocessing``
spawn children, subprocesses. It arms the hooks (``pipeprof.script.rank_boot``),
which install themselves once the process imports torch, and then runs the
``sitecustomize`` that this one hides, if the environment had one, so the
user's own start-up code still runs. Standard library only; never raises.
"""

from __future__ import annotations


def _start() -> None:
    import os
    import sys
    if os.environ.get("PIPEPROF_EVENTS_DIR"):
        try:
            from pipeprof.script import rank_boot
            rank_boot.arm()
        except Exception as e:  # noqa: BLE001 - the user's process runs on, unprofiled, with the reason said
            print(f"pipeprof: warning: could not arm the hooks in pid {os.getpid()}: {type(e).__name__}: {e}",
                  file=sys.stderr)
    _run_hidden_sitecustomize()


def _run_hidden_sitecustomize() -> None:
    """The next ``sitecustomize`` on ``sys.path`` after this folder, executed as ``site`` would have."""
    import importlib.machinery
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - site itself only warns about a failing sitecustomize
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}", file=sys.stderr)


_start()
