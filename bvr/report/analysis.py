"""From collected runs to the numbers a report prints: measures (:mod:`bvr.report.measures`), tests that hold their
level, the paper.

Each pretrained arm is compared with the no-pretraining control on every measure but MLM loss ("did pretraining help
at this budget?"), and the pretrained arms with each other, ``b - a`` with ``a`` the earlier arm, on every measure.
Arms pair by pretraining seed (seed s of every arm starts from the same weights) in a paired t test
(:func:`bvr.report.inference.compare`); every tested comparison forms one Holm family at a family-wise error of 5 %,
intervals are Bonferroni-simultaneous, and each comparison carries the smallest effect it detects with 80 % power."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum

import pandas as pd

from bvr.ablation.declare import BUDGET_KIND
from bvr.report.collect import Collected, main_key
from bvr.report.inference import Comparison as InferenceComparison
from bvr.report.inference import UnitsNeeded, adjusted_confidence, compare, holm, units_needed, with_confidence
from bvr.report.measures import (
    MLM,
    Measure,
    direction,
    display_scale,
    evaluation_measures,
    finetune_measures,
    metric_label,
    mlm_measure,
)
from bvr.report.published import published_effect
from bvr.report.stats import Summary, summarize

CONTROL_FAMILY = "pretraining"  # each pretrained arm against the control: did pretraining help at this budget?
ABLATION_FAMILY = "ablation"  # pretrained arms against each other: the ablation's question
ALPHA = 0.05  # family-wise error rate of every report: the chance that any verdict in it is false


class Outcome(Enum):
    """What a comparison ``b - a`` found, each with the words the report's tables print (``a``, ``b``: the arms)."""

    B_BETTER = "{b} better"
    A_BETTER = "{a} better"
    NO_DIFFERENCE = "no difference detected"
    SAME = "the arms did not differ at this budget"
    """Every pretraining seed of ``b`` gave ``a``'s value to the last digit: the two arms were one run, so the
    comparison measures nothing (a static arm that never reused a mask is the dynamic arm)."""
    TOO_FEW_UNITS = "too few units"
    NOT_COMPARABLE = "not comparable"


@dataclass(frozen=True)
class Comparison:
    """Arm ``b`` against arm ``a`` (the control, or the paper's baseline arm) on one measure, tested and adjusted."""

    family: str
    measure: Measure
    arm_a: str
    arm_b: str
    test: InferenceComparison  # the t test of ``b - a`` at 95 % (nominal, unadjusted)
    interval: InferenceComparison  # the same test with its interval at the report's (simultaneous) Bonferroni level
    adjusted_p: float  # Holm-adjusted p over every tested comparison of the report (NaN when not tested)
    m: int  # tested comparisons in the report (the family's size)
    mde: float  # smallest true ``|b - a|`` the design detects with 80 % power at ``ALPHA / m``
    published: float | None = None  # the paper's ``b - a`` in the measure's units
    needed: UnitsNeeded | None = None  # pretraining seeds the paper's effect would need at this noise
    comparable: bool = True  # False where the measure differs between the arms (MLM loss across tokenizers)

    @property
    def key(self) -> str:
        """The measure's key (``blimp``, ``probe/sst2``, ``finetune/sst2``, ``mlm``)."""
        return self.measure.key

    @property
    def name(self) -> str:
        return f"{self.arm_b} − {self.arm_a}"

    @property
    def estimate(self) -> float:
        return self.test.estimate

    @property
    def identical(self) -> bool:
        """Tested, and every paired difference is exactly zero: the arms gave the same numbers, seed for seed."""
        return self.test.tested and bool(self.test.differences) and all(d == 0 for d in self.test.differences)

    @property
    def significant(self) -> bool:
        """Holm rejects the null at :data:`ALPHA`."""
        return self.comparable and self.test.tested and self.adjusted_p <= ALPHA

    @property
    def outcome(self) -> Outcome:
        """What the comparison found: an arm better (Holm), no difference detected, or why it was not tested."""
        if not self.comparable:
            return Outcome.NOT_COMPARABLE
        if not self.test.tested:
            return Outcome.TOO_FEW_UNITS
        if self.identical:
            return Outcome.SAME
        if not self.significant:
            return Outcome.NO_DIFFERENCE
        return Outcome.B_BETTER if (self.estimate > 0) == self.measure.higher_is_better else Outcome.A_BETTER

    @property
    def winner(self) -> str | None:  # the better arm where Holm found a difference
        return {Outcome.B_BETTER: self.arm_b, Outcome.A_BETTER: self.arm_a}.get(self.outcome)

    @property
    def loser(self) -> str | None:
        return {Outcome.B_BETTER: self.arm_a, Outcome.A_BETTER: self.arm_b}.get(self.outcome)

    @property
    def ours(self) -> str:
        """The outcome in the tables' words: an :class:`Outcome` with the arms filled in ('dynamic better')."""
        return self.outcome.value.format(a=self.arm_a, b=self.arm_b)

    @property
    def paper(self) -> str:
        """The paper's direction, or 'n/a'."""
        return direction(self.published, self.arm_a, self.arm_b, higher_is_better=self.measure.higher_is_better)

    @property
    def agreement(self) -> str:
        """'agree' / 'disagree' when Holm rejects (by sign), 'inconclusive' otherwise, or 'no published value'."""
        if self.published is None or math.isnan(self.published):
            return "no published value"
        if not self.comparable:
            return "not comparable"
        if not self.significant:
            return "inconclusive"
        return "agree" if (self.published > 0) == (self.estimate > 0) else "disagree"


