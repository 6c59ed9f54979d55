"""``bvr ablate --launcher local|slurm`` at the command line: the options checked, the launch, what it says, and the
SLURM jobs ``bvr status`` shows (:mod:`bvr.ops.launch.launch` does the work)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from bvr.cli.options import console
from bvr.cli.ui import print_views
from bvr.errors import BvrError
from bvr.formatting import duration, literal
from bvr.ops.launch.launch import ACTIVE


def check_launcher(launcher: str, jobs: int | None, only: list[str] | None, stage_dir: Path | None) -> None:
    """Refuse options that do not go with ``--launcher``, naming them."""
    if launcher != "inline" and (only or stage_dir):
        raise BvrError(f"--launcher {launcher} runs the units of the whole plan; --only and --stage-dir run "
                       "chosen units in this process", where="--launcher", hint="drop one of them")
    if jobs is not None and launcher != "local":
        why = ("SLURM decides how many jobs run at once, from the launcher section's resources" if launcher == "slurm"
               else "inline runs one unit at a time; to say that bvr shares the machine, use bvr --jobs N")
        raise BvrError(f"--jobs goes with --launcher local: {why}", where="--jobs",
                       hint="bvr ablate NAME --launcher local --jobs N")


def launch_local(plan: Any, invocation: Any, jobs: int, ui_url: str | None) -> None:
    """``--launcher local``: the units ``jobs`` at a time, then the closing lines."""
    from bvr.ops.launch.launch import run_local

    result = run_local(plan, invocation, jobs, console, ui_url)
    console.plain(f"ablation {plan.name}: {len(result.ran)} unit(s) run by the local launcher ({jobs} at a time), "
                  f"{len(result.failed)} failed, {len(result.skipped)} skipped, in {duration(result.seconds)}")
    if (Path("reports") / plan.name / "report.html").is_file() and result.ran:  # its path: the report unit's line
        print_views(plan.experiment, ui_url)
    if result.failed:
        raise BvrError(f"{len(result.failed)} unit(s) failed: {'; '.join(result.failed)}", where=f"ablate {plan.name}",
                       hint=f"their logs are in {plan.folder / 'logs'}; fix the cause and run the same command "
                            "again: finished units are reused")


def launch_slurm(plan: Any, invocation: Any, ui_url: str | None) -> None:
    """``--launcher slurm``: submit, then say what was queued and how to follow it."""
    from bvr.ops.launch.launch import submit_slurm

    done = submit_slurm(plan, invocation, console, ui_url)
    for unit, job in done.submitted.items():
        console.plain(f"{unit}: submitted as SLURM job {job}", wrap=True)
    status = shlex.join(["bvr", "status", plan.name, *(["--preset", plan.preset] if plan.preset else []),
                         *(["--output-dir", str(invocation.output_dir)]
                           if invocation.output_dir != Path("outputs") else [])])
    if not done.submitted and not done.queued:
        console.plain(f"ablation {plan.name}: every unit is finished; nothing submitted", wrap=True)
        return
    console.plain(f"ablation {plan.name}: {len(done.submitted)} job(s) submitted, {len(done.queued)} already queued "
                  f"or running; logs in {plan.folder / 'slurm'}")
    console.plain(f"follow: {status} (or squeue); the same bvr ablate command again submits only what is neither "
                  "finished nor queued")


def print_slurm_jobs(folder: Path, manifest: Any) -> int:
    """The SLURM jobs ``bvr ablate --launcher slurm`` submitted for the plan in ``folder``, each unit's SLURM state
    beside the manifest's, and the log of every job that did not complete; returns how many are queued or
    running. A record it cannot use, or SLURM's commands missing here, is one line instead of the table."""
    from rich.table import Table

    from bvr.ops.launch.launch import read_jobs, unit_state
    from bvr.ops.launch.slurm import slurm_states

    try:
        jobs = read_jobs(folder)
        states = slurm_states(sorted({entry["job"] for entry in jobs.values()}))
    except BvrError as err:  # the manifest's progress stands without them
        console.plain(f"SLURM jobs not shown: {err.one_line()}")
        return 0
    if not jobs:
        return 0
    table = Table("unit", "SLURM job", "SLURM state", "manifest", title="SLURM jobs (bvr ablate --launcher slurm)")
    failed, active = [], 0
    for unit, entry in sorted(jobs.items(), key=lambda item: (len(item[1]["job"]), item[1]["job"])):
        state = states.get(entry["job"], "GONE")
        table.add_row(*map(literal, (unit, entry["job"], state, unit_state(manifest, unit))))
        active += state in ACTIVE
        if state not in ("COMPLETED", "GONE") and state not in ACTIVE:
            failed.append(f"{unit}: SLURM job {entry['job']} {state}; log {entry.get('log', '?')}")
    console.print(table)
    for line in failed:
        console.plain(f"job ended: {line}")
    return active
