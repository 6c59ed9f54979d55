"""The result sections of a report: every measure per arm with its variance components, BLiMP beside the
published models, the fine-tuning scores, the paper beside our runs, and pretraining."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from bvr.errors import BvrError
from bvr.evaluation.blimp.published import published_blimp, published_summaries, published_terms
from bvr.evaluation.blimp.scores import BlimpSummary
from bvr.formatting import duration
from bvr.report.analysis import Analysis
from bvr.report.cells import RunLinks, fmt, fmt_ci, fmt_count, fmt_rate, mean_of, metric_digits, signed
from bvr.report.document import Block, Bullets, Cell, Figure, Heading, Paragraph, Table
from bvr.report.measures import MLM, PRETRAIN_TASK, Measure
from bvr.report.numbers import pretrain_table
from bvr.report.selection import selection_frame, selection_section


def _measure_runs(analysis: Analysis, links: RunLinks, measure: Measure, arm: str) -> Cell:
    """Links to the runs behind one arm's values of a measure, one per pretraining seed (``p0``, ``p1``): the
    evaluation runs for BLiMP and the probes, the pretraining runs for MLM loss; fine-tuning runs are linked
    per seed under Fine-tuning scores."""
    if measure.key == MLM:
        rows = analysis.collected.pretrain[analysis.collected.pretrain["arm"] == arm]
    elif measure.key == "blimp" or measure.key.startswith("probe/"):
        frame = analysis.collected.evaluations
        kind, _, task = measure.key.partition("/")
        rows = frame[(frame["arm"] == arm) & (frame["kind"] == kind)]
        rows = rows[rows["task"] == task] if task else rows
    else:
        return "under Fine-tuning scores"
    found = rows.sort_values("pretrain_seed")[["pretrain_seed", "run_id"]].itertuples(index=False)
    return tuple(links.run(run_id, f"p{seed}") for seed, run_id in found) or "—"


def measures_section(analysis: Analysis, links: RunLinks) -> list[Block]:
    rows = []
    for measure in analysis.measures:
        first = True
        for arm in analysis.collected.arms:
            units = measure.units(arm)
            if not units:
                continue
            mean, low, high = measure.mean_interval(arm)
            d = measure.digits
            comp = measure.components(arm)
            inner = max(comp.n_inner) if comp and comp.n_inner else 1
            rows.append([measure.title if first else "", arm, str(len(units)), str(inner), fmt(mean, d),
                         fmt_ci(low, high, d), fmt(comp.between_sd if comp else None, d),
                         fmt(comp.within_sd if comp and inner > 1 else None, d),
                         fmt(measure.baseline, d) if first else "", fmt(measure.bow, d) if first else "",
                         _measure_runs(analysis, links, measure, arm)])
            first = False
    if not rows:
        return []
    caption = ("n: pretraining seeds; inner: fine-tuning or probe seeds per pretraining seed. Mean over pretraining "
               "seeds with its 95% t interval (per arm, not adjusted). SD between: spread of the true per-seed "
               "means across pretraining seeds; SD within: across fine-tuning/probe seeds of one model (one-way "
               "random-effects ANOVA; with one value per model, SD between is their plain spread, which holds "
               "both). baseline: majority class (probes, fine-tuning) or chance (BLiMP). bag of words: the same "
               "probe (logistic regression, ridge for regression) on the word counts of the same training examples, "
               "scored on the same examples, the same for every model: how far the encoders are from counting "
               "words (sentence-task probes only; '—' for tagging and for evaluations cached before it was logged). "
               "runs: one per pretraining seed.")
    header = ["measure", "arm", "n", "inner", "mean", "95% CI", "SD between", "SD within", "baseline", "bag of words",
              "runs"]
    return [Heading("Every measure, per arm"), Table(header, rows, align="LLrrrrrrrrl", caption=caption)]


def blimp_section(analysis: Analysis) -> list[Block]:
    measure = analysis.measure("blimp")
    if measure is None:
        return []
    details = analysis.collected.details
    blimp = details[details["kind"] == "blimp"]
    terms = blimp[blimp["key"].str.startswith("blimp/term/")]
    paradigms = sorted({key.removeprefix("blimp/paradigm/") for key in blimp["key"]
                        if key.startswith("blimp/paradigm/")})
    published = _published_blimp(analysis.collected.manifest.context.data_dir, paradigms)
    arms = [arm for arm in analysis.collected.arms if measure.units(arm)]
    header = ["", *arms, *published]
    count = f" ({len(paradigms)} paradigms)" if paradigms else ""
    rows = [[f"macro accuracy{count}", *(fmt(mean_of(measure.units(arm))) for arm in arms),
             *(fmt(100 * v.macro) for v in published.values())]]
    for term in sorted(set(terms["key"])):
        name = term.removeprefix("blimp/term/")
        cells = []
        for arm in arms:
            values = terms[(terms["key"] == term) & (terms["arm"] == arm)]["value"]
            cells.append(fmt(100 * values.mean()) if not values.empty else "—")
        rows.append([name, *cells, *(fmt(100 * v.terms.get(name, math.nan)) for v in published.values())])
    settings = analysis.collected.manifest.evaluations_settings
    n = settings.get("blimp_per_paradigm")
    caption = (f"Accuracy in %, pseudo-log-likelihood scoring (each token masked in turn), "
               f"{f'{n} pairs per paradigm (the same pairs for every model)' if n else 'all 1,000 pairs per paradigm'}"
               "; ours are means over pretraining seeds. Published models (BLiMP paper, errata-corrected) score "
               "all pairs with their own (left-to-right) log-probabilities, averaged here over the paradigms our "
               "runs scored. Chance is 50%.")
    return [Heading("BLiMP beside the published models"),
            Table(header, rows, align="L" + "r" * (len(header) - 1), caption=caption)]


def _published_blimp(data_dir: str | None, paradigms: Sequence[str] = ()) -> dict[str, BlimpSummary]:
    """The published models' BLiMP accuracies (fractions) averaged over ``paradigms``, the ones our runs scored (all
    of the file's when empty), read from ``DATA_DIR/blimp`` (:mod:`bvr.evaluation.blimp.published`) of the data folder
    the ablation recorded, else of ``BVR_DATA_DIR`` (the data moved since); empty when neither holds a readable one."""
    for candidate in dict.fromkeys(d for d in (data_dir, os.environ.get("BVR_DATA_DIR")) if d):
        folder = Path(candidate) / "blimp"
        try:
            published, terms = published_blimp(folder), published_terms(folder)
        except (BvrError, OSError):
            continue
        return published_summaries(published, {uid: term for uid, term in terms.items()
                                               if not paradigms or uid in paradigms})
    return {}


def _seed_links(analysis: Analysis, links: RunLinks, rows: pd.DataFrame) -> Cell:
    several = len(analysis.collected.manifest.pretrain_seeds) > 1 or analysis.scores["pretrain_seed"].nunique() > 1
    cells = []
    for r in rows.sort_values(["pretrain_seed", "seed"]).itertuples(index=False):
        text = (f"p{r.pretrain_seed}s{r.seed}" if several else f"s{r.seed}") + ("×" if r.collapsed else "")
        cells.append(links.run(r.run_id, text))
    return tuple(cells)


def scores_section(analysis: Analysis, links: RunLinks, figures: dict[str, Figure]) -> list[Block]:
    rows = []
    for task in analysis.tasks:
        measure = analysis.measure(f"finetune/{task}")
        baseline = measure.baseline if measure is not None else None
        label = analysis.task_title(task) + (f" (majority/trivial baseline {fmt(baseline)})"
                                             if baseline is not None else "")
        for arm in analysis.collected.arms:
            s = analysis.summaries.get((arm, task))
            if s is None:
                continue
            seeds = analysis.scores[(analysis.scores["arm"] == arm) & (analysis.scores["task"] == task)]
            rows.append([label, arm, str(s.n), str(s.n_collapsed), fmt(s.median),
                         f"{fmt(s.iqr)} ({fmt(s.q1)}–{fmt(s.q3)})", f"{fmt(s.min)}–{fmt(s.max)}", fmt(s.mean),
                         _seed_links(analysis, links, seeds)])
            label = ""  # the task's first row names it
    blocks: list[Block] = [Heading("Fine-tuning scores")]
    if not rows:
        return [*blocks, Paragraph("No finished fine-tuning run was found.")]
    caption = ("Scores in points: GLUE and CoNLL-2003 are logged as fractions and shown ×100; SQuAD is logged in "
               "points. Each run's final-epoch score on the headline split, over every pretraining and fine-tuning "
               "seed. n: runs found; collapsed: runs predicting one class, only O tags or only empty answers "
               "(marked × in the runs column), kept in every statistic. IQR with the quartiles (linear "
               "interpolation). Intervals are in 'Every measure, per arm', over pretraining seeds.")
    header = ["task", "arm", "n", "collapsed", "median", "IQR (q1–q3)", "min–max", "mean", "runs"]
    blocks.append(Table(header, rows, align="llrrrrrrl", caption=caption))
    if "scores" in figures:
        blocks.append(figures["scores"])
    grid = selection_frame(analysis.collected.manifest)
    return [*blocks, *selection_section(grid, analysis.collected.arms, analysis.scales, figures.get("selection"))]


def _column(table: pd.DataFrame, c) -> pd.DataFrame:
    """A published table's rows for comparison ``c``'s column: by task and metric for fine-tuning, by the probe's
    key (``probe/TASK``) for a feature-based column, whose metric we log under another name."""
    if c.measure.key.startswith("probe/"):
        return table[table["task"] == c.measure.key]
    return table[(table["task"] == c.measure.task) & (table["metric"] == c.measure.metric)]


def _published_rows(analysis: Analysis, table: pd.DataFrame) -> list[list[Cell]]:
    """Direction of each effect in one published table and here, for every pair of our arms the table also has."""
    rows = []
    for c in analysis.comparisons:
        if c.published is None:
            continue
        column = _column(table, c)
        value = {arm: column.loc[column["arm"] == arm, "value"] for arm in (c.arm_a, c.arm_b)}
        if any(v.empty or pd.isna(v.iloc[0]) for v in value.values()):
            continue  # the effect is printed in another of the ablation's tables
        d = metric_digits(c.measure.metric)
        label = column["metric_label"].dropna()
        paper_a, paper_b = float(value[c.arm_a].iloc[0]), float(value[c.arm_b].iloc[0])
        rows.append([label.iloc[0] if not label.empty else c.key, c.name, fmt(paper_a, d), fmt(paper_b, d),
                     signed(paper_b - paper_a, d), c.paper, f"{signed(c.estimate, d)} "
                     f"{fmt_ci(c.interval.ci_low, c.interval.ci_high, d)}", c.ours, c.agreement])
    return rows


def _ours(analysis: Analysis, arm: str, task: str, metric: str, pretrained: pd.DataFrame) -> float:
    """Our value for one published column: a pretraining metric's mean over pretraining seeds, else the runs' median."""
    if task == PRETRAIN_TASK:
        return pretrained[metric].get(arm, math.nan) if metric in pretrained else math.nan
    if task.startswith("probe/"):
        measure = analysis.measure(task)
        values = list(measure.values.get(arm, {}).values()) if measure is not None else []
        return float(pd.Series(values).median()) if values else math.nan
    summary = analysis.summaries.get((arm, task))
    return summary.median if summary is not None and analysis.metric(task) == metric else math.nan


def _ran(analysis: Analysis, task: str) -> bool:
    return task in {*analysis.tasks, PRETRAIN_TASK} or (task.startswith("probe/")
                                                        and analysis.measure(task) is not None)


def _beside_rows(analysis: Analysis, table: pd.DataFrame) -> tuple[list[str], list[list[Cell]], list[str]]:
    """Our medians beside one published table's values, per arm the two share and per published column of a task
    we ran; then the headings of the columns left out."""
    pub = table.dropna(subset=["task"])
    every = list(pub[["task", "metric", "metric_label"]].drop_duplicates(["task", "metric"]).itertuples(index=False))
    columns = [c for c in every if _ran(analysis, c.task)]
    skipped = [c.metric_label or c.task for c in every if not _ran(analysis, c.task)]
    if not columns:  # none of the table's tasks runs at this preset: still show what the paper printed
        columns, skipped = every, []
    pretrained = pretrain_table(analysis).set_index("arm")
    rows = []
    for arm in [arm for arm in analysis.collected.pretrained_arms if arm in set(pub["arm"])]:
        cells: list[Cell] = [arm]
        for col in columns:
            paper = pub.loc[(pub["arm"] == arm) & (pub["task"] == col.task) & (pub["metric"] == col.metric), "value"]
            d = metric_digits(col.metric)
            ours = _ours(analysis, arm, col.task, col.metric, pretrained)
            if col.task == PRETRAIN_TASK and col.metric.endswith("_acc"):
                ours *= 100.0  # logged as a fraction, printed by the paper in points
            cells.append(f"{fmt(paper.iloc[0] if not paper.empty else None, d)} / {fmt(ours, d)}")
        rows.append(cells)
    return ["arm", *[f"{c.metric_label or c.task} paper / ours" for c in columns]], rows, skipped


def published_section(analysis: Analysis) -> list[Block]:
    key = analysis.collected.manifest.published
    blocks: list[Block] = [Heading("Beside the paper")]
    if analysis.published.empty:
        why = (f"reports/published.yaml has no table for '{key}'." if key else
               "No published table informs this ablation.")
        return [*blocks, Paragraph(why)]
    measured = False
    for source, table in analysis.published.groupby("source", sort=False):
        pretraining = (" (pretraining metrics: means over pretraining seeds, as under Pretraining)"
                       if (table["task"] == PRETRAIN_TASK).any() else "")
        blocks.append(Paragraph(f"{source}: {table['setting'].iloc[0]}. Paper values in points as printed; ours are "
                                f"medians over all our runs{pretraining}, and our differences means over pretraining "
                                "seeds with their simultaneous intervals, in points, at our far smaller scale."))
        direction = _published_rows(analysis, table)
        if direction:
            header = ["paper column", "b − a", "paper a", "paper b", "paper Δ", "paper says",
                      "our Δ [simultaneous CI]", "we see", "agreement"]
            caption = ("agreement: Holm rejects and our difference has the paper's sign (agree) or the other sign "
                       "(disagree); inconclusive when Holm does not reject.")
            blocks.append(Table(header, direction, align="lLrrrllll", caption=caption))
        header, beside, skipped = _beside_rows(analysis, table)
        if beside and len(header) > 1:
            caption = "'—' where the paper has no value or our runs are missing." + (
                f" Published columns for tasks this ablation does not run: {', '.join(skipped)}." if skipped else "")
            if not direction and all(cell.endswith("/ —") for row in beside for cell in row[1:]):
                caption = "The paper's values; none of these tasks runs at this preset ('—')."
            blocks.append(Table(header, beside, align="L" + "r" * (len(header) - 1), caption=caption))
        words = table[table["task"].isna()]
        if not words.empty:
            blocks.append(Bullets(tuple(f"{r.arm_label}: {r.note}" for r in words.itertuples(index=False))))
        measured = measured or bool(direction) or not words.empty
    if not measured:
        blocks.append(Paragraph("None of the paper's arm pairs was measured here (yet)."))
    return blocks


def pretraining_section(analysis: Analysis, links: RunLinks, figures: dict[str, Figure]) -> list[Block]:
    table = pretrain_table(analysis)
    blocks: list[Block] = [Heading("Pretraining")]
    if table.empty:
        return [*blocks, Paragraph("No finished pretraining run was found.")]
    rows = [[r["arm"], fmt(r["train/mlm_loss"], 3), fmt(r["val/mlm_loss"], 3), fmt(r["val/perplexity"], 2),
             _sentence_accuracy(r), fmt_rate(r["tokens_per_s"]),
             duration(r["wall_seconds"]), fmt_count(r["steps"]), tuple(links.run(run_id) for run_id in r["runs"])]
            for r in table.to_dict("records")]
    header = ["arm", "train MLM loss", "val MLM loss", "val perplexity", "val NSP / SOP acc (%)", "tokens / s",
              "wall time", "last step", "runs"]
    caption = ("Each run's last logged values. Losses, perplexity and accuracies: means over the arm's pretraining "
               "seeds (validation MLM loss is the mean of 'Every measure, per arm'); tokens / s, wall time and last "
               "step: medians over them. tokens / s: median of the logged training throughput (validation excluded), "
               "measured under whatever else the machine ran at the time (each run's system/* metrics in MLflow show "
               "the machine's CPU and memory use while it trained), so compare arms by it only when they ran "
               "alone on the same hardware. wall time: the last invocation of each run; "
               "a killed and resumed run does not count its earlier invocations or the time it was stopped. "
               "Perplexity counts tokens of the arm's own vocabulary. NSP / SOP: the accuracy of the arm's "
               "sentence objective (data.sentence_objective), marked (SOP) for sentence-order prediction.")
    blocks.append(Table(header, rows, align="lrrrrrrrl", caption=caption))
    blocks += [figures[k] for k in ("curves", "throughput", "parameters") if k in figures]
    return blocks


def _sentence_accuracy(row: dict) -> str:
    """The arm's validation NSP accuracy in percent, else its SOP accuracy marked ``(SOP)``; '—' with neither."""
    if not pd.isna(row["val/nsp_acc"]):
        return fmt(row["val/nsp_acc"] * 100)
    if not pd.isna(row["val/sop_acc"]):
        return f"{fmt(row['val/sop_acc'] * 100)} (SOP)"
    return fmt(None)
