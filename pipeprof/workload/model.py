"""The MLPs pipeprof trains: 784 -> hidden widths -> 10, an activation between layers.

Two implementations of the same network, for the classic comparison:

- ``module``: an ``nn.Sequential`` of ``nn.Linear`` and activation modules;
- ``scratch``: explicit parameter tensors and a forward written with
  ``torch.addmm`` and activation functions (``ScratchMLP``).

Both get their initial values from ``initial_parameters``, drawn from a private
``torch.Generator`` seeded with ``spec.seed`` (the global RNG is never touched),
so for one spec they start from the same weights, bit for bit, on any device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from pipeprof.scenario import ModelSpec
from pipeprof.storage.synthetic import CLASSES, FEATURES

PRELU_INIT = 0.25  # nn.PReLU's default slope
LEAKY_SLOPE = 0.01  # nn.LeakyReLU's default negative slope
UNIFORM_BOUND = 0.05  # init "uniform": U(-0.05, 0.05)
NORMAL_STD = 0.01  # init "normal": N(0, 0.01**2)

_ACTIVATION_MODULES: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
    "leaky_relu": lambda: nn.LeakyReLU(LEAKY_SLOPE),
    "prelu": lambda: nn.PReLU(num_parameters=1, init=PRELU_INIT),
}


def layer_widths(hidden: tuple[int, ...]) -> list[int]:
    """``[784, *hidden, 10]``: the widths from input to logits."""
    if len(hidden) < 1 or any(w < 1 for w in hidden):
        raise ValueError(f"hidden must hold at least one width >= 1, got {list(hidden)}")
    return [FEATURES, *hidden, CLASSES]


def initial_parameters(spec: ModelSpec) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One ``(weight (out x in), bias (out))`` pair per linear layer, float32 on the CPU.

    ``spec.init`` chooses the distribution (``fan_in`` is the layer's input width):

    - ``default``: nn.Linear's own: kaiming_uniform_(a=sqrt(5)) weights, i.e.
      U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
      Drawn in nn.Linear's order, so the values equal those of ``nn.Linear``
      layers built in sequence after ``torch.manual_seed(spec.seed)``.
    - ``xavier``: xavier_uniform_ weights, U(-a, a) with a = sqrt(6 / (fan_in + fan_out)); zero bias.
    - ``uniform``: weights and bias U(-0.05, 0.05).
    - ``normal``: weights and bias N(0, 0.01**2), i.e. standard deviation 0.01.
    """
    generator = torch.Generator().manual_seed(spec.seed)
    widths = layer_widths(spec.hidden)
    pairs = []
    for n_in, n_out in zip(widths, widths[1:]):
        weight, bias = torch.empty(n_out, n_in), torch.empty(n_out)
        if spec.init == "default":
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=generator)
            bound = 1 / math.sqrt(n_in)
            nn.init.uniform_(bias, -bound, bound, generator=generator)
        elif spec.init == "xavier":
            nn.init.xavier_uniform_(weight, generator=generator)
            nn.init.zeros_(bias)
        elif spec.init == "uniform":
            nn.init.uniform_(weight, -UNIFORM_BOUND, UNIFORM_BOUND, generator=generator)
            nn.init.uniform_(bias, -UNIFORM_BOUND, UNIFORM_BOUND, generator=generator)
        elif spec.init == "normal":
            nn.init.normal_(weight, 0.0, NORMAL_STD, generator=generator)
            nn.init.normal_(bias, 0.0, NORMAL_STD, generator=generator)
        else:
            raise ValueError(f"unknown init {spec.init!r}")
        pairs.append((weight, bias))
    return pairs


class ScratchMLP:
    """The MLP as plain tensors: ``weights[i]`` (out x in), ``biases[i]``, and for
    ``prelu`` one learnable slope per hidden layer in ``slopes``.

    Parameters are listed (``parameters``, ``named_parameters``) in the order
    and under the names of the equivalent ``nn.Sequential``, so the two
    implementations can be compared entry by entry.
    """

    def __init__(self, pairs: list[tuple[torch.Tensor, torch.Tensor]], activation: str,
                 device: torch.device) -> None:
        if activation not in _ACTIVATION_MODULES:
            raise ValueError(f"unknown activation {activation!r}")
        self.activation = activation
        self.weights = [w.to(device).requires_grad_() for w, _ in pairs]
        self.biases = [b.to(device).requires_grad_() for _, b in pairs]
        hidden_layers = len(pairs) - 1
        self.slopes = ([torch.full((1,), PRELU_INIT, device=device, requires_grad=True)
                        for _ in range(hidden_layers)] if activation == "prelu" else [])

    def _activate(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        if self.activation == "relu":
            return torch.relu(h)
        if self.activation == "sigmoid":
            return torch.sigmoid(h)
        if self.activation == "tanh":
            return torch.tanh(h)
        if self.activation == "leaky_relu":
            return F.leaky_relu(h, LEAKY_SLOPE)
        return F.prelu(h, self.slopes[layer])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (batch x 10) for ``x`` (batch x 784)."""
        h = x
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.addmm(b, h, w.t())
            if i < last:
                h = self._activate(h, i)
        return h

    __call__ = forward

    def named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """``(name, tensor)`` as ``nn.Sequential.named_parameters`` would name them."""
        index = 0  # the Sequential's child index: Linear, activation, Linear, ...
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            yield f"{index}.weight", w
            yield f"{index}.bias", b
            if i < len(self.weights) - 1:
                if self.slopes:
                    yield f"{index + 1}.weight", self.slopes[i]
                index += 2

    def parameters(self) -> list[torch.Tensor]:
        return [p for _, p in self.named_parameters()]

    def train(self, mode: bool = True) -> ScratchMLP:
        return self  # no dropout or batch norm: nothing differs between modes


Model = nn.Module | ScratchMLP  # what build_model returns, by spec.implementation


def build_model(spec: ModelSpec, device: torch.device) -> Model:
    """The MLP ``spec`` describes, on ``device``, deterministic for ``spec.seed``.

    ``spec.compile`` is not applied here: the training step compiles the
    forward (see ``pipeprof.workload.step.make_train_step``), so the model
    returned stays a plain, inspectable object.
    """
    pairs = initial_parameters(spec)
    if spec.implementation == "scratch":
        return ScratchMLP(pairs, spec.activation, torch.device(device))
    if spec.implementation != "module":
        raise ValueError(f"unknown implementation {spec.implementation!r}")
    if spec.activation not in _ACTIVATION_MODULES:
        raise ValueError(f"unknown activation {spec.activation!r}")
    layers: list[nn.Module] = []
    for i, (weight, bias) in enumerate(pairs):
        # skip_init: no throw-away random init (and no draw from the global RNG).
        linear = nn.utils.skip_init(nn.Linear, weight.shape[1], weight.shape[0], device=device)
        with torch.no_grad():
            linear.weight.copy_(weight)
            linear.bias.copy_(bias)
        layers.append(linear)
        if i < len(pairs) - 1:
            layers.append(_ACTIVATION_MODULES[spec.activation]())
    return nn.Sequential(*layers).to(device)
