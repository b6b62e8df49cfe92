"""The hooks always undo: after ``pipeprof.profile()`` every attribute any hook patched is the original again.

The attributes to check come from the registry itself (``Patches.apply`` is
watched while the hooks install), so a patch added later is checked without
touching these tests; a snapshot of every class in torch's DataLoader
modules, of ``Tensor`` and of the optimizers catches a change made beside
the registry.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.optim import optimizer as torch_optimizer
from torch.utils.data import DataLoader, IterableDataset, TensorDataset
from torch.utils.data import dataloader as torch_dataloader
from torch.utils.data import dataset as torch_dataset
from torch.utils.data._utils import fetch as torch_fetch

import pipeprof
from pipeprof.measure.sampler import SystemSampler
from pipeprof.script import decode_hooks, hooks, patches
from pipeprof.script.batches import Tagged, TimedCollate

pytestmark = pytest.mark.integration

KNOWN = {(DataLoader, "__iter__"), (torch_dataloader._BaseDataLoaderIter, "__next__"), (torch.Tensor, "to"),
         (torch.Tensor, "cuda"), (torch_fetch._MapDatasetFetcher, "fetch"), (torch_fetch._IterableDatasetFetcher, "fetch")}


def _watch(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, str, Any, Any]]:
    """Every ``Patches.apply`` from now on, with what the owner held just before: (owner, name, own, value)."""
    seen: list[tuple[Any, str, Any, Any]] = []
    real = patches.Patches.apply

    def apply(self: patches.Patches, owner: Any, name: str, make: Any) -> patches.Patch:
        seen.append((owner, name, patches.own_value(owner, name), getattr(owner, name)))
        return real(self, owner, name, make)

    monkeypatch.setattr(patches.Patches, "apply", apply)
    return seen


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, str]]:
    """(owner, name) of every attribute the hooks patch when they install, as the registry records them."""
    with pytest.MonkeyPatch.context() as mp:
        seen = _watch(mp)
        probe = hooks.Hooks(hooks.EventLog(str(tmp_path_factory.mktemp("probe") / "events.jsonl")))
        probe.install()
        probe.uninstall()
    _assert_restored(seen)
    return [(owner, name) for owner, name, _own, _value in seen]


def _state(targets: list[tuple[Any, str]]) -> list[tuple[Any, str, Any, Any]]:
    return [(owner, name, patches.own_value(owner, name), getattr(owner, name)) for owner, name in targets]


def _assert_restored(before: list[tuple[Any, str, Any, Any]]) -> None:
    for owner, name, own, value in before:
        where = f"{getattr(owner, '__qualname__', type(owner).__name__)}.{name}"
        assert patches.own_value(owner, name) is own, f"{where} is not what it was"
        assert getattr(owner, name) is value, f"{where} is not what it was"


def _classes() -> list[type]:
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # torch wraps SGD.step at the first optimizer
    found: list[type] = [torch.Tensor, torch._C.TensorBase, torch_optimizer.Optimizer, torch.optim.SGD]
    for module in (torch_dataloader, torch_fetch, torch_dataset):
        found += [v for v in vars(module).values() if inspect.isclass(v) and v.__module__ == module.__name__]
    return found


LOGS: list[hooks.EventLog] = []  # every event log made by a test (each session has one)


@pytest.fixture(autouse=True)
def _record_logs(monkeypatch: pytest.MonkeyPatch) -> Any:
    real = hooks.EventLog.__init__

    def init(self: hooks.EventLog, path: str, **options: Any) -> None:
        real(self, path, **options)
        LOGS.append(self)

    monkeypatch.setattr(hooks.EventLog, "__init__", init)
    yield
    LOGS.clear()


def _world() -> dict[str, Any]:
    """What the hooks could touch beside the registry: torch's loader, tensor and optimizer classes, the
    optimizers' global hooks."""
    return {"classes": {(cls, key): value for cls in _classes() for key, value in list(vars(cls).items())
                        if key != "__slotnames__"},  # pickle's cache, made the first time a class is pickled
            "post_hooks": dict(torch_optimizer._global_optimizer_post_hooks),
            "pre_hooks": dict(torch_optimizer._global_optimizer_pre_hooks)}


def _assert_world(before: dict[str, Any]) -> None:
    after = _world()
    assert after["classes"].keys() == before["classes"].keys()
    changed = [f"{cls.__qualname__}.{key}" for (cls, key), value in before["classes"].items()
               if after["classes"][(cls, key)] is not value]
    assert changed == []
    assert after["post_hooks"] == before["post_hooks"] and after["pre_hooks"] == before["pre_hooks"]
    assert hooks.active() is None
    for log in LOGS:  # no session's exit flush is left registered (unregistering it would drop the count)
        count = atexit._ncallbacks()
        atexit.unregister(log.flush)
        assert atexit._ncallbacks() == count


