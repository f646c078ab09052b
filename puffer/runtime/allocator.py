"""Host memory allocator settings for training on the CPU.

What lives here: `retain_freed_memory`, which asks glibc's malloc to keep freed memory for reuse.
Why: a PPO update on pixels allocates and frees tensors of several to tens of MB per minibatch
(the float observations, conv activations and their gradients). By default glibc serves blocks
that large with mmap and returns them to the kernel on free (or trims the heap's top), so every
minibatch faults its pages in again: 66,000-224,000 minor page faults per Atari update (4 x 4
minibatches of 256) measured on 2 cores, about 10% of the update's time. Keeping freed memory
holds the process at its peak footprint, which training reaches every minibatch anyway (plus,
measured, up to a minibatch's buffers: tens of MB).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

log = logging.getLogger(__name__)

# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Blocks up to this size come from the heap and stay there when freed; 1 GiB covers any
# minibatch tensor of the policies here while leaving truly huge one-off buffers to mmap.
RETAIN_BYTES = 1 << 30


def retain_freed_memory() -> bool:
    """Keep freed blocks (< 1 GiB) in this process for reuse; True when glibc accepted it.
    Elsewhere (macOS, musl) it does nothing and says so at debug level."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        log.debug("not glibc (%s %s): allocator settings left alone", platform.system(),
                  platform.libc_ver()[0] or "unknown libc")
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    accepted = all(libc.mallopt(param, RETAIN_BYTES) == 1
                   for param in (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD))
    if not accepted:
        log.warning("glibc refused the mallopt settings that keep freed memory; training runs "
                    "as before, with more page faults")
    return accepted
