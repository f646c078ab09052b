"""Code paths renamed since files were written: the one table, read where a file names code.

A checkpoint's config and a model file's config name classes by their dotted paths
(`_target_`, env.wrappers), and the envs a checkpoint holds are pickled with their classes'
module paths. When a module moves (the package's folders, commit after 773e1fc) or a class moves
between modules, the old path goes in `RENAMED`, and both readers follow it: `migrate_config`
for configs (puffer.config.resume.saved_config, puffer.agent.load) and `loads` / `Unpickler` for
pickles (the vector backends' saved envs, puffer.files.checkpoint's trusted payloads).

Imports nothing of puffer's: every floor reads it.
"""

from __future__ import annotations

import io
import pickle

# old dotted path (a module, or one name in it) -> where it lives now. A name's own entry wins
# over its module's.
RENAMED = {
    # the package laid out in folders (issue 31)
    "puffer.actions": "puffer.emulation.actions",
    "puffer.spaces": "puffer.emulation.spaces",
    "puffer.padding": "puffer.emulation.padding",
    "puffer.bench": "puffer.vector.benchmark",
    "puffer.trainer": "puffer.training.trainer",
    "puffer.rollout": "puffer.training.rollout",
    "puffer.advantage": "puffer.training.advantage",
    "puffer.minibatches": "puffer.training.minibatches",
    "puffer.optim": "puffer.training.optim",
    "puffer.signals": "puffer.training.signals",
    "puffer.ppo": "puffer.training.ppo",
    "puffer.spo": "puffer.training.spo",
    "puffer.checkpoint": "puffer.files.checkpoint",
    "puffer.trust": "puffer.files.trust",
    "puffer.model_file": "puffer.files.model_file",
    "puffer.space_json": "puffer.files.space_json",
    "puffer.video": "puffer.evaluation.video",
    "puffer.threads": "puffer.runtime.threads",
    "puffer.allocator": "puffer.runtime.allocator",
    "puffer.distributed": "puffer.runtime.distributed",
    "puffer.profiler": "puffer.monitor.profiler",
    "puffer.machine": "puffer.monitor.machine",
    "puffer.progress": "puffer.monitor.progress",
    "puffer.stats": "puffer.report.stats",
    "puffer.references": "puffer.report.references",
    "puffer.overrides": "puffer.cli.overrides",
    "puffer.extras": "puffer.cli.extras",
    "puffer.multirun": "puffer.cli.multirun",
    "puffer.models": "puffer.policies.networks",
    "puffer.models.ActionDist": "puffer.policies.distributions.ActionDist",
    "puffer.models.ActionHead": "puffer.policies.distributions.ActionHead",
    "puffer.models.LSTMWrapper": "puffer.policies.wrappers.LSTMWrapper",
    "puffer.models.ActionMasked": "puffer.policies.wrappers.ActionMasked",
    "puffer.normalize": "puffer.policies.normalize",
    "puffer.normalize.RewardScaler": "puffer.training.reward_scaler.RewardScaler",
    # action spaces pickled under puffer.spaces before puffer.actions existed
    "puffer.spaces.HybridBox": "puffer.emulation.actions.HybridBox",
    "puffer.spaces.BatchedHybridBox": "puffer.emulation.actions.BatchedHybridBox",
    "puffer.spaces.ActionLayout": "puffer.emulation.actions.ActionLayout",
}


def renamed(dotted: str) -> str:
    """Where the code at `dotted` lives now (itself when it never moved)."""
    if dotted in RENAMED:
        return RENAMED[dotted]
    module, _, name = dotted.rpartition(".")
    while module:
        if module in RENAMED:
            return f"{RENAMED[module]}{dotted[len(module):]}"
        module = module.rpartition(".")[0]
    return dotted


def migrate_config(config: dict) -> dict:
    """A copy of a saved config whose `_target_`s and env.wrappers entries name today's paths."""
    def walk(node, in_wrappers=False):
        if isinstance(node, dict):
            return {key: renamed(value) if key == "_target_" and isinstance(value, str)
                    else walk(value, key == "wrappers") for key, value in node.items()}
        if isinstance(node, list):
            return [renamed(item) if in_wrappers and isinstance(item, str) else walk(item) for item in node]
        return node

    return walk(config)


class Unpickler(pickle.Unpickler):
    """pickle's Unpickler, finding each class where it lives now."""

    def find_class(self, module: str, name: str):
        module, _, name = renamed(f"{module}.{name}").rpartition(".")
        return super().find_class(module, name)


def loads(data: bytes):
    """pickle.loads of bytes written under older module paths."""
    return Unpickler(io.BytesIO(data)).load()


def load(file, **kwargs):
    """pickle.load of a file written under older module paths (so that this module serves as
    torch.load's `pickle_module` for any of its file formats)."""
    return Unpickler(file, **kwargs).load()
