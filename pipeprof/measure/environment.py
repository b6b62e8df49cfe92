"""The machine a run ran on: versions, CPU, memory, GPUs."""

from __future__ import annotations

import math
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from pipeprof.version import __version__


def usable_cores(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup CPU quota.

    ``os.cpu_count()`` counts the machine, not what a container or taskset
    lets this process run on; oversubscription has to be judged against this.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota_cores(cgroup_root)
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def _cgroup_quota_cores(root: Path) -> float | None:
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]  # cgroup v2: "max 100000"
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def describe_environment(torch_threads: int, started: dict[str, Any] | None = None) -> dict[str, Any]:
    """Versions and machine facts for run.json, with every GPU NVML sees (or why none).

    ``started``: a profiled script's own start record (``script.hooks.started_facts``: its ``torch``
    version, ``cuda_available``, ``cuda_version``): the torch the script ran, which may not be pipeprof's,
    read without importing torch here (seconds of a core, at a script's start and end); pipeprof's own
    torch where absent.
    """
    from pipeprof.measure.gpu import Absent, gpu_inventory

    gpus = gpu_inventory()
    if started and started.get("torch"):
        version, cuda, cuda_version = started["torch"], bool(started.get("cuda_available")), started.get("cuda_version")
    else:
        import torch

        version, cuda, cuda_version = torch.__version__, torch.cuda.is_available(), torch.version.cuda
    return {
        "python": platform.python_version(),
        "torch": version,
        "torchvision": _version("torchvision"),  # importing it costs seconds
        "pipeprof": __version__,
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_cores": usable_cores(),
        "cpu_count_logical": os.cpu_count(),
        "ram_bytes": psutil.virtual_memory().total,
        "torch_threads": torch_threads,
        "cuda_available": cuda,
        "cuda_version": cuda_version,
        "gpus": {"absent": gpus.reason} if isinstance(gpus, Absent) else gpus,
    }
