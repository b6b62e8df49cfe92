"""Words at the edge: what analysis says, as a ``Reason`` (a kind and its numbers), never as a sentence.

A prediction's model (``analysis.prediction``) and a recommendation's reason and notes (``analysis.recommend``)
are ``Reason``s; ``render.prediction_text`` and ``render.advice_text`` write their sentences, once for the
terminal, the report and summary.json (written at the edge, ``pipeline.derive.summary_document``). A number may
be another ``Reason`` (a model built on another, a reason wrapped by the job's ranks).

``TEXT``: a sentence already written: a summary.json read back holds its words, not their numbers, and the
modules that still phrase (``ranks``, ``sampled_advice``, ``transform_advice``) hand theirs as text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TEXT = "text"


@dataclass(frozen=True)
class Reason:
    """A ``kind`` of sentence and the ``numbers`` (names, flags, other ``Reason``s) it is written from."""

    kind: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.numbers[key]


def reason(kind: str, **numbers: Any) -> Reason:
    return Reason(kind, numbers)


def text(words: str) -> Reason:
    """A sentence already written (``TEXT``)."""
    return Reason(TEXT, {"text": words})
