"""What each kind of unit does: one handler per :class:`~bvr.ablation.plan.UnitKind`, in :data:`HANDLERS`. A handler
runs its unit through the stage caches, reads a :class:`UnitContext` and changes nothing else: it returns an
:class:`Outcome`, which the runner (:mod:`bvr.runner.run`) puts in the manifest, the DVC stage folder and the log.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bvr.ablation.arms import check_static_masks_repeat
from bvr.ablation.manifest import Manifest
from bvr.ablation.plan import Plan, Unit, UnitKind
from bvr.ablation.records import Record
from bvr.config import Config, config_hash
from bvr.errors import BvrError
from bvr.formatting import points, pretrain_summary
from bvr.ops.dvc.stage_folder import evaluation_file, finetune_summary

if TYPE_CHECKING:
    from bvr.tracking import RunContext


@dataclass(frozen=True)
class UnitContext:
    """What a handler reads: the plan, the manifest as it stands, and this invocation's settings and models."""

    plan: Plan
    manifest: Manifest
    """Read only: a handler returns its records in its :class:`Outcome` instead of writing them here."""
    models: Mapping[str, Path]
    """Label -> model folder of each arm pretrained (or initialised) by this invocation."""
    run: RunContext
    """The context of every MLflow run the unit opens (:func:`run_context`; no parent run on other DDP ranks)."""
    stage_dir: Path | None
    """The DVC stage folder (``--stage-dir``), or None."""
    rank: int
    progress: bool
    ui_url: str | None = None


@dataclass(frozen=True)
class Product:
    """A file or folder a unit leaves in the DVC stage folder: ``text`` written, or the folder ``tree`` copied."""

    path: tuple[str, ...]
    """Where under the stage folder (``("static", "model")``)."""
    text: str | None = None
    tree: Path | None = None


@dataclass(frozen=True)
class Outcome:
    """What a unit did: whether it built anything, and what it recorded, made and has to say."""

    built: bool
    """False when everything came from the cache."""
    records: tuple[Record, ...] = ()
    """The manifest records it filled (:meth:`~bvr.ablation.manifest.Manifest.put`)."""
    products: tuple[Product, ...] = ()
    """Its files for the DVC stage folder (written only when there is one)."""
    lines: tuple[str, ...] = ()
    """Its key numbers (scores in points), for the one line the runner prints when the unit ends."""
    model: Path | None = None
    """The model folder a ``pretrain`` unit made or found."""
    report: Any = None
    """The ``report`` unit's :class:`~bvr.report.render.RenderResult`."""


def run_context(plan: Plan, manifest: Manifest, unit: Unit, parent_run_id: str | None) -> RunContext:
    """The context of every MLflow run ``unit`` opens: the ablation's experiment and parent run, and the model's
    label and tags, each key its arm declares among them as ``bvr.declared.KEY`` (``bvr.declared.masking.mode =
    static``), so fine-tuning and evaluation runs show the ablated setting too."""
    from bvr.tracking import TAG_ARM, TAG_DECLARED_PREFIX, TAG_LABEL, TAG_PRETRAIN_SEED, RunContext

    tags: dict[str, Any] = {}
    if unit.kind not in (UnitKind.CORPUS, UnitKind.TOKENIZER, UnitKind.REPORT) and unit.name is not None:
        arm = plan.arm(unit.name)
        declared = {f"{TAG_DECLARED_PREFIX}{key}": v for key, v in (manifest.declared.get(arm.arm) or {}).items()}
        tags = {TAG_ARM: arm.arm, TAG_LABEL: arm.label, TAG_PRETRAIN_SEED: arm.pretrain_seed, **declared}
    return RunContext(experiment=plan.experiment, ablation=plan.name, label=unit.name, parent_run_id=parent_run_id,
                      tags=tags)


