"""SLURM's own commands as ``bvr ablate --launcher slurm`` and ``bvr status`` ask them: the jobs' states
(``squeue``, ``sacct``, ``scontrol``), the cluster's nodes (``sinfo``), a cancel (``scancel``). A command that is not
on PATH is one line saying so and what to do (:func:`slurm`), never a traceback.
"""

from __future__ import annotations

import shutil
import socket
import subprocess

from bvr.errors import BvrError


def slurm(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the SLURM command ``args`` and return what it printed, whatever its exit status (not on PATH: one line)."""
    if shutil.which(args[0]) is None:
        raise BvrError(f"{args[0]}, a SLURM command, is not on PATH: SLURM is not installed here, or not on PATH",
                       hint="run this on the cluster's login node, or put SLURM's commands on PATH (`module load "
                            "slurm`, say)")
    return subprocess.run(list(args), capture_output=True, text=True, check=False)


def slurm_states(job_ids: list[str]) -> dict[str, str]:
    """Each job's SLURM state (``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ``CANCELLED``, ...), from the
    queue, else the accounting database, else slurmctld's memory of recent jobs; ``GONE`` when none knows it."""
    states: dict[str, str] = {}
    if not job_ids:
        return states
    queue = slurm("squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids))
    for line in queue.stdout.splitlines():
        job, _, state = line.strip().partition(" ")
        if job in job_ids:
            states[job] = state
    rest = [job for job in job_ids if job not in states]
    if rest and shutil.which("sacct"):
        acct = slurm("sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(rest))
        for line in acct.stdout.splitlines():
            job, _, state = line.strip().partition("|")
            if job in rest and state:
                states[job] = state.split()[0]
    for job in [job for job in job_ids if job not in states]:
        shown = slurm("scontrol", "show", "job", "-o", job).stdout
        found = [word.split("=", 1)[1] for word in shown.split() if word.startswith("JobState=")]
        states[job] = found[0] if found else "GONE"
    return states


def check_store_for_slurm(uri: str) -> None:
    """Refuse a store on this machine's disk (SQLite, files) when SLURM has a node other than this host."""
    if not (uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri):
        return
    listed = slurm("sinfo", "-h", "-N", "-o", "%N")
    nodes = sorted(set(listed.stdout.split()))
    here = {socket.gethostname(), socket.gethostname().split(".")[0], "localhost"}
    others = [node for node in nodes if node not in here]
    if others:
        raise BvrError(f"the MLflow store {uri} is a file on this machine, and SLURM's nodes "
                       f"({', '.join(others[:5])}{' ...' if len(others) > 5 else ''}) would write it from others",
                       where="--launcher slurm",
                       hint="start a tracking server on PostgreSQL that every node reaches and set "
                            "MLFLOW_TRACKING_URI to it (docs/large-scale.md, 'On a SLURM cluster')")