@dataclass
class Analysis:
    """Everything a report prints, in points (see the module docstring)."""

    collected: Collected
    scores: pd.DataFrame  # the fine-tuning runs with a ``points`` column (value times the task's scale in ``scales``)
    scales: dict[str, float]
    summaries: dict[tuple[str, str], Summary]  # (arm, task) -> over that arm's fine-tuning runs on the task
    measures: list[Measure]  # in report order: BLiMP, probes, fine-tuning tasks, MLM loss
    comparisons: list[Comparison]  # pretrained arms two at a time on every measure (the ablation family)
    control: list[Comparison]  # each pretrained arm against the control on every measure but MLM loss
    published: pd.DataFrame  # this ablation's rows of ``reports/published.yaml`` (empty when there are none)
    notes: list[str] = field(default_factory=list)

    @property
    def tasks(self) -> list[str]:
        """The manifest's fine-tuning tasks, then any other task a run was found for."""
        planned = self.collected.tasks
        return planned + sorted(set(self.scores["task"]) - set(planned))

    def metric(self, task: str) -> str:
        """The headline key of fine-tuning ``task`` as logged by its runs (or the registry's)."""
        rows = self.scores.loc[self.scores["task"] == task, "metric"]
        return str(rows.iloc[0]) if not rows.empty else main_key(task)

    def task_title(self, task: str) -> str:
        """How a table and a figure name fine-tuning ``task``: 'sst2: dev accuracy, ×100' ('points' when logged so)."""
        return f"{task}: {metric_label(self.metric(task))}, {'×100' if self.scales.get(task) == 100 else 'points'}"

    @property
    def m(self) -> int:
        """Tested comparisons in the report (the Holm family)."""
        return sum(c.test.tested and c.comparable for c in [*self.control, *self.comparisons])

    @property
    def level(self) -> str:
        """The level of the report's simultaneous intervals, as every table, figure, MLflow and the terminal print it
        (``99.5%``; ``95%`` with nothing tested)."""
        return f"{adjusted_confidence(0.95, self.m) * 100:.4g}%" if self.m else "95%"

    def measure(self, key: str) -> Measure | None:
        return next((measure for measure in self.measures if measure.key == key), None)


VALIDATION_KEYS = ("tokenizer.family", "tokenizer.vocab_size", "data.input_format", "data.max_length")
"""What shapes an arm's validation sequences: arms that differ in one are validated on other tokens (another
vocabulary) or other contexts (another input format: a sentence pair is about half as long as full sentences), so
their MLM losses are not compared. Arms that differ only in the sentence objective are (its pairs swap or replace
a segment, not the contexts' length: the sentence-objective ablation compares them)."""


def _same_validation(pretrain: pd.DataFrame, arm_a: str, arm_b: str) -> bool:
    def validated_on(arm: str) -> tuple:
        rows = pretrain.loc[pretrain["arm"] == arm, list(VALIDATION_KEYS)].astype(str)
        return tuple(rows.drop_duplicates().itertuples(index=False))
    return validated_on(arm_a) == validated_on(arm_b)


def _scored(collected: Collected) -> tuple[pd.DataFrame, dict[str, float]]:
    frame = collected.finetune.copy()
    tasks = list(dict.fromkeys([*collected.tasks, *frame["task"]]))
    scales = {task: display_scale(task, frame.loc[frame["task"] == task, "value"].tolist()) for task in tasks}
    frame["points"] = [value * scales[task] for task, value in zip(frame["task"], frame["value"], strict=True)]
    return frame, scales