class Numbers(IterableDataset):
    def __iter__(self) -> Any:
        for i in range(24):
            yield torch.full((4,), float(i)), torch.tensor(float(i))


def _loaders() -> dict[str, DataLoader]:
    data = TensorDataset(torch.randn(64, 4), torch.randn(64))
    return {"train": DataLoader(data, batch_size=8, shuffle=True),
            "stream": DataLoader(Numbers(), batch_size=6),
            "workers": DataLoader(data, batch_size=16, num_workers=1, persistent_workers=True)}


def _train(loaders: dict[str, DataLoader], raise_at: int | None = None,
           exc: type[BaseException] = ValueError) -> int:
    """A few epochs over every loader, a step per batch; raises ``exc`` at batch ``raise_at``. The batches."""
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = 0
    for loader in loaders.values():
        for x, y in loader:
            assert type(x) is torch.Tensor and type(y) is torch.Tensor
            loss = torch.nn.functional.mse_loss(model(x.to("cpu")).squeeze(1), y.to(torch.float32))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batches += 1
            if batches == raise_at:
                raise exc("boom")
    return batches


def test_the_registry_records_every_patch_the_hooks_make(targets):
    assert KNOWN <= set(targets)  # the six of today; a new one is checked below without being named here


@pytest.mark.parametrize("ending", ["normal", "exception", "interrupt"])
def test_every_patched_attribute_is_the_original_after_the_block(tmp_path, monkeypatch, targets, ending):
    loaders = _loaders()
    instance_targets = [(loader, "collate_fn") for loader in loaders.values()]
    before, world = _state(targets + instance_targets), _world()
    seen = _watch(monkeypatch)
    decodes = {(owner, name) for owner, name, _ in decode_hooks.targets()}  # patched at a loader's first pass
    exc = {"normal": None, "exception": ValueError, "interrupt": KeyboardInterrupt}[ending]
    try:
        with pipeprof.profile(name=ending, out=tmp_path, warmup_steps=0, quiet=True) as prof:
            assert hooks.active() is not None
            assert _train(loaders, raise_at=None if exc is None else 9, exc=exc or ValueError) == 8 + 4 + 4
    except (ValueError, KeyboardInterrupt) as e:
        assert exc is not None and type(e) is exc
    else:
        assert exc is None
    # Everything the registry saw patched during the block, the collate_fn of the loaders iterated included, is back.
    iterated = instance_targets if exc is None else instance_targets[:2]  # batch 9 is the stream's
    assert {(owner, name) for owner, name, _o, _v in seen} == set(targets) | set(iterated) | decodes
    _assert_restored(seen)
    _assert_restored(before)
    _assert_world(world)
    assert loaders["workers"]._iterator is None  # its persistent workers held the timed fetch: ended
    assert prof._hooks.patches.applied() == [] and prof._hooks.patches.stranded == []
    assert prof.summary["steps"] > 0
    assert _train(loaders) == 16  # and the loaders work as before: plain batches
    _assert_world(world)


def _fail_at(monkeypatch: pytest.MonkeyPatch, call: int) -> list[int]:
    """Make the ``call``-th ``Patches.apply`` raise (after the earlier ones succeeded); counts the calls."""
    calls = [0]
    real = patches.Patches.apply

    def apply(self: patches.Patches, owner: Any, name: str, make: Any) -> patches.Patch:
        calls[0] += 1
        if calls[0] == call:
            raise RuntimeError(f"injected failure patching {name}")
        return real(self, owner, name, make)

    monkeypatch.setattr(patches.Patches, "apply", apply)
    return calls


COUNTED = (12, [(8, 64, 1), (4, 24, 1)], 12)  # the train and stream loaders, once each


def _counted(prof: Any) -> tuple[int, list[tuple[int, int, int]], int]:
    """Steps; batches, samples and passes of each loader; batches with their maker's record (timed once)."""
    s = prof.summary
    return s["steps"], [(d["batches"], d["samples"], d["passes"]) for d in s["loaders"]], len(prof.run.loading)


def _a_working_block(tmp_path: Path) -> None:
    """The next profile() works and counts every step once."""
    loaders = _loaders()
    del loaders["workers"]
    world = _world()
    with pipeprof.profile(name="after", out=tmp_path / "after", warmup_steps=0, quiet=True) as prof:
        assert _train(loaders) == 12
    assert _counted(prof) == COUNTED
    _assert_world(world)


