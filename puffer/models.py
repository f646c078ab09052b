"""Policies and action distributions.

What lives here: `Default` (an MLP actor-critic over any emulated observation), `ObsEncoder`
(flat row -> features, unflattening structured observations per leaf) and `ActionDist` (sampling,
log-probabilities and entropy for Discrete, MultiDiscrete, Box and HybridBox action spaces).
What does not: the training loop (puffer.ppo).

A policy maps a batch of flat observations to `(dist_params, value)`; `ActionDist` built from the
action space interprets `dist_params`: logits for categorical spaces, `(mean, log_std)` for Box,
`(logits, mean, log_std)` for HybridBox.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from puffer.actions import HybridBox
from puffer.spaces import ObsLayout, format_path

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}


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


def mlp(in_dim: int, hidden: int, layers: int, activation: str) -> nn.Sequential:
    if activation not in ACTIVATIONS:
        raise ValueError(f"policy.activation={activation!r}: expected one of {sorted(ACTIVATIONS)}")
    modules, dim = [], in_dim
    for _ in range(layers):
        modules += [layer_init(nn.Linear(dim, hidden)), ACTIVATIONS[activation]()]
        dim = hidden
    return nn.Sequential(*modules)


IMAGE_FEATURES = 256  # features of each image leaf of a structured observation


def nature_convs(chw: tuple[int, ...]) -> tuple[nn.Sequential, int]:
    """The Nature DQN's convolutions (32-8-4, 64-4-2, 64-3-1, ReLUs, flattened) for (C, H, W)
    frames, and how many features they give."""
    convs = nn.Sequential(
        layer_init(nn.Conv2d(chw[0], 32, 8, stride=4)), nn.ReLU(),
        layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
        layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
        nn.Flatten(),
    )
    with torch.no_grad():
        return convs, convs(torch.zeros(1, *chw)).shape[1]


def is_image(space: spaces.Space) -> bool:
    """Frames large enough for the Nature CNN: a Box of 2 (H, W) or 3 (channels first or last)
    dims whose values are pixels, uint8 or declared 0-255, and whose spatial sides are 36 or more."""
    if not (isinstance(space, spaces.Box) and len(space.shape) in (2, 3)):
        return False
    pixels = space.dtype == np.uint8 or (np.all(space.low == 0) and np.all(space.high == 255))
    if not pixels:
        return False
    shape = tuple(space.shape)
    if len(shape) == 2:
        spatial = shape
    else:
        spatial = shape[:2] if pixel_layout(shape) == "hwc" else shape[1:]
    return min(spatial) >= 36


class ImageEncoder(nn.Module):
    """The Nature CNN torso on one image ((C, H, W), (H, W, C) or (H, W), pixels scaled by
    1/255), then a linear layer to IMAGE_FEATURES (SB3's CombinedExtractor does the same for
    Dict observations): a top-level image observation or an image leaf of a structured one."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.shape = shape = tuple(int(d) for d in shape)
        self.layout = "hw" if len(shape) == 2 else pixel_layout(shape)
        chw = {"hw": (1, *shape), "hwc": (shape[-1], *shape[:2]), "chw": shape}[self.layout]
        self.convs, flat = nature_convs(chw)
        self.linear = nn.Sequential(layer_init(nn.Linear(flat, IMAGE_FEATURES)), nn.ReLU())

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        if self.layout == "hwc":
            frames = frames.permute(0, 3, 1, 2)
        elif self.layout == "hw":
            frames = frames.unsqueeze(1)
        return self.linear(self.convs(frames.float() / 255.0))


SYMBOL_EMBEDDING, SYMBOL_FEATURES, SYMBOL_VOCABULARY = 8, 256, 1 << 16


def is_symbol_grid(space: spaces.Space) -> bool:
    """A 2-d Box of signed or wide integers, each cell one symbol of a bounded set (NetHack's
    glyph ids, 0..5976 over 21x79): values that name things, not pixel intensities. uint8 grids
    stay images or floats (MiniGrid's object/colour/state channels train as floats)."""
    if not (isinstance(space, spaces.Box) and len(space.shape) == 2 and space.dtype.kind in "iu"
            and space.dtype != np.uint8 and min(space.shape) >= 2):
        return False
    low, high = np.min(space.low), np.max(space.high)
    return 1 < int(high) - int(low) + 1 <= SYMBOL_VOCABULARY


