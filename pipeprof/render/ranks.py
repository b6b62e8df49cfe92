"""A multi-rank job on the page and in the terminal: the straggler in words, the per-rank table's rows.

The numbers come from summary.json's ``ranks`` (one entry per rank) and ``straggler``
(``{rank, node, kind, evidence}``, maybe a ``sentence``), written by ``analysis``; this module only
chooses the words and formats the numbers (as plain text: the templates escape it). No matplotlib:
the console imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.summary import Summary, as_summary
from pipeprof.format import NOT_MEASURED, finite
from pipeprof.render.straggler_text import straggler_words

# What the straggler's kind says about it, after "rank N (node) ...".
STRAGGLER_WORDS = {
    "input": "waits for its data while the other ranks wait for it in collectives",
    "compute": "computes slower than the other ranks, which wait for it in collectives",
    "h2d": "copies its batches to the device slower than the other ranks, which wait for it in collectives",
}
KEPT_PACE = "no straggler: the ranks kept pace (their own time per step within noise of each other)"
FRACTIONS = ("data_wait", "h2d", "collective_wait", "compute", "other")

# Units an evidence key ends with, and the words its label ends with instead.
_UNITS = (("_fraction", "share"), ("_per_sample_s", "per sample"), ("_bytes_per_s", ""), ("_pct", "%"),
          ("_s", ""), ("_bytes", ""))


def rank_label(rank: Any, node: Any) -> str:
    """``rank 1 (node-a)``; ``rank 1`` without a node."""
    text = f"rank {rank}"
    return f"{text} ({node})" if node not in (None, "") else text


def straggler_view(summary: Summary | Mapping[str, Any]) -> dict[str, Any] | None:
    """The straggler block: ``kind``, ``title``, ``sentence`` and the evidence ``rows`` as (label, text);
    None for a single-process run (no ``straggler``)."""
    s = as_summary(summary).straggler
    if s is None:
        return None
    kind, evidence = s.kind, s.evidence
    if kind == "none" or s.rank is None:
        compared = s.ranks_compared
        title = "No straggler named" if compared is not None and compared < 2 else "No straggler: the ranks kept pace"
        words = KEPT_PACE
    else:
        title = f"Straggler: {rank_label(s.rank, s.node)}, {_KIND_TITLES.get(kind, kind)}"
        words = f"{rank_label(s.rank, s.node)} {STRAGGLER_WORDS.get(kind, f'is the straggler ({kind})')}"
    rows = [(evidence_label(k), evidence_text(k, v)) for k, v in evidence.items()]
    return {"kind": kind, "rank": s.rank, "node": s.node, "title": title, "sentence": straggler_words(s) or words,
            "rows": rows}


_KIND_TITLES = {"input": "input-bound", "compute": "compute-bound", "h2d": "bound by the copy to the device"}


def straggler_line(summary: Summary | Mapping[str, Any]) -> str | None:
    """The console's line: the straggler's rank, node and kind and why; None for a single-process run."""
    view = straggler_view(summary)
    if view is None:
        return None
    if view["rank"] is None or view["kind"] == "none":
        return f"none: {view['sentence']}"
    return f"{rank_label(view['rank'], view['node'])}, {view['kind']}: {view['sentence']}"


def rank_rows(summary: Summary | Mapping[str, Any]) -> list[dict[str, Any]]:
    """The per-rank table's rows, numbers left as numbers (the template formats them): ``rank``, ``node``,
    ``samples_per_s``, ``fractions`` (the five phases), ``fetch_per_sample_s``, ``prep_per_sample_s``,
    ``verdict`` (its class), ``status``, ``straggler`` (True on the straggler's row)."""
    record = as_summary(summary)
    straggler = record.straggler.rank if record.straggler is not None else None
    rows = []
    for e in record.ranks:
        loading = e.loading
        rows.append({"rank": e.rank, "node": e.node, "local_rank": e.local_rank, "pid": e.pid, "steps": e.steps,
                     "samples_per_s": e.samples_per_s,
                     "fractions": {p: finite(e.fractions.get(p)) for p in FRACTIONS},
                     "fetch_per_sample_s": loading.fetch_per_sample_s if loading is not None else None,
                     "prep_per_sample_s": loading.prep_per_sample_s if loading is not None else None,
                     "verdict": e.verdict.klass or NOT_MEASURED,
                     "status": str(e.status or "unknown"),
                     "straggler": straggler is not None and e.rank == straggler})
    return rows


_BY_RANK = "_by_rank"  # an evidence value per rank: {rank: value}, its unit before this suffix


def evidence_label(key: str) -> str:
    """An evidence key in words: ``data_wait_fraction`` -> "data wait, share"; ``own_step_s`` -> "own step";
    ``own_step_s_by_rank`` -> "own step, by rank"."""
    if key.endswith(_BY_RANK) and len(key) > len(_BY_RANK):
        return f"{evidence_label(key[: -len(_BY_RANK)])}, by rank"
    for suffix, words in _UNITS:
        if key.endswith(suffix) and len(key) > len(suffix):
            base = key[: -len(suffix)].replace("_", " ")
            return f"{base}, {words}" if words else base
    return key.replace("_", " ")


def evidence_text(key: str, value: Any) -> str:
    """An evidence value formatted by its key's unit; per-rank values (a dict or list) as
    ``rank 0 120 ms · rank 1 410 ms``."""
    if key.endswith(_BY_RANK) and len(key) > len(_BY_RANK):
        key = key[: -len(_BY_RANK)]
    if isinstance(value, dict):
        return " · ".join(f"rank {k} {evidence_text(key, v)}" for k, v in value.items()) or NOT_MEASURED
    if isinstance(value, (list, tuple)):
        return " · ".join(f"rank {i} {evidence_text(key, v)}" for i, v in enumerate(value)) or NOT_MEASURED
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str) or value is None:
        return NOT_MEASURED if value is None else value
    if key.endswith("_fraction"):
        return fmt.pct(value, 1)
    if key.endswith("_bytes_per_s"):
        return fmt.byte_rate(value)
    if key.endswith("_bytes"):
        return fmt.byte_size(value)
    if key.endswith("_pct"):
        return fmt.pct(float(value) / 100, 0) if finite(value) is not None else NOT_MEASURED
    if key.endswith("_s"):
        return fmt.duration(value)
    return fmt.number(value)
