"""What a report says first: did pretraining help (or hurt) each arm against the no-pretraining control, then the
ablation's effect on each measure, one sentence each, from the Holm-adjusted comparisons of :mod:`.analysis`."""

from __future__ import annotations

import math

from bvr.report.analysis import Analysis, Comparison
from bvr.report.inference import MIN_UNITS, adjusted_confidence


def _won(analysis: Analysis, by_arm: bool) -> dict[str, list[Comparison]]:
    """Per pretrained arm, the measures on which it beats the control (``by_arm``) or the control beats it
    (Holm-adjusted)."""
    out: dict[str, list[Comparison]] = {arm: [] for arm in analysis.collected.pretrained_arms}
    for c in analysis.control:
        if c.significant and c.ours == f"{c.b if by_arm else c.a} better":
            out.setdefault(c.b, []).append(c)
    return out


def pretraining_helped(analysis: Analysis) -> dict[str, list[Comparison]]:
    """Per pretrained arm, the measures on which it beats the control (Holm-adjusted)."""
    return _won(analysis, by_arm=True)


def pretraining_hurt(analysis: Analysis) -> dict[str, list[Comparison]]:
    """Per pretrained arm, the measures on which the control beats it (Holm-adjusted)."""
    return _won(analysis, by_arm=False)


def _hurt_line(arm: str, control: str, losses: list[Comparison], m: int) -> str:
    """'Pretraining hurt ARM: ...' with each measure's effect, arm − control, and its interval."""
    return (f"Pretraining hurt {arm}: worse than the {control} control on "
            + ", ".join(f"{c.measure.title} by {_fmt_effect(c)} points" for c in losses)
            + f" (Holm-adjusted over {m} comparisons).")


def _fmt_effect(c: Comparison) -> str:
    digits = 3 if c.task == "mlm" else 1
    return (f"{c.estimate:+.{digits}f} [{c.interval.ci_low:+.{digits}f}, {c.interval.ci_high:+.{digits}f}]")


def headlines(analysis: Analysis) -> list[str]:
    """The sanity check first (did pretraining help?), then the ablation's effect on each measure."""
    lines = []
    control = analysis.collected.control
    helped = pretraining_helped(analysis) if control and analysis.control else {}
    hurt = pretraining_hurt(analysis) if control and analysis.control else {}
    if control and analysis.control:
        for arm, wins in helped.items():
            tried = [c for c in analysis.control if c.b == arm]
            if not tried:
                continue
            losses = hurt.get(arm, [])
            if wins:
                others = [c for c in tried if c.test.tested and c not in wins and c not in losses]
                short = ("; not on " + ", ".join(f"{c.measure.title} ({c.estimate:+.1f}, detectable {c.mde:.1f})"
                                                 for c in others)) if others else ""
                lines.append(f"Pretraining helped {arm}: better than the {control} control on "
                             + ", ".join(f"{c.measure.title} by {_fmt_effect(c)} points" for c in wins)
                             + f" (Holm-adjusted over {analysis.m} comparisons; "
                             f"{analysis.m and f'{adjusted_confidence(0.95, analysis.m) * 100:.4g}'}% intervals)"
                             + short + ".")
            elif not any(c.test.tested for c in tried):
                n = max(c.test.n for c in tried)
                lines.append(f"Whether pretraining helped {arm} is not tested: at most {n} pretraining seed(s) "
                             f"pair with the {control} control on any measure, and a test needs {MIN_UNITS}.")
            else:
                best = [c for c in tried if c.test.tested]
                mde = min((c.mde for c in best if not math.isnan(c.mde)), default=math.nan)
                gaps = "; ".join(f"{c.measure.title} {c.estimate:+.1f}, detectable {c.mde:.1f}" for c in best)
                lines.append(f"At this budget {arm} does not beat the {control} control on any measure"
                             f" (the design detects differences of {mde:.1f} points or more; {arm} − {control}: "
                             f"{gaps}): the budget is too small to judge the ablation. Grow it (tokens, steps, "
                             "data) until pretraining moves a measure by more than its detectable difference, or "
                             "add pretraining seeds (the detectable difference shrinks about as 1/√seeds).")
            if losses:
                lines.append(_hurt_line(arm, control, losses, analysis.m))
        if not any(helped.values()) and any(c.test.tested for c in analysis.control):
            lines.append("Pretraining did not beat the control anywhere, so no difference between arms below can "
                         "be read as an effect of the ablated choice.")
    # A measure on which no arm beat the control cannot show what the ablated choice does to pretraining.
    blind = set()
    if any(helped.values()):
        tested = {c.measure.key for c in analysis.control if c.test.tested}
        blind = tested - {c.measure.key for wins in helped.values() for c in wins}
    for c in analysis.comparisons:
        if not c.comparable:
            continue
        extra = f"; the paper: {c.published:+.1f} ({c.paper})" if c.published is not None else ""
        if c.needed is not None:
            extra += f", which would need {c.needed} pretraining seeds per arm at this noise"
        if c.measure.key in blind:
            extra += (f"; pretraining did not beat the {control} control on this measure, so it cannot show the "
                      "ablation's effect at this budget")
        if c.significant:
            lines.append(f"{c.measure.title}: {c.ours} ({c.name} = {_fmt_effect(c)}, Holm p={c.adjusted_p:.3g}; "
                         f"n={c.test.n}){extra}.")
        elif c.test.tested:
            digits = 3 if c.task == "mlm" else 1
            lines.append(f"{c.measure.title}: no difference detected between {c.a} and {c.b} ({c.name} = "
                         f"{_fmt_effect(c)}, n={c.test.n}); the design detects |Δ| ≥ {c.mde:.{digits}f}{extra}.")
        else:
            lines.append(f"{c.measure.title}: {c.name} not tested ({c.test.n} pretraining seed(s); at least "
                         f"{MIN_UNITS} needed){extra}.")
    return lines
