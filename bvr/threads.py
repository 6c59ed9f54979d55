"""How many threads bvr's torch work uses, and how its OpenMP workers wait: a budget that shares cores.

torch runs each operator on an OpenMP pool of one worker per CPU of the process's affinity, and GNU OpenMP lets a
worker that finished its share *spin* (``GOMP_SPINCOUNT``, up to 300,000 checks) before it sleeps: fastest alone,
slowest beside another CPU-bound process, whose workers spin while their partner is descheduled (two tiny
pretraining runs on 2 cores each ran 20x slower than one alone; ``benchmarks/contention.py``). Two things fix it:

- threads from the CPUs this process may use (:func:`usable_cpus`: the affinity mask *and* a cgroup CPU quota),
  divided among the jobs told to share them (:func:`thread_budget`: ``training.threads``, ``bvr --jobs N``, or the
  user's own ``OMP_NUM_THREADS``);
- workers that sleep when they wait (:func:`quiet_waits`: ``OMP_WAIT_POLICY=PASSIVE`` before torch is loaded, unless
  the user sets OpenMP's waiting). The tiny preset's run is about a quarter slower alone than when spinning, which
  ``bvr --jobs 1`` gets back (docs/benchmarks.md).

The count comes from configuration and the machine, never from the load of the moment: a reduction over another
number of threads sums in another order, so the same config and seed would give other weights. It is in the run's
opening line and its MLflow tags (:meth:`ThreadBudget.tags`). No torch import at the top: the CLI calls
:func:`quiet_waits` before torch is loaded.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
JOBS_ENV = "BVR_JOBS"
"""How many jobs share this machine's CPUs (``bvr --jobs N`` sets it, so that processes bvr starts inherit it)."""
WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
"""Environment variables by which a user sets OpenMP's waiting themselves (then bvr leaves it alone)."""


@dataclass(frozen=True)
class Usable:
    """The CPUs this process may run on, and what limits them."""

    cpus: int
    affinity: int
    quota: float | None
    """CPUs' worth of time the cgroup allows per period (None: no quota)."""

    @property
    def limit(self) -> str:
        """What sets :attr:`cpus`, in words.

        >>> Usable(2, 2, None).limit, Usable(1, 8, 1.5).limit
        ('affinity', 'cgroup quota 1.5 CPUs')
        """
        if self.quota is not None and math.ceil(self.quota) < self.affinity:
            return f"cgroup quota {self.quota:g} CPUs"
        return "affinity"


