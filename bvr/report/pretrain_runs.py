"""The pretraining table of a report: per pretrained arm, throughput, time, tokens, model size and final losses.
Final losses are means over pretraining seeds, as every measure of the report, so validation MLM loss reads the same
here and under 'Every measure, per arm'; the rest are medians (one run slowed by a busy machine does not move them)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pandas as pd

from bvr.report.analysis import Analysis
from bvr.report.collect import FINAL_KEYS

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
    """One row per pretrained arm with a finished run: throughput, time, tokens, size and final losses
    (:data:`FINAL_KEYS` means over pretraining seeds, the rest medians); ``runs`` lists the run ids."""
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
    """``how`` (``pd.Series.median`` or ``.mean``) of the values that are numbers (None and NaN left out); NaN when
    there is none."""
    kept = pd.Series([float(v) for v in values if _finite(v)], dtype=float)
    return float(how(kept)) if not kept.empty else math.nan
