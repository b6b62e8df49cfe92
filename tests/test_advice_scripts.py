"""Advice for real profiled scripts (issue 14, item 5): what persistent workers can save, and the risk when a
new DataLoader is built per fit. Small real runs of tests/fixtures/loader_per_fit.py."""

from __future__ import annotations

import pytest
from support.profiled import FIXTURES, ProfiledRuns

FIXTURE = FIXTURES / "loader_per_fit.py"
pytestmark = pytest.mark.integration


def _profile(runs: ProfiledRuns, *args: str) -> tuple[dict, dict]:
    proc, folder, summary, meta = runs("python", str(FIXTURE), *args)
    assert proc.returncode == 0, proc.stderr
    return summary, meta


def test_a_new_loader_per_fit_is_never_told_to_keep_its_workers(profiled_runs):
    summary, meta = _profile(profiled_runs, "--fits", "4", "--passes", "1")
    train = [d for d in meta["loaders"] if d["role"] == "train"]
    assert [(d["name"], d["passes"]) for d in train] == [("train_loader", 1)] * 4
    recs = summary["recommendations"]
    assert not [r for r in recs if "loader.persistent_workers" in r["change"]]
    assert all("persistent_workers=True" not in (r.get("script_text") or "") for r in recs)
    reuse = [r for r in recs if "build the DataLoader once" in (r.get("code_change") or "")]
    if reuse:  # the new loaders' starts cost enough to be worth the code change: the risk goes with it
        assert "a new DataLoader is built per fit: persistent_workers would keep each one's workers alive" \
               in reuse[0]["note"]


def test_a_loader_iterated_again_may_keep_its_workers(profiled_runs):
    summary, meta = _profile(profiled_runs, "--fits", "1", "--passes", "4")
    (train,) = [d for d in meta["loaders"] if d["role"] == "train"]
    assert train["passes"] == 4
    (rec,) = [r for r in summary["recommendations"] if "loader.persistent_workers" in r["change"]]
    assert "the first step of 3 epochs waited" in rec["reason"]  # passes 2-4, never the first
    assert rec["script_text"] == "train_loader: DataLoader(Slow(...), persistent_workers=True)"
