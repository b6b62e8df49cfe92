"""``pipeprof profile --verify -- python train.py``: re-run the script with the top recommendation applied.

The run folder is saved first (nothing measured waits on the re-run). The
first recommendation that changes a setting (``verify.first_change``) is
turned into ``pipeprof profile`` flags (``script_flags``): ``loader.KEY`` ->
``--loader NAME.KEY=VALUE`` on the training loader (by the name the run saw
it under, so an evaluation loader is never the one changed; ``--loader
KEY=VALUE`` when the run had no one name for it), ``train.threads`` ->
``--threads``. A change that is not a loader or thread setting
(``data.storage``: holding the data elsewhere is a code change) is "not
applicable", with the reason. The flags go on top of the first run's own
``--loader`` / ``--threads`` (the change wins on the same key).

The re-run is a fresh ``pipeprof profile`` process (``python -m pipeprof
profile --quiet``), bounded by the same ``--steps`` and with the same warm-up
and sampling rate, whose run folder lands in the first run's ``verify/``.
Its outcome is the same record as a scenario's (``verify.verify``), stored
as run.json's ``verification`` (``verify.store``): summary.json and the
report are derived again, and ``analysis.verification`` compares predicted
and measured samples/s. ``measured_loader`` holds the settings the re-run's
training loader really ran with.
"""

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof.pipeline.progress import SILENT, Progress
from pipeprof.pipeline.verify import VERIFY_FOLDER, VERIFY_REPEATS, checked_change
from pipeprof.script.overrides import ALLOWED, LoaderOverride, Overrides

THREADS_KEY = "train.threads"
LOADER_PREFIX = "loader."


@dataclass(frozen=True)
class Child:
    """What a re-run gave: its exit status, run folder (None if it wrote none) and summary.json."""

    exit_code: int
    folder: Path | None
    summary: dict[str, Any] | None
    stderr_tail: str


def script_flags(change: dict[str, Any], train_loader: str | None) -> tuple[Overrides | None, str | None]:
    """A recommendation's ``change`` as overrides of the loader named ``train_loader`` (None: the training
    loader as the hooks tell it), or ``(None, why not)`` when some key is not a loader or thread setting."""
    items: list[LoaderOverride] = []
    threads = None
    for key, value in change.items():
        if key == THREADS_KEY:
            threads = int(value)
        elif key.startswith(LOADER_PREFIX) and key[len(LOADER_PREFIX):] in ALLOWED:
            items.append(LoaderOverride(train_loader, key[len(LOADER_PREFIX):], value))
        else:
            return None, (f"the top recommendation changes {key}, which pipeprof cannot set on a script from "
                          "outside (only DataLoader arguments and torch threads): it is a change to the code")
    return Overrides(tuple(items), threads), None


def combined(base: Overrides, change: Overrides) -> Overrides:
    """``base`` (the first run's own flags) with ``change`` on top: the change wins on the same loader and key."""
    keys = {o.key for o in change.loader}  # the change is the training loader's: base's same key gives way
    kept = tuple(o for o in base.loader if o.key not in keys)
    return Overrides(kept + change.loader, change.threads if change.threads is not None else base.threads)


def flags_text(overrides: Overrides) -> str:
    return " ".join(shlex.quote(w) for w in overrides.flags())


def training_loader_name(summary: dict[str, Any]) -> str | None:
    """The name the run's training loader had, when it had exactly one."""
    names = {str(lo.get("name")) for lo in summary.get("loaders") or []
             if isinstance(lo, dict) and lo.get("role") == "train" and lo.get("name")}
    return names.pop() if len(names) == 1 else None


def child_command(command: list[str], out: Path, name: str, overrides: Overrides, *, steps: int | None,
                  warmup_steps: int, sample_hz: float) -> list[str]:
    """The re-run as a ``pipeprof profile`` command line."""
    words = command[1:] if command and command[0] == "--" else list(command)
    argv = [sys.executable, "-m", "pipeprof", "profile", "--quiet", "--no-what-ifs", "--out", str(out), "--name", name,
            "--warmup-steps", str(warmup_steps), "--sample-hz", str(sample_hz)]
    if steps:
        argv += ["--steps", str(steps)]
    return [*argv, *overrides.flags(), "--", *words]


