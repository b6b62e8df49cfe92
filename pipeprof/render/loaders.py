"""A script's DataLoaders folded for display: one line per name and settings, with counts.

A script that builds a new DataLoader per fit (the d2l book's Trainer, a notebook cell run again) iterates
many loaders of the same name; a table of twenty rows that repeat hides what differs. Loaders with the same
name, role, dataset and settings fold into one ``LoaderGroup``; the loaders themselves stay in it for a
detailed view. Sums are of the loaders' own numbers (run.json's ``loaders``); the means per batch and per
sample are weighted by batches and samples. No torch, no pandas: the console imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipeprof.numbers import finite

# What a loader was built with: loaders equal in all of these (and in name and role) fold together.
SETTINGS = ("dataset", "batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers",
            "drop_last", "multiprocessing_context")


@dataclass(frozen=True)
class LoaderGroup:
    """Loaders of one name, role and settings, in the order the script first iterated them."""

    name: str
    role: str
    settings: tuple[tuple[str, Any], ...]  # (key, value) in SETTINGS order
    loaders: tuple[dict[str, Any], ...]

    @property
    def count(self) -> int:
        return len(self.loaders)

    @property
    def batches(self) -> int:
        return int(self._sum("batches"))

    @property
    def samples(self) -> int:
        return int(self._sum("samples"))

    @property
    def passes(self) -> int:
        return int(self._sum("passes"))

    @property
    def wait_s(self) -> float:
        return self._sum("wait_s")

    @property
    def eval_s(self) -> float | None:
        """Time in this group's passes (evaluation loaders only; None for training loaders)."""
        return self._sum("eval_s") if any(finite(x.get("eval_s")) is not None for x in self.loaders) else None

    @property
    def wait_per_batch_s(self) -> float | None:
        return self._weighted("wait_per_batch_s", "batches")

    @property
    def fetch_per_sample_s(self) -> float | None:
        return self._weighted("fetch_per_sample_s", "samples")

    @property
    def prep_per_sample_s(self) -> float | None:
        return self._weighted("prep_per_sample_s", "samples")

    def setting(self, key: str) -> Any:
        return dict(self.settings).get(key)

    def _sum(self, key: str) -> float:
        return sum(finite(x.get(key)) or 0.0 for x in self.loaders)

    def _weighted(self, key: str, weight: str) -> float | None:
        pairs = [(v, finite(x.get(weight)) or 0.0) for x in self.loaders if (v := finite(x.get(key))) is not None]
        total = sum(w for _, w in pairs)
        if not pairs:
            return None
        if total <= 0:
            return sum(v for v, _ in pairs) / len(pairs)
        return sum(v * w for v, w in pairs) / total


def fold_loaders(loaders: Iterable[dict[str, Any]]) -> list[LoaderGroup]:
    """The loaders (run.json's / summary.json's ``loaders``) folded by name, role and ``SETTINGS``."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for loader in loaders:
        if not isinstance(loader, dict):
            continue
        key = (str(loader.get("name")), str(loader.get("role")),
               *(repr(loader.get(k)) for k in SETTINGS))  # repr: unhashable values (a list) fold too
        groups.setdefault(key, []).append(loader)
    return [LoaderGroup(str(members[0].get("name")), str(members[0].get("role")),
                        tuple((k, members[0].get(k)) for k in SETTINGS), tuple(members))
            for members in groups.values()]
