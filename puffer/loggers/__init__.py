"""Where metrics go: the local metrics file always, Weights & Biases when configured.

Only `puffer.loggers.wandb` imports wandb. Named `loggers` so it does not shadow `logging`.
"""

from puffer.loggers.base import JsonlLogger, Logger, MultiLogger, read_metrics

__all__ = ["Logger", "JsonlLogger", "MultiLogger", "read_metrics"]
