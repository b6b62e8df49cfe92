"""The DataLoader's own rules and defaults, in one place.

``torch.utils.data.DataLoader`` refuses ``prefetch_factor`` and
``persistent_workers`` without worker processes, defaults ``prefetch_factor``
to 2 when there are workers, and ignores ``pin_memory`` when there is no CUDA
device to copy to (the batches stay pageable). Scenario validation, variants,
the tuner, the recommendations and the attribution all ask here instead of
restating these rules.
"""

from __future__ import annotations

from typing import Any

# PyTorch's default when num_workers > 0 and prefetch_factor is not given.
DEFAULT_PREFETCH_FACTOR = 2

# DataLoader arguments that need worker processes (num_workers >= 1): PyTorch raises without them.
NEED_WORKERS = ("prefetch_factor", "persistent_workers")

# The DataLoader settings a scenario's [loader] table or a script's DataLoader(...) call names.
LOADER_SETTINGS = ("batch_size", "num_workers", "prefetch_factor", "pin_memory", "persistent_workers")


def prefetch_factor(num_workers: int, factor: int | None) -> int | None:
    """The prefetch factor the DataLoader uses: ``factor`` or the default with workers, None without."""
    if not num_workers:
        return None
    return int(factor) if factor else DEFAULT_PREFETCH_FACTOR


def queue_capacity_batches(num_workers: int, factor: int | None) -> int | None:
    """Batches the DataLoader keeps in flight: ``num_workers * prefetch_factor``; None without workers."""
    effective = prefetch_factor(num_workers, factor)
    return None if effective is None else int(num_workers) * effective


def pins_memory(pin_memory: bool, device: str) -> bool:
    """Whether ``pin_memory`` has an effect: only when batches go to a CUDA device."""
    return bool(pin_memory) and str(device).startswith("cuda")


def worker_only_conflicts(num_workers: int, settings: dict[str, Any]) -> list[str]:
    """The worker-only keys of ``settings`` set to a non-default value while ``num_workers == 0``."""
    if num_workers:
        return []
    return [key for key in NEED_WORKERS if settings.get(key) not in (None, False)]


def without_worker_only(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with the worker-only keys reset to their unset values (for ``num_workers = 0``)."""
    out = dict(settings)
    out["prefetch_factor"] = None
    out["persistent_workers"] = False
    return out
