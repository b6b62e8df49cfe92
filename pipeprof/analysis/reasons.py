"""A reason: what a sentence says, as a kind plus its numbers, for ``render/`` to word.

Analysis decides (which rule, which part, which share) and records the decision as a ``Reason``; the
sentence a person reads is written once, in ``render/`` (``render.cause_text``, ``render.verdict_text``),
for the terminal, the report and summary.json alike. A reason read back from a summary.json holds the words
as that file kept them (``WRITTEN``): the numbers behind them are in the record's evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

WRITTEN = "written"  # the words as a summary.json kept them (a summary read back)


@dataclass(frozen=True)
class Reason:
    """``kind`` names the sentence; ``values`` hold its numbers (units in the names), flags and names;
    ``parts`` the reasons it is built on, in the order the sentence says them."""

    kind: str
    values: Mapping[str, Any] = field(default_factory=dict)
    parts: tuple[Reason, ...] = ()

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @classmethod
    def written(cls, text: str) -> Reason:
        """The words themselves, as read back from a summary.json."""
        return cls(WRITTEN, {"text": text})