def test_a_start_that_fails_at_any_patch_undoes_the_ones_before(tmp_path, monkeypatch, targets):
    before, world = _state(targets), _world()
    for call in range(1, len(targets) + 1):
        with monkeypatch.context() as mp:
            calls = _fail_at(mp, call)
            prof = pipeprof.profile(name="fails", out=tmp_path, quiet=True)
            with pytest.raises(RuntimeError, match="injected failure"):
                with prof:
                    pytest.fail("the block must not run")
            assert calls[0] == call
        _assert_restored(before)
        _assert_world(world)
        assert not Path(prof._tmp.name).exists()  # its temporary folder is gone too
    _a_working_block(tmp_path)


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise OSError("injected failure")


@pytest.mark.parametrize("step", ["event log", "optimizer hook", "atexit", "sampler"])
def test_a_start_that_fails_after_the_patches_undoes_them(tmp_path, monkeypatch, targets, step):
    before, world = _state(targets), _world()
    with monkeypatch.context() as mp:
        if step == "event log":  # the event file cannot be written
            mp.setattr(hooks.EventLog, "open", _boom)
        elif step == "optimizer hook":
            mp.setattr(hooks, "register_optimizer_step_post_hook", _boom)
        elif step == "atexit":
            mp.setattr(hooks.atexit, "register", _boom)
        else:  # the system sampler cannot start (after the hooks installed)
            mp.setattr(SystemSampler, "start", _boom)
        with pytest.raises(OSError, match="injected failure"):
            with pipeprof.profile(name="fails", out=tmp_path, quiet=True):
                pytest.fail("the block must not run")
    _assert_restored(before)
    _assert_world(world)
    _a_working_block(tmp_path)


def test_a_refused_second_block_leaves_the_first_working(tmp_path, targets):
    before, world = _state(targets), _world()
    loaders = _loaders()
    del loaders["workers"]
    with pipeprof.profile(name="outer", out=tmp_path, warmup_steps=0, quiet=True) as outer:
        with pytest.raises(RuntimeError, match="already profiling"):
            with pipeprof.profile(name="inner", out=tmp_path, quiet=True):
                pass
        assert hooks.active() is outer._hooks
        assert _train(loaders) == 12
    assert _counted(outer) == COUNTED
    _assert_restored(before)
    _assert_world(world)


def test_a_patch_over_pipeprofs_wrapper_stays_and_the_wrapper_passes_through(tmp_path, targets):
    before = _state(targets)
    loaders = _loaders()
    del loaders["workers"]
    calls: list[str] = []
    fetcher = torch_fetch._MapDatasetFetcher
    try:
        with pipeprof.profile(name="patched", out=tmp_path, warmup_steps=0, quiet=True) as first:
            ours_iter, ours_fetch, ours_to = DataLoader.__iter__, fetcher.fetch, torch.Tensor.to

            def user_iter(loader: DataLoader) -> Any:  # a library patching over pipeprof's wrappers
                calls.append("iter")
                return ours_iter(loader)

            def user_fetch(self: Any, index: Any) -> Any:
                calls.append("fetch")
                return ours_fetch(self, index)

            def user_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                calls.append("to")
                return ours_to(self, *args, **kwargs)

            DataLoader.__iter__, fetcher.fetch, torch.Tensor.to = user_iter, user_fetch, user_to
            assert _train(loaders) == 12  # still profiled through the user's patches
        assert _counted(first) == COUNTED
        # Their patches stay; pipeprof's wrappers under them are pass-throughs to the originals.
        assert DataLoader.__iter__ is user_iter and fetcher.fetch is user_fetch and torch.Tensor.to is user_to
        assert {(p.owner, p.name) for p in first._hooks.patches.stranded} == {
            (DataLoader, "__iter__"), (fetcher, "fetch"), (torch.Tensor, "to")}
        assert hooks.active() is None
        calls.clear()
        assert _train(loaders) == 12
        assert calls.count("iter") == 2 and calls.count("fetch") == 8 and calls.count("to") == 24  # x and y, a batch
        x, _y = next(ours_iter(loaders["train"]))  # code holding pipeprof's wrapper keeps working
        assert type(x) is torch.Tensor and type(ours_fetch(fetcher(loaders["train"].dataset, True, list, False),
                                                           [0, 1])) is list
        assert ours_to(x, torch.float64).dtype == torch.float64
        # A second block profiles through both layers once: no double timing, no record left on a batch.
        with pipeprof.profile(name="again", out=tmp_path, warmup_steps=0, quiet=True) as second:
            assert _train(loaders) == 12
        assert _counted(second) == COUNTED
        assert DataLoader.__iter__ is user_iter and fetcher.fetch is user_fetch and torch.Tensor.to is user_to
        assert second._hooks.patches.stranded == []
    finally:
        for owner, name, own, _value in before:
            if own is patches.MISSING:
                if name in vars(owner):
                    delattr(owner, name)
            else:
                setattr(owner, name, own)
    _assert_restored(before)


