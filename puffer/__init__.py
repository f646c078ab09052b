"""puffer: config-driven, high-throughput reinforcement learning.

Importing `puffer` is cheap (no torch): worker processes import it too.

It bounds how long torch's OpenMP threads spin while they wait (GOMP_SPINCOUNT, read once when
torch loads OpenMP, so import puffer before torch for it to apply): libgomp's default of 300,000
spins holds a core that another process needs, and two runs side by side with two threads each
then take 4-5x as long per Nature CNN step instead of 2x (bench/threads.py). An OMP_WAIT_POLICY
or GOMP_SPINCOUNT of your own is left as it is. How many threads torch uses: puffer.threads.
"""

import os

if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "3000")

__version__ = "0.1.0"
