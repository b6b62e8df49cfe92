"""run.json's environment: a profiled script's own torch, read without importing torch in pipeprof's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from pipeprof.measure import gpu as gpu_mod
from pipeprof.measure.environment import describe_environment
from pipeprof.script.session import Session


def test_a_scripts_environment_is_its_own_torch_read_without_importing_torch():
    started = {"torch": "2.99.0+fake", "cuda_available": True, "cuda_version": "12.9", "torch_threads": 3}
    code = ("import json, sys; from pipeprof.measure.environment import describe_environment; "
            f"e = describe_environment(3, {started!r}); "
            "print(json.dumps([e['torch'], e['cuda_available'], e['cuda_version'], e['torch_threads'], "
            "'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout) == ["2.99.0+fake", True, "12.9", 3, False]


def test_without_a_start_record_the_environment_is_pipeprofs_own_torch():
    env = describe_environment(2)
    assert env["torch"] == torch.__version__ and env["cuda_available"] == torch.cuda.is_available()
    assert env["cuda_version"] == torch.version.cuda
    assert describe_environment(2, {"pid": 1})["torch"] == torch.__version__  # a start record with no torch


def started(tmp_path) -> Session:
    """A session started on this process and stopped again: what it decided at start."""
    session = Session("s", tmp_path / "events.jsonl", sample_hz=5)
    session.start(os.getpid())
    session.stop_sampling()
    return session


def test_a_session_asks_the_driver_for_a_gpu_not_torch(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_mod, "gpu_inventory", lambda nvml=None: gpu_mod.Absent("no NVML here"))
    session = started(tmp_path)
    assert session.cuda_available is False and session.absences["gpu"] == "no CUDA device on this machine"
    monkeypatch.setattr(gpu_mod, "gpu_inventory", lambda nvml=None: [{"index": 0, "name": "fake"}])
    monkeypatch.setattr(gpu_mod, "open_visible_gpus", lambda nvml=None, env=None: gpu_mod.Absent("NVML: no GPU"))
    session = started(tmp_path)
    assert session.cuda_available is True and session.absences["gpu"] == "NVML: no GPU"
