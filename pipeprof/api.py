"""The Python API: profile a training loop in your own code or a notebook, with the same run folder and report.

    import pipeprof

    with pipeprof.profile(name="mlp") as prof:
        for epoch in range(3):
            for x, y in prof.wrap(train_loader):   # optional: names the training loader
                ...
                optimizer.step()                   # a step ends here (or call prof.step())
    print(prof.summary["verdict"]["sentence"], prof.folder)

Inside the block every torch DataLoader's iteration is timed, batch copies
to the device are timed, and the process (with its DataLoader workers) is
sampled, exactly as ``pipeprof profile`` does for a script. When the block
ends — normally, by an exception, or by Ctrl-C — the run is saved under
``out`` (default ``reports/``), with summary.json and report.html; the
exception goes on as it would without pipeprof.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from pipeprof.errors import UsageError
from pipeprof.run_folder import Run

__all__ = ["Profile", "profile"]


class Profile:
    """One profiled block: ``wrap(loader)`` and ``step()`` inside it; ``run``, ``summary``, ``folder`` after it."""

    def __init__(self, name: str = "profile", *, out: str | Path = "reports", warmup_steps: int = 5,
                 sample_hz: float = 10.0, quiet: bool = False, clock: Callable[[], float] | None = None,
                 device: Any = None, light_s: float | None = None) -> None:
        """``clock`` and ``device`` replace the host clock (``time.perf_counter``) and the CUDA device, for
        simulation: ``pipeprof.gpu_check.sim_device`` runs loops on a simulated GPU with them. ``light_s``: the
        always-on mode (as ``pipeprof profile --light``): only an aggregate per window of ``light_s`` seconds
        is kept, cut by a thread of this process (``pipeline.light_profile``)."""
        if light_s is not None and not float(light_s) >= 1:
            raise ValueError(f"light_s must be a window in seconds >= 1, got {light_s!r}")
        self.light_s = light_s
        self._light: Any = None
        if not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"warmup_steps must be a whole number >= 0, got {warmup_steps!r}")
        if not 0 < float(sample_hz) <= 1000:
            raise ValueError(f"sample_hz must be > 0 and <= 1000, got {sample_hz!r}")
        self.name, self.out, self.quiet = name, Path(out), quiet
        self.warmup_steps, self.sample_hz = warmup_steps, float(sample_hz)
        self.run: Run | None = None
        self.summary: dict[str, Any] | None = None
        self.folder: Path | None = None
        self._hooks: Any = None
        self._clock, self._device = clock, device

    def __enter__(self) -> Profile:
        from pipeprof.run_folder import ensure_out_folder
        from pipeprof.script.hooks import EventLog, Hooks, started_facts
        from pipeprof.script.hooks import clock as host_clock
        from pipeprof.script.session import Session

        try:
            ensure_out_folder(self.out)
        except UsageError as e:  # worded for the command line's --out: said here as this call's argument
            why = str(e).removeprefix(f"--out {self.out}: ")
            raise ValueError(f"pipeprof.profile(out={str(self.out)!r}): {why}") from None
        self._tmp = tempfile.TemporaryDirectory(prefix="pipeprof-")
        try:  # a start that fails leaves nothing behind: no patch, no sampler, no temporary folder
            events = Path(self._tmp.name) / "events.jsonl"
            clock = self._clock or host_clock
            hooks = Hooks(EventLog(str(events), clock=clock), clock=clock, device=self._device)
            hooks.log.add(("S", clock(), {**started_facts(), "argv": list(sys.argv)}), clock())
            self._session = Session(self.name, events, warmup_steps=self.warmup_steps, sample_hz=self.sample_hz,
                                    clock=clock)
            hooks.install()  # all or nothing
            try:
                self._session.start(os.getpid())
            except BaseException:
                hooks.uninstall()
                raise
            if self.light_s is not None:
                from pipeprof.pipeline.light_profile import LightProfile, LightThread
                self._light = LightThread(LightProfile(self._session, Path(self._tmp.name) / "light", self.light_s))
        except BaseException:
            self._tmp.cleanup()
            raise
        self._hooks = hooks
        return self

    def wrap(self, loader: Any) -> Any:
        """Declare ``loader`` the training loader (other loaders count as evaluation); returns it unchanged. A
        library's wrapper of a DataLoader (timm's ``PrefetchLoader``, WebDataset's ``WebLoader``, accelerate's
        loaders) declares the DataLoader it wraps, and a ``torchdata.nodes`` Loader itself; an object that holds
        none is returned and declares nothing (its batches are the script's own, whatever their type). A
        wrapper's own ``next()`` is then timed, as a look-ahead loader's (``frameworks.time_wrapper``)."""
        from pipeprof.adapters import own_loader
        from pipeprof.script.frameworks import time_wrapper
        from pipeprof.script.loader_names import inner_dataloader

        hooks = self._active()
        inner = loader if own_loader(loader) is not None else inner_dataloader(loader)  # a torchdata.nodes Loader is one
        if inner is not None:
            hooks.declare_training(inner)
        if inner is not None and inner is not loader:  # a wrapper: the loop's next() on it is what it waits in
            time_wrapper(loader, hooks.patches, hooks, hooks.clock)
        return loader

    def step(self) -> None:
        """Mark the end of a training step (use when steps are not one ``optimizer.step()`` each)."""
        self._active().mark_step()

    def _active(self) -> Any:
        if self._hooks is None or self.run is not None:
            raise RuntimeError("pipeprof: wrap() and step() work inside `with pipeprof.profile() as prof:`")
        return self._hooks

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        from pipeprof.errors import interrupt_reason, one_line
        from pipeprof.pipeline.derive import derived_files
        from pipeprof.render.index import rebuild_index
        from pipeprof.run_folder import new_run_folder, save_run

        try:
            self._hooks.uninstall()  # its last flush: every event is in the file
        finally:
            if self._light is not None:
                self._light.stop()  # the last window
            self._session.stop_sampling()
        if exc is None:
            status, error = "complete", None
        elif isinstance(exc, KeyboardInterrupt):
            status, error = "interrupted", interrupt_reason(exc)
        else:
            status, error = "failed", one_line(exc)
        where = _caller()
        script = {"command_line": f"pipeprof.profile() in {where}", "api": True, "cwd": os.getcwd(),
                  "python": sys.executable, "argv": list(sys.argv)}
        try:
            self.run = self._session.finish(status, error, script)
            if self._light is not None:
                from pipeprof.pipeline.light_profile import keep_windows_only
                keep_windows_only(self.run, self._light.profile)
        finally:
            self._tmp.cleanup()
        self.folder = new_run_folder(self.out, self.name)
        self.summary, files = derived_files(self.run, self.folder.name)
        save_run(self.run, self.folder, files)
        try:
            rebuild_index(self.out)
        except Exception as e:  # noqa: BLE001 - the index is a convenience, never a failure of the block
            print(f"pipeprof: warning: could not rebuild {self.out / 'index.html'}: {e}", file=sys.stderr)
        if not self.quiet:
            verdict = (self.summary.get("verdict") or {}).get("sentence") or self.summary.get("bottleneck_reason")
            print(f"pipeprof: {verdict}\nreport: {self.folder / 'report.html'}", file=sys.stderr)
        return False  # an exception inside the block goes on


def profile(name: str = "profile", **options: Any) -> Profile:
    """``with pipeprof.profile(name=...) as prof:`` — see the module docstring; options: ``out``,
    ``warmup_steps`` (5), ``sample_hz`` (10), ``quiet``, ``light_s`` (None: every step kept)."""
    return Profile(name, **options)


def _caller() -> str:
    """The file and line of the ``with`` statement (a notebook cell names itself like ``<ipython-input-3>``)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("pipeprof", "contextlib")):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"
