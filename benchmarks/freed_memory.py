"""Freed memory kept (``bvr.memory``) against glibc's steady-state thresholds, on the pretraining step, in one run.

glibc adapts its mmap threshold to the largest block freed (at most 32 MB) and trims the heap's top once twice that
is free; after a few steps of the benchmark encoder (4 layers, hidden 256, vocab 30,522, 32 x 128, fp32, MLM only)
that is 32 MB and 64 MB. ``keep_freed_memory`` fixes them at 32 MB and 1 GB. ``mallopt`` can change both at any
time, so the two settings alternate step by step in one process (after one untimed step under each setting, so that
the heap has settled into it); the script prints the median step time, the megabytes page-faulted per step and the
ratio. glibc's dynamic default cannot be restored once set, hence the fixed 32 MB / 64 MB stand-in for it: it
faults about what a fresh process does (130-180 MB a step on this model).

``--dry-run`` runs the same code at ``pretrain_throughput.py``'s toy sizes, so that CI checks that the script runs;
its figures mean nothing.

    python benchmarks/freed_memory.py [--steps 20] [--threads N] [--dry-run] [--json out.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import statistics
import time

import torch
from pretrain_throughput import BENCH, DRY, make_batch, ours

from bvr.memory import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, MMAP_THRESHOLD, TRIM_THRESHOLD

SETTINGS = {"kept": (MMAP_THRESHOLD, TRIM_THRESHOLD), "glibc": (32 << 20, 64 << 20)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per setting")
    parser.add_argument("--threads", type=int, default=None, help="torch threads [default: all cores]")
    parser.add_argument("--dry-run", action="store_true", help="the same code at toy sizes (for CI)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    shape = DRY if args.dry_run else BENCH
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version"):
        raise SystemExit("this benchmark needs glibc (it sets malloc's thresholds)")

    def use(setting: str) -> None:
        mmap, trim = SETTINGS[setting]
        libc.mallopt(M_MMAP_THRESHOLD, mmap)
        libc.mallopt(M_TRIM_THRESHOLD, trim)

    _, step = ours(shape=shape)
    batches = [make_batch(seed, shape) for seed in range(4)]
    times: dict[str, list[float]] = {name: [] for name in SETTINGS}
    faults: dict[str, list[int]] = {name: [] for name in SETTINGS}
    for i in range(args.steps):
        for name in (SETTINGS if i % 2 else reversed(SETTINGS)):  # alternate which goes first
            use(name)
            step(batches[i % 4])  # settle the heap under this setting
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            step(batches[(i + 1) % 4])
            times[name].append(time.perf_counter() - start)
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    page_mb = resource.getpagesize() / 2**20
    figures = {name: {"step_s": statistics.median(times[name]),
                      "faulted_mb_per_step": statistics.median(faults[name]) * page_mb} for name in SETTINGS}
    figures["speedup"] = figures["glibc"]["step_s"] / figures["kept"]["step_s"]
    print(f"pretraining step, {shape.layers} layers, hidden {shape.hidden}, {shape.batch}x{shape.seq}, "
          f"{torch.get_num_threads()} threads, "
          f"median of {args.steps} steps each, alternating")
    print(f"{'heap':<34}{'step (s)':>10}{'faulted MB/step':>17}")
    for name, label in (("glibc", "glibc steady state (32 MB / 64 MB)"), ("kept", "kept (32 MB / 1 GB)")):
        print(f"{label:<34}{figures[name]['step_s']:>10.3f}{figures[name]['faulted_mb_per_step']:>17.0f}")
    print(f"kept: {figures['speedup']:.3f}x the step rate of glibc's thresholds")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