def _distinct(configs: Iterable[Config], *, tokenizer: bool) -> list[Config]:
    """One config per distinct corpus (and, with ``tokenizer``, tokenizer) settings: one build per stage folder."""
    seen: dict[str, Config] = {}
    for cfg in configs:
        seen.setdefault(config_hash(cfg.corpus, cfg.data_dir, cfg.tokenizer if tokenizer else None), cfg)
    return list(seen.values())


def _json(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=2)


def corpus(ctx: UnitContext, unit: Unit) -> Outcome:
    """Read the corpus of every distinct corpus setting."""
    from bvr.pretraining.prepare import prepare_corpus

    built: set[Path] = set()
    products = []
    for cfg in _distinct((arm.config for arm in ctx.plan.arms), tokenizer=False):
        folder = prepare_corpus(cfg, progress=ctx.progress, built=built)
        stats = folder / "documents" / "corpus_stats.json"
        record = json.loads(stats.read_text()) if stats.is_file() else {}
        products.append(Product(("corpus.json",), _json({"folder": folder.name, **record})))
    return Outcome(bool(built), products=tuple(products))


def tokenizer(ctx: UnitContext, unit: Unit) -> Outcome:
    """Train the tokenizer of family ``unit.name`` for every distinct corpus and tokenizer setting."""
    from bvr.pretraining.prepare import prepare_corpus, prepare_tokenizer

    built: set[Path] = set()  # the tokenizers: a corpus read on the way is the corpus unit's work
    products = []
    for cfg in _distinct((a.config for a in ctx.plan.arms if a.config.tokenizer.family == unit.name),
                         tokenizer=True):
        folder = prepare_tokenizer(cfg, prepare_corpus(cfg, progress=ctx.progress), progress=ctx.progress,
                                   built=built)
        products.append(Product((f"tokenizer-{unit.name}",), tree=folder))
    return Outcome(bool(built), products=tuple(products))


def data(ctx: UnitContext, unit: Unit) -> Outcome:
    """The arm's input format (and every stage before it); a static masking arm that this data shows would never
    reuse a mask is refused here, and the ablation with it (:class:`~bvr.ablation.arms.ArmsCannotDiffer`)."""
    from bvr.pretraining.prepare import prepare

    built: set[Path] = set()
    arm = ctx.plan.arm(unit.name)
    prepared = prepare(arm.config, progress=ctx.progress, built=built)
    stats = json.loads((prepared.instances / "data_stats.json").read_text())
    if not arm.control:  # before any pretraining: a static arm that never reuses a mask is the dynamic arm
        modes = {other.config.masking.mode for other in ctx.plan.arms if not other.control and other is not arm}
        check_static_masks_repeat(arm.arm, arm.config, modes, stats["train"])
    product = Product((f"data-{unit.name}.json",), _json({"folder": prepared.instances.name, **stats}))
    return Outcome(prepared.instances.resolve() in built, products=(product,))


def pretrain(ctx: UnitContext, unit: Unit) -> Outcome:
    """Pretrain the arm (resumed from ``last.ckpt``), or write the control's randomly initialised encoder."""
    from bvr.pretraining.initialise import initialise
    from bvr.pretraining.run import pretrain as pretrain_arm

    label = unit.name
    arm = ctx.plan.arm(label)
    if arm.control:
        result = initialise(arm.config, progress=ctx.progress)
    else:
        result = pretrain_arm(arm.config, context=ctx.run, resume=True, progress=ctx.progress)
    if ctx.rank != 0:  # the other DDP ranks took part in training; rank zero records it
        return Outcome(not result.reused)
    stage = {"run_dir": str(result.run_dir), "metrics": result.metrics}
    records: tuple[Record, ...] = ()
    lines: tuple[str, ...] = ()
    if not arm.control:
        run_id_file = result.run_dir / "mlflow_run_id"
        run_id = _run_here(ctx, result.run_dir, run_id_file.read_text().strip() if run_id_file.is_file() else None)
        record = dataclasses.replace(
            ctx.manifest.pretrain_record(label), status="done", error=None, run_dir=str(result.run_dir),
            metrics=result.metrics, run_id=run_id)
        shown = {k: v for k, v in result.metrics.items() if k != "wall_seconds"}  # the unit's line has its time
        records, lines = (record,), (pretrain_summary(shown),)
        stage["run_id"] = record.run_id
    products = (Product((label, "model"), tree=result.model_dir), Product((label, "pretrain.json"), _json(stage)))
    return Outcome(not result.reused, records, products, lines, model=result.model_dir)


