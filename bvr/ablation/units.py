"""What each kind of unit does: one typed handler per :class:`~bvr.ablation.plan.UnitKind`, in :data:`HANDLERS`.

A handler runs its unit (through the stage caches, so a finished unit is found rather than rebuilt), records the
result in the runner's manifest, writes the unit's products under the DVC stage folder when there is one
(:mod:`bvr.ablation.stages`), and returns whether it built anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from bvr.ablation.plan import Unit, UnitKind
from bvr.ablation.stages import adopt_stage_records, copy_tree, evaluation_file, finetune_summary
from bvr.config import Config, config_hash
from bvr.display import points
from bvr.errors import BvrError

if TYPE_CHECKING:
    from bvr.ablation.run import Runner

Handler = Callable[["Runner", Unit], bool]
"""Runs one unit; True when it built something, False when everything came from the cache."""


def _distinct(configs: Iterable[Config], *, tokenizer: bool) -> list[Config]:
    """One config per distinct corpus (and, with ``tokenizer``, tokenizer) settings: one build per stage folder."""
    seen: dict[str, Config] = {}
    for cfg in configs:
        seen.setdefault(config_hash(cfg.corpus, cfg.data_dir, cfg.tokenizer if tokenizer else None), cfg)
    return list(seen.values())


def corpus(runner: Runner, unit: Unit) -> bool:
    """Read the corpus of every distinct corpus setting."""
    from bvr.pretraining.prepare import prepare_corpus

    built = False
    for cfg in _distinct((arm.config for arm in runner.plan.arms), tokenizer=False):
        folder = prepare_corpus(cfg, progress=runner.progress)
        built |= runner.fresh(folder)
        stats = folder / "documents" / "corpus_stats.json"
        if (out := runner.stage_out("corpus.json")) is not None:
            record = json.loads(stats.read_text()) if stats.is_file() else {}
            out.write_text(json.dumps({"folder": folder.name, **record}, indent=2))
    return built


def tokenizer(runner: Runner, unit: Unit) -> bool:
    """Train the tokenizer of family ``unit.name`` for every distinct corpus and tokenizer setting."""
    from bvr.pretraining.prepare import prepare_corpus, prepare_tokenizer

    built = False
    for cfg in _distinct((a.config for a in runner.plan.arms if a.config.tokenizer.family == unit.name),
                         tokenizer=True):
        folder = prepare_tokenizer(cfg, prepare_corpus(cfg, progress=runner.progress), progress=runner.progress)
        built |= runner.fresh(folder)
        if (out := runner.stage_out(f"tokenizer-{unit.name}")) is not None:
            copy_tree(folder, out)
    return built


def data(runner: Runner, unit: Unit) -> bool:
    """The arm's input format (and every stage before it)."""
    from bvr.pretraining.prepare import prepare

    prepared = prepare(runner.plan.arm(unit.name).config, progress=runner.progress)
    if (out := runner.stage_out(f"data-{unit.name}.json")) is not None:
        stats = json.loads((prepared.instances / "data_stats.json").read_text())
        out.write_text(json.dumps({"folder": prepared.instances.name, **stats}, indent=2))
    return runner.fresh(prepared.instances)


def pretrain(runner: Runner, unit: Unit) -> bool:
    """Pretrain the arm (resumed from ``last.ckpt``), or write the control's randomly initialised encoder."""
    from bvr.pretraining.run import initialise
    from bvr.pretraining.run import pretrain as pretrain_arm

    label = unit.name
    arm = runner.plan.arm(label)
    if arm.control:
        result = initialise(arm.config, progress=runner.progress)
    else:
        result = pretrain_arm(arm.config, resume=True, ablation=runner.plan.name, arm=label,
                              parent_run_id=runner.parent_run_id, experiment=runner.plan.experiment,
                              progress=runner.progress)
    if runner.rank != 0:
        return not result.reused
    runner.models[label] = result.model_dir
    if not arm.control:
        run_id_file = result.run_dir / "mlflow_run_id"
        runner.manifest.pretrain_record(label).update(
            status="done", error=None, run_dir=str(result.run_dir), metrics=result.metrics,
            run_id=run_id_file.read_text().strip() if run_id_file.is_file() else None)
        runner.note(_pretrain_line(result.metrics))
    if (out := runner.stage_out(label, "model")) is not None:
        copy_tree(result.model_dir, out)
        record = {"run_dir": str(result.run_dir), "metrics": result.metrics}
        if not arm.control:
            record["run_id"] = runner.manifest.pretrain_record(label).run_id
        (out.parent / "pretrain.json").write_text(json.dumps(record, indent=2))
    return not result.reused


def _model(runner: Runner, label: str) -> Path:
    """The arm's model folder: the DVC stage's copy, this invocation's run, or the cached run."""
    if runner.stage_dir is not None and (runner.stage_dir / label / "model" / "config.json").is_file():
        return runner.stage_dir / label / "model"
    if label not in runner.models:
        pretrain(runner, Unit(UnitKind.PRETRAIN, label))
    return runner.models[label]


def _check_pretrained(runner: Runner, label: str, what: str, where: str) -> None:
    """Refuse to go on from an arm whose pretraining failed."""
    if not runner.plan.arm(label).control and runner.manifest.pretrain_record(label).status == "failed":
        raise BvrError(f"pretraining of '{label}' failed; nothing to {what}", where=where)


