"""Members: N independent agents of one architecture that learn as one batch (issue 43's learner).

On the small policies most RL research trains, a PPO minibatch step is almost all per-op overhead
(~1.45 ms on these CPUs for a 64-wide MLP), paid once per op whatever the tensors' size. Stacking
N agents' parameters on a leading member axis and running the step once for all of them pays it
once: one forward, one backward and one optimizer step serve the N agents.

Each member learns as its solo run would, with nothing shared but the kernels:
- the policy's forward is mapped over the member axis (torch.func.vmap of functional_call: any
  policy module; an LSTM's cell as its formula in plain ops, which vmap can map), and the loss
  is PPO's own (`PPO.loss`), whose means and advantage normalisation run over the sample axis:
  each member's own; no reduction crosses members but the sum of their losses that one backward
  differentiates (member k's part of its gradient is k's loss's alone);
- the float settings that do not change shapes (`Coefficients`, the learning rate,
  `max_grad_norm`, Adam's eps) are per member: members of one batch may differ in them;
- gradient-norm clipping (`clip_per_member`) and Adam (`MemberAdam`) are per member, with the
  formulas of torch.nn.utils.clip_grad_norm_ and torch.optim.Adam;
- a member whose loss or gradient is not finite is stopped alone (`MemberStep.active`): its
  parameters and Adam state keep their last finite values, and the others go on.

What lives here: `Stack` (the stacked parameters, their forward, a member back as a module),
`StackedPolicy` (the stack as one policy module over every member's rows), `clip_per_member`,
`MemberAdam` and `MemberStep` (one minibatch step of PPO for every member). What does not: the
members' rollouts, minibatches and loop (puffer.training.batched), their runs (puffer.batch).
"""

from __future__ import annotations

import copy
import logging

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from puffer.policies.protocol import is_recurrent
from puffer.training.minibatches import Minibatch
from puffer.training.ppo import PPO, Coefficients
from puffer.training.rollout import float32_params

log = logging.getLogger(__name__)


