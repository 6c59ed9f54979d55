"""The numbers of a report: the pretraining table (:func:`pretrain_table`), ``metrics.json``
(:func:`metrics_payload`), the rows of ``dvc metrics show`` (:func:`dvc_metrics`) and the effects logged as metrics
of the ablation's parent run (:func:`effect_metrics`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from bvr.report.analysis import Analysis
from bvr.report.budget import budget_curve, budget_payload
from bvr.report.cells import mean_of
from bvr.report.collect import FINAL_KEYS
from bvr.report.shown import ScoreRow

FACTS = ("wall_seconds", "tokens_seen", "epochs", "params_total", "params_embedding", "params_non_embedding",
         "words_seen", "ids_per_word", "id_occurrences_median", "id_rare_share")
"""The runs' ``run/*`` metrics the table gives as medians (:data:`bvr.report.collect.RUN_KEYS`)."""
PRETRAIN_TABLE_COLUMNS = ("arm", "runs", "tokens_per_s", *FACTS, "steps", "tokens_per_step", *FINAL_KEYS)
EXPORTED_COLUMNS = ("tokens_per_s", "wall_seconds", "tokens_seen", "tokens_per_step", "words_seen", "params_total",
                    "params_embedding", "params_non_embedding", "id_occurrences_median", "id_rare_share")
"""The table's columns that ``metrics.json`` (under ``pretrain``) and ``plots/pretrain_runs.csv`` give per arm."""


def _throughput(run: dict, history: pd.DataFrame) -> float:
    """Median logged ``train/tokens_per_s`` of a run (the first, warm-up interval aside), else tokens / wall time."""
    logged = history.loc[(history["run_id"] == run["run_id"]) & (history["key"] == "train/tokens_per_s"), "value"]
    logged = logged[logged > 0]
    if not logged.empty:
        return float(logged.median())
    wall, seen = run["run/wall_seconds"], run["run/tokens_seen"]
    return seen / wall if wall and seen and not (math.isnan(wall) or math.isnan(seen)) else math.nan


def _per_step(run: dict) -> float:
    """Tokens a step of the run: its tokens seen over the steps it logged at the end (``run/steps``), else over its
    last logged training step (runs logged before ``run/steps``)."""
    steps = run.get("run/steps") if _finite(run.get("run/steps")) else run.get("steps")
    seen = run.get("run/tokens_seen")
    return seen / steps if _finite(seen) and _finite(steps) and steps else math.nan


def _finite(value: float | None) -> bool:
    return value is not None and not pd.isna(value)


def pretrain_table(analysis: Analysis) -> pd.DataFrame:
    """One row per pretrained arm with a finished run: throughput, time, tokens, size and final losses; ``runs``
    lists the run ids. :data:`FINAL_KEYS` are means over pretraining seeds, as every measure of the report (so
    validation MLM loss reads the same under 'Every measure, per arm'); the rest are medians (one run slowed by a busy
    machine does not move them)."""
    pretrain, history = analysis.collected.pretrain, analysis.collected.history
    rows = []
    for arm in analysis.collected.pretrained_arms:
        runs = pretrain[pretrain["arm"] == arm].to_dict("records")
        if not runs:
            continue
        row: dict = {"arm": arm, "runs": [r["run_id"] for r in runs],
                     "tokens_per_s": _over_seeds([_throughput(r, history) for r in runs], pd.Series.median)}
        for name in FACTS:
            row[name] = _over_seeds([r[f"run/{name}"] for r in runs], pd.Series.median)
        row["steps"] = _over_seeds([r["steps"] for r in runs], pd.Series.median)
        row["tokens_per_step"] = _over_seeds([_per_step(r) for r in runs], pd.Series.median)
        for name in FINAL_KEYS:
            row[name] = _over_seeds([r[name] for r in runs], pd.Series.mean)
        rows.append(row)
    return pd.DataFrame(rows, columns=list(PRETRAIN_TABLE_COLUMNS))


def _over_seeds(values: Sequence[float | None], how: Callable[[pd.Series], float]) -> float:
    """``how`` (``pd.Series.median`` or ``.mean``) of the values that are numbers; NaN when there is none."""
    kept = pd.Series([float(v) for v in values if _finite(v)], dtype=float)
    return float(how(kept)) if not kept.empty else math.nan



def clean(value: Any) -> Any:
    """JSON-safe: NaN becomes null, numpy numbers plain floats with 7 significant digits: not decimals (a p-value of
    3e-7 must not read 0), and no more than a float32 metric holds (MLflow keeps Lightning's float32 0.52 as
    0.51999998, which would print as 51.999998 points). Text stays text, lists lists.

    >>> clean({"score": 51.99999809265137, "p": 3.1234567e-07, "n": 3, "nan": float("nan"), "arms": ["a"]})
    {'score': 52.0, 'p': 3.123457e-07, 'n': 3, 'nan': None, 'arms': ['a']}
    """
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    number = float(value)
    return None if math.isnan(number) else float(f"{number:.7g}")


