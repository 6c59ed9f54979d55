"""bvr.memory: glibc keeps the memory a step frees for the next step, unless the environment says otherwise."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from bvr.memory import user_malloc_settings

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                                reason="glibc only")

# Three rounds of a "step" that allocates 24 blocks of 8 MB (192 MB), touches them and frees them all; prints
# whether the thresholds were set and the megabytes page-faulted in the third round.
STEP = """
import ctypes, resource, sys
from bvr.memory import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
for round_ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [libc.malloc(8 << 20) for _ in range(24)]
    for block in blocks:
        ctypes.memset(block, 1, 8 << 20)
    for block in blocks:
        libc.free(block)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(applied, faults * resource.getpagesize() >> 20)
"""


def _third_round(mode: str, **env: str) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if k not in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                                                               "GLIBC_TUNABLES")}
    done = subprocess.run([sys.executable, "-c", STEP, mode], env={**environ, **env}, capture_output=True, text=True,
                          check=True)
    applied, megabytes = done.stdout.split()
    return applied, int(megabytes)


def test_a_step_reuses_what_the_last_one_freed():
    applied, kept = _third_round("keep")
    assert applied == "True" and kept < 20  # the 192 MB come from the heap the earlier rounds left
    _, default = _third_round("default")
    assert default > 150  # glibc's defaults give it back and fault it in again: the measurement can see it


def test_the_environments_own_malloc_settings_win():
    applied, faulted = _third_round("keep", MALLOC_TRIM_THRESHOLD_="131072")
    assert applied == "False" and faulted > 150
    assert user_malloc_settings({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"})
    assert user_malloc_settings({"MALLOC_MMAP_THRESHOLD_": "65536"})
    assert not user_malloc_settings({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2", "PATH": "/usr/bin"})