def _run_here(ctx: UnitContext, run_dir: Path, run_id: str | None) -> str | None:
    """The pretraining run in this ablation's experiment: a model another ablation pretrained gets a copy of its run
    here, without the artifacts (they stay with the run the copy names, ``bvr.copied_from``)."""
    from bvr.tracking import client_for, ensure_experiment, run_tags
    from bvr.tracking.placed import run_here

    experiment_id = ensure_experiment(ctx.plan.experiment, Path.cwd())
    tags = run_tags(ctx.run, stage="pretrain")
    return run_here(client_for(Path.cwd()), experiment_id, run_id, run_dir.name,
                    parent_run_id=ctx.run.parent_run_id, tags=tags, artifacts=False) or run_id


def find_model(ctx: UnitContext, label: str, *, what: str, where: str) -> Path:
    """The model folder of arm ``label``, to ``what`` (``evaluate``, ``fine-tune``): this invocation's, the DVC
    stage's copy, or the finished run the manifest records. Never trains: an arm whose pretraining has not finished
    is an error; the control's initialisation is found in its cache or written there in seconds."""
    from bvr.pretraining.initialise import initialise

    arm = ctx.plan.arm(label)
    if not arm.control and ctx.manifest.pretrain_record(label).status == "failed":
        raise BvrError(f"pretraining of '{label}' failed; nothing to {what}", where=where)
    if label in ctx.models:  # first, so the runs a full `bvr ablate` logs name its own run beside a stage folder
        return ctx.models[label]
    if ctx.stage_dir is not None and (ctx.stage_dir / label / "model" / "config.json").is_file():
        return ctx.stage_dir / label / "model"
    if arm.control:
        return initialise(arm.config, progress=ctx.progress).model_dir
    run_dir = ctx.manifest.pretrain_record(label).run_dir
    if run_dir and (Path(run_dir) / "model" / "config.json").is_file():
        return Path(run_dir) / "model"
    raise BvrError(f"'{label}' has no pretrained model yet; nothing to {what}", where=where,
                   hint=f"run the unit pretrain:{label} first, as a full `bvr ablate` does")


def evaluate(ctx: UnitContext, unit: Unit) -> Outcome:
    """Score BLiMP zero-shot (``blimp``) or probe the frozen features on a task over every probe seed (``probe``)."""
    from bvr.evaluation.run import evaluate_model

    label, kind = unit.name, unit.kind.value
    model = find_model(ctx, label, what="evaluate", where=f"{kind}:{label}")
    result = evaluate_model(model, kind, unit.task, ctx.plan.evaluations, data_dir=ctx.plan.data_dir,
                            output_dir=ctx.plan.output_dir, context=ctx.run, progress=ctx.progress)
    record = dataclasses.replace(
        ctx.manifest.evaluation_record(label, kind, unit.task), status="done", error=None, run_id=result.run_id,
        main_key=result.main_key, score=result.score, seeds={str(k): v for k, v in result.seeds.items()},
        baseline=result.baseline, seconds=result.seconds)
    spread = "" if len(result.seeds) < 2 else (f" (probe seeds {points(min(result.seeds.values()))}"
                                               f"–{points(max(result.seeds.values()))})")
    line = (f"{result.main_key} {points(result.score)}{spread}" +
            (f", trivial baseline {points(result.baseline)}" if result.baseline is not None else ""))
    product = Product((label, evaluation_file(kind, unit.task)), _json(record.to_dict()))
    return Outcome(not result.reused, (record,), (product,), (line,))


