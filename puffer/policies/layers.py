"""The layers every network is made of: the activations `policy.activation` names, orthogonal
initialization (the PPO implementation-details recipe), the MLP and an ensemble of MLPs."""

from __future__ import annotations

import math

import torch
from torch import nn

# keyed by the vocabulary of policy.activation (puffer.config.schema.ACTIVATIONS)
ACTIVATION_LAYERS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}


def activation_layer(name: str) -> nn.Module:
    """A new layer of the activation `policy.activation` names; a ValueError naming the key otherwise."""
    if name not in ACTIVATION_LAYERS:
        raise ValueError(f"policy.activation={name!r}: expected one of {sorted(ACTIVATION_LAYERS)}")
    return ACTIVATION_LAYERS[name]()


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    """Orthogonal weights and constant bias (the PPO implementation-details recipe)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


def default_init(module: nn.Module) -> None:
    """PyTorch's own initialization for every linear, convolution and embedding layer inside
    `module` (undoing layer_init)."""
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d, nn.Embedding)):
            layer.reset_parameters()


def mlp(in_dim: int, hidden: int, layers: int, activation: str, layer_norm: bool = False) -> nn.Sequential:
    """`layers` linear layers of `hidden` units, each followed by the activation; `layer_norm`
    puts a LayerNorm between each linear layer and its activation (PQN's network)."""
    activation_layer(activation)  # the name checked before any layer is built
    modules, dim = [], in_dim
    for _ in range(layers):
        modules.append(layer_init(nn.Linear(dim, hidden)))
        if layer_norm:
            modules.append(nn.LayerNorm(hidden))
        modules.append(activation_layer(activation))
        dim = hidden
    return nn.Sequential(*modules)


class EnsembleMLP(nn.Module):
    """`members` independent MLPs of the same shape (SAC's twin critics) applied in one batched
    matmul per layer: weights stacked on a leading member axis, each member's initialized as
    PyTorch's nn.Linear is (uniform in +-1/sqrt(fan_in)), ending in `out_dim` outputs.

    `forward(x, detach=True)` uses the weights without their gradients (the SAC actor's loss
    reads the critics it must not train)."""

    def __init__(self, members: int, in_dim: int, hidden: int, layers: int, activation: str, out_dim: int = 1):
        super().__init__()
        self.activation = activation_layer(activation)
        sizes = [in_dim, *[hidden] * layers, out_dim]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            bound = 1 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(members, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(members, 1, fan_out).uniform_(-bound, bound)))

    def forward(self, x: torch.Tensor, detach: bool = False) -> torch.Tensor:
        """x: (batch, in) for every member, or (members, batch, in); returns (members, batch, out)."""
        if x.dim() == 2:
            x = x.expand(len(self.weights[0]), *x.shape)
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            if detach:
                weight, bias = weight.detach(), bias.detach()
            x = torch.baddbmm(bias, x, weight)
            if i < last:
                x = self.activation(x)
        return x
