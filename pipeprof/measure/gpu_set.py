"""Every GPU a profiled command can see, sampled together, so that each run reads the GPU it trained on.

A script's training device is not known when sampling starts (its own code picks ``cuda:N``, a torchrun job
puts one rank on each GPU), and pipeprof must not initialise CUDA to ask. So ``GpuSet`` samples every visible
GPU through NVML (``gpu.open_visible_gpus``) and keeps each one's device readings under its CUDA number:
``cuda<N>_<column>`` for each of ``GPU_DEVICE_COLUMNS`` (``cuda1_gpu_util_pct``). It also notes which pids held
memory on which GPU, in NVML's pids. After the run, ``training_gpu`` says which GPU a process trained on (the
one where it held the most memory), and ``on_gpu`` puts that GPU's series in the run's ``gpu_*`` columns.

A GPU's two PCIe readings block ~40 ms together, so with several GPUs they are read only on the GPUs the tree
holds memory on; until the tree is seen on one (and when NVML's pids are another namespace's) every visible
GPU's other readings are taken, and once it is seen, only its GPUs' are.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pipeprof.measure.gpu import NAN, GpuMonitor, ProcessGpu
from pipeprof.run_folder import GPU_DEVICE_COLUMNS


def device_column(cuda_index: int, column: str) -> str:
    """Where ``column`` of ``cuda:cuda_index`` is kept in samples (``cuda1_gpu_util_pct``)."""
    return f"cuda{cuda_index}_{column}"


@dataclass(frozen=True)
class NoGpu:
    """Why no GPU's series is the run's (one line)."""

    reason: str


class GpuSet:
    """Samples several ``GpuMonitor``s (one per visible GPU, in CUDA's order) as one; ``close()`` closes all."""

    def __init__(self, monitors: list[GpuMonitor]) -> None:
        if not monitors:
            raise ValueError("GpuSet needs at least one GPU")
        self.monitors = monitors
        self.held_bytes: dict[int, dict[int, float]] = {m.cuda_index or 0: {} for m in monitors}  # peak, per pid
        self._tree_seen = False
        self._tree_on: set[int] = set()  # the GPUs the tree held memory on at the last reading
        self._others_listed = False
        self.selected: GpuMonitor | None = None

    def process_sample(self, tree_pids: Collection[int] = ()) -> ProcessGpu:
        """Every GPU's per-process reading, summed per pid (a pid's memory on all GPUs; its SM % of one GPU,
        added over GPUs as CPU % over cores). A mapping is None only when no GPU gave one."""
        utils: list[dict[int, float]] = []
        mems: list[dict[int, float]] = []
        self._tree_on = set()
        for m in self.monitors:
            reading = m.process_sample()
            if reading.util_pct is not None:
                utils.append(reading.util_pct)
            if reading.mem_bytes is not None:
                mems.append(reading.mem_bytes)
                held = self.held_bytes[m.cuda_index or 0]
                for pid, used in reading.mem_bytes.items():
                    held[pid] = max(held.get(pid, 0.0), used)
                    if pid in tree_pids:
                        self._tree_on.add(m.cuda_index or 0)
                    else:
                        self._others_listed = True
        self._tree_seen |= bool(self._tree_on)
        return ProcessGpu(util_pct=_summed(utils) if utils else None, mem_bytes=_summed(mems) if mems else None)

    def sample(self) -> dict[str, float]:
        """``cuda<N>_<column>`` for every visible GPU: in full for the GPUs the tree holds memory on (and the only
        one, if one); without PCIe for all of them until the tree is seen on one; NaN for the others."""
        row: dict[str, float] = {}
        for m in self.monitors:
            index = m.cuda_index or 0
            if len(self.monitors) == 1 or index in self._tree_on:
                values = m.sample()
            elif not self._tree_seen:
                values = m.sample(pcie=False)
            else:
                values = dict.fromkeys(GPU_DEVICE_COLUMNS, NAN)
            row.update({device_column(index, c): v for c, v in values.items()})
        return row

    def training_gpu(self, pids: Collection[int], recorded: str | None = None) -> int | NoGpu:
        """The CUDA number of the GPU these pids (a process and its workers) trained on, or why none.

        By identity first: the GPU where they held the most memory. When NVML never listed them but listed
        other processes of the tree, they used no GPU. Otherwise NVML's lists cannot tell (another PID
        namespace's pids, or lists a container's driver leaves empty) and the run's own record of its device
        decides (``recorded``: ``cuda:N``, ``cuda`` or ``cpu``), a plain ``cuda`` only where one GPU is
        visible.
        """
        held = {index: sum(by_pid.get(p, 0.0) for p in pids) for index, by_pid in self.held_bytes.items()}
        best = max(held, key=lambda i: held[i])
        if held[best] > 0:
            return best
        if self._tree_seen:  # NVML's pids are ours (it listed the tree elsewhere), and never these
            return NoGpu("the run trained on the CPU: it held no memory on any visible GPU")
        if recorded == "cpu":
            return NoGpu("the run trained on the CPU")
        if recorded is not None and recorded.startswith("cuda:") and recorded[5:].isdigit():
            index = int(recorded[5:])
            if index in self.held_bytes:
                return index
            return NoGpu(f"the run trained on {recorded}, which is not among the {len(self.monitors)} GPUs "
                         "visible to pipeprof")
        if len(self.monitors) == 1 and recorded == "cuda":
            return self.monitors[0].cuda_index or 0
        why = ("NVML lists pids of another PID namespace (a container's host)" if self._others_listed else
               "NVML listed none of its processes")
        return NoGpu(f"cannot tell which of the {len(self.monitors)} visible GPUs the run used: {why}")

    def select(self, cuda_index: int | None) -> None:
        """Make ``cuda_index``'s monitor the one whose ``absences`` and ``info`` are the run's."""
        self.selected = next((m for m in self.monitors if m.cuda_index == cuda_index), None)

    @property
    def absences(self) -> dict[str, str]:
        return dict(self.selected.absences) if self.selected is not None else {}

    def info(self) -> dict[str, Any]:
        """The selected GPU's ``info()``, and ``visible``: each visible GPU's cuda_index, uuid and nvml_index."""
        facts = self.selected.info() if self.selected is not None else {}
        facts["visible"] = [{"cuda_index": m.cuda_index, "uuid": m.uuid, "nvml_index": m.nvml_index}
                            for m in self.monitors]
        return facts

    def close(self) -> None:
        for m in self.monitors:
            m.close()


def _summed(readings: list[dict[int, float]]) -> dict[int, float]:
    total: dict[int, float] = {}
    for reading in readings:
        for pid, value in reading.items():
            total[pid] = total.get(pid, 0.0) + value
    return total


def on_gpu(samples: pd.DataFrame, cuda_index: int | None) -> pd.DataFrame:
    """``samples`` with ``cuda_index``'s series in the ``gpu_*`` device columns (NaN when None: no GPU's
    series is the run's). The per-GPU columns stay: the raw records of every GPU."""
    out = samples.copy()
    for column in GPU_DEVICE_COLUMNS:
        source = device_column(cuda_index, column) if cuda_index is not None else None
        out[column] = samples[source] if source is not None and source in samples else NAN
    return out