def evaluate(runner: Runner, unit: Unit) -> bool:
    """Score BLiMP zero-shot (``blimp``) or probe the frozen features on a task over every probe seed (``probe``)."""
    from bvr.evaluation.run import evaluate_model

    label, kind = unit.name, unit.kind.value
    arm = runner.plan.arm(label)
    _check_pretrained(runner, label, "evaluate", f"{kind}:{label}")
    result = evaluate_model(_model(runner, label), kind, unit.task, runner.plan.evaluations,
                            data_dir=runner.plan.data_dir, label=label, pretrain_seed=arm.pretrain_seed,
                            ablation=runner.plan.name, experiment=runner.plan.experiment,
                            parent_run_id=runner.parent_run_id, progress=runner.progress)
    record = runner.manifest.evaluation_record(label, kind, unit.task)
    record.update(status="done", error=None, run_id=result.run_id, main_key=result.main_key, score=result.score,
                  seeds={str(k): v for k, v in result.seeds.items()}, baseline=result.baseline,
                  seconds=result.seconds)
    spread = "" if len(result.seeds) < 2 else (f" (probe seeds {points(min(result.seeds.values()))}"
                                               f"–{points(max(result.seeds.values()))})")
    runner.note(f"{result.main_key} {points(result.score)}{spread}" +
                (f", trivial baseline {points(result.baseline)}" if result.baseline is not None else ""))
    if (out := runner.stage_out(label, evaluation_file(kind, unit.task))) is not None:
        out.write_text(json.dumps(record.to_dict(), indent=2))
    return not result.reused


def finetune(runner: Runner, unit: Unit) -> bool:
    """Fine-tune the arm on the task over every fine-tuning seed."""
    from bvr.tasks.registry import get_task
    from bvr.tasks.run import finetune as finetune_model

    label, task = unit.name, unit.task
    records = runner.manifest.finetune_records(label, task)
    _check_pretrained(runner, label, "fine-tune", unit.id)
    # The control fine-tunes from its initialisation (the weights arm seed s started from), not from weights
    # drawn per fine-tuning seed: fine-tuning seeds then nest inside the control's pretraining seed as they do
    # inside every arm's.
    plan = runner.plan
    result = finetune_model(_model(runner, label), task, seeds=plan.seeds, data_dir=plan.data_dir,
                            output_dir=plan.output_dir, preset=plan.preset,
                            overrides=plan.ablation.finetune_overrides(), from_scratch=False, arm=label,
                            ablation=plan.name, experiment=plan.experiment, parent_run_id=runner.parent_run_id,
                            progress=runner.progress)
    by_seed = {seed.seed: seed for seed in result.seeds}
    for record in records:
        seed = by_seed[record.seed]
        record.update(status="done", error=None, run_id=seed.run_id, main_key=result.main_key,
                      parent_run_id=result.parent_run_id or record.parent_run_id,
                      score=seed.scores[result.main_key], collapsed=seed.collapsed, seconds=seed.seconds,
                      baseline=result.info.baseline)
    summary = result.summary()
    collapsed = sum(seed.collapsed for seed in result.seeds)
    scale = get_task(task).points_scale
    runner.note(f"{result.main_key} median {points(summary['median'], scale)} (min {points(summary['min'], scale)}, "
                f"max {points(summary['max'], scale)}) over {len(result.seeds)} seeds" +
                (f", {collapsed} collapsed" if collapsed else ""))
    if (out := runner.stage_out(label, f"finetune-{task}.json")) is not None:
        out.write_text(json.dumps(finetune_summary(result, task, label, records), indent=2))
    return any(not seed.reused for seed in result.seeds)


def report(runner: Runner, unit: Unit) -> bool:
    """Render ``reports/NAME/`` from the manifest, after taking in what DVC stages recorded."""
    from bvr.report.render import render_report

    if runner.stage_dir is not None:
        adopt_stage_records(runner.manifest, runner.stage_dir)
    runner.save()
    result = render_report(runner.manifest, workdir=Path.cwd(), ui_url=runner.ui_url)
    runner.report = result
    runner.note(f"{result.html}" + ("" if result.complete else
                                            f" (partial: {len(result.missing)} item(s) missing)"))
    return True


def _pretrain_line(metrics: dict[str, float]) -> str:
    parts = []
    if "val/mlm_loss" in metrics:
        parts.append(f"val MLM loss {metrics['val/mlm_loss']:.3f} (perplexity {metrics.get('val/perplexity', 0):.0f})")
    if "tokens_seen" in metrics:
        parts.append(f"{metrics['tokens_seen'] / 1e6:.2f}M tokens")
    if "epochs" in metrics:
        parts.append(f"{metrics['epochs']:.1f} epochs, each mask seen up to {metrics.get('mask_max_times_seen', 0):.0f}"
                     " times")
    return "; ".join(parts)


HANDLERS: dict[UnitKind, Handler] = {
    UnitKind.CORPUS: corpus,
    UnitKind.TOKENIZER: tokenizer,
    UnitKind.DATA: data,
    UnitKind.PRETRAIN: pretrain,
    UnitKind.BLIMP: evaluate,
    UnitKind.PROBE: evaluate,
    UnitKind.FINETUNE: finetune,
    UnitKind.REPORT: report,
}
"""The handler of each kind of unit."""
