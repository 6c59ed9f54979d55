"""The ``launcher`` section: what ``bvr ablate --launcher slurm`` asks SLURM for, per kind of unit.

An execution setting, like ``training.threads``: it says where and on what the units run, not what they compute, so
it is in neither the plan's hash nor any run's key (a run made on the cluster is the run made here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bvr.config.layering import check

_SBATCH_OPTION = re.compile(r"[a-z][a-z0-9-]*")


@dataclass
class Resources:
    """One kind of unit's share of a node."""

    cpus: int = 1
    """CPUs per job (``--cpus-per-task``); the job's torch threads follow them."""
    gpus: int = 0
    """GPUs per job (``--gpus-per-node``)."""
    mem_gb: int = 8
    """Memory per job in GiB (``--mem``)."""
    time_minutes: int = 60
    """Time limit per job in minutes (``--time``); a job past it is stopped and resumes when resubmitted."""


@dataclass
class LauncherConfig:
    """SLURM's resources for the units of an ablation (``bvr ablate --launcher slurm``)."""

    partition: str | None = None
    """SLURM partition (None: the cluster's default)."""
    data: Resources = field(default_factory=lambda: Resources(cpus=1, mem_gb=8, time_minutes=60))
    """Reading the corpus, training tokenizers, preparing each arm's data, and the report."""
    pretrain: Resources = field(default_factory=lambda: Resources(cpus=1, mem_gb=8, time_minutes=240))
    """One pretraining run (an arm at one pretraining seed)."""
    evaluate: Resources = field(default_factory=lambda: Resources(cpus=1, mem_gb=8, time_minutes=120))
    """One model's BLiMP score, probe or fine-tuning on one task (over its seeds)."""
    sbatch: dict[str, str] = field(default_factory=dict)
    """Further sbatch options for every job, without the dashes (``{account: nlp, qos: high}``)."""

    def __post_init__(self) -> None:
        for kind in ("data", "pretrain", "evaluate"):
            resources = getattr(self, kind)
            for key in ("cpus", "mem_gb", "time_minutes"):
                value = getattr(resources, key)
                check(value >= 1, f"launcher.{kind}.{key}", f"{value} must be at least 1")
            check(resources.gpus >= 0, f"launcher.{kind}.gpus", f"{resources.gpus} must be 0 or more")
        for key, value in self.sbatch.items():
            check(bool(_SBATCH_OPTION.fullmatch(str(key))), f"launcher.sbatch.{key}",
                  "an sbatch option's long name without the dashes, in lower case (account, qos, constraint)")
            check("\n" not in value, f"launcher.sbatch.{key}", f"{value!r} must be one line of text")