def finetune(ctx: UnitContext, unit: Unit) -> Outcome:
    """Fine-tune the arm on the task over every fine-tuning seed."""
    from bvr.tasks.registry import get_task
    from bvr.tasks.run import FinetuneSetup
    from bvr.tasks.run import finetune as finetune_model

    label, task, plan = unit.name, unit.task, ctx.plan
    # The control fine-tunes from its initialisation (the weights arm seed s started from), not from weights drawn
    # per fine-tuning seed: fine-tuning seeds then nest inside the control's pretraining seed as in every arm's.
    model = find_model(ctx, label, what="fine-tune", where=unit.id)
    setup = FinetuneSetup(data_dir=plan.data_dir, output_dir=plan.output_dir, preset=plan.preset,
                          overrides=plan.ablation.finetune_overrides())
    result = finetune_model(model, task, seeds=plan.seeds, setup=setup, from_scratch=False, context=ctx.run,
                            progress=ctx.progress)
    by_seed = {seed.seed: seed for seed in result.seeds}
    records = []
    for record in ctx.manifest.finetune_records(label, task):
        seed = by_seed[record.seed]
        records.append(dataclasses.replace(
            record, status="done", error=None, run_id=seed.run_id, main_key=result.main_key,
            parent_run_id=result.parent_run_id or record.parent_run_id, score=seed.scores[result.main_key],
            collapsed=seed.collapsed, seconds=seed.seconds, baseline=result.info.baseline,
            grid_point=result.chosen_point, selection=_seed_selection(result.selection, plan.seeds.index(seed.seed))))
    summary = result.summary()
    collapsed = sum(seed.collapsed for seed in result.seeds)
    scale = get_task(task).points_scale
    line = (f"{result.main_key} median {points(summary['median'], scale)} (min {points(summary['min'], scale)}, "
            f"max {points(summary['max'], scale)}) over {len(result.seeds)} seeds" +
            (f", {collapsed} collapsed" if collapsed else "") +
            (f"; at {result.chosen_point}, chosen on held-out training examples" if result.chosen_point else ""))
    product = Product((label, f"finetune-{task}.json"), _json(finetune_summary(result, task, label, records)))
    return Outcome(any(not seed.reused for seed in result.seeds), tuple(records), (product,), (line,))


def _seed_selection(selection: dict[str, Any] | None, index: int) -> list[dict[str, Any]] | None:
    """The selection score of the seed at ``index`` (in the call's seeds) at every grid point; None without a grid."""
    return None if selection is None else [
        {"learning_rate": p["learning_rate"], "epochs": p["epochs"], "name": p["name"], "score": p["scores"][index]}
        for p in selection["points"]]


def report(ctx: UnitContext, unit: Unit) -> Outcome:
    """Render ``reports/NAME/`` from the manifest: every unit before it has recorded itself there."""
    from bvr.ops.views import write_report_views
    from bvr.report.render import render_report

    result = render_report(ctx.manifest, workdir=Path.cwd(), ui_url=ctx.ui_url, write_views=write_report_views)
    line = f"{result.html}" + ("" if result.complete else f" (partial: {len(result.missing)} item(s) missing)")
    return Outcome(True, lines=(line,), report=result)


HANDLERS: dict[UnitKind, Callable[[UnitContext, Unit], Outcome]] = {
    UnitKind.CORPUS: corpus, UnitKind.TOKENIZER: tokenizer, UnitKind.DATA: data, UnitKind.PRETRAIN: pretrain,
    UnitKind.BLIMP: evaluate, UnitKind.PROBE: evaluate, UnitKind.FINETUNE: finetune, UnitKind.REPORT: report}
"""The handler of each kind of unit: it runs the unit and says what it did."""
