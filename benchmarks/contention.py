"""Throughput beside other work: a tiny pretraining alone, two at once, and one beside a CPU-bound stranger.

Each run is ``bvr pretrain --preset tiny`` as a user starts it, on the masking ablation's tiny data (the first 250
documents of the corpus; the first run prepares them, outside its timed training), each with its own seed so that
none reuses another's finished run. Its tokens/s is the tokens it trained on over the wall time of its training (the
run's ``metrics.json``: ``tokens_seen / wall_seconds``), so start-up is not counted. The stranger is a Python busy loop,
started before the run and stopped after it.

Every scenario runs under two settings, in the same benchmark run:

- ``spinning``: OpenMP workers that spin before they sleep (``GOMP_SPINCOUNT=300000``, GNU OpenMP's own default
  when nothing sets a wait policy), threads from the CPU count: how bvr ran before its thread budget;
- ``bvr``: bvr's defaults (:mod:`bvr.threads`): workers that sleep while they wait, threads from the usable CPUs;

and the pair once more as ``bvr --jobs 2`` (each run told it shares the machine: half the threads each).

Prints one row a run: its tokens/s and the ratio to the same setting's run alone. Targets (bvr): each of two at
once at least 40% of alone, the two together at least 80%, one beside the stranger at least 40%.
Valid only on an otherwise idle machine.

``--dry-run`` uses a toy encoder on a few documents and a few steps, so that CI checks the script runs; its figures
mean nothing.

    python benchmarks/contention.py --data-dir DATA [--steps 300] [--settings ...] [--dry-run] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TINY = ["corpus.max_documents=250", "corpus.validation_fraction=0.04", "masking.dupe_factor=3",
        "training.val_every_steps=100"]
"""The masking ablation's tiny block (experiments/masking.yaml), steps aside (its 30 warm-up steps, at most
``--steps``, are set with them)."""
DRY = ["corpus.max_documents=40", "model.num_layers=1", "model.hidden_size=32", "model.num_heads=2",
       "model.intermediate_size=64", "data.max_length=32", "training.batch_size=4", "training.val_every_steps=2"]
"""``--dry-run``: a toy encoder on a few documents."""
SETTINGS = {
    "spinning": {"GOMP_SPINCOUNT": "300000"},
    "bvr": {},
}
"""Each setting's environment on top of this process's (OMP_WAIT_POLICY, GOMP_SPINCOUNT and BVR_JOBS removed)."""


PLAN = {"spinning": ("spinning", 1), "bvr": ("bvr", 1), "bvr --jobs 2": ("bvr", 2)}
"""The settings measured, in order: each one's environment (:data:`SETTINGS`) and the jobs each run is told of."""


@dataclass
class Bench:
    data_dir: Path
    work: Path
    overrides: list[str]
    runs: int = 0

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "bvr.cli", *args, "--preset", "tiny", "--data-dir", str(self.data_dir),
                "--output-dir", str(self.work / "outputs"), *(a for o in self.overrides for a in ("--set", o))]

    def env(self, setting: str, jobs: int = 1) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "BVR_JOBS",
                                                                  "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        env.update(SETTINGS[setting])
        if jobs > 1:
            env["BVR_JOBS"] = str(jobs)
        return env

    def together(self, setting: str, count: int, *, stranger: bool = False, jobs: int = 1) -> list[float]:
        """Start ``count`` pretraining runs at once (beside a busy loop if ``stranger``); their tokens/s."""
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if stranger else None
        try:
            names, procs = [], []
            for _ in range(count):
                self.runs += 1
                name = f"contention-{self.runs}"
                names.append(name)
                cmd = self.command("pretrain", "--set", f"name={name}", "--set", f"training.seed={self.runs}")
                with (self.work / f"{name}.log").open("w") as log:  # the child keeps its own handle
                    procs.append(subprocess.Popen(cmd, cwd=self.work, stdout=log, stderr=subprocess.STDOUT,
                                                  env=self.env(setting, jobs)))
            for proc, name in zip(procs, names, strict=True):
                if proc.wait():
                    raise SystemExit(f"{name} failed:\n{(self.work / f'{name}.log').read_text()[-3000:]}")
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
        return [self.rate(name) for name in names]

    def rate(self, name: str) -> float:
        (run,) = (self.work / "outputs" / "runs").glob(f"pretrain-{name}-*")
        metrics = json.loads((run / "metrics.json").read_text())
        return metrics["tokens_seen"] / metrics["wall_seconds"]

    def opening(self, name: str) -> str:
        """The threads part of a run's opening line, as its log shows it."""
        log = (self.work / f"{name}.log").read_text()
        return next((line.strip() for line in log.splitlines() if "threads" in line), "(no threads line)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="data folder holding corpus/")
    parser.add_argument("--steps", type=int, default=300, help="optimiser steps a run [default: 300]")
    parser.add_argument("--dry-run", action="store_true", help="a toy encoder for a few steps (CI)")
    parser.add_argument("--settings", nargs="+", choices=list(PLAN), default=list(PLAN),
                        help="which settings to measure [default: all three]")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    args = parser.parse_args()
    overrides = [*TINY, f"training.max_steps={args.steps}", f"training.warmup_steps={min(30, args.steps)}",
                 *(DRY if args.dry_run else [])]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args.data_dir.resolve(), Path(tmp), overrides)  # the first run prepares the data
        print(f"tiny pretraining, {args.steps} steps a run, {len(os.sched_getaffinity(0))} CPUs; tokens/s of each "
              f"run and its ratio to the same setting alone")
        print(f"{'setting':<16} {'scenario':<18} {'tokens/s':>10} {'ratio':>7}")
        alone_of: dict[str, float] = {}  # by environment: "bvr --jobs 2" is measured against bvr alone
        for setting in args.settings:
            env_setting, jobs = PLAN[setting]
            started = time.perf_counter()
            scenarios = []  # (the setting's name in the row, scenario, tokens/s of each run)
            if env_setting not in alone_of:
                alone_of[env_setting] = bench.together(env_setting, 1)[0]
                print(f"  ({env_setting}: {bench.opening(f'contention-{bench.runs}')})")
                scenarios.append((env_setting, "alone", [alone_of[env_setting]]))
            alone = alone_of[env_setting]
            scenarios.append((setting, "two at once", bench.together(env_setting, 2, jobs=jobs)))
            if jobs == 1:
                scenarios.append((setting, "beside a stranger", bench.together(env_setting, 1, stranger=True)))
            for label, scenario, rates in scenarios:
                for rate in rates:
                    rows.append({"setting": label, "scenario": scenario, "tokens_per_s": rate, "ratio": rate / alone})
                    print(f"{label:<16} {scenario:<18} {rate:>10,.0f} {rate / alone:>6.0%}")
                if len(rates) > 1:
                    print(f"{label:<16} {'  together':<18} {sum(rates):>10,.0f} {sum(rates) / alone:>6.0%}")
            print(f"  ({setting}: {time.perf_counter() - started:.0f} s)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
