"""Freed memory kept in the process: glibc's ``malloc`` told not to give it back to the kernel after every step.

A training step allocates and frees the same few hundred megabytes every time: activations, gradients, the MLM
loss's vocabulary slices. glibc's defaults hand much of that back (``munmap`` of blocks over its mmap threshold,
``trim`` of the heap's top once more than twice that is free), so the next step takes it again page by page: about
130-180 MB of page faults a step for the 4-layer, hidden-256 benchmark encoder, 6-9% of its time on this 2-core
machine. :func:`keep_freed_memory` raises both thresholds once per process, so blocks up to 32 MB come from the
heap and freed ones stay there for the next step. The peak resident memory does not change (it is the peak of what
is in use); what changes is that the process keeps it until it ends, as a CUDA caching allocator does.

The C library's own knobs win: with ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_`` or a
``glibc.malloc`` tunable in ``GLIBC_TUNABLES`` set, nothing is changed. Other C libraries (musl, macOS) are left
as they are. No torch import: the CLI calls this before anything allocates.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Mapping

M_TRIM_THRESHOLD = -1  # mallopt's parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024
"""glibc's largest mmap threshold on 64-bit systems: blocks under 32 MB come from the heap and are reused."""
TRIM_THRESHOLD = 1024 * 1024 * 1024
"""Up to 1 GB free at the heap's top is kept for the next step instead of being given back."""
USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def user_malloc_settings(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment already tells glibc's malloc its thresholds (then bvr leaves them alone)."""
    return any(name in environ for name in USER_SETTINGS) or "glibc.malloc" in environ.get("GLIBC_TUNABLES", "")


@functools.cache
def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (once; later calls return the first answer). False
    on another C library or platform, or when the environment sets them itself (:func:`user_malloc_settings`)."""
    if not sys.platform.startswith("linux") or user_malloc_settings():
        return False
    try:
        libc = ctypes.CDLL(None)  # the C library this process already runs on
        libc.gnu_get_libc_version  # glibc only: musl has mallopt but other parameters  # noqa: B018
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
