"""``pipeprof tune -- python train.py``'s pipeline: search a script's loader and thread settings from outside.

Every trial is ``pipeprof profile --quiet --steps N --loader KEY=VALUE ...
--threads T -- CMD`` in a fresh process (``ProfileRunner``); its run folder's
summary.json gives the steady rate of the counted steps (``samples_per_s``),
and the first trial's gives the settings the script uses itself (``loaders``:
the training loader; ``attribution.cpu.torch_threads``) and its
recommendations, which seed the search. The search is
``pipeprof.analysis.tune.search`` over ``Space`` (no placements: the data
stays where the script keeps it).

Noise: a short trial's rate moves by a few percent from run to run, so the
best trials (``FINALISTS`` at most, each beating the script's own trial by
more than ``min_gain``) are run again for ``confirm_steps`` steps, and so is
the script's own setting, interleaved; a finalist is chosen only when its
confirming run beats the script's own confirming run by more than
``min_gain``. Otherwise the answer is the script's own setting: the tuner
never tells anyone to use settings slower than theirs.

tune.json: ``base`` and ``best`` (``settings``, ``change`` = the keys that
differ from the script's own, ``samples_per_s``; ``best`` also ``speedup``,
``confirmed`` and ``python``, the lines to write where the loader is built),
``trials`` (every run in order: search trials then confirming runs, each with
its run folder). Nothing here prints: progress goes to the ``Progress`` given.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.prediction_check import point_predictions, prediction_check
from pipeprof.analysis.thresholds import TUNE_MIN_GAIN
from pipeprof.analysis.tune import FINALISTS, SEEDS, Settings, Space, search
from pipeprof.errors import UsageError
from pipeprof.loader_rules import prefetch_factor
from pipeprof.measure.environment import usable_cores
from pipeprof.pipeline.progress import SILENT, Progress
from pipeprof.pipeline.script_run import launched_name, run_name, split_command
from pipeprof.pipeline.script_verify import script_flags
from pipeprof.pipeline.sweep import create_folder, keep_checks
from pipeprof.render.script_text import script_text
from pipeprof.run_folder import write_text
from pipeprof.run_meta import LoaderInfo

LOADER_KEYS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "batch_size")
ERROR_CHARS = 400  # of a failed trial's stderr kept in tune.json


@dataclass(frozen=True)
class TrialRun:
    """One profiled run of the script: its status, steady rate, summary.json and folder (or why it failed)."""

    status: str  # "complete" or "failed"
    samples_per_s: float | None
    summary: dict[str, Any] | None = None
    folder: Path | None = None
    error: str | None = None


# (change from the script's own settings, steps, folder for the run) -> the run
RunTrial = Callable[[Settings, int, Path], TrialRun]


@dataclass(frozen=True)
class ScriptBudget:
    """Steps per trial, steps of each confirming run, trial measurements at most."""

    steps: int
    confirm_steps: int
    max_evals: int


def override_args(change: Settings) -> list[str]:
    """``--loader KEY=VALUE`` / ``--threads N`` for ``pipeprof profile``: the change as overrides of the training
    loader (``script_verify.script_flags``, the one mapping of scenario keys to flags)."""
    overrides, why_not = script_flags(change, None)
    if overrides is None:
        raise ValueError(why_not)
    return overrides.flags()


class ProfileRunner:
    """Runs a trial as ``python -m pipeprof profile`` in a fresh process and reads its summary.json."""

    def __init__(self, command: list[str], *, warmup_steps: int, python: str = sys.executable) -> None:
        self.command, self.warmup_steps, self.python = command, warmup_steps, python

    def argv(self, change: Settings, steps: int, out: Path) -> list[str]:
        return [self.python, "-m", "pipeprof", "profile", "--quiet", "--no-what-ifs", "--steps", str(steps),
                "--warmup-steps", str(self.warmup_steps), "--out", str(out), *override_args(change),
                "--", *self.command]

    def __call__(self, change: Settings, steps: int, out: Path) -> TrialRun:
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "pipeprof.log", "w+", encoding="utf-8") as log:
            returncode = subprocess.run(self.argv(change, steps, out), stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, check=False).returncode
            log.seek(0)
            text = log.read()
        return read_trial(out, returncode, text)


def read_trial(out: Path, returncode: int, log_text: str) -> TrialRun:
    """The trial's run folder under ``out`` read back: complete only with a steady rate and exit status 0."""
    folders = sorted(p.parent for p in out.glob("*/summary.json"))
    if not folders:
        return TrialRun("failed", None, error=_last_lines(log_text) or f"exit status {returncode}, no run folder")
    folder = folders[-1]
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    rate = summary.get("samples_per_s")
    if returncode != 0 or summary.get("status") != "complete":
        error = summary.get("error") or _last_lines(log_text) or f"exit status {returncode}"
        return TrialRun("failed", None, summary, folder, str(error))
    if not isinstance(rate, (int, float)) or not rate > 0:
        return TrialRun("failed", None, summary, folder, "no training steps were measured")
    return TrialRun("complete", float(rate), summary, folder)


