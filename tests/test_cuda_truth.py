"""The CUDA side of pipeprof held against the real API's behaviour, without a GPU: no CUDA initialisation in
the script's process before the script makes one, the training device (not torch's current one) timed and
read, device spans between neighbouring events, no host synchronisation during counted steps."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

import pipeprof
from pipeprof.script.event_file import read_events
from pipeprof.script.hooks import cuda_seen
from pipeprof.script.protocol import EVENTS_ENV

REPO = Path(pipeprof.__file__).resolve().parent.parent

FORKING_SCRIPT = textwrap.dedent("""
    import os, sys
    import torch
    # What a script that forks CUDA-using children checks first: the child may initialise CUDA state.
    pid = os.fork()
    if pid == 0:
        os._exit(3 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    print("child-bad-fork", os.waitstatus_to_exitcode(status) == 3)
""")


def test_a_child_forked_after_the_hooks_start_is_not_in_bad_fork(tmp_path):
    # The installed torch is a CUDA build: torch.cuda.is_available() runs cuInit even without a GPU, and
    # a child forked after it is "in bad fork" (it could not initialise CUDA). pipeprof's start must not.
    script = tmp_path / "forks.py"
    script.write_text(FORKING_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), EVENTS_ENV: str(tmp_path / "events.jsonl")}
    done = subprocess.run([sys.executable, "-m", "pipeprof.script.boot", str(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "child-bad-fork False" in done.stdout
    start = read_events(tmp_path / "events.jsonl").start
    assert start["cuda_available"] is False  # no GPU here, found without cuInit


class _Cuda:
    """torch.cuda as ``cuda_seen`` uses it; ``is_available`` would initialise CUDA and is counted."""

    def __init__(self, initialized: bool, nvml_count: int) -> None:
        self.initialized, self.nvml_count, self.inits = initialized, nvml_count, 0

    def is_initialized(self) -> bool:
        return self.initialized

    def is_available(self) -> bool:
        self.inits += 1
        return True

    def _device_count_nvml(self) -> int:
        return self.nvml_count


def test_cuda_is_seen_through_nvml_until_the_script_initialises_it():
    before = _Cuda(initialized=False, nvml_count=2)
    assert cuda_seen(before) is True and before.inits == 0
    assert cuda_seen(_Cuda(initialized=False, nvml_count=-1)) is False  # NVML unreadable: none seen
    after = _Cuda(initialized=True, nvml_count=-1)
    assert cuda_seen(after) is True and after.inits == 1  # initialised by the script: torch's own answer
    assert cuda_seen(torch.cuda) is False
