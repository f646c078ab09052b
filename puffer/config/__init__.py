"""Configs: the typed schemas registered with Hydra (schema), the checks no type can express
(validate), and resuming a run from a checkpoint's config (resume). The table of code paths
renamed since files were written is puffer.renamed.

Importing this package registers the schemas; the config files themselves are conf/.
"""

from puffer.config.schema import (
    CONF_DIR,
    SWEEPS_DIR,
    RunConfig,
    RuntimeConfig,
    TrainConfig,
)
from puffer.config.validate import resolve_device, validate
from puffer.errors import ConfigError

__all__ = ["CONF_DIR", "SWEEPS_DIR", "ConfigError", "RunConfig", "RuntimeConfig", "TrainConfig",
           "resolve_device", "validate"]
