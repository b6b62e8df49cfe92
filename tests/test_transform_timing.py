"""Per-transform timing (measure.transforms): each leaf of a pipeline timed where it runs, exactly, on fake clocks;
real torchvision v1 and v2 pipelines (nested, random containers) timed unchanged in what they compute."""

from __future__ import annotations

import pickle

import pytest
import torch

from pipeprof.measure.clock import FakeClock
from pipeprof.measure.transforms import TransformTimer, rank, transform_name


class Costs:
    """A transform that advances the wall clock by ``wall_s`` and the CPU clock by ``cpu_s``: a known cost."""

    def __init__(self, wall: FakeClock, cpu: FakeClock, wall_s: float, cpu_s: float, add: float = 0.0) -> None:
        self.wall, self.cpu, self.wall_s, self.cpu_s, self.add = wall, cpu, wall_s, cpu_s, add

    def __call__(self, x):
        self.wall.advance(self.wall_s)
        self.cpu.advance(self.cpu_s)
        return x + self.add


class Compose:  # shaped like torchvision.transforms.Compose: a list of callables
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class Cheap(Costs):
    pass


class Expensive(Costs):
    pass


def test_each_leaf_gets_its_own_wall_and_cpu_time_and_nested_containers_are_walked():
    wall, cpu = FakeClock(), FakeClock()
    pipeline = Compose([Cheap(wall, cpu, 0.001, 0.001, 1), Compose([Expensive(wall, cpu, 0.010, 0.004, 10)]),
                        Cheap(wall, cpu, 0.002, 0.002, 100)])
    timer = TransformTimer(wall, cpu)
    assert timer.install(pipeline) is pipeline
    assert [pipeline(0) for _ in range(4)] == [111] * 4  # what it computes is unchanged
    totals = timer.take()
    assert list(totals) == ["Cheap", "Expensive", "Cheap #2"]  # installation order; equal names told apart
    assert (totals["Expensive"].calls, totals["Expensive"].wall_s, totals["Expensive"].cpu_s) == \
        (4, pytest.approx(0.040), pytest.approx(0.016))
    assert totals["Cheap"].wall_s == pytest.approx(0.004) and totals["Cheap #2"].wall_s == pytest.approx(0.008)
    assert timer.take()["Expensive"].calls == 0  # take() clears: one batch's worth at a time
    rows = rank(totals, samples=4, prep_s=0.060)
    assert [r["name"] for r in rows] == ["Expensive", "Cheap #2", "Cheap"]  # costliest first
    assert rows[0] == {"name": "Expensive", "per_sample_s": pytest.approx(0.010), "calls": 4,
                       "cpu_per_sample_s": pytest.approx(0.004), "share_of_prep": pytest.approx(0.040 / 0.060)}
    timer.uninstall()
    assert [type(t).__name__ for t in pipeline.transforms] == ["Cheap", "Compose", "Cheap"]


def test_a_transform_a_random_container_skips_is_not_counted_and_a_bare_callable_is_wrapped():
    wall, cpu = FakeClock(), FakeClock()
    skipped = Compose([Expensive(wall, cpu, 0.5, 0.5)])  # never called: as RandomApply when its coin says no
    timer = TransformTimer(wall, cpu)
    timer.install(skipped)
    assert rank(timer.take(), samples=3, prep_s=1.0) == []  # never ran: no row

    def to_float(x):
        wall.advance(0.003)
        return float(x)

    timed = timer.install(to_float)
    assert timed(2) == 2.0 and timer.take()["to_float"].wall_s == pytest.approx(0.003)
    assert rank({}, samples=0, prep_s=None) == []


def test_a_tuple_of_transforms_is_timed_and_put_back():
    wall, cpu = FakeClock(), FakeClock()
    pipeline = Compose((Cheap(wall, cpu, 0.001, 0.0),))
    timer = TransformTimer(wall, cpu)
    timer.install(pipeline)
    pipeline(0)
    assert timer.take()["Cheap"].calls == 1
    timer.uninstall()
    assert isinstance(pipeline.transforms, tuple)


