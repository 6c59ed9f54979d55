"""What a report says first, from the Holm-adjusted comparisons of :mod:`.analysis`: the ablation's effect on each
measure, then whether pretraining helped (or hurt) each arm against the control; a line per question (:func:`brief`)
and a sentence per finding (:func:`headlines`). A significant comparison, in either direction, is stated in one form:
who beats whom, on what, by how much (with its simultaneous interval) and at which Holm p (:func:`found`). A measure
is never listed both as one pretraining did not help and as a significant effect."""

from __future__ import annotations

import math

from bvr.ablation.declare import BUDGET_KIND
from bvr.report.analysis import Analysis, Comparison, Outcome
from bvr.report.cells import fmt_p, signed
from bvr.report.inference import MIN_UNITS
from bvr.report.shown import EffectRow


def pretraining_helped(analysis: Analysis, hurt: bool = False) -> dict[str, list[Comparison]]:
    """Per pretrained arm, the measures on which it beats the control (``hurt``: the control beats it), by Holm."""
    out: dict[str, list[Comparison]] = {arm: [] for arm in analysis.collected.pretrained_arms}
    wanted = Outcome.A_BETTER if hurt else Outcome.B_BETTER
    for c in analysis.control:
        if c.outcome is wanted:
            out.setdefault(c.arm_b, []).append(c)
    return out


def _fmt_effect(c: Comparison) -> str:
    """'+3.0 [-6.3, +12.3]': ``b − a`` and its simultaneous interval, signed, to the measure's digits."""
    d = c.measure.digits
    return f"{signed(c.estimate, d)} [{c.interval.ci_low:+.{d}f}, {c.interval.ci_high:+.{d}f}]"


def _holm(c: Comparison) -> str:
    """'Holm p = 0.028' or 'Holm p < 0.001'."""
    p = fmt_p(c.adjusted_p)
    return f"Holm p {p[0]} {p[1:]}" if p.startswith("<") else f"Holm p = {p}"


def _lead(c: Comparison) -> str:
    """'MEASURE by 9.3 [0.1, 18.5] points (Holm p = 0.028, n=8)': how far the better side of a significant
    comparison is ahead, with the simultaneous interval of that lead, so 'worse by 9.3' never reads 'by -9.3'."""
    d = c.measure.digits
    sign = 1 if c.estimate >= 0 else -1
    low, high = sorted((sign * c.interval.ci_low, sign * c.interval.ci_high))
    return (f"{c.measure.title} by {abs(c.estimate):.{d}f} [{low:.{d}f}, {high:.{d}f}] {c.measure.unit} "
            f"({_holm(c)}, n={c.test.n})")


def found(c: Comparison) -> str:
    """A Holm-significant comparison between arms as found: 'WINNER better than LOSER on MEASURE by SIZE (...)'."""
    return f"{c.winner} better than {c.loser} on {_lead(c)}"


def _against_control(arm: str, control: str, wins: list[Comparison], helped: bool) -> str:
    """'Pretraining helped|hurt ARM: better|worse than the CONTROL control on MEASURE by SIZE (...), ...'."""
    verb, than = ("helped", "better") if helped else ("hurt", "worse")
    return f"Pretraining {verb} {arm}: {than} than the {control} control on " + ", ".join(_lead(c) for c in wins)


def _control_lines(analysis: Analysis, arm: str, wins: list[Comparison], losses: list[Comparison]) -> list[str]:
    """The sentences on one pretrained arm against the control: what it helped, what it hurt, or why neither."""
    control = analysis.collected.control
    tried = [c for c in analysis.control if c.arm_b == arm]
    if not tried:
        return []
    lines = []
    tested = [c for c in tried if c.test.tested]
    quiet = [c for c in tested if c not in wins and c not in losses]  # neither helped nor hurt (Holm)
    if wins:
        short = ("; not on " + ", ".join(f"{c.measure.title} ({c.estimate:+.1f}, detectable {c.mde:.1f})"
                                         for c in quiet)) if quiet else ""
        lines.append(_against_control(arm, control, wins, helped=True) + short + ".")
    elif not tested:
        n = max(c.test.n for c in tried)
        with_control = ("pair with the {control} control" if all(c.test.paired for c in tried) else
                        "are compared with the {control} control").format(control=control)
        lines.append(f"Whether pretraining helped {arm} is not tested: at most {n} pretraining seed(s) {with_control} "
                     f"on any measure, and a test needs {MIN_UNITS}.")
    else:
        mde = min((c.mde for c in tested if not math.isnan(c.mde)), default=math.nan)
        gaps = "; ".join(f"{c.measure.title} {c.estimate:+.1f}, detectable {c.mde:.1f}" for c in quiet)
        lines.append(f"At this budget {arm} does not beat the {control} control on any measure"
                     f" (the design detects differences of {mde:.1f} points or more"
                     + (f"; {arm} − {control}: {gaps}" if gaps else "")
                     + "): the budget is too small to judge the ablation. Grow it (tokens, steps, data) until "
                     "pretraining moves a measure by more than its detectable difference, or add pretraining seeds "
                     "(the detectable difference shrinks about as 1/√seeds).")
    if losses:
        lines.append(_against_control(arm, control, losses, helped=False) + ".")
    return lines


