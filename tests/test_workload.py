"""The MLP variants and their training steps: shapes, inits, module vs scratch, SGD by hand, compile."""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch import nn

from pipeprof.scenario import ACTIVATIONS, INITS, ModelSpec
from pipeprof.workload.model import ScratchMLP, build_model, initial_parameters
from pipeprof.workload.step import ScratchSGD, make_train_step

CPU = torch.device("cpu")
IMPLEMENTATIONS = ("module", "scratch")


def toy_batches(n_batches: int = 4, batch: int = 32, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Noisy copies of ten random prototypes: learnable within a few dozen steps."""
    g = torch.Generator().manual_seed(seed)
    prototypes = torch.rand(10, 784, generator=g)
    batches = []
    for _ in range(n_batches):
        y = torch.randint(0, 10, (batch,), generator=g)
        x = prototypes[y] + 0.5 * torch.randn(batch, 784, generator=g)
        batches.append((x, y))
    return batches


def losses(spec: ModelSpec, steps: int, batches=None) -> list[float]:
    batches = batches or toy_batches()
    step = make_train_step(build_model(spec, CPU), spec)
    out = [step(*batches[i % len(batches)])[0] for i in range(steps)]
    return [v.item() for v in out]  # read after the loop, as the runner does


def linears(model) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if isinstance(model, ScratchMLP):
        return list(zip(model.weights, model.biases))
    return [(m.weight, m.bias) for m in model if isinstance(m, nn.Linear)]


# ---- structure -------------------------------------------------------------------------------


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("hidden", [(256,), (256, 128, 64, 32, 16), (4096, 4096)], ids=str)
def test_layers_follow_the_hidden_widths(hidden, implementation):
    spec = ModelSpec(hidden=hidden, implementation=implementation)
    model = build_model(spec, CPU)
    widths = [784, *hidden, 10]
    layers = linears(model)
    assert len(layers) == len(hidden) + 1
    assert [tuple(w.shape) for w, _ in layers] == list(zip(widths[1:], widths))
    assert [tuple(b.shape) for _, b in layers] == [(n,) for n in widths[1:]]
    if implementation == "module":
        assert sum(isinstance(m, nn.ReLU) for m in model) == len(hidden)  # between layers, none after the last
    assert build_model(spec, CPU)(torch.zeros(3, 784)).shape == (3, 10)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_prelu_has_one_learnable_slope_per_hidden_layer(implementation):
    model = build_model(ModelSpec(hidden=(8, 8, 8), activation="prelu", implementation=implementation), CPU)
    slopes = [p for name, p in model.named_parameters() if p.numel() == 1]
    assert len(slopes) == 3
    assert all(p.requires_grad and p.item() == 0.25 for p in slopes)


def test_an_empty_hidden_list_is_refused():
    with pytest.raises(ValueError, match="at least one width"):
        build_model(ModelSpec(hidden=()), CPU)


# ---- initialization ----------------------------------------------------------------------------


def test_default_init_is_nn_linears_own():
    torch.manual_seed(7)
    expected = [nn.Linear(784, 64), nn.Linear(64, 32), nn.Linear(32, 10)]
    for (w, b), linear in zip(linears(build_model(ModelSpec(hidden=(64, 32), seed=7), CPU)), expected):
        assert torch.equal(w, linear.weight) and torch.equal(b, linear.bias)


@pytest.mark.parametrize("init, weight_bound, weight_std, bias_std", [
    ("default", 1 / math.sqrt(784), 1 / math.sqrt(3 * 784), 1 / math.sqrt(3 * 784)),
    ("xavier", math.sqrt(6 / (784 + 256)), math.sqrt(2 / (784 + 256)), 0.0),
    ("uniform", 0.05, 0.05 / math.sqrt(3), 0.05 / math.sqrt(3)),
    ("normal", None, 0.01, 0.01),
])
def test_init_distributions(init, weight_bound, weight_std, bias_std):
    w, b = initial_parameters(ModelSpec(hidden=(256,), init=init))[0]
    if weight_bound is not None:
        assert w.abs().max().item() <= weight_bound
    assert w.std().item() == pytest.approx(weight_std, rel=0.02)
    assert w.mean().item() == pytest.approx(0.0, abs=weight_std / 50)
    if bias_std == 0.0:
        assert torch.equal(b, torch.zeros_like(b))
    else:
        assert b.std().item() == pytest.approx(bias_std, rel=0.2)  # 256 values: a looser estimate


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_deterministic_by_seed_and_the_global_rng_is_left_alone(implementation):
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    params = lambda seed: [p.detach().clone() for p in build_model(  # noqa: E731
        ModelSpec(hidden=(32, 16), seed=seed, activation="prelu", implementation=implementation), CPU).parameters()]
    a, b, c = params(1), params(1), params(2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert torch.equal(torch.random.get_rng_state(), before)


# ---- training ----------------------------------------------------------------------------------


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_each_activation_trains(activation, implementation):
    # One hidden layer: behind two, sigmoid and the N(0, 0.01) init barely move in 30 steps
    # at lr 0.05 (the vanishing signal these comparisons exist to show).
    values = losses(ModelSpec(hidden=(64,), activation=activation, implementation=implementation), 30)
    assert sum(values[-4:]) / 4 < 0.5 * values[0], values


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("init", INITS)
def test_each_init_trains(init, implementation):
    values = losses(ModelSpec(hidden=(64,), init=init, implementation=implementation), 30)
    assert sum(values[-4:]) / 4 < 0.5 * values[0], values


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_module_and_scratch_start_equal_and_train_alike(activation):
    specs = [ModelSpec(hidden=(64, 32), seed=3, activation=activation, implementation=i) for i in IMPLEMENTATIONS]
    module, scratch = (build_model(s, CPU) for s in specs)
    named_m, named_s = dict(module.named_parameters()), dict(scratch.named_parameters())
    assert list(named_m) == list(named_s)
    assert all(torch.equal(named_m[k], named_s[k]) for k in named_m)

    batches = toy_batches()
    steps = [make_train_step(m, s) for m, s in zip((module, scratch), specs)]
    for i in range(5):
        (loss_m, correct_m), (loss_s, correct_s) = (step(*batches[i % 4]) for step in steps)
        torch.testing.assert_close(loss_s, loss_m, rtol=0, atol=1e-5)
        assert correct_m.item() == correct_s.item()
    for k in named_m:  # the updates, not only the losses, agree
        torch.testing.assert_close(named_s[k], named_m[k], rtol=0, atol=1e-5)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_scratch_sgd_equals_torch_sgd(momentum):
    g = torch.Generator().manual_seed(0)
    start = [torch.randn(5, 3, generator=g), torch.randn(3, generator=g)]
    ours = [p.clone().requires_grad_() for p in start]
    theirs = [p.clone().requires_grad_() for p in start]
    opt_ours, opt_theirs = ScratchSGD(ours, 0.1, momentum), torch.optim.SGD(theirs, lr=0.1, momentum=momentum)
    x = torch.randn(8, 5, generator=g)
    for _ in range(6):
        for params, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad()
            ((x @ params[0] + params[1]).tanh() ** 2).sum().backward()
            opt.step()
        assert all(p.grad is not None for p in ours)
        for a, b in zip(ours, theirs):
            assert torch.equal(a, b)
    opt_ours.zero_grad()
    assert all(p.grad is None for p in ours)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_step_never_reads_a_value_back(implementation, monkeypatch):
    """On a GPU, .item() / bool() / float() on a device tensor would synchronize every step."""
    spec = ModelSpec(hidden=(16,), implementation=implementation)
    step = make_train_step(build_model(spec, CPU), spec)
    x, y = toy_batches(1)[0]

    def refuse(*args, **kwargs):
        raise AssertionError("the training step read a tensor's value")

    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    loss, correct = step(x, y)
    loss, correct = step(x, y)
    monkeypatch.undo()
    assert loss.shape == () and not loss.requires_grad and loss.grad_fn is None
    assert correct.dtype == torch.int64 and 0 <= correct.item() <= len(y)


def test_a_model_of_the_other_implementation_is_refused():
    model = build_model(ModelSpec(hidden=(8,)), CPU)
    with pytest.raises(ValueError, match="scratch"):
        make_train_step(model, ModelSpec(hidden=(8,), implementation="scratch"))


# ---- torch.compile -----------------------------------------------------------------------------


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_compiled_training_matches_eager(implementation):
    torch._dynamo.reset()
    eager = ModelSpec(hidden=(16,), activation="tanh", implementation=implementation)
    compiled = ModelSpec(hidden=(16,), activation="tanh", implementation=implementation, compile=True)
    batches = toy_batches(2)
    t0 = time.perf_counter()
    got = losses(compiled, 4, batches)
    assert time.perf_counter() - t0 < 60, "compiling a tiny MLP took over a minute"
    torch.testing.assert_close(got, losses(eager, 4, batches), rtol=0, atol=1e-5)


def test_a_compiler_failure_is_a_runtime_error_with_the_reason(monkeypatch):
    cpp = getattr(torch._inductor.config, "cpp", None)
    if cpp is None or not hasattr(cpp, "cxx"):
        pytest.skip("this torch has no torch._inductor.config.cpp.cxx to point at a missing compiler")
    torch._dynamo.reset()
    monkeypatch.setattr(cpp, "cxx", ("pipeprof-no-such-compiler",))
    spec = ModelSpec(hidden=(24,), activation="sigmoid", compile=True)
    step = make_train_step(build_model(spec, CPU), spec)
    x, y = toy_batches(1, batch=4)[0]
    try:
        with pytest.raises(RuntimeError, match="could not compile.*compiler"):
            step(x, y)
    finally:
        torch._dynamo.reset()
