"""The layers every network is made of: the activations `policy.activation` names, orthogonal
initialization (the PPO implementation-details recipe) and the MLP."""

from __future__ import annotations

import math

from torch import nn

# keyed by the vocabulary of policy.activation (puffer.config.schema.ACTIVATIONS)
ACTIVATION_LAYERS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}


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
    if activation not in ACTIVATION_LAYERS:
        raise ValueError(f"policy.activation={activation!r}: expected one of {sorted(ACTIVATION_LAYERS)}")
    modules, dim = [], in_dim
    for _ in range(layers):
        modules.append(layer_init(nn.Linear(dim, hidden)))
        if layer_norm:
            modules.append(nn.LayerNorm(hidden))
        modules.append(ACTIVATION_LAYERS[activation]())
        dim = hidden
    return nn.Sequential(*modules)