def test_the_collate_a_user_set_during_the_block_stays(tmp_path, targets):
    before = _state(targets)
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16)), batch_size=4)
    theirs = torch.utils.data.default_collate
    with pipeprof.profile(name="collate", out=tmp_path, warmup_steps=0, quiet=True):
        next(iter(loader))
        timed = loader.collate_fn
        assert isinstance(timed, TimedCollate)
        loader.collate_fn = theirs
    assert loader.collate_fn is theirs
    copy.deepcopy(timed)  # a timed collate unpickled in the training process (not a worker) patches nothing
    _assert_restored(before)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_pass_that_goes_on_after_the_block_gets_plain_batches(tmp_path, workers):
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32)), batch_size=4, num_workers=workers)
    with pipeprof.profile(name="tagged", out=tmp_path, warmup_steps=0, quiet=True):
        it = iter(loader)
        next(it)
    assert "_pipeprof_loader" not in vars(it)  # untagged: a later session leaves the pass alone
    # The fetch is torch's again; a worker started under the profiler still times its batches, unwrapped.
    rest = list(it)
    assert len(rest) == 7 and all(type(batch) is not Tagged and type(batch[0]) is torch.Tensor for batch in rest)


BOOT_DRIVER = """
import atexit, json, sys
from pipeprof.script import patches
seen = []
real = patches.Patches.apply
def apply(self, owner, name, make):
    seen.append((owner, name, patches.own_value(owner, name), getattr(owner, name)))
    return real(self, owner, name, make)
patches.Patches.apply = apply

def check():  # registered first, so it runs after every other exit handler
    back = [f"{getattr(o, '__qualname__', type(o).__name__)}.{n}" for o, n, own, value in seen
            if patches.own_value(o, n) is own and getattr(o, n) is value]
    print(json.dumps({"patched": len(seen), "restored": back}))
atexit.register(check)
from pipeprof.script import boot
boot.main(sys.argv[1:])
"""

SCRIPT = """
import sys, torch
from torch.utils.data import DataLoader, TensorDataset
from pipeprof.script import hooks
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32)), batch_size=8)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    model(x.to("cpu")).sum().backward()
    optimizer.step()
assert hooks.active() is not None
sys.exit(3)
"""


def test_profile_script_boot_takes_the_hooks_back_when_the_script_ends(tmp_path):
    (tmp_path / "driver.py").write_text(textwrap.dedent(BOOT_DRIVER))
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    events = tmp_path / "events.jsonl"
    env = {**os.environ, "PIPEPROF_EVENTS": str(events)}
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "train.py")], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr  # the script's own exit status
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["patched"] == len(result["restored"]) >= 7  # the six class patches and the loader's collate_fn
    last = json.loads(events.read_text().splitlines()[-1])
    assert last[0] == "X" and last[2:] == ["exit", 3]


def test_a_spawned_worker_times_its_batches_and_the_training_process_is_restored(tmp_path, targets):
    before, world = _state(targets), _world()
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32)), batch_size=8, num_workers=1,
                        multiprocessing_context="spawn")
    with pipeprof.profile(name="spawned", out=tmp_path, warmup_steps=0, quiet=True) as prof:
        assert all(type(x) is torch.Tensor for x, _y in loader)
    # The worker patched its own fetchers when it unpickled the timed collate: every batch has its record.
    assert list(prof.run.loading["worker"]) == [0, 0, 0, 0]
    assert prof.run.loading["pid"].nunique() == 1 and prof.run.loading["pid"].iloc[0] != os.getpid()
    _assert_restored(before)
    _assert_world(world)


