"""puffer: config-driven, high-throughput reinforcement learning.

Importing `puffer` is cheap (no torch): worker processes import it too.
"""

__version__ = "0.1.0"