def test_torchvision_v1_and_v2_pipelines_are_timed_unchanged():
    v1 = pytest.importorskip("torchvision.transforms")
    v2 = pytest.importorskip("torchvision.transforms.v2")
    image = torch.rand(3, 32, 32)
    for t in (v1, v2):
        torch.manual_seed(0)
        pipeline = t.Compose([t.RandomApply([t.RandomHorizontalFlip(p=1.0)], p=1.0), t.CenterCrop(16),
                              t.Normalize(mean=[0.5] * 3, std=[0.25] * 3), t.Lambda(lambda x: x * 2)])
        expected = pipeline(image)
        timer = TransformTimer()
        timer.install(pipeline)
        assert torch.equal(pipeline(image), expected)
        totals = timer.take()
        names = list(totals)
        assert names[0] == "RandomHorizontalFlip(p=1.0)" and names[1] == "CenterCrop(size=(16, 16))"
        assert names[2] == "Normalize" and names[3].startswith("Lambda(")  # a long repr: the class name
        assert all(v.calls == 1 and v.wall_s > 0 and v.cpu_s >= 0 for v in totals.values()), totals
        timer.uninstall()
        assert torch.equal(pipeline(image), expected)
        assert all(v.calls == 0 for v in timer.take().values())  # after uninstall: nothing more counted


def test_a_timed_pipeline_pickles_for_a_spawned_worker():
    v1 = pytest.importorskip("torchvision.transforms")
    pipeline = v1.Compose([v1.CenterCrop(8), v1.Normalize(mean=[0.5], std=[0.5])])
    timer = TransformTimer()
    timer.install(pipeline)
    copy = pickle.loads(pickle.dumps(pipeline))  # what a spawned DataLoader worker receives
    out = copy(torch.rand(1, 16, 16))
    assert out.shape == (1, 8, 8)
    assert transform_name(copy.transforms[0]) == "CenterCrop(size=(8, 8))"


def test_module_leaves_are_replaced_by_a_wrapper_not_hooked_and_keep_their_attributes():
    """Forward hooks put every call of a module on torch's slow path (+8 µs a call measured, +2.5 µs wrapped):
    a list (v1 and v2 containers) gets ``Timed`` wrappers, a ``ModuleList`` (v2's RandomApply takes one)
    ``TimedModule``s; no hook is left on the transforms."""
    v1 = pytest.importorskip("torchvision.transforms")
    v2 = pytest.importorskip("torchvision.transforms.v2")
    from pipeprof.measure.transforms import Timed, TimedModule

    image = torch.rand(1, 16, 16)
    for t, wrapper in ((v1, Timed), (v2, Timed), (v2, TimedModule)):
        crop, normalize = t.CenterCrop(8), t.Normalize(mean=[0.5], std=[0.5])
        held = [crop] if wrapper is Timed else torch.nn.ModuleList([crop])
        pipeline = t.Compose([t.RandomApply(held, p=1.0), normalize])
        expected = pipeline(image)
        timer = TransformTimer()
        timer.install(pipeline)
        timed_crop = pipeline.transforms[0].transforms[0]
        assert type(timed_crop) is wrapper and list(timed_crop.size) == [8, 8]
        assert repr(timed_crop) == repr(crop)
        assert torch.equal(pipeline(image), expected)
        assert not crop._forward_hooks and not crop._forward_pre_hooks and not normalize._forward_hooks
        totals = timer.take()
        assert [n.split("(")[0] for n in totals] == ["CenterCrop", "Normalize"]
        assert [v.calls for v in totals.values()] == [1, 1]
        timer.uninstall()
        assert pipeline.transforms[0].transforms[0] is crop and pipeline.transforms[1] is normalize