def cgroup_quota(root: Path = CGROUP_ROOT) -> float | None:
    """The cgroup's CPU quota in CPUs (quota / period), from cgroup v2's ``cpu.max`` or v1's ``cpu.cfs_*_us``; None
    when there is none or it cannot be read.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "cpu.max").write_text("150000 100000\\n")
    ...     cgroup_quota(Path(d))
    1.5
    """
    try:
        fields = (root / "cpu.max").read_text().split()
        quota, period = fields[0], fields[1]
    except (OSError, IndexError):
        try:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    try:
        q, p = int(quota), int(period)  # "max" (v2) and -1 (v1): no quota
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def usable_cpus(root: Path = CGROUP_ROOT) -> Usable:
    """The CPUs this process may use: its affinity mask, capped by the cgroup's quota rounded up (1.5 CPUs of
    time can keep 2 threads busy half the time each, which is still faster than 1)."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        affinity = os.cpu_count() or 1
    quota = cgroup_quota(root)
    cpus = min(affinity, max(1, math.ceil(quota))) if quota is not None else affinity
    return Usable(cpus, affinity, quota)


@dataclass(frozen=True)
class ThreadBudget:
    """The threads one bvr process gives torch: ``threads`` intra-op workers (and as many inter-op)."""

    threads: int
    usable: Usable
    jobs: int
    source: str
    """What set the count: ``training.threads``, ``OMP_NUM_THREADS``, or "" (the usable CPUs and the jobs)."""
    waits: str
    """How OpenMP's workers wait, from this process's environment (:func:`wait_policy`)."""

    def line(self) -> str:
        """The run's opening line's word on threads.

        >>> ThreadBudget(1, Usable(2, 2, None), 2, "", "OMP_WAIT_POLICY=PASSIVE").line()
        'threads 1 (2 usable CPUs (affinity) shared by 2 jobs; OpenMP waits: OMP_WAIT_POLICY=PASSIVE)'
        >>> ThreadBudget(3, Usable(2, 2, None), 1, "training.threads", "spinning").line()
        'threads 3 (training.threads; 2 usable CPUs (affinity); OpenMP waits: spinning)'
        """
        shared = f" shared by {self.jobs} jobs" if self.jobs > 1 else ""
        why = f"{self.source}; " if self.source else ""
        cpus = f"{self.usable.cpus} usable CPU{'s' if self.usable.cpus != 1 else ''}"
        return (f"threads {self.threads} ({why}{cpus} ({self.usable.limit}){shared}"
                f"; OpenMP waits: {self.waits})")

    def tags(self) -> dict[str, str]:
        """What MLflow records of it, as tags (a resumed run may get another budget on another machine).

        >>> ThreadBudget(1, Usable(2, 2, None), 2, "", "spinning").tags()["bvr.threads"]
        '1'
        """
        return {"bvr.threads": str(self.threads), "bvr.threads_budget": self.line()}


def jobs_from(environ: Mapping[str, str] = os.environ) -> int:
    """The jobs sharing the machine, from :data:`JOBS_ENV` (1 when unset).

    >>> jobs_from({}), jobs_from({"BVR_JOBS": "3"})
    (1, 3)
    """
    raw = environ.get(JOBS_ENV, "").strip()
    if not raw:
        return 1
    from bvr.errors import BvrError

    try:
        jobs = int(raw)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise BvrError(f"{JOBS_ENV}={raw!r} is not a number of jobs: give a whole number of at least 1") from None
    return jobs


def thread_budget(requested: int = 0, jobs: int | None = None, *, root: Path = CGROUP_ROOT,
                  environ: Mapping[str, str] = os.environ) -> ThreadBudget:
    """The threads for this process: ``requested`` when set (``training.threads``), else the user's
    ``OMP_NUM_THREADS``, else the usable CPUs divided among ``jobs`` (from :data:`JOBS_ENV` when None), at least one.

    >>> thread_budget(0, 2, root=Path("/nonexistent"), environ={}).threads == max(1, usable_cpus().affinity // 2)
    True
    >>> thread_budget(0, 1, environ={"OMP_NUM_THREADS": "3"}).line().startswith("threads 3 (OMP_NUM_THREADS; ")
    True
    """
    usable = usable_cpus(root)
    jobs = jobs_from(environ) if jobs is None else jobs
    policy = wait_policy(environ)
    if requested > 0:
        return ThreadBudget(requested, usable, jobs, "training.threads", policy)
    omp = environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:  # the user's (or a launcher's) own count; a list ("4,2") is left to OpenMP
        return ThreadBudget(int(omp), usable, jobs, "OMP_NUM_THREADS", policy)
    return ThreadBudget(max(1, usable.cpus // jobs), usable, jobs, "", policy)


def wait_policy(environ: Mapping[str, str] = os.environ) -> str:
    """How OpenMP's workers wait, as the environment sets it (``OMP_WAIT_POLICY=PASSIVE``), or "spinning" when
    nothing does (GNU OpenMP's default: spin a while, then sleep).

    >>> wait_policy({}), wait_policy({"GOMP_SPINCOUNT": "10000", "PATH": "/bin"})
    ('spinning', 'GOMP_SPINCOUNT=10000')
    """
    return ", ".join(f"{name}={environ[name]}" for name in WAIT_SETTINGS if name in environ) or "spinning"


def use_threads(requested: int = 0) -> ThreadBudget:
    """Give torch the :func:`thread_budget`'s intra-op threads, and as many inter-op threads where torch still allows
    it (only before its first inter-op work)."""
    import torch

    budget = thread_budget(requested)
    torch.set_num_threads(budget.threads)
    if torch.get_num_interop_threads() != budget.threads:
        with contextlib.suppress(RuntimeError):  # already started: it keeps its count (independent ops only)
            torch.set_num_interop_threads(budget.threads)
    return budget


def quiet_waits(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Have OpenMP workers sleep, not spin, while they wait (``OMP_WAIT_POLICY=PASSIVE``), unless the environment
    already sets OpenMP's waiting (:data:`WAIT_SETTINGS`) or says this job has the machine alone (``BVR_JOBS=1``,
    ``bvr --jobs 1``). It takes effect only if torch is not loaded yet. True if bvr set the policy.

    >>> env = {}; quiet_waits(env), env
    (True, {'OMP_WAIT_POLICY': 'PASSIVE'})
    >>> quiet_waits({"GOMP_SPINCOUNT": "10000"}), quiet_waits({"BVR_JOBS": "1"})
    (False, False)
    """
    if any(name in environ for name in WAIT_SETTINGS) or environ.get(JOBS_ENV, "").strip() == "1":
        return False  # the user's own setting; or `--jobs 1`: alone on the machine, where spinning is fastest
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True
