"""The pretraining table of a report: per pretrained arm, throughput, time, tokens, model size and final losses,
each the median over the arm's pretraining seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from bvr.report.analysis import Analysis

PRETRAIN_TABLE_COLUMNS = ("arm", "runs", "tokens_per_s", "wall_seconds", "tokens_seen", "steps", "epochs",
                          "params_total", "params_embedding", "params_non_embedding", "train/mlm_loss", "val/mlm_loss",
                          "val/perplexity", "val/nsp_acc", "val/sop_acc")


def _throughput(run: dict, history: pd.DataFrame) -> float:
    """Median logged ``train/tokens_per_s`` of a run (the first, warm-up interval aside), else tokens / wall time."""
    logged = history.loc[(history["run_id"] == run["run_id"]) & (history["key"] == "train/tokens_per_s"), "value"]
    logged = logged[logged > 0]
    if not logged.empty:
        return float(logged.median())
    wall, seen = run["run/wall_seconds"], run["run/tokens_seen"]
    return seen / wall if wall and seen and not (math.isnan(wall) or math.isnan(seen)) else math.nan


def pretrain_table(analysis: Analysis) -> pd.DataFrame:
    """One row per pretrained arm with a finished run: throughput, time, tokens, size and final losses.

    Each number is the median over the arm's pretraining seeds (one seed: that run's value); ``runs`` lists the
    run ids.
    """
    pretrain, history = analysis.collected.pretrain, analysis.collected.history
    rows = []
    for arm in analysis.collected.pretrained_arms:
        runs = pretrain[pretrain["arm"] == arm].to_dict("records")
        if not runs:
            continue
        row: dict = {"arm": arm, "runs": [r["run_id"] for r in runs],
                     "tokens_per_s": _median([_throughput(r, history) for r in runs])}
        for name in ("wall_seconds", "tokens_seen", "epochs", "params_total", "params_embedding",
                     "params_non_embedding"):
            row[name] = _median([r[f"run/{name}"] for r in runs])
        for name in ("steps", "train/mlm_loss", "val/mlm_loss", "val/perplexity", "val/nsp_acc", "val/sop_acc"):
            row[name] = _median([r[name] for r in runs])
        rows.append(row)
    return pd.DataFrame(rows, columns=list(PRETRAIN_TABLE_COLUMNS))


def _median(values: Sequence[float | None]) -> float:
    """The median of the finite values; NaN when there is none."""
    kept = [float(v) for v in values if v is not None and not pd.isna(v)]
    return float(pd.Series(kept).median()) if kept else math.nan
