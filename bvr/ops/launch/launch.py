"""``bvr ablate NAME --launcher local|slurm``: the plan's units side by side, each as its own process.

Every unit runs as ``bvr ablate NAME ... --only UNIT``: the same caches, locks and MLflow runs as an inline run; the
launcher decides only *when* and *where*, following the plan's graph (:meth:`~bvr.ablation.plan.Plan.needs`):

- ``local``: up to ``--jobs N`` ready units at a time, each told of the others (``BVR_JOBS=N``) so that its torch
  threads are its share of the cores. SIGTERM or Ctrl-C goes on to the running units
  (:mod:`bvr.ops.launch.processes`); the same command again resumes.
- ``slurm``: one job per unit through submitit, with ``afterok`` dependencies (the report ``afterany``: it renders
  what finished) and the ``launcher`` config section's resources. The jobs are remembered in ``jobs.json`` beside the
  manifest, so that ``bvr status`` shows their states and the same command again submits only what is neither
  finished nor queued.

This process first writes the manifest and opens the parent run (:func:`~bvr.runner.run.launcher_parent`); the
units' processes merge their records into the manifest under its lock.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from rich.console import Console

from bvr.ablation.checked import conforms, shown
from bvr.ablation.manifest import Manifest
from bvr.ablation.plan import Plan, Unit, UnitKind
from bvr.errors import BvrError
from bvr.fs import write_text
from bvr.ops.launch.processes import UnitProcesses, forwarding
from bvr.ops.launch.slurm import check_store_for_slurm, slurm, slurm_states


class Launcher(str, Enum):
    """Where ``bvr ablate`` runs the units."""

    INLINE = "inline"
    """In this process, one after another (the default)."""
    LOCAL = "local"
    SLURM = "slurm"

ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                    "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT"})
"""SLURM job states of a job that is queued or running: its unit is not submitted again."""
JOBS_FILE = "jobs.json"


@dataclass(frozen=True)
class Invocation:
    """What picks the plan again in another process: the experiment as given, the preset, every ``--set``, the
    folders, and the working folder (where the MLflow store is)."""

    experiment: str
    preset: str | None
    overrides: tuple[str, ...]
    data_dir: Path | None
    output_dir: Path
    workdir: Path

    def command(self, unit: Unit) -> list[str]:
        """The ``bvr ablate ... --only UNIT`` that runs ``unit`` (folders absolute: a job may start elsewhere)."""
        experiment = self.experiment
        if Path(experiment).suffix in (".yaml", ".yml") or Path(experiment).is_file():
            experiment = str(Path(experiment).resolve())
        return [sys.executable, "-m", "bvr.cli", "ablate", experiment,  # this interpreter: the job's bvr is this one
                *(["--preset", self.preset] if self.preset else []),
                *(arg for text in self.overrides for arg in ("--set", text)),
                *(["--data-dir", str(self.data_dir.resolve())] if self.data_dir else []),
                "--output-dir", str(self.output_dir.resolve()), "--no-progress", "--only", unit.id]


def finished(manifest: Manifest, unit: Unit) -> bool:
    """Whether the manifest records ``unit`` done (units without records, such as the data's, never are)."""
    records = manifest.records_of(unit)
    return bool(records) and all(record.status == "done" for record in records)


def unit_state(manifest: Manifest, unit_id: str) -> str:
    """What the manifest says of the unit ``unit_id``: ``done``, ``failed``, ``missing``, ``N / M done`` for a unit of
    several seeds part done, or ``—`` for a unit it keeps no record of (the data units, the report)."""
    kind, _, rest = unit_id.partition(":")
    name, _, task = rest.partition(":")
    records = manifest.records_of(Unit(UnitKind(kind), name or None, task or None))
    if not records:
        return "—"
    statuses = [record.status for record in records]
    if len(set(statuses)) == 1:
        return statuses[0]
    return f"{statuses.count('done')} / {len(statuses)} done" + (", failed" if "failed" in statuses else "")


def to_run(plan: Plan, manifest: Manifest, settled: frozenset[str] = frozenset()) -> list[Unit]:
    """The units a launcher starts, in plan order: every unit the manifest does not record done, the units they
    need that are not done either (cached ones take seconds), and the report when anything else runs. ``settled``:
    ids of units left alone although not recorded done (queued, running, or ended well in an earlier submission)."""
    units = plan.units()
    wanted = {unit for unit in units if unit.kind is not UnitKind.REPORT and manifest.records_of(unit)
              and not finished(manifest, unit) and unit.id not in settled}
    for unit in reversed(units):  # a unit comes after every unit it needs
        if unit in wanted:
            wanted.update(need for need in plan.needs(unit)
                          if not finished(manifest, need) and need.id not in settled)
    if wanted:
        wanted.add(Unit(UnitKind.REPORT))
    return [unit for unit in units if unit in wanted]


RESOURCES = {UnitKind.PRETRAIN: "pretrain", UnitKind.BLIMP: "evaluate", UnitKind.PROBE: "evaluate",
             UnitKind.FINETUNE: "evaluate"}
"""Which of the launcher section's resources a kind of unit gets: ``pretrain``, ``evaluate``, else ``data``."""


# --- on this machine ------------------------------------------------------------------------------------------


@dataclass
class LocalResult:
    """What ``--launcher local`` did: units by id."""

    ran: list[str]
    failed: dict[str, str]
    skipped: list[str]
    seconds: float


def run_local(plan: Plan, invocation: Invocation, jobs: int, console: Console, ui_url: str | None = None
              ) -> LocalResult:
    """Run the units :func:`to_run` picks, up to ``jobs`` at a time, each as its own ``bvr ablate --only`` process
    with its log under the plan's folder; a unit whose needs failed is skipped, the report runs last whatever failed
    (it renders what finished). Ctrl-C (SIGTERM) is passed on to the running units, and raised once they stopped."""
    from bvr.runner.run import launcher_parent

    start = time.perf_counter()
    logs = plan.folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "BVR_JOBS": str(jobs)}
    with launcher_parent(plan, console=console, ui_url=ui_url) as manifest:
        units = to_run(plan, manifest)
        planned = set(units)
        ok: set[Unit] = set()
        ended: set[Unit] = set()
        failed: dict[str, str] = {}
        skipped: list[str] = []
        waiting = list(units)
        console.print(f"launcher local: {len(units)} unit(s), up to {jobs} at a time; logs in {logs}",
                      markup=False, highlight=False, soft_wrap=True)
        processes = UnitProcesses(console)
        with forwarding(processes), ThreadPoolExecutor(max_workers=jobs) as pool:
            running: dict[Future[tuple[int, list[str]]], Unit] = {}
            while waiting or running:
                if processes.stopping is not None:
                    waiting.clear()  # nothing more starts; the running units are stopping
                for unit in list(waiting):
                    needs = [need for need in plan.needs(unit) if need in planned]
                    if unit.kind is not UnitKind.REPORT and any(need in ended - ok for need in needs):
                        waiting.remove(unit)
                        ended.add(unit)
                        skipped.append(unit.id)
                        console.print(f"{unit.id}: skipped, a unit it needs did not finish", markup=False,
                                      highlight=False)
                    elif len(running) < jobs and all(need in ended for need in needs):  # failed needs: skipped above
                        waiting.remove(unit)
                        log = logs / f"{unit.id.replace(':', '-')}.log"
                        running[pool.submit(_run_logged, processes, invocation.command(unit), log, env,
                                            invocation.workdir)] = unit
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    unit = running.pop(future)
                    code, lines = future.result()
                    ended.add(unit)
                    if code == 0:
                        ok.add(unit)
                    elif processes.stopping is not None:
                        continue  # stopped: no failure
                    else:
                        failed[unit.id] = lines[-1] if lines else f"exit status {code}"
                    for line in lines:
                        console.print(line, markup=False, highlight=False, soft_wrap=True)
        processes.raise_stop()
    return LocalResult([u.id for u in units if u in ok], failed, skipped, time.perf_counter() - start)