def test_backward_passes_without_an_optimizer_are_steps_each_counted_once(tmp_path, targets):
    # Tensor.backward calls torch.autograd.backward, the one patched: each pass is one step, whichever is called.
    world = _world()
    loader = DataLoader(TensorDataset(torch.randn(48, 4), torch.randn(48)), batch_size=8)
    w = torch.zeros(4, requires_grad=True)
    with pipeprof.profile(name="scratch", out=tmp_path, warmup_steps=0, quiet=True) as prof:
        for i, (x, y) in enumerate(loader):
            loss = ((x @ w - y) ** 2).mean()
            if i % 2:
                loss.backward()
            else:
                torch.autograd.backward(loss)
            with torch.no_grad():  # a hand-written SGD: no torch.optim, no optimizer hook
                w -= 0.01 * w.grad
                w.grad.zero_()
    assert prof.run.meta["step_source"] == "backward"
    assert prof.summary["steps"] == 6 and prof.summary["loaders"][0]["role"] == "train"
    assert prof.run.meta["script"]["torch_threads"]["first step"] == torch.get_num_threads()
    _assert_world(world)
    assert torch.autograd.backward.__module__ == "torch.autograd"  # the original, not pipeprof's wrapper


def test_a_fit_by_hand_after_a_fit_with_torch_optim_counts_its_steps_as_they_come(tmp_path, targets):
    # d2l's MLP then MLPScratch: the second fit has no optimizer step; its backward passes end its steps, both
    # for --steps and code profiling (the step listeners) and in the run.
    world = _world()
    data = TensorDataset(torch.randn(32, 4), torch.randn(32))
    concise_loader, scratch_loader = DataLoader(data, batch_size=8), DataLoader(data, batch_size=8)
    model, w = torch.nn.Linear(4, 1), torch.zeros(4, requires_grad=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    counted: list[int] = []
    with pipeprof.profile(name="two-fits", out=tmp_path, warmup_steps=0, quiet=True) as prof:
        active = hooks.active()
        assert active is not None
        active.step_listeners.append(counted.append)
        for x, y in concise_loader:
            ((model(x).squeeze(1) - y) ** 2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        for x, y in scratch_loader:
            ((x @ w - y) ** 2).mean().backward()
            with torch.no_grad():
                w -= 0.01 * w.grad
                w.grad.zero_()
    assert counted == list(range(1, 9))
    assert prof.run.meta["step_source"] == "optimizer and backward"
    assert prof.summary["steps"] == 8
    assert "uncounted_batches" not in prof.run.meta["absences"]
    _assert_world(world)


def test_one_loader_with_accumulation_then_by_hand_counts_each_pass_as_its_steps(tmp_path, targets):
    # One loader: a fit with torch.optim and two backward passes an optimizer step, then a fit by hand. A later
    # pass of the accumulating fit counts its optimizer steps only; the fit by hand's passes count their
    # backward passes (its first pass once it ends without an optimizer step).
    world = _world()
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32)), batch_size=8)
    model, w = torch.nn.Linear(4, 1), torch.zeros(4, requires_grad=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    counted: list[int] = [0]
    marks: list[int] = []
    with pipeprof.profile(name="one-loader", out=tmp_path, warmup_steps=0, quiet=True) as prof:
        active = hooks.active()
        assert active is not None
        active.step_listeners.append(counted.append)
        for _epoch in range(2):
            for i, (x, y) in enumerate(loader):
                ((model(x).squeeze(1) - y) ** 2).mean().backward()
                if i % 2:
                    optimizer.step()
                    optimizer.zero_grad()
            marks.append(counted[-1])
        for _epoch in range(2):
            for x, y in loader:
                ((x @ w - y) ** 2).mean().backward()
                with torch.no_grad():
                    w -= 0.01 * w.grad
                    w.grad.zero_()
            marks.append(counted[-1])
    assert marks[1] - marks[0] == 2  # the second accumulating pass: its 2 optimizer steps, not 4 backward passes
    assert marks[3] - marks[1] == 8  # the fit by hand: 4 backward passes a pass
    assert prof.run.meta["step_source"] == "optimizer and backward"
    assert prof.summary["steps"] == 4 + 8
    _assert_world(world)


@pytest.mark.parametrize("stopped", [True, False])
def test_a_process_pipeprof_stops_leaves_no_process_group_to_the_interpreters_teardown(tmp_path, stopped):
    """A gloo group left to interpreter teardown can abort the rank (SIGABRT, 1 in ~10 exits of a 2-rank spawn
    on this machine): the hooks destroy the group of a process they stopped, and only of one they stopped."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    prof = hooks.Hooks(hooks.EventLog(str(tmp_path / "events.jsonl")), 2 if stopped else None)
    prof.install()
    try:
        with pytest.raises(SystemExit) if stopped else contextlib.nullcontext():
            _train({"train": _loaders()["train"]})
    finally:
        prof.uninstall()
    try:
        assert dist.is_initialized() is not stopped
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