class SymbolGridEncoder(nn.Module):
    """A grid of symbol ids -> features: a learned embedding per symbol (ids from the space's
    lowest), flattened in grid order, then a linear layer and ReLU."""

    def __init__(self, space: spaces.Box):
        super().__init__()
        self.shape = tuple(int(d) for d in space.shape)
        self.low, vocabulary = int(np.min(space.low)), int(np.max(space.high)) - int(np.min(space.low)) + 1
        self.embed = nn.Embedding(vocabulary, SYMBOL_EMBEDDING)
        self.project = nn.Sequential(
            layer_init(nn.Linear(int(np.prod(self.shape)) * SYMBOL_EMBEDDING, SYMBOL_FEATURES)), nn.ReLU())

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        ids = (grid.long() - self.low).clamp(0, self.embed.num_embeddings - 1)
        return self.project(self.embed(ids).flatten(1))


TEXT_EMBEDDING, TEXT_FEATURES = 16, 64


class TextEncoder(nn.Module):
    """A Text leaf's character codes -> features: a learned embedding per character (code 0, the
    padding, embeds to zeros), the sequence flattened in order, then a linear layer and ReLU."""

    def __init__(self, vocabulary: int, max_length: int):
        super().__init__()
        self.embed = nn.Embedding(vocabulary + 1, TEXT_EMBEDDING, padding_idx=0)
        self.project = nn.Sequential(layer_init(nn.Linear(max_length * TEXT_EMBEDDING, TEXT_FEATURES)), nn.ReLU())

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.project(self.embed(codes.long()).flatten(1))


class ObsEncoder(nn.Module):
    """Flat observations -> float features, an encoder chosen from the space at every level: an
    image (pixel frames of 36x36 or more, `is_image`) by a small CNN, whether it is the whole
    observation or a leaf of a Dict/Tuple; a structured space (the emulated FlatBox remembers it)
    is unflattened and each leaf encoded: images by a CNN each, other Boxes as floats, Discrete
    and MultiDiscrete as one-hots, MultiBinary as 0/1 floats, Text by a character embedding
    (TextEncoder); the leaves are concatenated. Any other Box is flattened."""

    def __init__(self, observation_space: spaces.Space):
        super().__init__()
        native = getattr(observation_space, "native", None)
        self.layout = ObsLayout(native) if native is not None else None
        self.image = None  # the encoder of a top-level image or symbol grid
        if self.layout is None:
            kind = "flat"
            if is_image(observation_space):
                kind, self.image = "cnn", ImageEncoder(observation_space.shape)
                self.out_dim = IMAGE_FEATURES
            elif is_symbol_grid(observation_space):
                kind, self.image = "embedding", SymbolGridEncoder(observation_space)
                self.out_dim = SYMBOL_FEATURES
            else:
                self.out_dim = int(np.prod(observation_space.shape))
            self.leaves = [("obs", kind, self.out_dim)]
            return
        self.encoders = []
        self.out_dim = 0
        self.cnns = nn.ModuleList()  # one small Nature torso per image leaf (or embedding per symbol grid)
        self.texts = nn.ModuleList()  # one character embedding per text leaf
        for leaf in self.layout.leaves:
            if is_image(leaf.space):
                encode = ("cnn", [IMAGE_FEATURES], len(self.cnns))
                self.cnns.append(ImageEncoder(leaf.shape))
            elif is_symbol_grid(leaf.space):
                encode = ("embedding", [SYMBOL_FEATURES], len(self.cnns))
                self.cnns.append(SymbolGridEncoder(leaf.space))
            elif isinstance(leaf.space, spaces.Text):
                encode = ("text", [TEXT_FEATURES], len(self.texts))
                self.texts.append(TextEncoder(len(leaf.space.character_set), leaf.size))
            elif isinstance(leaf.space, spaces.Discrete):
                encode = ("onehot", [int(leaf.space.n)], [int(leaf.space.start)])
            elif isinstance(leaf.space, spaces.MultiDiscrete):
                encode = ("onehot", leaf.space.nvec.ravel().tolist(), leaf.space.start.ravel().tolist())
            else:
                encode = ("float", [leaf.size], None)
            self.encoders.append(encode)
            self.out_dim += sum(encode[1])
        self.leaves = [(format_path("obs", leaf.path), kind, sum(sizes))
                       for leaf, (kind, sizes, _) in zip(self.layout.leaves, self.encoders, strict=True)]

    def describe(self) -> str:
        """How each leaf is read, for the run's log: e.g. `obs: cnn -> 256`."""
        return ", ".join(f"{name}: {kind} -> {size}" for name, kind, size in self.leaves)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        batch = obs.shape[0]
        if self.layout is None:
            if self.image is not None:
                return self.image(obs)
            return obs.reshape(batch, -1).float()
        parts = []
        for (kind, sizes, starts), value in zip(self.encoders, self.layout.leaf_values(obs), strict=True):
            if kind in ("cnn", "embedding"):
                parts.append(self.cnns[starts](value.reshape(batch, *self.cnns[starts].shape)))
                continue
            value = value.reshape(batch, -1)
            if kind == "text":
                parts.append(self.texts[starts](value))
                continue
            if kind == "float":
                parts.append(value.float())
                continue
            for column, (n, start) in enumerate(zip(sizes, starts, strict=True)):
                index = (value[:, column].long() - start).clamp(0, n - 1)
                parts.append(nn.functional.one_hot(index, n).float())
        return torch.cat(parts, dim=-1)