def _run_logged(processes: UnitProcesses, command: list[str], log: Path, env: dict[str, str],
                workdir: Path) -> tuple[int, list[str]]:
    """Run ``command`` with its output in ``log`` as one of ``processes``; return its exit status and the lines worth
    showing: the unit's own closing line, or on failure its last lines and where the log is (not started: 1, none)."""
    with log.open("w", encoding="utf-8") as out:
        out.write("$ " + shlex.join(command) + "\n")
        out.flush()
        process = processes.start(command, out, env, workdir)
        if process is None:
            return 1, []
        code = processes.wait(process)
    unit = command[-1]
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    shown = [line for line in lines if re.match(rf"{re.escape(unit)}: (done|reused|failed) in ", line)][:1]
    if code:
        tail = [line for line in lines[1:] if line.strip()][-3:]
        shown = [f"{unit}: failed (exit status {code}); log {log}", *(f"  {line}" for line in tail)]
    return code, shown


# --- on SLURM -----------------------------------------------------------------------------------------------


def read_jobs(plan_folder: Path) -> dict[str, dict[str, str]]:
    """The SLURM jobs submitted for a plan: unit id -> ``{"job": ID, "log": PATH}`` (empty when none); a file that
    cannot be read, or an entry not of that layout, is one line with what repairs it."""
    path = plan_folder / JOBS_FILE
    hint = (f"run the bvr ablate command with --launcher slurm again: it sets the record aside as {JOBS_FILE}.damaged "
            "and submits every unit neither finished nor queued")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise BvrError(f"the record of SLURM jobs cannot be read: {err}", where=str(path), hint=hint) from None
    if (wrong := _jobs_mismatch(data)) is not None:
        raise BvrError(f"the record of SLURM jobs is damaged: {wrong}", where=str(path), hint=hint)
    return data


