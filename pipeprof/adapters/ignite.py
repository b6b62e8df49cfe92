"""pytorch-ignite: an ``Engine`` runs the loop over a DataLoader and catches every exception its run raises (its
``EXCEPTION_RAISED`` handlers, a save-on-crash checkpoint among them, run then). A run ``--steps`` ends is
ended as ignite's own ``engine.terminate()`` ends one: the engine's loop sees its data end, fires
``TERMINATE`` and returns, and the script goes on as after a terminated run."""

from __future__ import annotations

from types import FrameType

from pipeprof.adapters.base import Adapter


def terminate(frame: FrameType | None) -> bool:
    """Ask the ignite ``Engine`` whose run is on the stack from ``frame`` out to terminate; whether one was."""
    while frame is not None:
        engine = frame.f_locals.get("self")
        stop = getattr(engine, "terminate", None)
        if type(engine).__module__.startswith("ignite.engine") and callable(stop):
            stop()
            return True
        frame = frame.f_back
    return False


ADAPTER = Adapter(
    name="pytorch-ignite",
    packages=("ignite",),
    stop_loop=terminate,
    sees=("its Engine's DataLoaders as DataLoaders (trainer and evaluators), one step per iteration; --steps ends "
          "the run as engine.terminate() does, never through its EXCEPTION_RAISED handlers"),
)
