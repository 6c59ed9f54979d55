"""A fine-tuning grid in the report: each arm's chosen point and the selection curve.

Where ``finetune.learning_rate`` (or ``epochs``) is a grid, every model was fine-tuned at each point and the point
with the best median score on the held-out selection split was kept (:mod:`bvr.tasks.selection`); the report's other
fine-tuning scores are the chosen point's. The manifest's fine-tuning records hold each seed's selection score at
every point (:func:`selection_frame`), shown as a table of chosen points and a figure against the learning rate.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bvr.ablation.manifest import Manifest
from bvr.report.document import Block, Heading, Paragraph, Table
from bvr.report.figures import panel_grid, style_axes

COLUMNS = ("arm", "pretrain_seed", "task", "seed", "point", "learning_rate", "epochs", "score", "chosen")


def selection_frame(manifest: Manifest) -> pd.DataFrame:
    """One row per fine-tuning seed and grid point: its selection score (a fraction, or points for span tasks) and
    whether the point is the one chosen for its model. Empty without a grid."""
    rows = []
    for record in manifest.finetune:
        for point in record.selection or []:
            rows.append({"arm": record.arm, "pretrain_seed": record.pretrain_seed, "task": record.task,
                         "seed": record.seed, "point": point["name"], "learning_rate": point["learning_rate"],
                         "epochs": point["epochs"], "score": point["score"],
                         "chosen": point["name"] == record.grid_point})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _chosen_cell(rows: pd.DataFrame) -> str:
    """``lr 1e-03, 2 epochs (p0, p2); lr 3e-04, 2 epochs (p1)``: each chosen point with its pretraining seeds."""
    chosen = rows[rows["chosen"]].drop_duplicates(["pretrain_seed", "point"]).sort_values(
        ["learning_rate", "epochs", "pretrain_seed"])
    parts = []
    for point, group in chosen.groupby("point", sort=False):
        seeds = ", ".join(f"p{int(s)}" for s in sorted(group["pretrain_seed"]))
        parts.append(f"{point} ({seeds})")
    return "; ".join(parts) or "—"


def chosen_table(frame: pd.DataFrame, arms: list[str], scales: dict[str, float]) -> list[list[str]]:
    """Per task and arm: the point chosen for each pretraining seed, and each point's median selection score over
    every seed of the arm (in points)."""
    rows = []
    for task in dict.fromkeys(frame["task"]):
        scale = scales.get(str(task), 1.0)
        for arm in arms:
            part = frame[(frame["task"] == task) & (frame["arm"] == arm)]
            if part.empty:
                continue
            medians = part.groupby("point", sort=False)["score"].median()
            curve = ", ".join(f"{point} {scale * value:.1f}" for point, value in medians.items())
            rows.append([str(task), arm, _chosen_cell(part), curve])
    return rows


def selection_section(frame: pd.DataFrame, arms: list[str], scales: dict[str, float],
                      figure: Block | None) -> list[Block]:
    """The section: what the grid was, the chosen points and the curve; nothing without a grid."""
    if frame.empty:
        return []
    points = list(dict.fromkeys(frame["point"]))
    text = ("Every model (each arm at each pretraining seed, the control's initialisations too) was fine-tuned at each "
            f"of {len(points)} grid points ({'; '.join(points)}) over the same fine-tuning seeds, on training examples "
            "without the selection split. The point whose seeds score best (median) on the selection split — training "
            "examples held out of training, never the reported split — was kept for that model, and the fine-tuning "
            "scores in this report are that point's. The choice is per model, as BERT and RoBERTa chose their "
            "fine-tuning learning rate per pretrained model and task; it keeps the pretraining seeds independent.")
    caption = ("chosen point: the grid point kept for each pretraining seed (pN). selection median: each point's "
               "median selection score over every pretraining and fine-tuning seed of the arm, in points. Each "
               "point's runs are in MLflow under the model's fine-tuning run, tagged bvr.grid_point; the chosen one "
               "bvr.chosen=true.")
    blocks: list[Block] = [Heading("Fine-tuning grid", level=3), Paragraph(text),
                           Table(["task", "arm", "chosen point", "selection median per point"],
                                 chosen_table(frame, arms, scales), align="llll", caption=caption)]
    return [*blocks, *([figure] if figure is not None else [])]


def _curve_panel(ax: Axes, frame: pd.DataFrame, task: str, colors: dict[str, str], scale: float) -> None:
    part = frame[frame["task"] == task]
    several_epochs = part["epochs"].nunique() > 1
    for arm, rows in part.groupby("arm", sort=False):
        for epochs, line in rows.groupby("epochs"):
            by_lr = line.groupby("learning_rate")["score"]
            lrs = np.array(sorted(by_lr.groups))
            median = by_lr.median().reindex(lrs).to_numpy() * scale
            low, high = (by_lr.min().reindex(lrs).to_numpy() * scale, by_lr.max().reindex(lrs).to_numpy() * scale)
            label = f"{arm}, {epochs} epochs" if several_epochs else str(arm)
            style = "-" if not several_epochs or epochs == part["epochs"].min() else "--"
            ax.plot(lrs, median, style, marker="o", markersize=4, color=colors.get(str(arm)), label=label)
            ax.fill_between(lrs, low, high, color=colors.get(str(arm)), alpha=0.15, linewidth=0)
    ax.set_xscale("log")
    ax.set_xlabel("fine-tuning learning rate", fontsize=8)
    ax.set_ylabel("selection score (points)", fontsize=8)
    ax.set_title(f"{task}: score on the selection split", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    style_axes(ax)


def selection_figure(frame: pd.DataFrame, colors: dict[str, str], scales: dict[str, float]) -> Figure | None:
    """One panel per task: the median selection score against the learning rate, a line per arm, shaded between
    the lowest and highest seed; None without a grid over several learning rates."""
    tasks = [t for t in dict.fromkeys(frame["task"]) if frame[frame["task"] == t]["learning_rate"].nunique() > 1]
    if not tasks:
        return None
    figure, axes = panel_grid(len(tasks), 4.2, 3.0)
    for ax, task in zip(axes, tasks, strict=True):
        _curve_panel(ax, frame, str(task), colors, scales.get(str(task), 1.0))
    return figure