class Stack:
    """N policies of one architecture as stacked tensors. The parameters' memory is one (N, P)
    tensor, `flat` (so that clipping and Adam are a few ops on one tensor, not a few per
    parameter); `params` maps each name of the policy's parameters to a (N, ...) leaf that aliases
    its part of `flat` (autograd fills each leaf's gradient alone, and an update of `flat` is an
    update of the leaves). `buffers` maps the buffers' names to (N, ...) tensors; `base` is the
    architecture (on the meta device, holding no weights) that torch.func.functional_call runs
    with one member's slice."""

    def __init__(self, policies: list[nn.Module]):
        kinds = {type(p) for p in policies}
        if len(kinds) != 1:
            raise ValueError(f"members must share one architecture, got {sorted(k.__name__ for k in kinds)}")
        stacked, self.buffers = stack_module_state(policies)
        self.flat = torch.cat([value.detach().flatten(1) for value in stacked.values()], dim=1)
        self.params, start = {}, 0
        for name, value in stacked.items():
            count = value[0].numel()
            self.params[name] = self.flat[:, start:start + count].view(value.shape).requires_grad_()
            start += count
        self.recurrent = is_recurrent(policies[0])
        self.base = _mappable(copy.deepcopy(policies[0]).to("meta"))
        for module in self.base.modules():  # vmap cannot ask a tensor for its memory format;
            if getattr(module, "channels_last", False):  # NHWC is a speed-up that changes no result
                module.channels_last = False
        # The same architecture with its linear layers as member-batched matmuls, run on all
        # members' rows as one batch of rows (member k's B rows together): every other op sees
        # rows as in a solo policy. Where the policy's only parameters are its linear layers'
        # (an MLP's), this runs all members without vmap, 1.6x faster for CartPole's MLP;
        # whether it does is found on the first forward (`direct`). It holds the stacked
        # tensors themselves (`_bound`).
        self.batched = _bound(_member_linears(copy.deepcopy(self.base)), {**self.params, **self.buffers})
        # (a recurrent policy's step and sequence pass take states: they run through vmap)
        self.direct: bool | None = False if self.recurrent else None

    @property
    def size(self) -> int:
        return self.flat.shape[0]

    def flat_grad(self, loss: torch.Tensor) -> torch.Tensor:
        """d loss / d flat, (N, P): the leaves' gradients side by side."""
        grads = torch.autograd.grad(loss, list(self.params.values()))
        return torch.cat([g.flatten(1) for g in grads], dim=1)

    def forward(self, obs: torch.Tensor):
        """The policy's outputs for each member's observations: obs (N, B, ...) -> outputs with
        a leading member axis, member k's from its own weights."""
        if self.direct is None:
            self.direct = self._direct_matches(obs)
        if self.direct:
            return self._direct(obs)
        return vmap(self._call)(self.params, self.buffers, obs)

    def call(self, method: str, *args):
        """The policy's `method` (a recurrent policy's `step` or `forward_sequence`) for each
        member: `args` (tensors, or tuples of them) with a leading member axis -> its outputs
        with one, member k's from its own weights."""
        bound = _Method(self.base, method)

        def one(params, buffers, *member_args):
            named = ({f"module.{k}": v for k, v in params.items()}, {f"module.{k}": v for k, v in buffers.items()})
            return functional_call(bound, named, member_args)

        return vmap(one)(self.params, self.buffers, *args)

    def _direct(self, obs: torch.Tensor):
        return _unflatten(self.batched(obs.flatten(0, 1)), self.size)

    def _call(self, params, buffers, obs):
        return functional_call(self.base, (params, buffers), (obs,))

    def _direct_matches(self, obs: torch.Tensor) -> bool:
        """Whether the member-batched layers give what vmap gives on these observations (same
        shapes, equal to float tolerance). A policy whose ops mix the member axis with the
        sample axis (a flatten from axis 1, an expand to the rows' count) fails here, by an
        error or by other outputs, and runs through vmap."""
        with torch.no_grad():
            expected = vmap(self._call)(self.params, self.buffers, obs)
            try:
                found = self._direct(obs)
            except (RuntimeError, ValueError, IndexError) as exc:
                log.info("members: the policy runs through torch.func.vmap (its layers do not take a member "
                         "axis: %s)", str(exc).splitlines()[0])
                return False
        expected, found = _leaves(expected), _leaves(found)
        same = len(expected) == len(found) and all(
            a.shape == b.shape and torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-5)
            for a, b in zip(expected, found, strict=True))
        log.info("members: the policy runs %s", "with member-batched layers" if same
                 else "through torch.func.vmap (member-batched layers give other outputs)")
        return same

    def member(self, k: int, template: nn.Module) -> nn.Module:
        """Member k as a module of its own (a copy of `template` with k's weights): for saving its
        model file and evaluating it as a solo run's policy is."""
        policy = copy.deepcopy(template)
        policy.load_state_dict({name: value[k].detach().clone()
                                for name, value in {**self.params, **self.buffers}.items()})
        return policy


