"""The PufferLib-documented CleanRL-style API: `Config` and `train(config, vec_env, policy)`.

`Config` is puffer's `TrainConfig` (CleanRL's names and ppo.py defaults); `train` is
`puffer.training.ppo.train`. No second loop: this module only names them the way users know.
"""

from puffer.config import TrainConfig as Config
from puffer.training.ppo import PPO, train

__all__ = ["Config", "train", "PPO"]