def _last_lines(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " / ".join(lines[-3:])[-ERROR_CHARS:]


def train_loader(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The training loader's description in summary.json ``loaders`` (the first with role train)."""
    loaders = [d for d in summary.get("loaders") or [] if isinstance(d, dict)]
    return next((d for d in loaders if d.get("role") == "train"), loaders[0] if loaders else None)


def base_settings(summary: dict[str, Any], space: Space) -> Settings:
    """The settings the script runs with (its training loader and torch threads), as the search's keys."""
    loader = train_loader(summary) or {}
    cpu = (summary.get("attribution") or {}).get("cpu") or {}
    started = (summary.get("script") or {}).get("started") or {}
    threads = cpu.get("torch_threads") or started.get("torch_threads") or space.cores
    s: Settings = {"loader.num_workers": int(loader.get("num_workers") or 0),
                   "train.threads": min(int(threads), space.cores),
                   "loader.prefetch_factor": loader.get("prefetch_factor"),
                   "loader.persistent_workers": bool(loader.get("persistent_workers"))}
    if space.cuda:
        s["loader.pin_memory"] = bool(loader.get("pin_memory"))
    if space.batch_sizes:
        s["loader.batch_size"] = loader.get("batch_size")
    return space.normalize(s)


def make_space(summary: dict[str, Any], batch_sizes: tuple[int, ...], cores: int) -> Space:
    """Workers up to twice the cores, threads up to the cores, pin_memory where CUDA is, batch sizes if asked."""
    loader = train_loader(summary) or {}
    started = (summary.get("script") or {}).get("started") or {}
    workers = int(loader.get("num_workers") or 0)
    return Space(cores=cores, max_workers=max(2 * cores, workers + 2), cuda=bool(started.get("cuda_available")),
                 batch_sizes=batch_sizes)


def seeds_from(summary: dict[str, Any], space: Space) -> list[Settings]:
    """The first trial's recommendations that change searched settings, best predicted first."""
    dims = set(space.dimensions())
    out = []
    for rec in summary.get("recommendations") or []:
        change = {k: v for k, v in (rec.get("change") or {}).items() if k in dims}
        if change:
            out.append(change)
    return out[:SEEDS]


def changed(settings: Settings, base: Settings) -> Settings:
    """The keys of ``settings`` that differ from ``base``: what to override, what to write in the script."""
    return {k: v for k, v in settings.items() if base.get(k) != v}


def written(change: Settings, start: Settings) -> Settings:
    """The change as the script's author writes it: a prefetch factor the script left unset and the change
    sets to PyTorch's default for its workers is no change to write."""
    workers = int(change.get("loader.num_workers", start.get("loader.num_workers")) or 0)
    if start.get("loader.prefetch_factor") is None and "loader.prefetch_factor" in change \
            and change["loader.prefetch_factor"] == prefetch_factor(workers, None):
        return {k: v for k, v in change.items() if k != "loader.prefetch_factor"}
    return change


class _Trials:
    """Runs and records the trials: a folder each under ``trials/``, in order."""

    def __init__(self, folder: Path, run_trial: RunTrial, progress: Progress, clock: Callable[[], float]) -> None:
        self.folder, self.run_trial, self.progress, self.clock = folder, run_trial, progress, clock
        self.records: list[dict[str, Any]] = []
        self.start: Settings | None = None  # the script's own settings, once the first trial read them
        self.loader: dict[str, Any] = {}  # its training loader, as that trial saw it

    def run(self, settings: Settings, change: Settings, steps: int, why: str, phase: str) -> TrialRun:
        index = len(self.records)
        out = self.folder / "trials" / f"{index:02d}"
        self.progress.line(f"  trial {index}: {label(change)} ({why}, {steps} steps) …", end="")
        started = self.clock()
        try:
            trial = self.run_trial(change, steps, out)
        except KeyboardInterrupt:  # listed with what it left (its folder), then the tune stops
            self.records.append({
                "index": index, "phase": phase, "why": why, "settings": dict(settings), "change": dict(change),
                "steps": steps, "status": "interrupted", "samples_per_s": None, "wall_s": self.clock() - started,
                "folder": str(out.relative_to(self.folder)) if out.exists() else None,
                "error": "the tune was interrupted while this trial ran", "predictions": []})
            raise
        wall_s = self.clock() - started
        self.records.append({
            "index": index, "phase": phase, "why": why, "settings": dict(settings), "change": dict(change),
            "steps": steps, "status": trial.status, "samples_per_s": trial.samples_per_s, "wall_s": wall_s,
            "folder": str(trial.folder.relative_to(self.folder)) if trial.folder else None, "error": trial.error,
            "predictions": point_predictions(trial.summary or {})})
        self.progress.line(f" {fmt.rate(trial.samples_per_s)}" if trial.samples_per_s else f" failed: {trial.error}")
        return trial


class FirstTrialFailed(Exception):
    """The script failed as written: nothing to tune from."""


def tune_script(command: list[str], *, out: Path, budget: ScriptBudget, run_trial: RunTrial,
                batch_sizes: tuple[int, ...] = (), cores: int | None = None, min_gain: float = TUNE_MIN_GAIN,
                progress: Progress = SILENT, clock: Callable[[], float] = time.monotonic,
                now: dt.datetime | None = None) -> tuple[dict[str, Any], Path]:
    """Search, confirm and write ``tune.json`` in a new tune folder under ``out``; the document and the folder.

    ``doc["status"]``: ``complete``, ``failed`` (the first trial failed: ``doc["error"]``) or ``interrupted``.
    """
    if budget.steps < 1 or budget.confirm_steps < 1 or budget.max_evals < 1:
        raise UsageError(f"tune: steps, confirming steps and --max-evals must be >= 1 (got {budget})")
    cores = cores or usable_cores()
    folder = create_folder(out, f"tune-{script_name(command)}")
    trials = _Trials(folder, run_trial, progress, clock)
    doc: dict[str, Any] = {
        "kind": "script-tune", "status": "complete", "command": list(command), "steps": budget.steps,
        "confirm_steps": budget.confirm_steps, "max_evals": budget.max_evals, "min_gain": min_gain,
        "created": (now or dt.datetime.now(dt.timezone.utc)).isoformat(timespec="seconds"),
        "base": None, "best": None, "trials": trials.records, "error": None, "notes": []}
    try:
        _search_and_confirm(doc, trials, budget, batch_sizes, cores, min_gain)
    except FirstTrialFailed as e:
        doc["status"], doc["error"] = "failed", str(e)
    except KeyboardInterrupt:
        doc["status"] = "interrupted"
        _best_so_far(doc, trials, min_gain)
    doc["prediction_check"] = trials_check(doc)
    keep_checks(doc, "tune")
    write_text(folder / "tune.json", json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    return doc, folder


def _best_so_far(doc: dict[str, Any], trials: _Trials, min_gain: float) -> None:
    """An interrupted tune's ``best``: the fastest search trial measured so far that beat the script's own settings
    by more than ``min_gain`` (else its own settings), not confirmed, said so in a note."""
    if doc["best"] is not None or doc["base"] is None or trials.start is None:
        return
    base_rate = float(doc["base"]["samples_per_s"] or 0.0)
    done = (f"Interrupted after {sum(t['phase'] == 'search' and t['status'] == 'complete' for t in trials.records)} "
            "measured trial(s)")
    beating = _beating(trials, base_rate, min_gain)
    if not beating:
        doc["best"] = _best(trials, None, base_rate, base_rate, confirmed=False)
        doc["notes"].append(f"{done}: none so far beat the script's own settings by more than "
                            f"{100 * min_gain:.0f}%.")
        return
    doc["best"] = _best(trials, beating[0], beating[0]["samples_per_s"], base_rate, confirmed=False)
    doc["notes"].append(f"{done}: the best is the fastest trial so far, not confirmed in a longer run beside the "
                        "script's own settings.")


def _beating(trials: _Trials, base_rate: float, min_gain: float) -> list[dict[str, Any]]:
    """The search trials measured whole that beat the script's own settings by more than ``min_gain``, fastest
    first."""
    return sorted((t for t in trials.records if t["phase"] == "search" and t["status"] == "complete"
                   and t["change"] and t["samples_per_s"] > base_rate * (1 + min_gain)),
                  key=lambda t: -t["samples_per_s"])


def _best(trials: _Trials, winner: dict[str, Any] | None, rate: float, base_rate: float | None, *,
          confirmed: bool) -> dict[str, Any]:
    """tune.json's ``best``: ``winner``'s settings (None: the script's own) at ``rate`` samples/s, its speed-up
    over ``base_rate`` and, for a change, the Python that makes it."""
    start = trials.start or {}
    change = winner["change"] if winner is not None else {}
    best: dict[str, Any] = {"settings": winner["settings"] if winner is not None else start, "change": change,
                            "samples_per_s": rate, "confirmed": confirmed}
    if winner is not None:
        best["trial"] = winner["index"]
    best["speedup"] = rate / base_rate if base_rate else None
    best["python"] = (script_text(written(change, start), LoaderInfo.parse(trials.loader) or LoaderInfo())
                      if change else "")
    return best


def trials_check(doc: dict[str, Any]) -> dict[str, Any]:
    """tune.json's ``prediction_check`` (``analysis.prediction_check``) over the search trials, each at its whole
    settings (the script's own, ``base.settings``, with the trial's change)."""
    start = dict((doc.get("base") or {}).get("settings") or {})
    points = [{**t, "label": f"trial {t['index']}", "change": {**start, **t["change"]}}
              for t in doc["trials"] if t.get("phase") == "search"]
    return prediction_check(points).to_json()


def _search_and_confirm(doc: dict[str, Any], trials: _Trials, budget: ScriptBudget, batch_sizes: tuple[int, ...],
                        cores: int, min_gain: float) -> None:
    first = trials.run({}, {}, budget.steps, "the script as written", "search")
    if first.status != "complete" or first.summary is None:
        raise FirstTrialFailed(f"the script failed as written: {first.error}")
    if train_loader(first.summary) is None:
        raise FirstTrialFailed("the script built no DataLoader that pipeprof saw: nothing to tune")
    space = make_space(first.summary, batch_sizes, cores)
    start = base_settings(first.summary, space)
    trials.records[0]["settings"] = dict(start)
    doc["space"] = {"dimensions": space.dimensions(), "cores": space.cores, "max_workers": space.max_workers,
                    "cuda": space.cuda, "batch_sizes": list(space.batch_sizes)}
    doc["base"] = {"settings": start, "change": {}, "samples_per_s": first.samples_per_s, "confirmed": False}
    loader = train_loader(first.summary) or {}
    trials.start, trials.loader = start, loader

    def evaluate(settings: Settings, why: str) -> tuple[float | None, str]:
        if settings == start:  # the search begins with the script as written: measured already
            return first.samples_per_s, "complete"
        trial = trials.run(settings, changed(settings, start), budget.steps, why, "search")
        return trial.samples_per_s, trial.status

    result = search(start, space, evaluate, lambda: seeds_from(first.summary or {}, space),
                    max_evals=budget.max_evals, min_gain=min_gain)
    base_rate = float(first.samples_per_s or 0.0)
    finalists = _beating(trials, base_rate, min_gain)[:FINALISTS]
    best = _best(trials, None, base_rate, base_rate, confirmed=False)
    if not finalists:
        doc["notes"].append(f"No trial beat the script's own settings by more than {100 * min_gain:.0f}%: "
                            "keep them.")
    else:
        confirmed = _confirm(trials, finalists, start, budget.confirm_steps)
        base_confirm = confirmed.pop(None, None)
        if base_confirm is not None:
            doc["base"].update(samples_per_s=base_confirm, confirmed=True)
            best = _best(trials, None, base_confirm, base_confirm, confirmed=False)
        held = [(rate, f) for f in finalists if (rate := confirmed.get(f["index"])) is not None
                and base_confirm is not None and rate > base_confirm * (1 + min_gain)]
        if held:
            rate, winner = max(held, key=lambda pair: pair[0])
            best = _best(trials, winner, rate, base_confirm, confirmed=True)
        else:
            doc["notes"].append(f"The best trials did not hold up in {budget.confirm_steps}-step runs beside the "
                                f"script's own settings (a gain of more than {100 * min_gain:.0f}% was needed): "
                                "keep them.")
    doc["best"] = best
    if result.best is not None:  # the search's fastest trial, before confirmation (may be noise)
        doc["searched_best"] = {"change": changed(result.best.settings, start),
                                "samples_per_s": result.best.samples_per_s}


def _confirm(trials: _Trials, finalists: list[dict[str, Any]], start: Settings,
             steps: int) -> dict[int | None, float | None]:
    """Each finalist and the script's own settings, run for ``steps`` steps, interleaved (the base after the
    first finalist): their rates by the finalist's trial index (None: the script's own)."""
    rates: dict[int | None, float | None] = {}
    order: list[dict[str, Any] | None] = [finalists[0], None, *finalists[1:]]
    for f in order:
        if f is None:
            rates[None] = trials.run(start, {}, steps, "confirm: the script as written", "confirm").samples_per_s
        else:
            rates[f["index"]] = trials.run(f["settings"], f["change"], steps, f"confirm: trial {f['index']}",
                                           "confirm").samples_per_s
    return rates


def script_name(command: list[str]) -> str:
    """The tune folder's name part: the script's (or module's, or launched script's) name."""
    try:
        _, _, target = split_command(command)
        return run_name(target)
    except UsageError:
        return launched_name(command[1:] if command and command[0] == "--" else command)


def label(change: Settings) -> str:
    """A change in a few words: ``num_workers=2 threads=1``, or ``as written``."""
    if not change:
        return "as written"
    return " ".join(f"{k.partition('.')[2] if k != 'train.threads' else 'threads'}={v!r}" for k, v in change.items())