class MemberLinear(nn.Module):
    """nn.Linear for N members at once: weight (N, out, in), bias (N, out), x (N * B, in), the
    rows of member k the k-th B."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        members = self.weight.shape[0]
        rows = x.reshape(members, -1, x.shape[-1])
        weight = self.weight.transpose(1, 2)
        out = torch.bmm(rows, weight) if self.bias is None else torch.baddbmm(self.bias[:, None], rows, weight)
        return out.view(*x.shape[:-1], out.shape[-1])


class _Method(nn.Module):
    """`module`'s method `name` as this module's forward (torch.func.functional_call calls forward)."""

    def __init__(self, module: nn.Module, name: str):
        super().__init__()
        self.module, self.name = module, name

    def forward(self, *args):
        return getattr(self.module, self.name)(*args)


class LSTMCellOps(nn.Module):
    """nn.LSTMCell's formula (its gates i, f, g, o; its parameter names) in ops torch.func.vmap
    can map over members: nn.LSTMCell's fused kernel has no batching rule. Equal to it to float
    tolerance (the fused kernel adds the two matmuls' outputs in its own order)."""

    def __init__(self, cell: nn.LSTMCell):
        super().__init__()
        self.weight_ih, self.weight_hh = cell.weight_ih, cell.weight_hh
        self.bias_ih, self.bias_hh = cell.bias_ih, cell.bias_hh

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        h, c = state
        gates = F.linear(x, self.weight_ih, self.bias_ih) + F.linear(h, self.weight_hh, self.bias_hh)
        i, f, g, o = gates.chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


def _mappable(module: nn.Module) -> nn.Module:
    """`module` with every nn.LSTMCell in it replaced by an LSTMCellOps (same parameter names)."""
    for name, child in module.named_children():
        setattr(module, name, LSTMCellOps(child) if type(child) is nn.LSTMCell else _mappable(child))
    return module


def _unflatten(x, members: int):
    """Outputs over N * B rows (a tensor or a tuple of them) as (N, B, ...)."""
    if isinstance(x, tuple):
        return tuple(_unflatten(part, members) for part in x)
    return x.unflatten(0, (members, -1))


def _member_linears(module: nn.Module) -> nn.Module:
    """`module` with every nn.Linear in it replaced by a MemberLinear (same parameter names)."""
    for name, child in module.named_children():
        setattr(module, name, MemberLinear(child) if type(child) is nn.Linear else _member_linears(child))
    return module


def _bound(module: nn.Module, tensors: dict[str, torch.Tensor]) -> nn.Module:
    """`module` holding `tensors` (its parameters' and buffers' names -> the stacked tensors) in
    place of its own, as plain attributes: it reads the stack's memory itself, so every call skips
    functional_call's swapping of them in and out (110 us of a 16-member CartPole forward's 255)."""
    for name, value in tensors.items():
        *path, leaf = name.split(".")
        owner = module.get_submodule(".".join(path))
        owner._parameters.pop(leaf, None)
        owner._buffers.pop(leaf, None)
        setattr(owner, leaf, value)
    return module


def _leaves(x) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    return [leaf for part in x for leaf in _leaves(part)]


class StackedPolicy(nn.Module):
    """N members' policies as one module over rows grouped by member: forward(obs) of N * E rows
    gives member k's outputs for rows [k * E, (k + 1) * E) from its own weights (one vmapped
    forward for all). Its state_dict is the stacked parameters (`flat`) and buffers."""

    def __init__(self, policies: list[nn.Module]):
        super().__init__()
        self.stack = Stack(policies)
        self.size = len(policies)
        self._template = [copy.deepcopy(policies[0])]  # (in a list: not a submodule of this one)
        self.is_recurrent = self.stack.recurrent

    @property
    def template(self) -> nn.Module:
        """A policy of the members' architecture (its weights member 0's first ones, its
        buffers those update_buffers last held)."""
        return self._template[0]

    def forward(self, obs: torch.Tensor):
        return tuple(_flat_rows(x) for x in self.stack.forward(self._by_member(obs)))

    def initial_state(self, rows: int, device="cpu"):
        """A recurrent policy's zero state for `rows` rows (every member's)."""
        return self.template.initial_state(rows, device)

    def step(self, obs: torch.Tensor, state: tuple):
        """A recurrent policy's step on N * E rows and their states (rows grouped by member):
        (dist params, values, new state), member k's rows from its own weights."""
        params, values, state = self.stack.call("step", self._by_member(obs), tuple(self._by_member(x) for x in state))
        return _flat_rows(params), _flat_rows(values), tuple(_flat_rows(x) for x in state)

    def forward_sequence(self, obs: torch.Tensor, state: tuple, starts: torch.Tensor):
        """A recurrent policy's pass over (T, B) steps of B = N * E rows (grouped by member) from
        `state`: (T * B)-flattened outputs, step-major, as a solo policy's."""
        steps = obs.shape[0]

        def per_member(x: torch.Tensor) -> torch.Tensor:  # (T, N * E, ...) -> (N, T, E, ...)
            return x.view(steps, self.size, -1, *x.shape[2:]).movedim(1, 0)

        def step_major(x):  # (N, T * E, ...) -> (T * N * E, ...)
            if isinstance(x, tuple):
                return tuple(step_major(part) for part in x)
            return x.view(self.size, steps, -1, *x.shape[2:]).movedim(0, 1).flatten(0, 2)

        outputs = self.stack.call("forward_sequence", per_member(obs), tuple(self._by_member(x) for x in state),
                                  per_member(starts))
        return tuple(step_major(x) for x in outputs)

    def _by_member(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        if rows % self.size:
            raise ValueError(f"{rows} rows do not split into {self.size} members' rows")
        return x.view(self.size, rows // self.size, *x.shape[1:])

    def member(self, k: int) -> nn.Module:
        return self.stack.member(k, self.template)

    def update_buffers(self, k: int, update) -> None:
        """`update(module)` on member k's buffers (running statistics such as
        puffer.policies.normalize.NormalizedPolicy's), through a module of the template's
        architecture that holds them for the call."""
        scratch = self._template[0]
        with torch.no_grad():
            for name, buffer in scratch.named_buffers():
                buffer.copy_(self.stack.buffers[name][k])
            update(scratch)
            for name, buffer in scratch.named_buffers():
                self.stack.buffers[name][k].copy_(buffer)

    def state_dict(self, *args, **kwargs) -> dict:
        return {"flat": self.stack.flat, **{f"buffers.{name}": value for name, value in self.stack.buffers.items()}}

    def load_state_dict(self, state: dict, strict: bool = True, assign: bool = False):
        with torch.no_grad():
            self.stack.flat.copy_(state["flat"])
            for name, value in self.stack.buffers.items():
                value.copy_(state[f"buffers.{name}"])


def _flat_rows(x):
    """(N, E, ...) outputs as (N * E, ...) rows; tuples (a Gaussian's mean and log_std) each."""
    if isinstance(x, tuple):
        return tuple(_flat_rows(part) for part in x)
    return x.flatten(0, 1)


def clip_per_member(grad: torch.Tensor, max_norm: torch.Tensor) -> torch.Tensor:
    """Each member's gradient (a row of the (N, P) `grad`) scaled to a norm of at most its
    `max_norm` (N,), in place, as torch.nn.utils.clip_grad_norm_ scales one agent's; returns the
    norms before clipping (N,)."""
    norms = torch.linalg.vector_norm(grad, dim=1)
    grad.mul_((max_norm / (norms + 1e-6)).clamp(max=1.0)[:, None])
    return norms


class MemberAdam:
    """Adam (torch.optim.Adam's update, without weight decay or amsgrad) over the stacked (N, P)
    parameters, with each member's own learning rate, eps and step count (N,), and a mask of the
    members that step: a stopped member's parameters and moments stay as they are."""

    def __init__(self, flat: torch.Tensor, lr: torch.Tensor, eps: torch.Tensor, betas: tuple[float, float] = (0.9, 0.999)):
        self.flat = flat
        self.lr, self.eps, self.betas = lr, eps, betas
        self.steps = torch.zeros_like(lr)
        self.exp_avg = torch.zeros_like(flat)
        self.exp_avg_sq = torch.zeros_like(flat)

    @torch.no_grad()
    def step(self, grad: torch.Tensor, active: torch.Tensor) -> None:
        """One Adam step of the active members. A stopped member steps with a zero gradient, betas
        of 1 and a learning rate of 0: its moments and parameters stay exactly as they are, in
        the same few passes over `flat` as everyone's update (no copies, no host sync)."""
        on = active[:, None]
        beta1 = torch.where(on, self.betas[0], 1.0)
        beta2 = torch.where(on, self.betas[1], 1.0)
        self.steps += active.to(self.steps.dtype)
        grad = torch.where(on, grad, 0.0)  # a stopped member's non-finite gradient reaches nothing
        self.exp_avg.lerp_(grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).add_(grad * grad * (1 - beta2))
        steps = self.steps.clamp(min=1)  # (a member stopped at its first step: no division by 0)
        step_size = torch.where(active, self.lr / (1 - self.betas[0] ** steps), 0.0)[:, None]
        correction2 = (1 - self.betas[1] ** steps).sqrt()[:, None]
        denom = self.exp_avg_sq.sqrt().div_(correction2).add_(self.eps[:, None])
        self.flat.sub_(step_size * self.exp_avg / denom)

    def state_dict(self) -> dict:
        return {"lr": self.lr, "eps": self.eps, "steps": self.steps, "exp_avg": self.exp_avg,
                "exp_avg_sq": self.exp_avg_sq}

    def load_state_dict(self, state: dict) -> None:
        for name in ("lr", "eps", "steps", "exp_avg", "exp_avg_sq"):
            getattr(self, name).copy_(state[name])


def per_sample(k: Coefficients) -> Coefficients:
    """Members' (N,) settings shaped for PPO.loss on (N, B) samples: the clip ranges bound each
    sample, (N, 1); the loss weights scale each member's means, (N,)."""
    return Coefficients(k.clip_coef[:, None], k.vf_clip_coef[:, None], k.ent_coef, k.vf_coef)


class MemberStep:
    """One minibatch step of `algorithm`'s loss (PPO's, or a subclass's such as SPO) for every
    member of `stack` at once: the policy's forward mapped over the members (vmap), the loss on
    (N, B) samples with (N, 1) settings, one backward, per-member clipping and Adam. Members whose
    loss or gradient norm is not finite leave `active` and never step again."""

    def __init__(self, algorithm: PPO, stack: Stack, optimizer: MemberAdam, max_grad_norm: torch.Tensor):
        self.algorithm, self.stack, self.optimizer = algorithm, stack, optimizer
        self.max_grad_norm = max_grad_norm
        self.active = torch.ones(stack.size, dtype=torch.bool, device=stack.flat.device)

    def __call__(self, mb: Minibatch, coefficients: Coefficients,
                 stepping: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Step on `mb`, whose tensors have a leading member axis (N, B, ...), with per-member
        `coefficients` (each (N,)); `stepping` (N,) the members this minibatch is one of theirs
        (a member whose solo run has fewer minibatches, or has stopped its epochs on
        train.target_kl, is given padding and does not step). Returns each member's STATS (N, 7:
        PPO's order, grad_norm the norm before clipping) and new ratios (N, B). A recurrent
        policy's minibatch is each member's row sequences, (N, T, B, ...) with `mb.sequence` =
        (h0, c0 (N, B, H), starts (N, T, B)): its T * B steps are the member's samples."""
        n, rows = mb.advantages.shape[0], mb.advantages[0].numel()
        if mb.sequence is None:
            outputs, new_values = self.stack.forward(mb.obs)
        else:
            h0, c0, starts = mb.sequence
            outputs, new_values = self.stack.call("forward_sequence", mb.obs, (h0, c0), starts)
        # log-probabilities row by row: the (N, B) samples as N * B rows and back
        outputs = float32_params(outputs)
        flat_outputs = (outputs.flatten(0, 1) if isinstance(outputs, torch.Tensor)
                        else tuple(x.flatten(0, 1) for x in outputs))
        actions = mb.actions.flatten(0, 1 if mb.sequence is None else 2)
        logprobs, entropy = self.algorithm.dist.log_prob_entropy(flat_outputs, actions)
        losses, stats, ratio = self.algorithm.loss(logprobs.view(n, rows), entropy.view(n, rows),
                                                   new_values.float().view(n, rows),
                                                   mb, per_sample(coefficients))
        # The sum's gradient for member k's row of `flat` is k's own loss's: no term of the sum
        # reads another member's parameters (one backward for all, not a mean over members).
        grad = self.stack.flat_grad(losses.sum())
        norms = clip_per_member(grad, self.max_grad_norm)
        self.active &= torch.isfinite(stats).all(1) & torch.isfinite(norms)
        self.optimizer.step(grad, self.active if stepping is None else self.active & stepping)
        stats = torch.cat([stats[:, :5], norms[:, None].to(stats.dtype), stats[:, 5:]], dim=1)
        return stats.float(), ratio.detach()
