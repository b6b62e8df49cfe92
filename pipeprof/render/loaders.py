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

from pipeprof.run_meta import LOADER_SETTINGS, LoaderInfo

SETTINGS = LOADER_SETTINGS  # what a loader was built with: loaders equal in these (and name and role) fold


@dataclass(frozen=True)
class LoaderGroup:
    """Loaders of one name, role and settings, in the order the script first iterated them."""

    name: str
    role: str
    settings: tuple[tuple[str, Any], ...]  # (key, value) in SETTINGS order
    loaders: tuple[LoaderInfo, ...]

    @property
    def count(self) -> int:
        return len(self.loaders)

    @property
    def batches(self) -> int:
        return int(sum(x.batches or 0.0 for x in self.loaders))

    @property
    def samples(self) -> int:
        return int(sum(x.samples or 0.0 for x in self.loaders))

    @property
    def passes(self) -> int:
        return int(sum(x.passes or 0.0 for x in self.loaders))

    @property
    def wait_s(self) -> float:
        return sum(x.wait_s or 0.0 for x in self.loaders)

    @property
    def eval_s(self) -> float | None:
        """Time in this group's passes (evaluation loaders only; None for training loaders)."""
        timed = [x.eval_s for x in self.loaders]
        return sum(t or 0.0 for t in timed) if any(t is not None for t in timed) else None

    @property
    def wait_per_batch_s(self) -> float | None:
        return _weighted([(x.wait_per_batch_s, x.batches) for x in self.loaders])

    @property
    def fetch_per_sample_s(self) -> float | None:
        return _weighted([(x.fetch_per_sample_s, x.samples) for x in self.loaders])

    @property
    def prep_per_sample_s(self) -> float | None:
        return _weighted([(x.prep_per_sample_s, x.samples) for x in self.loaders])

    def setting(self, key: str) -> Any:
        return self.loaders[0].setting(key)  # the group's settings are its first loader's


def _weighted(values: list[tuple[float | None, float | None]]) -> float | None:
    """The mean of the values recorded, weighted by their weights (plain where no weight is > 0)."""
    pairs = [(v, w or 0.0) for v, w in values if v is not None]
    total = sum(w for _, w in pairs)
    if not pairs:
        return None
    if total <= 0:
        return sum(v for v, _ in pairs) / len(pairs)
    return sum(v * w for v, w in pairs) / total


def fold_loaders(loaders: Iterable[LoaderInfo]) -> list[LoaderGroup]:
    """The loaders (run.json's / summary.json's ``loaders``, read: ``LoaderInfo.parse_all``) folded by name, role
    and ``SETTINGS``."""
    groups: dict[tuple[Any, ...], list[LoaderInfo]] = {}
    for loader in loaders:
        key = (str(loader.name), str(loader.role),
               *(repr(v) for _, v in loader.settings))  # repr: unhashable values (a list) fold too
        groups.setdefault(key, []).append(loader)
    return [LoaderGroup(str(members[0].name), str(members[0].role), members[0].settings, tuple(members))
            for members in groups.values()]