def _jobs_mismatch(data: Any) -> str | None:
    """What in a parsed ``jobs.json`` is not of its layout (unit id -> ``{"job": ID, "log": PATH}``, both strings);
    None where nothing is."""
    if not isinstance(data, dict):
        return f"expected an object of unit ids, got {shown(data)}"
    kinds = {kind.value for kind in UnitKind}
    for unit, entry in data.items():
        if unit.partition(":")[0] not in kinds:
            return f"'{unit}' is not a unit ({', '.join(sorted(kinds))}, with a name and task)"
        if not conforms(entry, dict[str, str]) or not entry.get("job"):
            return f"'{unit}' must be an object of strings with its \"job\" id, got {shown(entry)}"
    return None


def recorded_jobs(plan_folder: Path) -> tuple[dict[str, dict[str, str]], str | None]:
    """:func:`read_jobs`, a record it refuses set aside as ``jobs.json.damaged`` (the units it listed are then
    submitted again unless finished): the jobs and the one line saying what was set aside (None: nothing)."""
    try:
        return read_jobs(plan_folder), None
    except BvrError as err:
        path = plan_folder / JOBS_FILE
        path.replace(path.with_name(f"{JOBS_FILE}.damaged"))
        return {}, (f"{path}: {err.message}; set aside as {JOBS_FILE}.damaged: every unit neither finished nor "
                    "queued is submitted (finished units are reused)")


@dataclass
class Submitted:
    """What ``--launcher slurm`` did: unit id -> job id, for the units it submitted and those already queued."""

    submitted: dict[str, str]
    queued: dict[str, str]


def submit_slurm(plan: Plan, invocation: Invocation, console: Console, ui_url: str | None = None) -> Submitted:
    """Submit one SLURM job per unit of :func:`to_run` not already queued, with ``afterok`` on the jobs of the
    units it needs (the report: ``afterany``), and record them in ``jobs.json``; a store on this machine's disk is
    refused first (:func:`check_store_for_slurm`)."""
    try:
        import submitit
    except ImportError:
        raise BvrError("the SLURM launcher needs submitit", where="--launcher slurm",
                       hint='pip install -e ".[cluster]"') from None
    from bvr.ops.launch.job import UnitJob
    from bvr.runner.run import launcher_parent
    from bvr.tracking import tracking_uri

    check_store_for_slurm(tracking_uri(invocation.workdir))
    launcher = plan.arms[0].config.launcher  # the same for every arm: --set applies to all
    recorded, repaired = recorded_jobs(plan.folder)
    if repaired:
        console.print(repaired, markup=False, highlight=False, soft_wrap=True)
    states = slurm_states(sorted({entry["job"] for entry in recorded.values()}))
    queued = {uid: entry["job"] for uid, entry in recorded.items() if states.get(entry["job"]) in ACTIVE}
    report = Unit(UnitKind.REPORT).id
    ended_well = {uid for uid, entry in recorded.items() if states.get(entry["job"]) == "COMPLETED"}
    with launcher_parent(plan, console=console, ui_url=ui_url) as manifest:  # closed once made: jobs nest in it
        units = to_run(plan, manifest, frozenset((set(queued) | ended_well) - {report}))
    if report in queued and units:
        # A queued report would render before the units submitted now end: it is submitted again after them.
        slurm("scancel", queued.pop(report))
    submitted: dict[str, str] = {}
    folder = plan.folder / "slurm"
    for unit in units:
        needs = [need.id for need in plan.needs(unit)]
        after = [job for uid in needs if (job := queued.get(uid) or submitted.get(uid))]
        share = getattr(launcher, RESOURCES.get(unit.kind, "data"))
        extra: dict[str, Any] = {**launcher.sbatch}
        if after:
            extra["dependency"] = f"{'afterany' if unit.kind is UnitKind.REPORT else 'afterok'}:{':'.join(after)}"
            extra["kill-on-invalid-dep"] = "yes"
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
        executor.update_parameters(
            name=f"bvr-{plan.name}-{unit.id}"[:120], timeout_min=share.time_minutes, cpus_per_task=share.cpus,
            mem_gb=share.mem_gb, nodes=1, tasks_per_node=1,
            **({"gpus_per_node": share.gpus} if share.gpus else {}),
            **({"slurm_partition": launcher.partition} if launcher.partition else {}),
            slurm_setup=[f"export OMP_NUM_THREADS={share.cpus}"], slurm_additional_parameters=extra)
        try:
            job = executor.submit(UnitJob(unit.id, invocation.command(unit), str(invocation.workdir)))
        except Exception as err:  # noqa: BLE001 - submitit raises sbatch's own failure as a plain error
            _save_jobs(plan.folder, recorded)
            raise BvrError(f"sbatch refused the job of {unit.id}: {str(err).strip().splitlines()[-1]}",
                           where="--launcher slurm",
                           hint="check the launcher section (partition, resources) against sinfo") from None
        submitted[unit.id] = job.job_id
        recorded[unit.id] = {"job": job.job_id, "log": str(job.paths.stdout)}
        _save_jobs(plan.folder, recorded)  # after each job: a submission cut short still knows what it queued
    return Submitted(submitted, queued)


def _save_jobs(plan_folder: Path, jobs: dict[str, dict[str, str]]) -> None:
    write_text(plan_folder / JOBS_FILE, json.dumps(jobs, indent=2))
