"""The figures of a report, drawn with matplotlib's object-oriented API onto the Agg canvas (no ``pyplot``, no
display): each function builds a :class:`~matplotlib.figure.Figure`, None when there is nothing to draw, which
:func:`save_figure` writes as PNG. Arms keep one colour across every figure (:func:`arm_colors`), the control grey.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, FuncFormatter

from bvr.report.analysis import Analysis, Comparison, Outcome
from bvr.report.budget import BudgetCurve, helps
from bvr.report.cells import fmt_count
from bvr.report.measures import MLM, Measure, metric_label
from bvr.report.numbers import pretrain_table

DPI = 110
"""Resolution of the PNG files; at the sizes below a figure is at most ~1100 pixels wide."""

# Okabe and Ito's colour-blind-safe palette, without its yellow (too pale on white) and black (kept for summaries).
_PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8C564B", "#332288")
_CONTROL = "#8a8a8a"
_SUMMARY = "#222222"


def arm_colors(arms: Sequence[str], control: str | None) -> dict[str, str]:
    """One colour per arm, in order; the control grey.

    >>> arm_colors(["static", "dynamic", "no-pretraining"], "no-pretraining")["no-pretraining"]
    '#8a8a8a'
    """
    pretrained = [arm for arm in arms if arm != control]
    return {arm: _CONTROL if arm == control else _PALETTE[pretrained.index(arm) % len(_PALETTE)] for arm in arms}


def new_figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)  # the Agg canvas, whatever backend the process has
    return figure


def save_figure(figure: Figure | None, path: Path) -> Path | None:
    """``figure`` as PNG at ``path``; None without a figure (nothing to draw)."""
    if figure is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    # bbox_inches="tight": long tick labels and axis titles are never clipped; no version stamp: same bytes.
    figure.savefig(path, dpi=DPI, format="png", metadata={"Software": None}, bbox_inches="tight")
    return path


def panel_grid(count: int, width: float, height: float) -> tuple[Figure, np.ndarray]:
    """A figure of ``count`` panels of ``width`` x ``height`` inches, at most 3 a row: its axes, the unused hidden."""
    ncols = min(count, 3)
    figure = new_figure(width * ncols + 0.4, height * math.ceil(count / ncols) + 0.2)
    axes = figure.subplots(math.ceil(count / ncols), ncols, squeeze=False).ravel()
    for ax in axes[count:]:
        ax.set_visible(False)
    return figure, axes[:count]


def style_axes(ax: Axes) -> None:
    ax.grid(True, alpha=0.3, linewidth=0.6)
    ax.spines[["top", "right"]].set_visible(False)
    ax.tick_params(labelsize=8)


# --- Pretraining -----------------------------------------------------------------------------------------------


def _tokens_axis(history: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray | None:
    """Tokens seen at each of ``rows``' steps, interpolated from the run's ``train/tokens_seen``; None without it."""
    seen = history[(history["run_id"] == rows["run_id"].iloc[0]) & (history["key"] == "train/tokens_seen")]
    if len(seen) < 2:
        return None
    return np.interp(rows["step"], seen["step"], seen["value"])


_CURVE_TITLES = {"train/mlm_loss": "training MLM loss", "val/perplexity": "validation perplexity"}
_CURVE_UNITS = {"train/mlm_loss": "MLM loss (nats per token)", "val/perplexity": "perplexity"}


def _curve_panel(ax: Axes, history: pd.DataFrame, key: str, colors: dict[str, str], by_tokens: bool) -> None:
    """One metric's curve per pretraining run, coloured by arm, with its title, axis labels and a legend of arms."""
    labelled: set[str] = set()
    for (arm, _), rows in history.groupby(["arm", "pretrain_seed"], sort=False):
        rows = rows[rows["key"] == key]
        if rows.empty:
            continue
        x = _tokens_axis(history, rows) if by_tokens else rows["step"].to_numpy()
        y = rows["value"].to_numpy()
        label = None if arm in labelled else arm
        labelled.add(arm)
        if key.startswith("train/") and len(y) > 25:  # faint, under a trailing mean over ~1/25 of its points
            ax.plot(x, y, color=colors[arm], alpha=0.25, linewidth=0.8)
            y = pd.Series(y).rolling(max(1, len(y) // 25), min_periods=1).mean().to_numpy()
        ax.plot(x, y, color=colors[arm], linewidth=1.6, label=label, marker="o" if len(y) < 12 else None, markersize=3)
    values = history.loc[history["key"] == key, "value"]
    unit = _CURVE_UNITS[key]
    if key == "val/perplexity" and values.min() > 0 and values.max() / values.min() > 10:
        ax.set_yscale("log")  # early perplexities run to the thousands; log keeps the end of training readable
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        unit += " (log scale)"
    if by_tokens:
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_title(_CURVE_TITLES[key], fontsize=10)
    ax.set_xlabel("tokens seen" if by_tokens else "optimiser step", fontsize=9)
    ax.set_ylabel(unit, fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    style_axes(ax)


def curves_figure(history: pd.DataFrame, colors: dict[str, str]) -> Figure | None:
    """Training MLM loss and validation perplexity (log scale when it spans a factor of 10) per arm, against tokens
    seen where logged; each panel with its y label and a legend of the arms. None without either curve."""
    keys = [k for k in _CURVE_TITLES if (history["key"] == k).any()]
    if not keys:
        return None
    figure = new_figure(10, 3.6)
    axes = figure.subplots(1, len(keys), squeeze=False)[0]
    runs = history.groupby(["arm", "pretrain_seed"], sort=False)
    by_tokens = all(_tokens_axis(history, rows) is not None for _, rows in runs)
    for ax, key in zip(axes, keys, strict=True):
        _curve_panel(ax, history, key, colors, by_tokens)
    return figure


def throughput(analysis: Analysis, colors: dict[str, str]) -> Figure | None:
    """Training tokens per second and wall time per pretrained arm, as bars."""
    table = pretrain_table(analysis)
    if table.empty:
        return None
    figure = new_figure(8, 2.4)
    left, right = figure.subplots(1, 2)
    arms = table["arm"].tolist()
    hours = table["wall_seconds"].max() >= 2 * 3600
    unit, divisor = ("hours", 3600) if hours else ("minutes", 60)
    left.yaxis.set_major_formatter(EngFormatter(sep=""))
    for ax, values, title in ((left, table["tokens_per_s"], "training tokens / s"),
                              (right, table["wall_seconds"] / divisor, f"wall time ({unit})")):
        bars = ax.bar(arms, values.fillna(0), color=[colors[arm] for arm in arms])
        ax.bar_label(bars, labels=[_short(v) for v in values], fontsize=8, padding=2)
        ax.set_title(title, fontsize=10)
        ax.margins(y=0.18)
        style_axes(ax)
        ax.tick_params(axis="x", rotation=15 if max(map(len, arms)) > 8 else 0)
    return figure


def _short(value: float) -> str:
    """'1.23M', '35,100', '812', '3.4' for bar labels; '' for NaN.

    >>> _short(1_234_567), _short(35_100), _short(3.42)
    ('1.23M', '35,100', '3.4')
    """
    if value is None or math.isnan(value):
        return ""
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f}M"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def parameters(analysis: Analysis, colors: dict[str, str]) -> Figure | None:
    """Parameters per arm in millions, split into embeddings and the rest (what a vocabulary changes)."""
    pretrain = analysis.collected.pretrain.drop_duplicates("arm")
    pretrain = pretrain[pretrain["run/params_total"].notna()]
    if pretrain.empty:
        return None
    arms = pretrain["arm"].tolist()
    body = pretrain["run/params_non_embedding"].fillna(0).to_numpy() / 1e6
    embed = pretrain["run/params_embedding"].fillna(0).to_numpy() / 1e6
    figure = new_figure(8, 0.4 * len(arms) + 1.4)
    ax = figure.subplots()
    ax.barh(arms, body, color=[colors[arm] for arm in arms], label="non-embedding")
    bars = ax.barh(arms, embed, left=body, color=[colors[arm] for arm in arms], alpha=0.4, hatch="//",
                   label="embeddings")
    ax.bar_label(bars, labels=[f"{b + e:.2f}M ({e:.2f}M embeddings)" for b, e in zip(body, embed, strict=True)],
                 fontsize=8, padding=3)
    ax.set_xlabel("parameters (millions)", fontsize=9)
    ax.invert_yaxis()
    ax.margins(x=0.45)
    figure.legend(fontsize=8, frameon=False, loc="outside upper center", ncols=2)
    style_axes(ax)
    return figure


# --- Fine-tuning -----------------------------------------------------------------------------------------------


def _task_panel(ax: Axes, analysis: Analysis, task: str, colors: dict[str, str]) -> None:
    arms = analysis.collected.arms
    scores = analysis.scores[analysis.scores["task"] == task]
    measure = analysis.measure(f"finetune/{task}")
    for x, arm in enumerate(arms):
        rows = scores[scores["arm"] == arm].sort_values(["pretrain_seed", "seed"])
        if rows.empty:
            continue
        n = len(rows)  # fixed offsets, so the seeds' points do not sit on each other (no random jitter)
        offsets = x - 0.12 + (np.linspace(-0.1, 0.1, n) if n > 1 else np.zeros(n))
        ok = ~rows["collapsed"].to_numpy(dtype=bool)
        ax.scatter(offsets[ok], rows["points"].to_numpy()[ok], s=16, color=colors[arm], alpha=0.85, zorder=3)
        ax.scatter(offsets[~ok], rows["points"].to_numpy()[~ok], s=30, color=colors[arm], marker="x", zorder=3)
        s = analysis.summaries[(arm, task)]
        ax.hlines(s.median, x - 0.26, x + 0.02, color=colors[arm], linewidth=2)
        mean, low, high = measure.mean_interval(arm) if measure is not None else (math.nan,) * 3
        if not math.isnan(low):  # the mean over pretraining seeds and its t interval, as "Every measure" prints
            ax.errorbar(x + 0.17, mean, yerr=[[mean - low], [high - mean]], fmt="o", markersize=4,
                        color=_SUMMARY, capsize=3, linewidth=1.2, zorder=4)
        elif not math.isnan(mean):
            ax.plot([x + 0.17], [mean], "o", markersize=4, color=_SUMMARY, zorder=4)
    if measure is not None and measure.baseline is not None:  # what predicting the majority class scores
        ax.axhline(measure.baseline, color=_SUMMARY, linestyle=":", linewidth=1, zorder=1)
        ax.annotate("majority baseline", (len(arms) - 0.45, measure.baseline), fontsize=7, color=_SUMMARY,
                    ha="right", va="bottom")
    ax.set_xticks(range(len(arms)), arms, fontsize=8, rotation=20 if max(map(len, arms)) > 8 else 0)
    ax.set_xlim(-0.6, len(arms) - 0.4)
    ax.set_title(analysis.task_title(task), fontsize=9)
    ax.set_ylabel(f"{metric_label(analysis.metric(task))} (points)", fontsize=8)
    style_axes(ax)


def task_scores(analysis: Analysis, colors: dict[str, str]) -> Figure | None:
    """One panel per task: every run a point (× collapsed), their median a dash, the seeds' mean and 95% t interval."""
    tasks = [t for t in analysis.tasks if (analysis.scores["task"] == t).any()]
    if not tasks:
        return None
    figure, axes = panel_grid(len(tasks), 3.5, 2.8)
    for ax, task in zip(axes, tasks, strict=True):
        _task_panel(ax, analysis, task, colors)
    return figure


def _forest(ax: Axes, comparisons: list[Comparison], title: str, unit: str) -> None:
    """One row per comparison: each pretraining seed's difference, the mean, its simultaneous interval, and 0."""
    for y, c in enumerate(comparisons):
        if y and c.key != comparisons[y - 1].key:  # a rule between measures
            ax.axhline(y - 0.5, color="#d0d7de", linewidth=0.8)
        colour = {Outcome.B_BETTER: "#1a7f37", Outcome.A_BETTER: "#cf222e"}.get(c.outcome, "#6e7781")
        ax.scatter(c.test.differences, [y] * len(c.test.differences), s=10, color="#9aa4ad", zorder=2)
        if c.test.tested:
            ax.hlines(y, c.interval.ci_low, c.interval.ci_high, color=colour, linewidth=2.2, zorder=3)
        if c.test.n:
            ax.plot([c.estimate], [y], "o", color=colour, markersize=5, zorder=4)
    ax.axvline(0, color=_SUMMARY, linewidth=0.8)
    ax.set_yticks(range(len(comparisons)), [f"{c.measure.title}: {c.name}" for c in comparisons], fontsize=8)
    ax.set_ylim(len(comparisons) - 0.5, -0.5)
    ax.set_xlabel(f"difference over pretraining seeds ({unit}; b − a)", fontsize=9)
    ax.set_title(title, fontsize=10)
    style_axes(ax)


def differences_figure(analysis: Analysis) -> Figure | None:
    """Forest plots of the paired differences: between arms in points, between arms on validation MLM loss in nats
    (a panel of its own: on the points' axis its tenths of a nat would not show), and each arm minus the control.
    None when no comparison has a pair."""
    between = [c for c in analysis.comparisons if c.key != MLM and c.test.n]
    mlm = [c for c in analysis.comparisons if c.key == MLM and c.comparable and c.test.n]
    control = [c for c in analysis.control if c.test.n]
    panels = [(rows, title, unit) for rows, title, unit in (
        (between, "between arms", "points"), (mlm, "between arms: validation MLM loss", "nats per token"),
        (control, "against no pretraining", "points")) if rows]
    if not panels:
        return None
    # One column: the row labels ("BLiMP macro accuracy (zero-shot): whole-word − token") need the width, and
    # side by side they left the axes no room at all.
    heights = [0.28 * len(rows) + 1.0 for rows, _, _ in panels]
    figure = new_figure(8.0, sum(heights))
    axes = figure.subplots(len(panels), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, (rows, title, unit) in zip(axes, panels, strict=True):
        _forest(ax, rows, title, unit)
    return figure


# --- The budget curve ------------------------------------------------------------------------------------------


def _budget_panel(ax: Axes, curve: BudgetCurve, measure: Measure) -> None:
    """``arm − control`` against tokens per run, with the simultaneous intervals; green where the fixed sequence
    declares that pretraining helps, red where the interval puts the control ahead."""
    points = [(p, c) for p in curve.sequence_points
              if (c := curve.comparison(measure.key, p.arm)) is not None and c.test.n]
    x = [p.tokens for p, _ in points]
    ax.plot(x, [c.estimate for _, c in points], color="#9aa4ad", linewidth=1, zorder=2)
    for p, c in points:
        declared = curve.declared(measure.key, p.arm)
        colour = "#1a7f37" if declared else "#cf222e" if c.significant and not helps(c) else "#6e7781"
        if c.test.tested:
            ax.errorbar([p.tokens], [c.estimate], yerr=[[c.estimate - c.interval.ci_low],
                                                         [c.interval.ci_high - c.estimate]],
                        fmt="o", color=colour, markersize=5, capsize=3, linewidth=1.4, zorder=3)
        else:
            ax.plot([p.tokens], [c.estimate], "o", color=colour, markersize=5, zorder=3)
        ax.annotate(p.arm, (p.tokens, c.estimate), fontsize=7, color=_SUMMARY, xytext=(4, 4),
                    textcoords="offset points")
    ax.axhline(0, color=_SUMMARY, linewidth=0.8)
    ax.set_title(measure.in_sentence.removeprefix("the "), fontsize=10)
    ax.set_ylabel(f"arm − {curve.control} (points)", fontsize=8)


def _loss_panel(ax: Axes, curve: BudgetCurve) -> None:
    """Validation MLM loss (mean and 95% t interval over pretraining seeds) and the unigram entropy, per budget."""
    losses = [p for p in curve.sequence_points if not math.isnan(p.mlm_loss)]
    if losses:
        low = [p.mlm_loss - p.mlm_low if not math.isnan(p.mlm_low) else 0.0 for p in losses]
        high = [p.mlm_high - p.mlm_loss if not math.isnan(p.mlm_high) else 0.0 for p in losses]
        ax.errorbar([p.tokens for p in losses], [p.mlm_loss for p in losses], yerr=[low, high], fmt="o-",
                    color=_PALETTE[0], markersize=5, capsize=3, linewidth=1.4, label="validation MLM loss")
    entropy = [p for p in curve.sequence_points if not math.isnan(p.unigram_entropy)]
    if entropy:
        ax.plot([p.tokens for p in entropy], [p.unigram_entropy for p in entropy], "s--", color=_PALETTE[1],
                markersize=4, linewidth=1.2, label="unigram entropy")
    ax.set_title("validation loss beside frequency-only prediction", fontsize=10)
    ax.set_ylabel("nats per token", fontsize=8)
    ax.legend(fontsize=7, frameon=False)


def budget_figure(curve: BudgetCurve | None) -> Figure | None:
    """One panel per measure of ``arm − control`` against tokens per run (log axis; intervals as error bars, green
    where they exclude zero in favour of pretraining, red against it), and a panel of validation MLM loss beside the
    unigram entropy; None when no budget has a finished run."""
    if curve is None or not curve.sequence_points:
        return None
    figure, axes = panel_grid(len(curve.measures) + 1, 3.6, 2.9)
    for ax, measure in zip(axes, curve.measures, strict=False):
        _budget_panel(ax, curve, measure)
    _loss_panel(axes[len(curve.measures)], curve)
    ticks = sorted({p.tokens for p in curve.sequence_points})
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(ticks, [fmt_count(t) for t in ticks], rotation=30 if len(ticks) > 4 else 0)
        ax.minorticks_off()  # the budgets are the ticks: no 2M, 3M ... between them
        ax.set_xlabel("tokens per pretraining run", fontsize=8)
        ax.margins(x=0.15)
        style_axes(ax)
    return figure
