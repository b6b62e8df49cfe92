"""The tuner's coordinate search against made-up throughput functions (no training)."""

import itertools

import pytest

from pipeprof.analysis.tune import Space, ceiling_words, search

START = {"loader.num_workers": 0, "train.threads": 4, "loader.prefetch_factor": None,
         "loader.persistent_workers": False, "data.storage": "images"}


def loader_bound(s):
    """Throughput of a made-up decode-bound loader on 4 cores: workers help until they steal the
    training threads' cores; prefetch 4 helps a little; the device placement is the ceiling."""
    if s["data.storage"] == "device":
        return 10_000.0
    k, t = s["loader.num_workers"], s["train.threads"]
    supply = 1_500.0 * (k if k else 0.6) * min(1.0, 4 / max(k + t, 1)) ** 0.5
    compute = 9_000.0 * min(t, 4 - min(k, 3)) / 4
    bonus = 1.05 if s["loader.prefetch_factor"] == 4 else 1.0
    if s["data.storage"] == "ram":
        supply *= 3
    return min(supply * bonus, compute)


def fake(f, calls):
    def evaluate(settings, why):
        calls.append((dict(settings), why))
        return f(settings), "complete"
    return evaluate


def grid_best(f, space):
    best = 0.0
    for k, t, pf, pw, st in itertools.product(range(space.max_workers + 1), range(1, space.cores + 1), (2, 4, 8),
                                             (False, True), ("images", "ram")):
        best = max(best, f(space.normalize({"loader.num_workers": k, "train.threads": t,
                                             "loader.prefetch_factor": pf, "loader.persistent_workers": pw,
                                             "data.storage": st})))
    return best


def test_the_search_finds_the_grid_best_in_far_fewer_measurements():
    space = Space(cores=4, max_workers=8, placements=("ram",))
    calls = []
    result = search(START, space, fake(loader_bound, calls), max_evals=40)
    assert result.best["samples_per_s"] >= 0.95 * grid_best(loader_bound, space)
    assert len(calls) <= 40 < (space.max_workers + 1) * space.cores * 3 * 2 * 2  # the grid: 432 settings
    assert calls[0] == (space.normalize(START), "the scenario as given")
    assert len({repr(sorted(c[0].items())) for c in calls}) == len(calls)  # nothing measured twice


def test_seeds_from_the_recommendations_are_measured_right_after_the_start():
    space = Space(cores=4, max_workers=8, placements=("ram", "device"))
    calls = []
    result = search(START, space, fake(loader_bound, calls), lambda: [{"data.storage": "device"}], max_evals=5)
    assert calls[1][1] == "predicted by the recommendations"
    assert calls[1][0]["data.storage"] == "device" and calls[1][0]["loader.num_workers"] == 0
    assert result.best["settings"]["data.storage"] == "device" and len(calls) == 5


def test_on_the_device_no_loader_setting_is_tried():
    space = Space(cores=2, max_workers=4, cuda=True, placements=("ram",))
    device = space.normalize(dict(START, **{"data.storage": "device"}))
    for dim in ("loader.num_workers", "loader.prefetch_factor", "loader.persistent_workers", "loader.pin_memory"):
        assert space.neighbours(dim, device) == []
    assert space.neighbours("data.storage", device) == ["ram"]


def test_normalize_writes_each_setting_one_way():
    space = Space(cores=2, max_workers=4)
    assert space.normalize({"loader.num_workers": 0, "loader.prefetch_factor": 4,
                            "loader.persistent_workers": True}) == \
        {"loader.num_workers": 0, "loader.prefetch_factor": None, "loader.persistent_workers": False}
    assert space.normalize({"loader.num_workers": 2, "loader.prefetch_factor": None})["loader.prefetch_factor"] == 2


def test_a_gain_within_the_noise_does_not_move_the_incumbent_and_skipped_settings_cost_nothing():
    space = Space(cores=2, max_workers=2)

    def evaluate(settings, why):
        if settings["loader.num_workers"] == 2:
            return None, "skipped"  # refused by the scenario: no time spent
        return (1020.0 if settings["loader.num_workers"] == 0 else 1000.0), "complete"

    result = search({"loader.num_workers": 1, "train.threads": 2}, space, evaluate, max_evals=3)
    assert [(t["settings"]["loader.num_workers"], t["settings"]["train.threads"], t["status"])
            for t in result.trials] == [(1, 2, "complete"), (0, 2, "complete"), (2, 2, "skipped"),
                                        (1, 1, "complete")]
    # 0 workers was 2% faster: below the 3% gain, so the search went on from 1 worker (threads = 1 tried
    # with 1 worker), yet the fastest measured setting is the one reported
    assert result.best["settings"]["loader.num_workers"] == 0


@pytest.mark.parametrize("best, ceiling, words", [
    (5000.0, 10000.0, "reaches 50% of the compute ceiling (10,000 samples/s"),
    (9800.0, 10000.0, "no longer the bottleneck"),
    (1.0, None, "compute ceiling not measured"),
])
def test_ceiling_words(best, ceiling, words):
    assert words in ceiling_words(best, ceiling)
