"""What `bvr ablate` says first: the run being made, its arms, evaluations and fine-tuning, its manifest, and the
thread budget it runs with."""

from __future__ import annotations

from bvr.ablation.plan import Plan, Unit
from bvr.formatting import literal
from bvr.threads import ThreadBudget


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
    """``sst2 x 2 seeds``, and where a task's hyperparameters are a grid, its points and the split they are chosen
    on: ``sst2 x 2 seeds at each of 3 points (lr 3e-04 to 3e-03), chosen per model on 2,000 held-out training
    examples``."""
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
        f"  arms: {', '.join(literal(a.label) for a in plan.arms)} ({len(ab.pretrain_seeds)} pretraining seed(s) each)",
        f"  evaluations: {_blimp(plan)}; {probes}",
        f"  fine-tuning: {_finetune(plan)}",
        f"  manifest: {literal(plan.manifest_path)}",
        f"  units to run or reuse: {len(units)}; {literal(budget.line())}"])
