"""Data-parallel learning over several processes: `torchrun --nproc-per-node=N -m puffer ...`.

Each rank builds its own vector env (seeded `seed + rank`), collects its own rollout and learns
from it; the gradients of every minibatch are averaged over the ranks (an all-reduce, as
DistributedDataParallel does; done by hand because the policy's recurrent and normalization
methods are not its forward). The ranks start from rank 0's weights, so they stay identical.
What must be the same on every rank is made so here: the number of minibatches, the advantage
normalization and the running observation/return statistics use moments summed over the ranks,
and decisions (early stop on target_kl, stop and save requests) are agreed. Rank 0 alone logs,
draws the dashboard, writes checkpoints (holding every rank's envs and random states) and
evaluates.

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; without them everything here is a no-op and
training is exactly the single-process code. gloo on CPU, NCCL on CUDA (device per LOCAL_RANK).
A rank that dies is reported by torchrun, which stops the others; a collective that waits past
`dist.timeout` seconds raises instead of hanging.
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Context:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        """Whether a process group is up (under torchrun, world size 1 included)."""
        return dist.is_available() and dist.is_initialized()

    @property
    def parallel(self) -> bool:
        """More than one rank: the code paths that differ from a single process apply."""
        return self.enabled and self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


SINGLE = Context()
_context = SINGLE


def context() -> Context:
    return _context


def launched() -> bool:
    """Whether this process was started by torchrun (or another launcher setting its variables),
    or is one of several SLURM tasks of Hydra's submitit launcher (then torchrun's variables
    are set from SLURM's here)."""
    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
        return True
    return export_slurm_ranks()


def export_slurm_ranks() -> bool:
    """Under `hydra/launcher=slurm` with tasks_per_node x nodes > 1, every task runs this job:
    submitit's TorchDistributedEnvironment sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
    MASTER_PORT from SLURM's variables, as torchrun would."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm" or int(os.environ.get("SLURM_NTASKS", "1")) <= 1:
        return False
    from submitit.helpers import TorchDistributedEnvironment

    TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    return True


def init(device: str, backend: str = "auto", timeout: float = 300.0) -> Context:
    """Join the process group torchrun describes; returns the context (SINGLE when not launched)."""
    global _context
    if not launched():
        return SINGLE
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if os.environ.get("TORCHELASTIC_RUN_ID") is not None:
        # torchrun ended (killed by a SIGUSR1 to the job's group, say): a hang-up, so that every
        # rank saves at its epoch boundary and exits (129), none trains on as an orphan. The
        # kernel sends it again as each of torchrun's threads ends: a repeated SIGHUP is no
        # "stop now" (puffer.training.signals)
        from puffer.runtime.processes import end_with_parent

        end_with_parent(signal.SIGHUP)
    if not dist.is_initialized():
        if backend == "auto":
            backend = "nccl" if device.startswith("cuda") else "gloo"
        if backend == "nccl":  # NCCL's own buffers (and the object collectives) use the current GPU
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout))
    _context = Context(dist.get_rank(), dist.get_world_size(), local_rank)
    log.info("rank %d of %d (%s)", _context.rank, _context.world_size, dist.get_backend())
    return _context


def shutdown() -> None:
    global _context
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _context = SINGLE


def rank_device(device: str, ctx: Context) -> str:
    """cuda -> cuda:LOCAL_RANK under a launcher (one GPU per rank on a node)."""
    if ctx.enabled and device == "cuda":
        return f"cuda:{ctx.local_rank}"
    return device


def broadcast_parameters(module: torch.nn.Module) -> None:
    """Every rank starts from rank 0's weights and buffers."""
    if not _context.enabled:
        return
    for tensor in [*module.parameters(), *module.buffers()]:
        sent = tensor.data.to(_wire(), copy=True)  # the policy is still on the CPU here
        dist.broadcast(sent, src=0)
        tensor.data.copy_(sent)


def average_gradients(parameters) -> None:
    """The mean of every rank's gradient, in one flat all-reduce."""
    if not _context.parallel:
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= _context.world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def _wire() -> torch.device:
    """Where a collective's tensors must be: NCCL only moves CUDA tensors."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def all_sum(values: torch.Tensor) -> torch.Tensor:
    """`values` summed over the ranks (itself in a single process), on their own device."""
    if _context.parallel:
        summed = values.to(_wire(), copy=True)
        dist.all_reduce(summed)
        values = summed.to(values.device)
    return values


def moments(batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(count, mean, population variance) over dim 0 of `batch` on every rank together."""
    stats = torch.cat([batch.new_tensor([batch.shape[0]], dtype=torch.float64),
                       batch.double().sum(0).reshape(-1), batch.double().square().sum(0).reshape(-1)])
    stats = all_sum(stats)
    n, size = stats[0], (len(stats) - 1) // 2
    shape = batch.shape[1:]
    mean = (stats[1 : 1 + size] / n).reshape(shape)
    var = (stats[1 + size :] / n).reshape(shape) - mean.square()
    return n, mean, var.clamp_min(0)


def any_rank(flag: bool) -> bool:
    """True on every rank when it is True on any."""
    if not _context.parallel:
        return flag
    value = torch.tensor([int(flag)], device=_wire())
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def mean_over_ranks(value: float) -> float:
    if not _context.parallel:
        return value
    return float(all_sum(torch.tensor([value], dtype=torch.float64)).item() / _context.world_size)


def combine_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Each metric averaged over the ranks that have it (an episode may end on some ranks only);
    throughput is already the global figure on every rank."""
    if not _context.parallel:
        return metrics
    gathered: list = [None] * _context.world_size
    dist.all_gather_object(gathered, metrics)
    keys = {key for part in gathered for key in part}
    combined = {}
    for key in keys:
        values = [part[key] for part in gathered if key in part]
        combined[key] = sum(values) / len(values)
    return combined


def gather_to_main(obj):
    """Every rank's `obj`, in rank order, on rank 0 (None elsewhere)."""
    if not _context.parallel:
        return [obj]
    gathered = [None] * _context.world_size if _context.is_main else None
    dist.gather_object(obj, gathered, dst=0)
    return gathered