def _published_effect(published: pd.DataFrame, ablation: str | None, arm_a: str, arm_b: str,
                      measure: Measure) -> float | None:
    """The paper's ``b - a`` in the measure's units: fine-tuning tasks, and probes where a paper prints a
    feature-based column (as ``probe/TASK``, BERT Table 8's NER); the papers report no BLiMP."""
    if not ablation or published.empty:
        return None
    if measure.key.startswith("finetune/"):
        return published_effect(published, ablation, arm_a, arm_b, measure.task, measure.metric)
    if measure.key.startswith("probe/"):
        return published_effect(published, ablation, arm_a, arm_b, measure.key, None)
    return None


def _finish(raw: list[Comparison]) -> list[Comparison]:
    """Holm over every tested comparison, simultaneous intervals, detectable effects and the seeds the paper's needs."""
    tested = [i for i, c in enumerate(raw) if c.test.tested and c.comparable]
    m = len(tested)
    adjusted = dict(zip(tested, holm([raw[i].test.p_value for i in tested]), strict=True))
    level, alpha = adjusted_confidence(0.95, m), ALPHA / max(m, 1)
    out = []
    for i, c in enumerate(raw):
        test, effect = c.test, c.published
        needed = units_needed(effect, test.sd, alpha) if effect is not None and test.tested and effect != 0 else None
        out.append(replace(c, interval=with_confidence(test, level), adjusted_p=adjusted.get(i, math.nan), m=m,
                           mde=test.mde(alpha) if test.tested else math.nan, needed=needed))
    return out


def _pairs(arms: list[str], kind: str) -> list[tuple[str, str]]:
    """The pretrained arms compared with each other, the earlier first: every pair, but a budget curve's each budget
    and the next only (its question is each budget against the control; every pair would widen every interval).

    >>> _pairs(["a", "b", "c"], "ablation"), _pairs(["a", "b", "c"], BUDGET_KIND)
    ([('a', 'b'), ('a', 'c'), ('b', 'c')], [('a', 'b'), ('b', 'c')])
    """
    if kind == BUDGET_KIND:
        return list(zip(arms, arms[1:], strict=False))
    return [(arm_a, arm_b) for i, arm_a in enumerate(arms) for arm_b in arms[i + 1:]]


def analyse(collected: Collected, published: pd.DataFrame) -> Analysis:
    """One ablation's measures, tests (one Holm family) and published rows (its manifest's ``published`` table)."""
    frame, scales = _scored(collected)
    key = collected.manifest.published
    ours = published[published["ablation"] == key] if key else published.iloc[0:0]
    notes = []
    if key and ours.empty:
        notes.append(f"reports/published.yaml has no table for '{key}'")
    summaries = {}
    for (arm, task), rows in frame.groupby(["arm", "task"], sort=False):
        summaries[(arm, task)] = summarize(rows["points"].to_numpy(), collapsed=rows["collapsed"].to_numpy())
    tasks = list(dict.fromkeys([*collected.tasks, *sorted(set(frame["task"]) - set(collected.tasks))]))
    measures = [*evaluation_measures(collected), *finetune_measures(frame, tasks, collected)]
    mlm = mlm_measure(collected)
    every = [*measures, *([mlm] if mlm else [])]

    # Arms are paired with the control seed by seed, unless the control has initialisations of its own (Welch).
    control_paired = not collected.manifest.control_seeds

    def tested(family: str, measure: Measure, arm_a: str, arm_b: str) -> Comparison:  # alone, before _finish
        test = compare(measure.units(arm_b), measure.units(arm_a), higher_is_better=measure.higher_is_better,
                       paired=family != CONTROL_FAMILY or control_paired)
        comparable = measure.key != MLM or _same_validation(collected.pretrain, arm_a, arm_b)
        return Comparison(family, measure, arm_a, arm_b, test, test, math.nan, 0, math.nan,
                          _published_effect(ours, key, arm_a, arm_b, measure), comparable=comparable)

    arms, control = collected.pretrained_arms, collected.control
    raw = [tested(CONTROL_FAMILY, measure, control, arm) for measure in measures for arm in arms
           if control and measure.units(arm) and measure.units(control)]
    raw += [tested(ABLATION_FAMILY, measure, arm_a, arm_b) for measure in every
            for arm_a, arm_b in _pairs(arms, collected.manifest.kind) if measure.units(arm_a) and measure.units(arm_b)]
    done = _finish(raw)
    if not all(c.comparable for c in done):
        notes.append("MLM loss is per token of each arm's own validation sequences, so arms with different "
                     "tokenizers or input formats are not compared on it")
    return Analysis(collected, frame, scales, summaries, every, [c for c in done if c.family == ABLATION_FAMILY],
                    [c for c in done if c.family == CONTROL_FAMILY], ours, notes)
