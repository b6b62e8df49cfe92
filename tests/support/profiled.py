"""Real ``pipeprof profile`` runs of the fixture scripts, made once per session and shared.

A real run of a fixture script costs seconds (two interpreters import torch, the script trains): the
tests that only read what a run wrote share one run per command line, through the session-scoped
``profiled_runs`` fixture (tests/conftest.py). ``profile()`` makes a fresh run of a test's own, for the
tests whose run is theirs alone (it fails, it is interrupted, it writes into the folder).

A shared run folder is read-only to the tests: a test that changes one works on ``Profiled.copy_to()``.
At the end of the session every shared folder is checked unchanged (``ProfiledRuns.changed()``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof.pipeline.script_verify import report_lines
from support.shared import made_once

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# The transformers / accelerate / Lightning fixtures never reach the network.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

PROFILE_TIMEOUT_S = 240

# Command lines more than one test file reads the run of (each made once a session, in ``profiled_runs``).
# A 2-rank torchrun job on gloo whose rank 1 sleeps 1 ms a sample: the input straggler, rank 0 waits for it.
STRAGGLER_JOB = ("torchrun", "--standalone", "--nproc_per_node", "2", str(FIXTURES / "ddp_gloo.py"),
                 "--slow-rank", "1", "--sleep-ms", "1", "--samples", "640", "--batch-size", "16")


@dataclass(frozen=True)
class Profiled:
    """One finished ``pipeprof profile`` run: the process, its run folder (None when it wrote none), and the
    folder's summary.json and run.json as parsed JSON (None when absent).

    Unpacks as ``proc, folder, summary, meta``, the shape the test files' helpers always returned.
    """

    proc: subprocess.CompletedProcess[str]
    folder: Path | None
    summary: dict[str, Any] | None
    meta: dict[str, Any] | None

    def __iter__(self) -> Iterator[Any]:
        return iter((self.proc, self.folder, self.summary, self.meta))

    def copy_to(self, where: Path) -> Path:
        """A copy of the run folder under ``where``, for a test that writes into it."""
        assert self.folder is not None, self.proc.stderr[-3000:]
        return Path(shutil.copytree(self.folder, where / self.folder.name, symlinks=True))


def report_folder(stdout: str, stderr: str = "") -> Path | None:
    """The run folder the last ``report: .../report.html`` line names (``--quiet``: ``pipeprof: report: ...`` on
    stderr), None when there is none."""
    lines = report_lines(stdout, stderr)
    return Path(lines[-1]).parent if lines else None


def _read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def profile(out: Path, *command: str, options: Sequence[str] = (), cwd: Path | None = None,
            env: Mapping[str, str] | None = None, timeout: float = PROFILE_TIMEOUT_S) -> Profiled:
    """Run ``pipeprof profile --out OUT --quiet OPTIONS -- COMMAND`` to its end; ``env`` adds to os.environ."""
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--out", str(out), "--quiet", *options,
                           "--", *command], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **env} if env else None)
    folder = report_folder(proc.stdout, proc.stderr)
    if folder is not None and not folder.is_absolute():
        folder = (cwd or Path.cwd()) / folder
    if folder is None:
        return Profiled(proc, None, None, None)
    return Profiled(proc, folder, _read_json(folder / "summary.json"), _read_json(folder / "run.json"))


def _digest(folder: Path) -> str:
    """What the folder holds: every file's path and bytes, every link's target."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        h.update(str(path.relative_to(folder)).encode())
        if path.is_symlink():
            h.update(os.readlink(path).encode())
        elif path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


class ProfiledRuns:
    """The session's runs, one per command line (options, command, cwd and the added environment), made once
    for all the session's test workers (``support.shared.made_once``)."""

    def __init__(self, where: Any) -> None:
        self.where = where  # the session's tmp_path_factory, or a folder (``support.shared.made_once``)
        self._runs: dict[tuple[Any, ...], Profiled] = {}
        self._digests: dict[Path, str] = {}

    def __call__(self, *command: str, options: Sequence[str] = (), cwd: Path | None = None,
                 env: Mapping[str, str] | None = None, timeout: float = PROFILE_TIMEOUT_S) -> Profiled:
        """The run of ``pipeprof profile OPTIONS -- COMMAND``: made on first use, then the same one."""
        key = (tuple(options), tuple(command), str(cwd), tuple(sorted((env or {}).items())))
        if key not in self._runs:
            def build(out: Path) -> dict[str, Any]:
                run = profile(out, *command, options=options, cwd=cwd, env=env, timeout=timeout)
                return {"args": run.proc.args, "returncode": run.proc.returncode, "stdout": run.proc.stdout,
                        "stderr": run.proc.stderr, "folder": None if run.folder is None else str(run.folder)}

            made = made_once(self.where, f"profiled {json.dumps(key)}", build)
            proc = subprocess.CompletedProcess(made["args"], made["returncode"], made["stdout"], made["stderr"])
            folder = None if made["folder"] is None else Path(made["folder"])
            if folder is None:
                run = Profiled(proc, None, None, None)
            else:
                run = Profiled(proc, folder, _read_json(folder / "summary.json"), _read_json(folder / "run.json"))
                self._digests[folder] = _digest(folder)
            self._runs[key] = run
        return self._runs[key]

    def changed(self) -> list[Path]:
        """The shared run folders a test wrote into (it should have used ``Profiled.copy_to``)."""
        return [folder for folder, digest in self._digests.items() if _digest(folder) != digest]
