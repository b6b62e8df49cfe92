"""A job's straggler in words: which rank sets the pace and why, from the ``Reason`` the typed
``analysis.ranks.Straggler`` carries. summary.json's ``straggler.sentence`` is this text, written at the edge
(``pipeline.derive.summary_document``); the terminal and the report say it too (``render.ranks``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.ranks import Straggler
from pipeprof.analysis.reasons import WRITTEN

_DOING = {"input": "waiting for data", "h2d": "copying batches to the device", "compute": "computing"}


def straggler_words(s: Straggler) -> str:
    """The straggler's sentence (summary.json's ``straggler.sentence``)."""
    return _WORDS[s.why.kind](s.why.values)


def _named(n: Mapping[str, Any]) -> str:
    where = f" (node {n['node']})" if n["node"] else ""
    return (f"Rank {n['rank']}{where} sets the job's pace: its own work takes {fmt.duration(n['own_s'])} a step "
            f"against {fmt.duration(n['median_own_s'])} on the other ranks (median), {fmt.duration(n['phase_s'])} "
            f"of it {_DOING[n['kind']]} (the others {fmt.duration(n['others_phase_s'])}); "
            f"meanwhile the other ranks wait {fmt.pct(n['others_collective_wait'])} of their steps in collectives.")


_WORDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    WRITTEN: lambda n: str(n["text"]),
    "straggler_too_few": lambda n: (f"No straggler to name: {fmt.plural(n['ranks'], 'rank')} with at least "
                                    f"{n['min_steps']} counted steps, 2 needed to compare."),
    "straggler_noise": lambda n: (f"No rank sets the pace: rank {n['rank']}'s own work per step is "
                                  f"{fmt.pct(n['excess'])} above the others' on average, but it was the slower in only "
                                  f"{fmt.pct(n['slower'])} of the steps (a straggler is slower step after step, in "
                                  f"{fmt.pct(n['consistency'])} or more): a few slow steps, within noise."),
    "straggler_within": lambda n: (f"No rank sets the pace: the ranks' own work per step is within "
                                   f"{fmt.pct(n['margin'])} of each other (slowest, rank {n['rank']}: "
                                   f"{fmt.duration(n['own_s'])}; the others' median {fmt.duration(n['median_own_s'])})."),
    "straggler_named": _named,
}