def _sanity(analysis: Analysis) -> list[str]:
    """The sanity check: each pretrained arm against the control, then whether any arm beat it at all."""
    if not (analysis.collected.control and analysis.control):
        return []
    helped, hurt = pretraining_helped(analysis), pretraining_helped(analysis, hurt=True)
    lines = [line for arm, wins in helped.items() for line in _control_lines(analysis, arm, wins, hurt.get(arm, []))]
    if not any(helped.values()) and any(c.test.tested for c in analysis.control):
        lines.append("Pretraining did not beat the control anywhere, so no difference between arms below can "
                     "be read as an effect of the ablated choice.")
    return lines


def _blind(analysis: Analysis) -> dict[str, str]:
    """Measure key -> why it cannot show the ablation's effect: no arm beat the control on it (it was tested),
    or pretraining hurt it; empty when no arm beat the control anywhere (the sanity line says so once)."""
    control = analysis.collected.control
    helped = pretraining_helped(analysis)
    if not any(helped.values()):
        return {}
    tested = {c.measure.key for c in analysis.control if c.test.tested}
    hurt: dict[str, list[str]] = {}
    for arm, losses in pretraining_helped(analysis, hurt=True).items():
        for c in losses:
            hurt.setdefault(c.measure.key, []).append(arm)
    out = {}
    for key in tested - {c.measure.key for wins in helped.values() for c in wins}:
        why = (f"pretraining hurt {' and '.join(hurt[key])} against the {control} control on this measure"
               if key in hurt else f"pretraining did not beat the {control} control on this measure")
        out[key] = f"; {why}, so it cannot show the ablation's effect at this budget"
    return out


def _ablation_line(c: Comparison, blind: str) -> str:
    """One measure's comparison of two pretrained arms: found, not detected or not tested; then the paper's effect."""
    extra = f"; the paper: {c.published:+.1f} ({c.paper})" if c.published is not None else ""
    if c.needed is not None:
        extra += f", which would need {c.needed} pretraining seeds per arm at this noise"
    extra += blind
    if c.significant:
        return f"{found(c)}{extra}."
    if c.identical:
        return (f"{c.measure.title}: {Outcome.SAME.value}: each of {c.test.n} pretraining seeds of {c.arm_b} gave "
                f"{c.arm_a}'s value to the last digit, so this budget cannot answer the question{extra}.")
    if c.test.tested:
        return (f"{c.measure.title}: no difference detected between {c.arm_a} and {c.arm_b} ({c.name} = "
                f"{_fmt_effect(c)}, n={c.test.n}); the design detects |Δ| ≥ {c.mde:.{c.measure.digits}f}{extra}.")
    return (f"{c.measure.title}: {c.name} not tested ({c.test.n} pretraining seed(s); at least {MIN_UNITS} "
            f"needed){extra}.")


def headlines(analysis: Analysis) -> list[str]:
    """The ablation's effect on each measure first, then the sanity check (did pretraining help, or hurt?)."""
    blind = _blind(analysis)
    return [*(_ablation_line(c, blind.get(c.measure.key, "")) for c in analysis.comparisons if c.comparable),
            *_sanity(analysis)]


def _brief_pair(pair: list[Comparison]) -> str:
    """Two pretrained arms on every measure: each effect Holm finds with its simultaneous interval and who is
    better, then the measures where none was detected, with their estimates."""
    parts = [f"{c.measure.short_title} {_fmt_effect(c)} {c.measure.unit}, {c.ours}" for c in pair if c.significant]
    quiet = [c for c in pair if c.test.tested and not c.significant and not c.identical]
    if quiet:
        estimates = ", ".join(f"{c.measure.short_title} {signed(c.estimate, c.measure.digits)}" for c in quiet)
        parts.append(f"{estimates}: no difference detected")
    for kept, why in (([c for c in pair if c.identical], f"{Outcome.SAME.value} (every seed gave the same numbers)"),
                      ([c for c in pair if not c.test.tested], "not tested (too few pretraining seeds)")):
        if kept:
            parts.append(", ".join(c.measure.short_title for c in kept) + f": {why}")
    return f"**{pair[0].arm_b} − {pair[0].arm_a}**: " + "; ".join(parts) + "."