def report_lines(stdout: str, stderr: str) -> list[str]:
    """The report paths a ``pipeprof profile`` command named: ``report: PATH`` on its stdout, or (``--quiet``,
    which leaves the script's stdout to the script) ``pipeprof: report: PATH`` on its stderr."""
    said = [line[len("report: "):] for line in stdout.splitlines() if line.startswith("report: ")]
    return said + [line[len("pipeprof: report: "):] for line in stderr.splitlines()
                   if line.startswith("pipeprof: report: ")]


def run_child(argv: list[str], timeout_s: float | None = None) -> Child:
    """Run a ``pipeprof profile`` command; its run folder from its ``report: PATH`` line."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        return Child(124, None, None, f"the re-run took longer than {e.timeout:.0f} s")
    reports = report_lines(proc.stdout, proc.stderr)
    folder = Path(reports[-1]).parent if reports else None
    summary = None
    if folder is not None and (folder / "summary.json").is_file():
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    tail = " ".join(proc.stderr.strip().splitlines()[-1:])
    return Child(proc.returncode, folder, summary, tail)


def verify_script(command: list[str], summary: dict[str, Any], folder: Path, *, base: Overrides | None = None,
                  steps: int | None = None, warmup_steps: int = 5, sample_hz: float = 10.0,
                  progress: Progress = SILENT, runner: Callable[[list[str]], Child] = run_child,
                  repeats: int = VERIFY_REPEATS) -> dict[str, Any]:
    """Re-run the profiled ``command`` with the top applicable recommendation of ``summary`` (the run saved in
    ``folder``), alternately with the script as run (A B A B ..., ``repeats`` each, fresh processes, as
    ``verify.verify``); the raw ``verification`` record. ``runner`` runs a command line (a test's fake)."""
    rec, record = checked_change(summary)
    if rec is None:
        return record
    change, why_not = script_flags(rec["change"], training_loader_name(summary))
    if change is None:
        return {**record, "set": None, "status": "not applicable", "reason": why_not}
    overrides = combined(base or Overrides(), change)
    record["set"] = flags_text(change)
    record["flags"] = overrides.flags()
    out = folder / VERIFY_FOLDER
    out.mkdir(exist_ok=True)
    name = f"{(summary.get('scenario') or 'script')}-verify"
    argv = child_command(command, out, name, overrides, steps=steps, warmup_steps=warmup_steps,
                         sample_hz=sample_hz)
    as_run = child_command(command, out / "base", f"{(summary.get('scenario') or 'script')}-as-run", base or Overrides(),
                           steps=steps, warmup_steps=warmup_steps, sample_hz=sample_hz)
    rates, base_rates = [], []
    for i in range(max(repeats, 1)):
        with progress.waiting(f"verify: the script as run ({i + 1} of {repeats})"):
            rate = (runner(as_run).summary or {}).get("samples_per_s")
        if isinstance(rate, (int, float)):
            base_rates.append(float(rate))
        with progress.waiting(f"verify: re-running with {record['set']} ({i + 1} of {repeats})"):
            child = runner(argv)
        rate = (child.summary or {}).get("samples_per_s")
        if child.exit_code != 0 or not isinstance(rate, (int, float)):
            break
        rates.append(float(rate))
    s = child.summary or {}
    ran = "complete" if s.get("status") == "complete" and child.exit_code == 0 else (s.get("status") or "failed")
    record.update(
        status=ran,
        reason=s.get("error") or (None if ran == "complete" else child.stderr_tail or
                                  f"the re-run exited with status {child.exit_code}"),
        exit_code=child.exit_code,
        folder=str(child.folder.relative_to(folder)) if child.folder and child.folder.is_relative_to(folder)
        else (str(child.folder) if child.folder else None),
        measured_samples_per_s=statistics.median(rates) if rates else s.get("samples_per_s"),
        measured_verdict=(s.get("verdict") or {}).get("class"),
        measured_runs_samples_per_s=rates,
        base_samples_per_s=statistics.median(base_rates) if base_rates else None,
        base_runs_samples_per_s=base_rates,
        measured_loader=next(({k: lo.get(k) for k in ("name", *ALLOWED) if k in lo}
                              for lo in s.get("loaders") or [] if lo.get("role") == "train"), None),
        measured_threads=((s.get("script") or {}).get("torch_threads") or {}).get("first step"),
    )
    return record
