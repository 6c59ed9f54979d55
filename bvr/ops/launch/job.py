"""What one SLURM job of ``bvr ablate --launcher slurm`` runs: one unit's ``bvr ablate ... --only UNIT``. Apart
from :mod:`bvr.ops.launch.launch` so that the job, which unpickles it, imports nothing but submitit. A job stopped
at its time limit or preempted is requeued by submitit (:meth:`UnitJob.checkpoint`) and resumes from what it saved.
"""

from __future__ import annotations

import os
import subprocess

import submitit


class UnitJob(submitit.helpers.Checkpointable):
    """Run ``command`` in ``workdir``; its output goes to the job's log."""

    def __init__(self, unit: str, command: list[str], workdir: str) -> None:
        self.unit = unit
        self.command = command
        self.workdir = workdir

    def __call__(self) -> str:
        done = subprocess.run(self.command, cwd=self.workdir, env=os.environ.copy(), check=False)
        if done.returncode:
            how = (f"was stopped by signal {-done.returncode}" if done.returncode < 0
                   else f"exited with status {done.returncode}")
            raise RuntimeError(f"unit {self.unit} {how}; its lines are above in this log")
        return self.unit
