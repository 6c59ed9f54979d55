"""``bvr ablate NAME``: run an ablation declared in ``experiments/NAME.yaml`` from data to report.

An ablation expands (:func:`bvr.ablation.plan.make_plan`) into *units*, each cached by the stage that runs it, so a
second invocation runs only what changed or was interrupted. Each kind of unit has one handler
(:data:`bvr.runner.units.HANDLERS`). Every arm is pretrained before any is evaluated or fine-tuned (under torchrun
or SLURM only rank zero goes on). MLflow: one experiment per ablation, a parent run per ablation and settings
(``NAME (PRESET)``, tag ``bvr.stage=ablation``, the manifest logged to it) with the units' runs under it
(docs/ablations.md). With ``--stage-dir pipeline/NAME`` (``dvc.yaml``'s one stage) each unit also writes its
products under the stage folder for DVC (:mod:`bvr.ops.dvc.stage_folder`). What it says first: :func:`describe_plan`.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rich.console import Console

from bvr.ablation.arms import ArmsCannotDiffer
from bvr.ablation.manifest import Manifest
from bvr.ablation.plan import Plan, Unit, UnitKind
from bvr.cache import global_rank, target_lock
from bvr.errors import BvrError
from bvr.formatting import duration, literal
from bvr.fs import write_text
from bvr.ops.dvc.stage_folder import copy_tree
from bvr.progress import on_terminal
from bvr.runner.units import HANDLERS, Outcome, UnitContext, run_context
from bvr.threads import ThreadBudget, use_threads
from bvr.write_checks import check_writable, write_error

PRETRAINING_KINDS = (UnitKind.CORPUS, UnitKind.TOKENIZER, UnitKind.DATA, UnitKind.PRETRAIN)
"""The units every DDP rank takes part in; the others run on rank zero only."""


def hardware() -> dict[str, Any]:
    """What the numbers were measured on, for the manifest's context: the platform, Python and torch versions, CPU
    model and count, and GPU model and count."""
    import torch

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "cpu": cpu, "cpu_count": os.cpu_count(), "gpu": torch.cuda.get_device_name(0) if gpus else None,
            "gpu_count": gpus}


def run_shape(plan: Plan) -> str:
    """The run being made, from its arms' configurations (not the experiment file's words, which describe the
    published setting), a value the arms differ in given per arm: ``2 layers, hidden 128, 1,200 steps of 32 x 128
    tokens, static masks (dupe factor 3)/dynamic masks``."""
    def each(get) -> str:
        values = list(dict.fromkeys(get(arm.config) for arm in plan.pretrained or plan.arms))
        return "/".join(f"{v:,}" if isinstance(v, int) else str(v) for v in values)

    def step(c) -> str:
        if c.training.tokens_per_batch:
            return f"{c.training.tokens_per_batch:,} tokens"
        return f"{c.training.batch_size:,} x {c.data.max_length:,} tokens"

    def masks(c) -> str:
        m = c.masking
        return f"static masks (dupe factor {m.dupe_factor})" if m.mode == "static" else "dynamic masks"

    return (f"{each(lambda c: c.model.num_layers)} layers, hidden {each(lambda c: c.model.hidden_size)}, "
            f"{each(lambda c: c.training.max_steps)} steps of {each(step)}, {each(masks)}")


def _finetune(plan: Plan) -> str:
    """``sst2 x 2 seeds``, and for a grid its points and the split they are chosen on: ``sst2 x 2 seeds at each of 3
    points (lr 3e-04 to 3e-03), chosen per model on 2,000 held-out training examples``."""
    from bvr.config import resolve_finetune
    from bvr.tasks.registry import get_task

    parts = []
    for task in plan.tasks:
        cfg = resolve_finetune(plan.arms[0].config, get_task(task))
        text = f"{task} x {len(plan.seeds)} seeds"
        if cfg.is_grid:
            grid = cfg.grid()
            rates = sorted({p.learning_rate for p in grid})
            text += (f" at each of {len(grid)} points (lr {rates[0]:.0e}" +
                     (f" to {rates[-1]:.0e})" if len(rates) > 1 else ")") +
                     f", chosen per model on {cfg.selection_examples:,} held-out training examples")
        parts.append(text)
    return literal("; ".join(parts))


def _blimp(plan: Plan) -> str:
    """``BLiMP 50 pairs per paradigm``, or why there is no BLiMP."""
    ev = plan.evaluations
    if not ev.blimp:
        return "no BLiMP (evaluate.blimp.enabled=false)"
    if plan.blimp_dir is None:
        return "no BLiMP (no blimp/ in the data folder)"
    return "BLiMP " + (f"{ev.blimp_per_paradigm} pairs per paradigm" if ev.blimp_per_paradigm else "all pairs")


def describe_plan(plan: Plan, units: list[Unit], budget: ThreadBudget) -> str:
    """The lines `bvr ablate` opens with, as Rich markup."""
    ab, ev = plan.ablation, plan.evaluations
    probes = f"probes {literal(', '.join(ev.probe_tasks))} x {ev.probe_seeds} seeds" if ev.probe_tasks else "no probes"
    return "\n".join([
        f"[bold]ablation {literal(plan.name)}[/bold] (preset {literal(plan.preset or 'default')}): {run_shape(plan)}",
        f"  experiment file: {literal(ab.description)}",
        f"  arms: {', '.join(literal(a.label) for a in plan.arms)} ({len(ab.pretrain_seeds)} pretraining seed(s) each"
        + (f"; the control {len(ab.control_seeds)} initialisations, compared unpaired" if ab.control_seeds else "")
        + ")",
        f"  evaluations: {_blimp(plan)}; {probes}",
        f"  fine-tuning: {_finetune(plan)}",
        f"  manifest: {literal(plan.manifest_path)}",
        f"  units to run or reuse: {len(units)}; {literal(budget.line())}"])


@dataclass
class AblationResult:
    """What one invocation that failed in no unit did: units by id (``pretrain:static``)."""

    manifest: Manifest
    ran: list[str]
    reused: list[str]
    seconds: float
    report: Any = None


class Runner:
    """Runs units of one plan once the MLflow store and its folders are checked, keeping the manifest and the DVC
    stage folder up to date from each handler's :class:`~bvr.runner.units.Outcome` (:meth:`keep`)."""

    def __init__(self, plan: Plan, *, stage_dir: Path | None, progress: bool, console: Console,
                 ui_url: str | None = None) -> None:
        from bvr.tracking import check_store

        check_store(Path.cwd())
        check_writable(plan.output_dir, "output folder (--output-dir)")
        if stage_dir is not None:  # else every unit would fail on it, one after the other
            check_writable(stage_dir, "DVC stage folder (--stage-dir)")
        self.plan = plan
        self.stage_dir = stage_dir
        self.progress = progress
        self.ui_url = ui_url
        self.console = console
        self.rank = global_rank()
        self.manifest, repaired = Manifest.load_for(plan, hardware(), write=self.rank == 0)  # this machine's
        self.manifest.kind = plan.ablation.kind  # not in the plan hash: a manifest written before it had none
        self.parent_run_id: str | None = None
        self.report: Any = None
        self.models: dict[str, Path] = {}
        self.ran: list[str] = []
        self.reused: list[str] = []
        self.failed: dict[str, str] = {}
        self.mine: set[tuple[str, tuple[Any, ...]]] = set()
        """The records this invocation wrote: a save takes the others from the file (:meth:`Manifest.save`)."""
        if repaired:  # written now: a damaged manifest on disk would be refused again before the first unit
            self.say(literal(repaired))
            self.save()

    def save(self) -> None:
        if self.rank == 0:
            self.manifest.save(self.plan.manifest_path, mine=self.mine)

    def say(self, text: str) -> None:
        if self.rank == 0:
            self.console.print(text, highlight=False, soft_wrap=True)  # a log's line is not cut at 80 columns

    def context(self, unit: Unit) -> UnitContext:
        """What ``unit``'s handler reads: the models found so far and the context of the runs it opens."""
        run = run_context(self.plan, self.manifest, unit, self.parent_run_id)
        return UnitContext(self.plan, self.manifest, MappingProxyType(dict(self.models)), run, self.stage_dir,
                           self.rank, self.progress, self.ui_url)

    def keep(self, unit: Unit, outcome: Outcome) -> None:
        """Take in what a unit did: its records into the manifest, its model, its report, and its products under
        the DVC stage folder (rank zero only: the other ranks only train)."""
        if self.rank != 0:
            return
        for record in outcome.records:
            self.manifest.put(record)
            self.mine.add(Manifest.mark(record))
        if outcome.model is not None and unit.name is not None:
            self.models[unit.name] = outcome.model
        if outcome.report is not None:
            self.report = outcome.report
        if self.stage_dir is None:
            return
        for product in outcome.products:
            path = self.stage_dir.joinpath(*product.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            if product.tree is not None:
                copy_tree(product.tree, path)
            else:
                write_text(path, product.text or "")

    def run_unit(self, unit: Unit) -> None:
        """Run one unit through its kind's handler; a failure is recorded, not raised (but an interrupt is, and a
        write that failed for want of disk space or permission, as a :class:`~bvr.write_checks.WriteError`)."""
        start = time.perf_counter()
        if on_terminal():  # what the bars that follow belong to; a log gets the unit's one closing line only
            self.say(f"[bold]▶ {literal(unit)}[/bold]")
        try:
            outcome = HANDLERS[unit.kind](self.context(unit), unit)
            self.keep(unit, outcome)
        except KeyboardInterrupt:
            self.save()
            raise
        except ArmsCannotDiffer as err:  # the ablation cannot answer: stop before anything is pretrained
            self._fail(unit, err.one_line(), time.perf_counter() - start)
            raise
        except Exception as err:  # noqa: BLE001 - one failed unit must not lose the others' results
            if (error := write_error(err)) is not None:  # but a full disk or read-only folder fails every unit
                with contextlib.suppress(Exception):  # the manifest may not fit either: the unit is redone next time
                    self.save()
                raise error from err
            message = err.one_line() if isinstance(err, BvrError) else f"{type(err).__name__}: {err}"
            self._fail(unit, message, time.perf_counter() - start)
            if not isinstance(err, BvrError) and os.environ.get("BVR_DEBUG"):
                traceback.print_exc()
            return
        (self.ran if outcome.built else self.reused).append(unit.id)
        self.say(unit_line(unit, "done" if outcome.built else "reused", time.perf_counter() - start,
                           list(outcome.lines)))
        self.save()

    def _fail(self, unit: Unit, message: str, seconds: float) -> None:
        self.failed[unit.id] = message
        self.say(unit_line(unit, "[red]failed[/red]", seconds, [message]))
        for record in self.manifest.records_of(unit):
            if unit.kind is not UnitKind.FINETUNE or record.status != "done":  # seeds that finished stay done
                record.update(status="failed", error=message)
                self.mine.add(Manifest.mark(record))
        self.save()


def unit_line(unit: Unit, outcome: str, seconds: float, notes: list[str]) -> str:
    """The one line a finished unit prints, as Rich markup: what it was, how it ended (``outcome``, markup) and how
    long it took, then its key numbers (the unit and the notes as text, :func:`~bvr.formatting.literal`).

    >>> unit_line(Unit(UnitKind.BLIMP, "static-p0"), "done", 8.24, ["BLiMP 53.3 (chance 50.0)"])
    'blimp:static-p0: done in 8.2 s; BLiMP 53.3 (chance 50.0)'
    """
    return f"{literal(unit)}: {outcome} in {duration(seconds)}" + "".join(f"; {literal(note)}" for note in notes)


@contextlib.contextmanager
def _parent(runner: Runner, only: list[str] | None) -> Iterator[None]:
    """The ablation's MLflow parent run, one per ablation and settings, reopened by every later invocation so that
    every run of the ablation hangs under it; chosen units (``--only``, a launcher's jobs) nest under it without
    reopening it. Runs left RUNNING by a killed invocation are closed first."""
    from bvr.ops.views import write_views
    from bvr.tracking import RunContext, client_for, close_stale_runs, parent_run, run_tags

    plan = runner.plan
    if runner.rank != 0:
        yield
        return
    closed = close_stale_runs(plan.experiment, Path.cwd())
    if closed:
        runner.say(f"closed {len(closed)} MLflow run(s) left running by a process that no longer exists "
                   "(status KILLED, tag bvr.closed)")
    tags = run_tags(RunContext(ablation=plan.name), stage="ablation",
                    extra={"bvr.preset": plan.preset or "default", "bvr.plan": plan.plan_hash,
                           "bvr.manifest": str(plan.manifest_path), "bvr.kind": plan.ablation.kind})
    name = f"{plan.name} ({plan.preset or 'default'}{', chosen units' if only else ''})"
    with contextlib.ExitStack() as stack:
        # Under the manifest's lock: of two invocations started at once, the second finds the first's parent there.
        with target_lock(plan.manifest_path):
            existing = _recorded_parent(runner)
            if only and existing:
                runner.parent_run_id = existing
            else:
                run = stack.enter_context(parent_run(plan.experiment, name, workdir=Path.cwd(), tags=tags,
                                                     description=plan.ablation.description, resume_run_id=existing))
                write_views(client_for(Path.cwd()), run.info.experiment_id)
                runner.parent_run_id = runner.manifest.parent_run_id = run.info.run_id
                runner.save()
                stack.callback(_log_manifest, runner)
        yield


@contextlib.contextmanager
def launcher_parent(plan: Plan, *, console: Console, ui_url: str | None = None) -> Iterator[Manifest]:
    """The manifest and the MLflow parent run that the units' processes of ``bvr ablate --launcher`` nest under,
    made before the first starts and open for the block (alive, so no unit's process closes it as left behind)."""
    runner = Runner(plan, stage_dir=None, progress=False, console=console, ui_url=ui_url)
    with _parent(runner, None):
        yield runner.manifest


def _recorded_parent(runner: Runner) -> str | None:
    """The parent run the manifest on disk names (another invocation may have written it since), if this store has
    it. Refused where the manifest records finished units but this store lacks its parent: the outputs were moved
    away from their store, ``--output-dir`` names another folder's, or the id was edited or its run deleted."""
    from bvr.tracking import client_for, tracking_uri
    from bvr.tracking.placed import newest_run, stored_run

    path, store, client = runner.plan.manifest_path, tracking_uri(Path.cwd()), client_for(Path.cwd())
    on_disk = Manifest.load(path) if path.is_file() else runner.manifest
    recorded = on_disk.parent_run_id
    if recorded and not stored_run(client, recorded):
        done = [record.run_id for record in on_disk.records() if record.status == "done"]
        if any(stored_run(client, run_id) for run_id in done):  # they are here: the parent's id is not
            raise BvrError(f"its parent run {recorded} is not in {store}, which holds its finished runs: "
                           "parent_run_id was edited, or that run deleted", where=str(path),
                           hint="write the ablation's run id back (bvr ui NAME prints it), or write "
                                "\"parent_run_id\": null, and bvr finds that run by the plan")
        if done:
            raise BvrError(f"its finished runs are logged in another MLflow store ({on_disk.store or 'not recorded'})"
                           f", not in {store}", where=str(path),
                           hint="run bvr from the folder that holds that store or point MLFLOW_TRACKING_URI at it; "
                                "to run the ablation again into this store, pass another --output-dir")
        recorded = None  # nothing finished yet (or the run was deleted before any unit ran): start a new parent
    runner.manifest.store = store
    # None recorded (the manifest was deleted): its parent is found by the plan and the manifest's place.
    plan = runner.plan
    return recorded or newest_run(client, plan.experiment, f"tags.`bvr.stage` = 'ablation' and "
                                  f"tags.`bvr.plan` = '{plan.plan_hash}'", {"bvr.manifest": str(plan.manifest_path)})


def _log_manifest(runner: Runner) -> None:
    """Save the manifest, and log it to the ablation's parent run (when there is one)."""
    from bvr.tracking import client_for

    runner.save()
    if runner.parent_run_id:
        client_for(Path.cwd()).log_artifact(runner.parent_run_id, str(runner.plan.manifest_path))


def run_ablation(plan: Plan, *, only: list[str] | None = None, stage_dir: Path | None = None, report: bool = True,
                 progress: bool = True, console: Console | None = None, ui_url: str | None = None) -> AblationResult:
    """Run every unit of ``plan`` (or the ``only`` ones, ``pretrain:static``), reusing finished units, and the report
    last; ``stage_dir`` (``pipeline/NAME``) also gets each unit's products, for DVC. Failed units are recorded and
    raised together after the (partial) report; a write that ran out of disk or permission stops the run at once; an
    interrupt is passed on after the manifest is saved."""
    start = time.perf_counter()
    runner = Runner(plan, stage_dir=stage_dir, progress=progress, console=console or Console(), ui_url=ui_url)
    units = plan.select(only) if only else [u for u in plan.units() if report or u.kind is not UnitKind.REPORT]
    if runner.rank != 0:  # other DDP ranks take part in pretraining only
        units = [u for u in units if u.kind in PRETRAINING_KINDS]
    budget = use_threads(plan.arms[0].config.training.threads)  # each pretraining run applies its arm's own
    runner.say(describe_plan(plan, units, budget) if not only else  # chosen units (a SLURM job's): one line
               f"[bold]ablation {literal(plan.name)}[/bold] (preset {literal(plan.preset or 'default')}), data "
               f"folder {literal(plan.data_dir or '(none)')}, {literal(budget.line())}")
    context = runner.manifest.context
    earlier = context.wall_seconds or 0.0  # summed over invocations
    with _parent(runner, only):
        for unit in units:
            ran = len(runner.ran)
            runner.run_unit(unit)
            if unit.kind is not UnitKind.REPORT and len(runner.ran) > ran:
                # Counted up to the last unit that ran, not past it: a report rendered again from the same runs
                # (bvr report, or a run that reused every unit) shows the same wall time, byte for byte.
                context.wall_seconds = earlier + time.perf_counter() - start
    runner.save()
    if runner.failed:
        lines = "; ".join(f"{unit}: {message}" for unit, message in runner.failed.items())
        raise BvrError(f"{len(runner.failed)} unit(s) failed: {lines}", where=f"ablate {plan.name}",
                       hint="fix the cause and run the same command again: finished units are reused")
    return AblationResult(runner.manifest, runner.ran, runner.reused, time.perf_counter() - start, runner.report)
