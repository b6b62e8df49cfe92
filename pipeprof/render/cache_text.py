"""The page-cache check in words (summary.json's ``cache.reason``, the terminal's page-cache row, the report's
banner), from the ``CacheCheck`` reasons ``analysis.cache`` records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.cache import CacheCheck
from pipeprof.analysis.reasons import WRITTEN, Reason


def cache_json(check: CacheCheck) -> dict[str, Any]:
    """summary.json's ``cache``: the check's data and its reason in words."""
    return {**check.to_json(), "reason": cache_words(check.reason)}


def cache_words(r: Reason | None) -> str | None:
    """The check's reason in one sentence (None: none given)."""
    if r is None:
        return None
    return _WORDS[r.kind](r)


def _short(r: Reason) -> str:
    """Why one epoch of a cold run read less than it should have."""
    head = f"epoch {r['epoch']} read only {r['read_fraction']:.0%} of the data set from disk"
    if r["drop"] == "none":
        why = "no page-cache drop was recorded before it, so it was probably served from the cache"
    elif r["drop"] == "failed":
        why = f"the page cache was not dropped before it — {r['drop_reason'] or 'the drop failed'}"
    else:
        after = r["resident_after_bytes"]
        left = f" ({fmt.byte_size(after)} left resident)" if after is not None else ""
        why = (f"the page cache was dropped before it{left}, yet the data came from the cache: "
               "something read the files back in between (kernel readahead on a memory map, "
               "another process), or the reads were made by processes the sampler did not watch")
    if r["unattributed_may_account"]:
        why += (f"; note that {r['unattributed_fraction']:.0%} more was read by workers before the sampler "
                "first saw them, which could account for the rest")
    return f"{head}: {why}"


_WORDS: dict[str, Callable[[Reason], str]] = {
    WRITTEN: lambda r: str(r["text"]),
    "cache_not_on_disk": lambda r: "the data is not read from files on disk",
    "cache_warm": lambda r: "warm page cache: disk reads are reported, there is nothing to verify",
    "cache_no_epochs": lambda r: "no epochs were recorded, so the cold cache cannot be verified",
    "cache_reads_not_measured": lambda r: ("disk reads were not measured (no read_bytes readings: io_counters "
                                           "absent?), so the cold cache cannot be verified"),
    "cache_cold": lambda r: (f"every epoch read at least {r['min_read_fraction']:.0%} of the data set "
                             f"({fmt.byte_size(r['dataset_bytes'])}) from disk"),
    "cache_not_cold": lambda r: ("NOT COLD: " + "; ".join(_WORDS[p.kind](p) for p in r.parts)
                                 + f". A cold epoch should read at least {r['threshold']:.0%} of the data set "
                                 "from disk; the timings of these epochs are warm-cache timings."),
    "cache_epoch_short": _short,
}