def _gumbel_max(logits: torch.Tensor) -> torch.Tensor:
    """One categorical draw per row (keepdim): argmax of logits plus Gumbel noise, which is
    -log of an Exp(1) draw (3x faster than torch.multinomial for a few rows)."""
    return (logits - torch.empty_like(logits).exponential_().log()).argmax(-1, keepdim=True)


class ActionDist:
    """Sampling, log-probabilities, entropy and the deterministic action for one action space."""

    def __init__(self, action_space: spaces.Space):
        self.space = action_space
        if isinstance(action_space, spaces.Discrete):
            self.nvec, self.continuous = [int(action_space.n)], 0
        elif isinstance(action_space, spaces.MultiDiscrete):
            self.nvec, self.continuous = action_space.nvec.ravel().tolist(), 0
        elif isinstance(action_space, HybridBox):
            self.nvec = action_space.nvec.tolist()
            self.continuous = action_space.shape[0] - len(self.nvec)
        elif isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
            self.nvec, self.continuous = [], action_space.shape[0]
        else:
            raise ValueError(
                f"action space {action_space} is not an emulated flat action space; wrap the env "
                "with puffer.emulation first"
            )
        self.discrete_only = isinstance(action_space, spaces.Discrete)
        self.num_logits = sum(self.nvec)

    # dist_params: logits | (mean, log_std) | (logits, mean, log_std)
    def _split(self, params):
        if not self.continuous:
            return params, None, None
        if not self.nvec:
            return None, *params
        return params

    def sample(self, params) -> tuple[torch.Tensor, torch.Tensor]:
        """An action per row and its log-probability."""
        if not self.continuous:
            return self._sample_discrete(params)
        logits, mean, log_std = self._split(params)
        parts = []
        if logits is not None:
            parts += [_gumbel_max(chunk) for chunk in logits.split(self.nvec, dim=-1)]
        if mean is not None:
            parts.append(mean + log_std.exp() * torch.randn_like(mean))
        action = self._join(parts)
        logprob, _ = self.log_prob_entropy(params, action)
        return action, logprob

    def _sample_discrete(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # The rollout samples an action per step: no entropy, half the ops of the general path
        # (on 2 CPU cores, 0.4 ms of each Atari batch's 3.5 ms went to sampling).
        parts, logprob = [], None
        chunks = logits.split(self.nvec, dim=-1) if len(self.nvec) > 1 else (logits,)
        for chunk in chunks:
            log_p = torch.log_softmax(chunk, dim=-1)
            choice = _gumbel_max(log_p)
            parts.append(choice)
            chosen = log_p.gather(-1, choice).squeeze(-1)
            logprob = chosen if logprob is None else logprob + chosen
        return self._join(parts), logprob

    def mode(self, params) -> torch.Tensor:
        """The deterministic action: argmax of each categorical, the mean of the Gaussian."""
        logits, mean, _ = self._split(params)
        parts = []
        if logits is not None:
            parts += [chunk.argmax(dim=-1, keepdim=True) for chunk in logits.split(self.nvec, dim=-1)]
        if mean is not None:
            parts.append(mean)
        return self._join(parts)

    def _join(self, parts: list[torch.Tensor]) -> torch.Tensor:
        if self.discrete_only:
            return parts[0].squeeze(-1)
        if not self.continuous:
            return torch.cat(parts, dim=-1)
        return torch.cat([p.float() for p in parts], dim=-1)

    def log_prob_entropy(self, params, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, mean, log_std = self._split(params)
        logprob = torch.zeros(action.shape[0], device=action.device)
        entropy = torch.zeros_like(logprob)
        if logits is not None:
            indices = action.reshape(action.shape[0], -1)[:, : len(self.nvec)].long()
            for column, chunk in enumerate(logits.split(self.nvec, dim=-1)):
                log_p = torch.log_softmax(chunk, dim=-1)
                logprob = logprob + log_p.gather(-1, indices[:, column : column + 1]).squeeze(-1)
                entropy = entropy - (log_p.exp() * log_p).sum(-1)
        if mean is not None:
            value = action[:, len(self.nvec) :]
            log_std = log_std.expand_as(mean)
            z = (value - mean) / log_std.exp()
            logprob = logprob + (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
            entropy = entropy + (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
        return logprob, entropy

    def to_env(self, action: torch.Tensor) -> np.ndarray:
        """Policy action -> what the vector env takes: continuous parts clipped to the bounds."""
        array = action.cpu().numpy()
        if self.continuous:
            array = np.clip(array, self.space.low, self.space.high)
        return array


class ActionHead(nn.Module):
    """Hidden features -> dist_params for `ActionDist` (small-init logits and means)."""

    def __init__(self, action_space: spaces.Space, hidden: int, log_std_init: float = 0.0):
        super().__init__()
        self.dist = ActionDist(action_space)
        self.logits = layer_init(nn.Linear(hidden, self.dist.num_logits), std=0.01) if self.dist.nvec else None
        if self.dist.continuous:
            self.mean = layer_init(nn.Linear(hidden, self.dist.continuous), std=0.01)
            self.log_std = nn.Parameter(torch.full((1, self.dist.continuous), float(log_std_init)))

    def forward(self, hidden: torch.Tensor):
        logits = self.logits(hidden) if self.logits is not None else None
        if not self.dist.continuous:
            return logits
        gaussian = (self.mean(hidden), self.log_std.expand(hidden.shape[0], -1))
        return gaussian if logits is None else (logits, *gaussian)


class Default(nn.Module):
    """Separate actor and critic MLPs over the encoded observation (CleanRL's agent, extended to
    structured observations and every emulated action space).

    `ortho_init=False` gives every layer PyTorch's default initialization instead of orthogonal
    weights with small action and value heads (SB3's `ortho_init=False`, which the zoo's MuJoCo
    settings use: the action means start spread rather than all near 0)."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 hidden_size: int = 64, num_layers: int = 2, activation: str = "tanh",
                 log_std_init: float = 0.0, ortho_init: bool = True):
        super().__init__()
        self.encoder = ObsEncoder(observation_space)
        self.actor = mlp(self.encoder.out_dim, hidden_size, num_layers, activation)
        self.critic = mlp(self.encoder.out_dim, hidden_size, num_layers, activation)
        self.action_head = ActionHead(action_space, hidden_size, log_std_init)
        self.value_head = layer_init(nn.Linear(hidden_size, 1), std=1.0)
        if not ortho_init:
            default_init(self)

        self.hidden_out = 2 * hidden_size  # encode(): actor and critic features side by side

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.encoder(obs)
        return torch.cat([self.actor(features), self.critic(features)], dim=-1)

    def decode(self, hidden: torch.Tensor):
        actor, critic = hidden.chunk(2, dim=-1)
        return self.action_head(actor), self.value_head(critic).squeeze(-1)

    def forward(self, obs: torch.Tensor):
        features = self.encoder(obs)
        return self.action_head(self.actor(features)), self.value_head(self.critic(features)).squeeze(-1)


PIXEL_LAYOUTS = ("auto", "chw", "hwc")


def pixel_layout(shape: tuple[int, ...], layout: str = "auto") -> str:
    """chw or hwc for a 3-d frame shape: `auto` takes a last axis of 1, 3 or 4 (gray, RGB, RGBA)
    after a larger first one as channels last (gymnasium's render and most envs' frames)."""
    if layout not in PIXEL_LAYOUTS:
        raise ValueError(f"policy.layout={layout!r}: expected one of {PIXEL_LAYOUTS}")
    if layout != "auto":
        return layout
    return "hwc" if shape[-1] in (1, 3, 4) and shape[0] > 4 else "chw"


class NatureCNN(nn.Module):
    """The Nature DQN torso (conv 32-8-4, 64-4-2, 64-3-1, linear 512) shared by the actor and
    the critic, on uint8 pixels scaled by 1/255, (C, H, W) or (H, W, C) (`layout`, found from
    the shape by default). `channels_last` keeps activations NHWC, about twice as fast on CPUs;
    it changes no result."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 hidden_size: int = 512, channels_last: bool = True, layout: str = "auto"):
        super().__init__()
        shape = tuple(observation_space.shape)
        if len(shape) != 3:
            raise ValueError(f"policy=cnn expects (C, H, W) or (H, W, C) pixel observations, got "
                             f"shape {shape}")
        self.hwc = pixel_layout(shape, layout) == "hwc"
        if self.hwc:  # the env's (H, W, C) frames are viewed as (C, H, W) in encode(), no copy
            shape = (shape[2], shape[0], shape[1])
        if min(shape[1:]) < 36:
            raise ValueError(f"policy=cnn needs frames of at least 36x36 (the Nature CNN's kernels "
                             f"and strides), got {shape[1]}x{shape[2]}; use policy=default (an MLP "
                             "over the flattened pixels) for small grids")
        self.channels_last = channels_last
        self.scale = 1.0 / 255.0 if np.dtype(observation_space.dtype) == np.uint8 else 1.0
        self.convs, flat = nature_convs(shape)
        self.trunk = nn.Sequential(layer_init(nn.Linear(flat, hidden_size)), nn.ReLU())
        self.hidden_out = hidden_size
        self.action_head = ActionHead(action_space, hidden_size)
        self.value_head = layer_init(nn.Linear(hidden_size, 1), std=1.0)
        if channels_last:
            self.to(memory_format=torch.channels_last)

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        # Reorder the uint8 pixels, then make one float copy and scale it in place: one
        # minibatch-sized float allocation instead of three (float, scaled, reordered).
        if self.hwc:  # NHWC memory viewed as NCHW is channels_last already
            obs = obs.permute(0, 3, 1, 2)
        if self.channels_last:
            obs = obs.contiguous(memory_format=torch.channels_last)
        # (copy=True: a float input must not be scaled in place under its caller)
        x = obs.to(torch.float32, copy=True).mul_(self.scale) if self.scale != 1.0 else obs.float()
        return self.trunk(self.convs(x))

    def decode(self, hidden: torch.Tensor):
        return self.action_head(hidden), self.value_head(hidden).squeeze(-1)

    def forward(self, obs: torch.Tensor):
        return self.decode(self.encode(obs))


class LSTMWrapper(nn.Module):
    """Any policy with `encode`/`decode` and an LSTM between them (`policy.rnn=lstm`).

    The trainer keeps one (h, c) per row, zeroes it where an episode starts, and trains by
    backpropagating through each row's whole rollout from the state it started with."""

    is_recurrent = True

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy
        self.hidden_size = policy.hidden_out
        self.cell = nn.LSTMCell(self.hidden_size, self.hidden_size)
        for name, param in self.cell.named_parameters():
            if "weight" in name:
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.constant_(param, 0.0)

    def initial_state(self, batch: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(batch, self.hidden_size, device=device)
        return zeros, zeros.clone()

    def step(self, obs: torch.Tensor, state):
        h, c = self.cell(self.policy.encode(obs), state)
        params, value = self.policy.decode(h)
        return params, value, (h, c)

    def forward_sequence(self, obs: torch.Tensor, state, starts: torch.Tensor):
        """obs (T, B, ...) from `state` at t=0, zeroing it where `starts` (T, B); returns the
        (T*B)-flattened dist params and values."""
        steps, batch = obs.shape[:2]
        features = self.policy.encode(obs.reshape(steps * batch, *obs.shape[2:]))
        features = features.reshape(steps, batch, -1)
        h, c = state
        outputs = []
        for t in range(steps):
            keep = (~starts[t]).float()[:, None]
            h, c = self.cell(features[t], (h * keep, c * keep))
            outputs.append(h)
        return self.policy.decode(torch.cat(outputs))

    def forward(self, obs: torch.Tensor):
        """Without state (e.g. evaluation of one step from zeros)."""
        return self.step(obs, self.initial_state(obs.shape[0], obs.device))[:2]


MASK_KEY = "action_mask"
MASKED_LOGIT = -1e8  # not -inf: exp() of it is 0, and 0 * it stays 0 in the entropy


def mask_leaf(observation_space: spaces.Space, action_space: spaces.Space) -> int | None:
    """The index (in leaf order) of an `action_mask` entry of a Dict observation whose size is
    the number of logits (Discrete: n; MultiDiscrete: sum of nvec, each part's mask in turn)."""
    native = getattr(observation_space, "native", None)
    if not isinstance(native, spaces.Dict) or MASK_KEY not in native.spaces:
        return None
    layout = ObsLayout(native)
    index = next(i for i, leaf in enumerate(layout.leaves) if leaf.path == (MASK_KEY,))
    logits = ActionDist(action_space).num_logits
    if layout.leaves[index].size != logits:
        raise ValueError(f"obs['{MASK_KEY}'] has {layout.leaves[index].size} entries but the action "
                         f"space {action_space} has {logits} choices; expected one entry per choice")
    return index


class ActionMasked(nn.Module):
    """`policy` whose logits of actions the observation's `action_mask` marks 0 are pushed to
    -1e8: never sampled, never the deterministic choice, and with the same masked distribution
    in the update as in the rollout. build_policy adds it for a Dict observation with an
    `action_mask` entry (PettingZoo's classic games, many turn-based envs)."""

    def __init__(self, policy: nn.Module, observation_space: spaces.Space, action_space: spaces.Space):
        super().__init__()
        self.policy = policy
        self.is_recurrent = getattr(policy, "is_recurrent", False)
        self.index = mask_leaf(observation_space, action_space)
        self.layout = ObsLayout(observation_space.native)
        self.continuous = ActionDist(action_space).continuous

    def mask(self, params, obs: torch.Tensor):
        rows = obs.reshape(-1, obs.shape[-1])  # (T, B, row) sequences give (T*B)-flat params
        allowed = self.layout.leaf_values(rows)[self.index].reshape(rows.shape[0], -1) != 0
        if self.continuous:  # (logits, mean, log_std): only the categorical part is masked
            logits, *rest = params
            return (logits.masked_fill(~allowed, MASKED_LOGIT), *rest)
        return params.masked_fill(~allowed, MASKED_LOGIT)

    def forward(self, obs: torch.Tensor):
        params, value = self.policy(obs)
        return self.mask(params, obs), value

    def step(self, obs: torch.Tensor, state):
        params, value, state = self.policy.step(obs, state)
        return self.mask(params, obs), value, state

    def forward_sequence(self, obs: torch.Tensor, state, starts: torch.Tensor):
        params, value = self.policy.forward_sequence(obs, state, starts)
        return self.mask(params, obs), value

    def initial_state(self, batch: int, device="cpu"):
        return self.policy.initial_state(batch, device)
