"""The budget curve: a budget experiment's arms (one recipe pretrained for increasing budgets, ``kind: budget``)
each against the no-pretraining control, and where every other ablation's budget sits on it.

The arms are ordered by the tokens their runs saw; per measure, the fixed-sequence procedure
(:mod:`bvr.report.inference.sequence`) finds where pretraining starts to help, splitting the report's 5 % over the
measures only, never over the budgets (the report's simultaneous intervals split it over every test: 24 for the
shipped curve, where at 3 seeds only a giant effect clears them). :func:`budget_payload` is the curve as
``metrics.json`` holds it; :func:`budget_context` reads that file from ``reports/budget/`` for another ablation's
report; :func:`recipe_text` puts the shared recipe in a line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from bvr.ablation.declare import BUDGET_KIND
from bvr.report.analysis import ALPHA, Analysis, Comparison, Outcome
from bvr.report.cells import arm_config, fmt, fmt_ci, fmt_count, relative_path, signed
from bvr.report.document import Block, Bullets, Figure, Heading, Paragraph, Table
from bvr.report.inference import FixedSequence, fixed_sequences, one_sided_bound, one_sided_p
from bvr.report.measures import Measure

BUDGET_EXPERIMENT = "budget"  # the shipped curve (experiments/budget.yaml), whose report the others look for
METRICS_FILE = "metrics.json"
NEAR = 0.05  # a budget within this fraction of a curve point's tokens is "at" that point

TURN_PROCEDURE = ("fixed sequence: one-sided t tests of arm − control (H0: the budget is not better than the "
                  "control), from the largest budget down, each at alpha split over the measures only (Bonferroni), "
                  "stopping at the first budget that does not reject; the smallest rejected budget is the turn")
"""How :meth:`BudgetCurve.starts_to_help` decides, as ``metrics.json`` states it."""

LAYOUT = (("embedding_norm", True, "no embedding LayerNorm"), ("token_type_init", "normal", "zero token types"),
          ("head_transform", True, "no head transform"))
"""The model's departures from BERT's layout (``model`` key, BERT's value, the words for the other)."""


def recipe_text(config: dict[str, Any]) -> str:
    """A planned config's recipe in a line: encoder, vocabulary, inputs, masking, optimisation, corpus.

    >>> recipe_text({"model": {"family": "bert", "norm": "pre", "num_layers": 2, "hidden_size": 128},
    ...              "data": {"input_format": "segment-pair", "sentence_objective": "nsp", "max_length": 128},
    ...              "masking": {"mode": "dynamic", "split": [1.0, 0.0, 0.0]}, "training": {"dropout": False}})
    'bert 2x128 pre-LayerNorm, segment-pair x 128 + nsp, dynamic masking 100/0/0, no dropout'
    """
    def get(section: str, key: str) -> Any:
        return (config.get(section) or {}).get(key)

    layers, hidden = get("model", "num_layers"), get("model", "hidden_size")
    shape = f"{layers}x{hidden}" if layers and hidden else None
    model = " ".join(str(v) for v in (get("model", "family"), shape) if v)
    parts = [model + (" pre-LayerNorm" if get("model", "norm") == "pre" else "")]
    layout = [text for key, bert_way, text in LAYOUT if get("model", key) not in (None, bert_way)]
    if layout:
        parts[0] += " (" + ", ".join(layout) + ")"
    tokenizer = get("tokenizer", "family")
    if tokenizer:
        size = (f"vocabulary sized by min_count {get('tokenizer', 'min_count')}" if get("tokenizer", "min_count")
                else f"vocabulary {get('tokenizer', 'vocab_size') or 'default'}")
        parts.append(f"{tokenizer} {size}")
    if get("data", "input_format"):
        objective = get("data", "sentence_objective")
        parts.append(f"{get('data', 'input_format')} x {get('data', 'max_length')}"
                     + (f" + {objective}" if objective and objective != "none" else ""))
    split = get("masking", "split")
    if get("masking", "mode"):
        parts.append(f"{get('masking', 'mode')} masking"
                     + (" " + "/".join(f"{100 * v:.0f}" for v in split) if isinstance(split, list) else ""))
    if get("training", "dropout") is False:
        parts.append("no dropout")
    for key, text in (("learning_rate", "peak lr {:g}"), ("batch_size", "batch {}")):
        if get("training", key) is not None:
            parts.append(text.format(get("training", key)))
    if get("corpus", "max_documents"):
        parts.append(f"first {get('corpus', 'max_documents'):,} documents")
    return ", ".join(p for p in parts if p)


@dataclass(frozen=True)
class BudgetPoint:
    """One budget: an arm's finished pretraining runs (the arm's name carries the budget, as ``steps-900``); means
    over the runs, NaN where no run gave the number."""

    arm: str
    tokens: float  # run/tokens_seen
    runs: int
    mlm_loss: float  # the final validation MLM loss in nats per token ...
    mlm_low: float  # ... with its 95% t interval over pretraining seeds (NaN under 3 seeds)
    mlm_high: float
    unigram_entropy: float  # run/val_unigram_entropy, nats per token


@dataclass(frozen=True)
class BudgetCurve:
    """The budgets in increasing tokens, and each one's comparisons with the control."""

    points: list[BudgetPoint]  # one per pretrained arm, by tokens (arms without a finished run last, in file order)
    measures: list[Measure]
    comparisons: dict[tuple[str, str], Comparison]  # (measure key, arm) -> the report's ``arm − control``
    control: str
    recipe: str  # the shared recipe in words (the control's planned config: the base without any arm's diff)
    level: str  # the simultaneous intervals' level ("99.6%")

    def comparison(self, key: str, arm: str) -> Comparison | None:
        return self.comparisons.get((key, arm))

    @property
    def sequence_points(self) -> list[BudgetPoint]:
        """The budgets the fixed sequence runs over: those with tokens, smallest first."""
        return [p for p in self.points if not math.isnan(p.tokens)]

    @cached_property
    def sequences(self) -> dict[str, FixedSequence]:
        """Measure key -> the fixed-sequence procedure over :attr:`sequence_points` (a budget without a tested
        comparison stops its sequence), at :data:`~bvr.report.analysis.ALPHA` split over the measures."""
        return fixed_sequences({measure.key: [self.one_sided_p(measure.key, p.arm) for p in self.sequence_points]
                                for measure in self.measures}, ALPHA)

    @property
    def turn_measures(self) -> int:
        """Measures the fixed sequences split :data:`~bvr.report.analysis.ALPHA` over: those with a tested budget."""
        return sum(any(not math.isnan(v) for v in s.pvalues) for s in self.sequences.values())

    @property
    def turn_alpha(self) -> float:
        """The level of each fixed-sequence test: :data:`~bvr.report.analysis.ALPHA` over the tested measures."""
        return next(iter(self.sequences.values())).alpha if self.sequences else ALPHA

    def one_sided_p(self, key: str, arm: str) -> float:
        """The one-sided p-value of "the arm is not better than the control" on the measure (NaN: not tested)."""
        c = self.comparison(key, arm)
        return one_sided_p(c.test) if c is not None and c.comparable else math.nan

    def bound(self, key: str, arm: str) -> float:
        """The one-sided bound on ``arm − control`` at ``1 - turn_alpha``, on pretraining's side (NaN: untested)."""
        c = self.comparison(key, arm)
        return one_sided_bound(c.test, 1 - self.turn_alpha) if c is not None and c.comparable else math.nan

    def in_sequence(self, key: str, arm: str) -> tuple[FixedSequence, int] | None:
        """The measure's fixed sequence and the arm's place in it (None: no sequence, or a budget it does not hold)."""
        sequence = self.sequences.get(key)
        arms = [p.arm for p in self.sequence_points]
        return (sequence, arms.index(arm)) if sequence is not None and arm in arms else None

    def declared(self, key: str, arm: str) -> bool:
        """Whether the fixed sequence declares that pretraining helps on the measure at the arm's budget."""
        place = self.in_sequence(key, arm)
        return place is not None and place[0].rejected[place[1]]

    def starts_to_help(self, key: str) -> BudgetPoint | None:
        """The fixed-sequence turn: the smallest budget from which on pretraining helps on the measure, having
        helped at every larger budget (None: the largest budget does not reject)."""
        sequence = self.sequences.get(key)
        turn = sequence.turn if sequence is not None else None
        return self.sequence_points[turn] if turn is not None else None

    @property
    def largest(self) -> float:
        """The largest tokens per run among the budgets (NaN: none measured)."""
        return max((p.tokens for p in self.sequence_points), default=math.nan)


def helps(c: Comparison) -> bool:
    """``c``'s simultaneous interval excludes zero on the side of the pretrained arm ``b``."""
    if not (c.test.tested and c.comparable):
        return False
    return c.interval.ci_low > 0 if c.measure.higher_is_better else c.interval.ci_high < 0


def _mean(rows: pd.DataFrame, key: str) -> float:
    """The mean of a column's finite values; NaN when there is none (or no such column)."""
    kept = pd.to_numeric(rows[key], errors="coerce").dropna() if key in rows else pd.Series(dtype=float)
    return float(kept.mean()) if not kept.empty else math.nan


def budget_curve(analysis: Analysis) -> BudgetCurve | None:
    """The budget curve of a budget experiment's analysis; None for any other ablation or without a control."""
    collected = analysis.collected
    control = collected.control
    if collected.manifest.kind != BUDGET_KIND or not control:
        return None
    pretrain, mlm = collected.pretrain, analysis.measure("mlm")
    points = []
    for arm in collected.pretrained_arms:
        rows = pretrain[pretrain["arm"] == arm]
        loss, low, high = mlm.mean_interval(arm) if mlm is not None else (math.nan,) * 3
        points.append(BudgetPoint(arm, _mean(rows, "run/tokens_seen"), len(rows), loss, low, high,
                                  _mean(rows, "run/val_unigram_entropy")))
    order = {p.arm: i for i, p in enumerate(points)}
    points.sort(key=lambda p: (math.isnan(p.tokens), 0.0 if math.isnan(p.tokens) else p.tokens, order[p.arm]))
    comparisons = {(c.measure.key, c.arm_b): c for c in analysis.control}
    measures = [measure for measure in analysis.measures if any(key == measure.key for key, _ in comparisons)]
    return BudgetCurve(points, measures, comparisons, control, recipe_text(arm_config(collected.manifest, control)),
                       analysis.level)


def budget_payload(curve: BudgetCurve) -> dict[str, Any]:
    """The curve for ``metrics.json``: per arm (by increasing tokens) its tokens, losses and ``arm − control`` per
    measure, with the report's Holm numbers and, beside them, the fixed sequence's (``one_sided_p``,
    ``sequence_p``, ``sequence_rejects``, ``bound``: the one-sided bound at ``1 - alpha_per_measure``); per measure
    the fixed-sequence turn (null: none); ``turn`` states the procedure and its per-measure level."""
    arms = {}
    for p in curve.points:
        measures = {}
        for measure in curve.measures:
            c = curve.comparison(measure.key, p.arm)
            if c is not None:  # sequence_p: the largest one-sided p at this budget and every larger one
                place = curve.in_sequence(measure.key, p.arm)
                measures[measure.key.replace("/", "_")] = {
                    "mean": c.estimate, "ci_low": c.interval.ci_low, "ci_high": c.interval.ci_high, "n": c.test.n,
                    "holm_p": c.adjusted_p, "significant": c.significant, "helps": helps(c), "verdict": c.ours,
                    "one_sided_p": curve.one_sided_p(measure.key, p.arm),
                    "sequence_p": place[0].adjusted_p[place[1]] if place is not None else None,
                    "sequence_rejects": curve.declared(measure.key, p.arm), "bound": curve.bound(measure.key, p.arm)}
        arms[p.arm] = {"tokens_seen": p.tokens, "runs": p.runs, "val_mlm_loss": p.mlm_loss,
                       "val_unigram_entropy": p.unigram_entropy, "measures": measures}
    turns = {}
    for measure in curve.measures:
        first = curve.starts_to_help(measure.key)
        turns[measure.key.replace("/", "_")] = {"title": measure.title, "name": measure.in_sentence,
                                          "starts_to_help_arm": first.arm if first else None,
                                          "starts_to_help_tokens": first.tokens if first else None}
    turn = {"procedure": TURN_PROCEDURE, "alpha": ALPHA, "measures": curve.turn_measures,
            "alpha_per_measure": curve.turn_alpha, "bound_confidence": 1 - curve.turn_alpha}
    return {"recipe": curve.recipe, "control": curve.control, "interval_level": curve.level,
            "largest_tokens_seen": curve.largest, "turn": turn, "arms": arms, "measures": turns}


def budget_frame(curve: BudgetCurve) -> pd.DataFrame:
    """The data behind the figure, long: one row per (arm, measure) with tokens, ``arm − control``, interval and
    whether the fixed sequence declares pretraining helpful there (``helps``)."""
    rows = [{"arm": p.arm, "tokens_seen": p.tokens, "measure": measure.key, "difference": c.estimate,
             "ci_low": c.interval.ci_low, "ci_high": c.interval.ci_high, "helps": curve.declared(measure.key, p.arm)}
            for p in curve.points for measure in curve.measures
            if (c := curve.comparison(measure.key, p.arm)) is not None]
    return pd.DataFrame(rows, columns=["arm", "tokens_seen", "measure", "difference", "ci_low", "ci_high", "helps"])


# --- The section -----------------------------------------------------------------------------------------------


def _verdict(c: Comparison | None) -> str:
    if c is None:
        return "—"
    if c.comparable and not c.test.tested:
        return f"too few seeds (n={c.test.n})"
    return "pretraining better" if c.outcome is Outcome.B_BETTER else c.ours


def _percent(level: float) -> str:
    """A level as the report prints it: 0.0125 -> '1.25%'."""
    return f"{level * 100:.4g}%"


def _split(curve: BudgetCurve) -> str:
    """The fixed sequences' per-measure level in words: '1.25% (5% split over the 4 measures, not over the budgets)'."""
    if curve.turn_measures < 2:
        return f"{_percent(curve.turn_alpha)} (not split over the budgets)"
    return (f"{_percent(curve.turn_alpha)} ({_percent(ALPHA)} split over the {curve.turn_measures} measures, not over "
            "the budgets)")


def turning_lines(curve: BudgetCurve) -> list[str]:
    """Per measure, the fixed-sequence turn with that budget's difference and one-sided bound, and the larger
    budgets that helped with it; or that none did."""
    lines = []
    for measure in curve.measures:
        first = curve.starts_to_help(measure.key)
        if first is None:
            lines.append(f"{measure.title}: pretraining does not help within the budgets tried (up to "
                         f"{fmt_count(curve.largest)} tokens per run).")
            continue
        c = curve.comparison(measure.key, first.arm)
        side = "at least" if measure.higher_is_better else "at most"
        larger = [p.arm for p in curve.sequence_points[curve.sequence_points.index(first) + 1:]]
        lines.append(f"{measure.title}: pretraining starts to help at {fmt_count(first.tokens)} tokens per run "
                     f"({first.arm}: {signed(c.estimate)} points, {side} {curve.bound(measure.key, first.arm):+.1f} at "
                     f"{_percent(1 - curve.turn_alpha)} one-sided)"
                     + (f", and helps at every larger budget ({', '.join(larger)})" if larger else "") + ".")
    return lines


def budget_section(curve: BudgetCurve | None, figure: Figure | None = None) -> list[Block]:
    """The "Budget curve" section: the table per budget, where each measure turns, and the figure."""
    if curve is None:
        return []
    header = ["arm", "tokens per run"]
    for measure in curve.measures:
        header += [f"{measure.in_sentence}: Δ {curve.level} CI", "verdict"]
    header += ["val MLM loss (nats)", "unigram entropy (nats)"]
    rows = []
    for p in curve.points:
        row = [p.arm, fmt_count(p.tokens)]
        for measure in curve.measures:
            c = curve.comparison(measure.key, p.arm)
            row += ["—" if c is None else f"{signed(c.estimate)} {fmt_ci(c.interval.ci_low, c.interval.ci_high)}",
                    _verdict(c)]
        rows.append([*row, fmt(p.mlm_loss, 3), fmt(p.unigram_entropy, 3)])
    intro = (f"One recipe ({curve.recipe}) pretrained for increasing budgets, each budget against the {curve.control} "
             f"control on every measure: where does pretraining start to help? Δ is arm − {curve.control} in points "
             f"over pretraining seeds, with {curve.level} simultaneous intervals; verdicts follow Holm over the "
             "report's tests.")
    caption = ("Tokens per run: the mean of the arm's pretraining runs' run/tokens_seen. Where a measure starts to "
               "help (below the table) is decided by one-sided t tests of arm − control in a fixed sequence, from the "
               f"largest budget down, each at {_split(curve)}, stopping at the first budget that does not reject: it "
               f"keeps the family-wise error rate at {_percent(ALPHA)} without splitting it over the budgets, where "
               "the table's intervals and verdicts split it over every test of the report. Validation MLM loss beside "
               "the unigram entropy of the validation tokens (the loss of predicting each token from its frequency "
               "alone; means over the runs): how far each budget got past frequency-only prediction.")
    align = "Lr" + "rl" * len(curve.measures) + "rr"
    blocks: list[Block] = [Heading("Budget curve"), Paragraph(intro), Table(header, rows, align=align, caption=caption),
                           Bullets(tuple(turning_lines(curve)))]
    return blocks + ([figure] if figure is not None else [])


# --- Where another ablation's budget sits ----------------------------------------------------------------------


def _position(tokens: float, arms: dict[str, Any]) -> str:
    """Where ``tokens`` falls among the curve's budgets, in words."""
    points = sorted(((float(v["tokens_seen"]), arm) for arm, v in arms.items()
                     if isinstance(v, dict) and isinstance(v.get("tokens_seen"), int | float)), key=lambda t: t[0])
    if math.isnan(tokens) or not points:
        return ""
    near = [arm for seen, arm in points if abs(seen - tokens) <= NEAR * seen]
    if near:
        return f" This budget is the curve's {near[0]} point."
    if tokens < points[0][0]:
        return f" This budget is below the curve's smallest ({points[0][1]}, {fmt_count(points[0][0])} tokens)."
    if tokens > points[-1][0]:
        return f" This budget is above the curve's largest ({points[-1][1]}, {fmt_count(points[-1][0])} tokens)."
    below = max((p for p in points if p[0] < tokens), key=lambda t: t[0])
    above = min((p for p in points if p[0] > tokens), key=lambda t: t[0])
    return f" This budget lies between the curve's {below[1]} and {above[1]} points."


def budget_context(reports_root: Path, analysis: Analysis) -> str | None:
    """One line for another ablation's setup: its tokens per pretraining run, and where pretraining starts to help
    each measure on the budget curve rendered beside it (``reports_root/budget/metrics.json``), or how to run the
    curve when it is not there. None for the budget curve itself.
    """
    manifest = analysis.collected.manifest
    if manifest.kind == BUDGET_KIND:
        return None
    pretrain = analysis.collected.pretrain
    tokens = _mean(pretrain[pretrain["arm"].isin(analysis.collected.pretrained_arms)], "run/tokens_seen")
    here = (f"This budget: {fmt_count(tokens)} tokens per pretraining run." if not math.isnan(tokens) else
            "This budget: no pretraining run has reported its tokens yet.")
    folder = Path(reports_root) / BUDGET_EXPERIMENT
    shown = relative_path(str(folder))
    command = f"`bvr ablate {BUDGET_EXPERIMENT} --preset {manifest.preset or 'tiny'}`"
    path = folder / METRICS_FILE
    if not path.is_file():
        return (f"{here} The budget curve has not been run ({shown} is absent): {command} runs it, and this line "
                "then says from which budget on pretraining helps each measure.")
    try:
        curve = json.loads(path.read_text(encoding="utf-8"))["budget_curve"]
        measures, arms = dict(curve["measures"]), dict(curve["arms"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"{here} {shown}/{METRICS_FILE} holds no budget curve: {command} renders it."
    largest = curve.get("largest_tokens_seen")
    parts = []
    for key, turn in measures.items():
        name = (turn.get("name") or key) if isinstance(turn, dict) else key
        at = turn.get("starts_to_help_tokens") if isinstance(turn, dict) else None
        parts.append(f"{name} at {fmt_count(at)} tokens ({turn['starts_to_help_arm']})" if at is not None else
                     f"{name} not within the budgets tried (up to {fmt_count(largest)} tokens)")
    helped = ", ".join(parts) if parts else "no measure yet"
    recipe = curve.get("recipe") or "unknown"
    return (f"{here} On the budget curve ({shown}, recipe: {recipe}), pretraining starts to help {helped}."
            + _position(tokens, arms))