def _brief_control(analysis: Analysis) -> str | None:
    """Every pretrained arm against the control in one line: the measures pretraining helped and hurt (Holm), each
    with every arm's lead in points, and those where it did neither."""
    tried = [c for c in analysis.control if c.comparable and c.test.tested]
    if not tried:
        return None
    helped: dict[str, list[str]] = {}
    hurt: dict[str, list[str]] = {}
    for c in tried:
        if c.significant:
            side = helped if c.outcome is Outcome.B_BETTER else hurt
            side.setdefault(c.measure.short_title, []).append(f"{c.arm_b} {signed(c.estimate, c.measure.digits)}")
    neither = [c.measure.short_title for c in tried if c.measure.short_title not in helped | hurt]
    parts = [f"{verb} " + ", ".join(f"{measure} ({', '.join(leads)})" for measure, leads in side.items())
             for verb, side in (("helped", helped), ("hurt", hurt)) if side]
    if neither:
        parts.append(f"neither on {', '.join(dict.fromkeys(neither))}")
    return f"**pretraining − {analysis.collected.control}**: " + "; ".join(parts) + " (points)."


def too_small(analysis: Analysis) -> str | None:
    """The headline's line on arms that beat the control on none of the measures they were tested on (in full:
    :func:`_control_lines`), the first thing a reader must know: no difference involving such an arm can be read as
    the ablation's effect. None when every tested arm beats the control somewhere."""
    helped = pretraining_helped(analysis)
    unseen = [arm for arm in analysis.collected.pretrained_arms
              if not helped.get(arm) and any(c.arm_b == arm and c.test.tested for c in analysis.control)]
    if not (analysis.collected.control and unseen):
        return None
    control, budget_curve = analysis.collected.control, analysis.collected.manifest.kind == BUDGET_KIND
    if len(unseen) == len(analysis.collected.pretrained_arms):
        if budget_curve:
            return (f"**too small to judge**: no budget tried beats the {control} control on any measure, so "
                    "pretraining does not show within these budgets.")
        return (f"**too small to judge**: no arm beats the {control} control on any measure at this budget, so no "
                "difference between the arms can be read as the ablated choice's effect.")
    arms = ", ".join(unseen)
    verb = "does" if len(unseen) == 1 else "do"
    return (f"**too small to judge**: {arms} {verb} not beat the {control} control on any measure at this budget, so "
            + ("pretraining does not show there." if budget_curve else
               f"no difference involving {arms} can be read as the ablated choice's effect."))


def brief(analysis: Analysis, *, bold: bool = True) -> list[str]:
    """The headline in a line per question, every finding kept (the full sentences are :func:`headlines`): first,
    where an arm beats the control nowhere, that the budget is too small to judge (:func:`too_small`); each pair of
    pretrained arms; then pretraining against the control. What the terminal, the report's first screen and the
    parent run's description in MLflow (100 px) show; ``bold`` marks each line's subject in Markdown."""
    pairs: dict[tuple[str, str], list[Comparison]] = {}
    for c in analysis.comparisons:
        if c.comparable:
            pairs.setdefault((c.arm_a, c.arm_b), []).append(c)
    control, small = _brief_control(analysis), too_small(analysis)
    lines = [*([small] if small else []), *(_brief_pair(pair) for pair in pairs.values()),
             *([control] if control else [])]
    return lines if bold else [line.replace("**", "") for line in lines]


def effect_rows(analysis: Analysis) -> list[EffectRow]:
    """Every comparable comparison as a row of MLflow's effects view (:func:`bvr.ops.views.write_effects`), the
    ablation's pairs first, then each arm against the control, its verdict as ``dynamic better (Holm p < 0.001)``
    or why it was not tested."""
    rows = []
    for c in [*analysis.comparisons, *analysis.control]:
        if not c.comparable:
            continue
        nan = math.nan
        if c.test.tested:
            verdict, low, high = f"{c.ours} ({_holm(c)})", c.interval.ci_low, c.interval.ci_high
        else:
            verdict, low, high = f"not tested ({c.test.n} pretraining seed(s); at least {MIN_UNITS} needed)", nan, nan
        rows.append(EffectRow(c.arm_a, c.arm_b, c.measure.key, c.measure.short_title, c.measure.unit, c.measure.digits,
                              c.estimate, low, high, c.mde, analysis.level, verdict))
    return rows