def metrics_payload(analysis: Analysis) -> dict[str, Any]:
    """The headline numbers, in points, nested (numbers and booleans only, but for a budget curve's ``budget_curve``:
    :func:`~bvr.report.budget.budget_payload`, which names arms and says where each measure turns)."""
    scores: dict[str, dict] = {}  # the spread of an arm's runs on a task; intervals are over pretraining seeds
    for (arm, task), s in analysis.summaries.items():
        scores.setdefault(arm, {})[task] = {"median": s.median, "mean": s.mean, "q1": s.q1, "q3": s.q3, "iqr": s.iqr,
                                            "min": s.min, "max": s.max, "n": s.n, "collapsed": s.n_collapsed}
    differences: dict[str, dict] = {}
    for c in [*analysis.comparisons, *analysis.control]:
        differences.setdefault(f"{c.arm_b}_minus_{c.arm_a}", {})[c.key.replace("/", "_")] = {
            "mean": c.estimate, "ci_low": c.interval.ci_low, "ci_high": c.interval.ci_high, "n": c.test.n,
            "p": c.test.p_value, "holm_p": c.adjusted_p, "detectable": c.mde, "significant": c.significant}
    measures: dict[str, dict] = {}
    for measure in analysis.measures:
        for arm in analysis.collected.arms:
            units = measure.units(arm)
            if units:
                measures.setdefault(measure.key.replace("/", "_"), {})[arm] = {"mean": mean_of(units), "n": len(units)}
    keys = ("val/perplexity", "val/mlm_loss", "train/mlm_loss", *EXPORTED_COLUMNS)
    pretrain = {r["arm"]: {k.replace("/", "_"): r[k] for k in keys}
                for r in pretrain_table(analysis).to_dict("records")}
    missing = analysis.collected.missing
    payload = {"complete": not missing, "missing": len(missing), "scores": scores, "measures": measures,
                "differences": differences, "comparisons": analysis.m, "pretrain": pretrain}
    curve = budget_curve(analysis)
    if curve is not None:
        payload["budget_curve"] = budget_payload(curve)
    return clean(payload)


def dvc_metrics(analysis: Analysis) -> dict[str, dict[str, float]]:
    """``{file name under metrics/: {measure: difference}}``, in the report's order: one small file per arm-vs-arm
    comparison, ``B-minus-A.json``, holding the paired ``b - a`` per measure (``mlm``, ``blimp``, ``probe_TASK``,
    ``finetune_TASK``) rounded as the report prints it; the comparisons with the control where no two arms are
    compared. DVC shows each file as a row of ``dvc metrics show`` and each key as a column of ``dvc exp show``, so
    the keys are few and short; intervals are in ``metrics.json``. A difference that cannot be worked out is left
    out (DVC shows ``-``)."""
    rows: dict[str, dict[str, float]] = {}
    for c in analysis.comparisons or analysis.control:
        row = rows.setdefault(f"{c.arm_b}-minus-{c.arm_a}.json", {})
        if (estimate := clean(c.estimate)) is not None:  # NaN: no difference to work out
            row[c.key.replace("/", "_")] = round(estimate, c.measure.digits)
    return rows


def effects_table(analysis: Analysis) -> pd.DataFrame:
    """Every tested difference as one row: measure, ``b``, ``a``, the mean difference b - a over pretraining seeds
    (points; nats for MLM loss), its simultaneous interval, the Holm-adjusted p-value and ``n`` (pretraining seeds);
    the parent run's ``report/effects.csv``."""
    rows = [{"measure": c.measure.key, "b": c.arm_b, "a": c.arm_a, "b_minus_a": c.estimate, "low": c.interval.ci_low,
             "high": c.interval.ci_high, "p_holm": c.adjusted_p, "n": c.test.n}
            for c in [*analysis.control, *analysis.comparisons] if c.test.tested and c.comparable]
    return pd.DataFrame(rows, columns=["measure", "b", "a", "b_minus_a", "low", "high", "p_holm", "n"])


def effect_metrics(analysis: Analysis) -> dict[str, float]:
    """Every tested difference as metrics of the ablation's parent run: ``effect/MEASURE/B-vs-A``, the mean b - a over
    pretraining seeds in points (nats for ``mlm``), with ``/low``, ``/high`` (its simultaneous interval) and
    ``/p_holm``. A budget curve adds ``budget/MEASURE/starts_to_help_tokens``, the tokens per run from which on
    pretraining helps by the fixed sequence (:meth:`bvr.report.budget.BudgetCurve.starts_to_help`; absent if none)."""
    out: dict[str, float] = {}
    for c in [*analysis.control, *analysis.comparisons]:
        if not (c.test.tested and c.comparable):
            continue
        key = f"effect/{c.measure.key}/{c.arm_b}-vs-{c.arm_a}"
        values = {key: c.estimate, f"{key}/low": c.interval.ci_low, f"{key}/high": c.interval.ci_high,
                  f"{key}/p_holm": c.adjusted_p}
        out.update({k: float(v) for k, v in values.items() if v is not None and math.isfinite(v)})
    curve = budget_curve(analysis)
    for measure in curve.measures if curve is not None else []:
        first = curve.starts_to_help(measure.key)
        if first is not None:
            out[f"budget/{measure.key}/starts_to_help_tokens"] = float(first.tokens)
    return out


def summary_rows(analysis: Analysis) -> list[ScoreRow]:
    """The rows of MLflow's scores view (:func:`bvr.ops.views.write_summaries`): each arm's mean over its
    pretraining seeds on each measure, with its 95% t interval, as the report rounds it."""
    rows = []
    for measure in analysis.measures:
        for arm in analysis.collected.arms:
            units = measure.units(arm)
            if units:
                mean, low, high = measure.mean_interval(arm)
                rows.append(ScoreRow(arm, measure.key, measure.short_title, measure.unit, measure.digits, mean, low,
                                     high, len(units)))
    return rows
