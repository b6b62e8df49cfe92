"""Which NVML device is CUDA's ``cuda:N`` in a process: resolved by identity (UUID), as CUDA itself does.

NVML numbers every GPU of the machine in PCI bus order; CUDA numbers only the ones ``CUDA_VISIBLE_DEVICES``
lists, in the order it lists them, and interprets an index there in ``CUDA_DEVICE_ORDER`` (``FASTEST_FIRST``,
the default, or ``PCI_BUS_ID``). An entry may be an index, a GPU UUID (``GPU-…``) or a unique prefix of one, or a
MIG device UUID (``MIG-…``); CUDA stops reading the list at the first entry it cannot use, so the entries after
it are not visible. Each visible GPU is matched to its NVML handle by UUID (``nvmlDeviceGetUUID``), never by
position. Where the order cannot be known from NVML (indices under ``FASTEST_FIRST`` on unlike GPUs) the
answer is absent, with the reason, instead of a guess.

Only NVML is called: nothing here initialises CUDA in the profiled process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Unresolved:
    """No answer, and why (one line)."""

    reason: str


@dataclass(frozen=True)
class VisibleGpu:
    """One GPU as the process sees it: ``cuda_index`` is its N in ``cuda:N``."""

    cuda_index: int
    uuid: str
    nvml_index: int | None  # None for a MIG device (opened by its UUID)
    handle: Any


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entries(visible: str) -> list[str]:
    return [e.strip() for e in visible.split(",")]


def visible_gpus(nvml: Any, env: Mapping[str, str]) -> list[VisibleGpu] | Unresolved:
    """The GPUs CUDA would number in a process with this environment, in CUDA's order.

    ``nvml`` is initialised; its ``NVMLError`` propagates (the caller records it).
    """
    physical = []
    for i in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        physical.append((i, _text(nvml.nvmlDeviceGetUUID(handle)), handle))
    order = env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    names = {_text(nvml.nvmlDeviceGetName(h)) for _, _, h in physical} if order != "PCI_BUS_ID" else set()
    # FASTEST_FIRST ranks unlike GPUs by speed (ties in PCI order); NVML knows only the PCI order.
    index_order_known = len(names) <= 1
    unknown_order = Unresolved(f"CUDA numbers these unlike GPUs ({', '.join(sorted(names))}) fastest first "
                               f"(CUDA_DEVICE_ORDER={order}), an order NVML cannot tell; set "
                               "CUDA_DEVICE_ORDER=PCI_BUS_ID or list GPU UUIDs in CUDA_VISIBLE_DEVICES")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        if not index_order_known:
            return unknown_order
        return [VisibleGpu(n, uuid, i, h) for n, (i, uuid, h) in enumerate(physical)]
    chosen: list[VisibleGpu] = []
    for entry in _entries(visible) if visible.strip() else []:
        found = _entry(nvml, entry, physical, index_order_known)
        if isinstance(found, Unresolved):
            if found is _ORDER_UNKNOWN:
                return unknown_order
            break  # CUDA ignores the rest of the list from the first entry it cannot use
        uuid, nvml_index, handle = found
        if any(g.uuid == uuid for g in chosen):
            break
        chosen.append(VisibleGpu(len(chosen), uuid, nvml_index, handle))
    return chosen


_ORDER_UNKNOWN = Unresolved("order unknown")
_INVALID = Unresolved("invalid entry")


def _entry(nvml: Any, entry: str, physical: list[tuple[int, str, Any]],
           index_order_known: bool) -> tuple[str, int | None, Any] | Unresolved:
    if entry.isdigit():
        index = int(entry)
        if index >= len(physical):
            return _INVALID
        if not index_order_known:
            return _ORDER_UNKNOWN
        i, uuid, handle = physical[index]
        return uuid, i, handle
    if entry.startswith("GPU-"):
        matches = [p for p in physical if p[1].startswith(entry)]
        if len(matches) != 1:  # none, or an ambiguous prefix: CUDA rejects both
            return _INVALID
        i, uuid, handle = matches[0]
        return uuid, i, handle
    if entry.startswith("MIG-") and "/" not in entry:  # a MIG device's own UUID (the legacy MIG-GPU-…/g/c is not)
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(entry)
        except nvml.NVMLError:
            return _INVALID
        return _text(nvml.nvmlDeviceGetUUID(handle)), None, handle
    return _INVALID


def gpu_by_uuid(nvml: Any, uuid: str, cuda_index: int) -> list[VisibleGpu]:
    """The GPU with this UUID (torch's ``get_device_properties(i).uuid``, without the ``GPU-`` NVML gives a
    GPU), as ``cuda:cuda_index``; an empty list when NVML sees none with it."""
    wanted = str(uuid).removeprefix("GPU-")
    for i in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        found = _text(nvml.nvmlDeviceGetUUID(handle))
        if found.removeprefix("GPU-") == wanted:
            return [VisibleGpu(cuda_index, found, i, handle)]
    if wanted.startswith("MIG-"):
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(wanted)
        except nvml.NVMLError:
            return []
        return [VisibleGpu(cuda_index, wanted, None, handle)]
    return []


def describe_visible(env: Mapping[str, str]) -> str:
    """The environment that decided the visible GPUs, for a reason line."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    return "CUDA_VISIBLE_DEVICES unset" if visible is None else f"CUDA_VISIBLE_DEVICES={visible!r}"
