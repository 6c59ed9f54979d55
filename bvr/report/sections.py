"""The sections of a report, as document blocks: what each table and paragraph says, and where its numbers
come from.

:func:`report_blocks` lays out one ablation's report: the headline (a sentence per pair of arms and a matrix of
paired differences), what is missing, the scores per task, the paired comparisons, the paper beside our runs,
pretraining, the setup, and how to read it all. :func:`summary_blocks` lays out the index across ablations. Every
number is taken from an :class:`~bvr.report.analysis.Analysis` (so from MLflow, in points); every run id links to the
MLflow UI.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from bvr.display import duration
from bvr.report.analysis import PRETRAIN_TASK, Analysis, Comparison, headlines, metric_label, pretrain_table
from bvr.report.collect import Collected
from bvr.report.document import Block, Bullets, Cell, Figure, Heading, Link, Notice, Paragraph, Table
from bvr.report.stats import DEFAULT_BOOTSTRAPS, Summary

MLFLOW_UI = "http://127.0.0.1:5000"
"""Where ``mlflow ui`` serves a local store; run links point there unless the store is itself a server."""


# ---------------------------------------------------------------------------------------------------------------
# Formatting


def _fmt(value: float | None, digits: int = 1) -> str:
    """A number with ``digits`` decimals; '—' for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


def _signed(value: float | None, digits: int = 1) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:+.{digits}f}"


def _count(value: float | None) -> str:
    """'12.3M', '45.6K', '812'; '—' for None or NaN.

    >>> _count(12_345_678), _count(45_600), _count(812), _count(float("nan"))
    ('12.3M', '45.6K', '812', '—')
    """
    if value is None or math.isnan(value):
        return "—"
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= size:
            return f"{value / size:.1f}{suffix}"
    return f"{value:.0f}"


def _rate(value: float | None) -> str:
    """A throughput with thousands separated: '12,345'."""
    return "—" if value is None or math.isnan(value) else f"{value:,.0f}"


def _ci(low: float, high: float, digits: int = 1) -> str:
    return "—" if math.isnan(low) else f"[{low:.{digits}f}, {high:.{digits}f}]"


def _digits(metric: str) -> int:
    """Decimals for a metric: scores in points get 1, perplexities and losses 2."""
    return 1 if not (metric.endswith("perplexity") or metric.endswith("loss")) else 2


class _Links:
    """Links to runs in the MLflow UI: ``BASE/#/experiments/ID/runs/RUN``."""

    def __init__(self, collected: Collected) -> None:
        base = collected.uri if collected.uri.startswith(("http://", "https://")) else MLFLOW_UI
        self.base = base.rstrip("/")
        self.experiment_id = collected.experiment_id

    def run(self, run_id: str, text: str | None = None) -> Cell:
        if self.experiment_id is None:
            return text or run_id[:8]
        return Link(text or run_id[:8], f"{self.base}/#/experiments/{self.experiment_id}/runs/{run_id}")

    def experiment(self, name: str) -> Cell:
        if self.experiment_id is None:
            return name
        return Link(name, f"{self.base}/#/experiments/{self.experiment_id}")


# ---------------------------------------------------------------------------------------------------------------
# Sections


def _title(a: Analysis) -> list[Block]:
    m, missing = a.collected.manifest, a.collected.missing
    status = ("Complete: every planned run is in MLflow and agrees with the manifest." if not missing else
              f"Partial: {len(missing)} planned item(s) are missing or disagree (listed under Missing); the "
              "statistics use the runs that are there.")
    facts = [f"source {_relative(m.get('source'))}", f"preset {m.get('preset') or 'none (defaults)'}",
             f"plan {m.get('plan_hash') or '—'}"]
    return [Heading(f"Ablation report: {a.collected.ablation}", 1),
            Paragraph(str(m.get("description") or "").strip() or "(no description)"),
            Paragraph(status), Paragraph(" · ".join(facts))]


def _matrix_cell(c: Comparison | None) -> str:
    """'+1.6 ± 0.3' when the interval excludes 0, '(+0.2 ± 0.4)' when it covers 0, '(+0.2)' with one pair."""
    if c is None:
        return "—"
    if not c.comparable:
        return "not comparable"
    digits = 2 if c.task == PRETRAIN_TASK else 1
    text = _signed(c.paired.mean_diff, digits)
    if c.paired.can_tell:
        text += f" ± {c.paired.half_width:.{digits}f}"
    return text if c.paired.distinguishable else f"({text})"


def _matrix(a: Analysis) -> Table | None:
    """Pairs of arms by task: the mean paired difference and its '±', at a glance."""
    pairs: dict[tuple[str, str], dict[str, Comparison]] = {}
    for c in [*a.comparisons, *a.control]:
        pairs.setdefault((c.a, c.b), {})[c.task] = c
    if not pairs:
        return None
    tasks = [t for t in [*a.tasks, PRETRAIN_TASK] if any(t in row for row in pairs.values())]
    header = ["b − a", *[("val perplexity" if t == PRETRAIN_TASK else t) for t in tasks]]
    rows = []
    for (a_, b), row in pairs.items():
        rows.append([f"{b} − {a_}", *[_matrix_cell(row.get(t)) for t in tasks]])
        if any(c.published is not None for c in row.values()):
            rows.append([f"{b} − {a_}, paper", *[_signed(row[t].published, 2 if t == PRETRAIN_TASK else 1)
                                                  if t in row and row[t].published is not None else "—"
                                                  for t in tasks]])
    caption = ("Mean paired difference b − a in points (perplexity as is; lower is better) ± half its 95% bootstrap "
               "interval; in parentheses where the interval covers 0 (no difference detected) or, with one pair, "
               "does not exist. 'paper' rows: the published b − a.")
    return Table(header, rows, align="L" + "r" * len(tasks), caption=caption)


def _headline(a: Analysis) -> list[Block]:
    lines = headlines(a)
    if not lines:
        return [Heading("Headline"), Paragraph("No comparison yet: no arm pair has runs on a common task.")]
    intro = Paragraph("For each pair of arms: the tasks where the 95% interval of the paired difference excludes 0, "
                      "and by how much (points ± half the interval; GLUE and CoNLL-2003 scores ×100).")
    matrix = _matrix(a)
    return [Heading("Headline"), intro, Bullets(tuple(lines)), *([matrix] if matrix else [])]


def _missing(a: Analysis) -> list[Block]:
    if not a.collected.missing and not a.notes:
        return []
    blocks: list[Block] = [Heading("Missing")]
    if a.collected.missing:
        blocks.append(Notice(f"{len(a.collected.missing)} planned item(s) are missing or disagree; units without a "
                             "usable run are left out of every statistic below.", tuple(a.collected.missing)))
    if a.notes:
        blocks.append(Bullets(tuple(a.notes)))
    return blocks


def _hardware(context: dict[str, Any]) -> str:
    hw = context.get("hardware") or {}
    cpu = f"{hw.get('cpu') or 'CPU'} × {hw.get('cpu_count') or '?'}"
    gpu = f"; {hw['gpu']} × {hw.get('gpu_count') or 1}" if hw.get("gpu") else "; no GPU"
    soft = ", ".join(f"{k} {hw[k]}" for k in ("python", "torch") if hw.get(k))
    return f"{cpu}{gpu}" + (f" ({soft}; {hw['platform']})" if soft and hw.get("platform") else "")


def _corpus(a: Analysis) -> str:
    """The pretraining corpus of the first arm (arms share it unless one declares otherwise)."""
    arm = a.collected.arms[0]
    source, path = _config_value(a, arm, "corpus.source"), _config_value(a, arm, "corpus.path")
    cap = _config_value(a, arm, "corpus.max_documents")
    return f"{source}: {path}" + (f", first {cap} documents" if cap not in ("—", "null") else "")


def _commits(a: Analysis) -> str:
    """The manifest's commit, and every other commit a run was tagged with (a mixed ablation must say so)."""
    planned = a.collected.manifest.get("context", {}).get("git_commit")
    runs = pd.concat([a.collected.pretrain["git_commit"], a.collected.finetune["git_commit"]]).dropna()
    others = sorted(set(runs) - {planned})
    text = planned or "unknown"
    return text + (f" (runs also tagged with {', '.join(others)})" if others else "")


def _context(a: Analysis, links: _Links) -> list[Block]:
    m = a.collected.manifest
    context = m.get("context") or {}
    parent = a.collected.parent_run_id
    rows: list[list[Cell]] = [
        ["arms", ", ".join(a.collected.arms) + (f" (control: {a.collected.control})" if a.collected.control else "")],
        ["tasks", ", ".join(a.collected.tasks) or "—"],
        ["fine-tuning seeds", ", ".join(map(str, m.get("finetune_seeds") or [])) or "—"],
        ["pretraining seeds", ", ".join(map(str, m.get("pretrain_seeds") or [])) or "—"],
        ["overrides", ", ".join(m.get("overrides") or []) or "none"],
        ["corpus", _corpus(a)],
        ["task data", str(context.get("data_dir") or "—")],
        ["hardware", _hardware(context)],
        ["started / updated", f"{context.get('started') or '—'} / {context.get('updated') or '—'}"],
        ["wall time (all invocations, up to this report)", duration(context.get("wall_seconds"))],
        ["git commit", _commits(a)],
        ["MLflow store", a.collected.uri],
        ["MLflow experiment", links.experiment(a.collected.experiment)],
        ["parent run", links.run(parent, parent) if parent else "—"],
    ]
    return [Heading("Setup"), Table(["setting", "value"], rows), *_arms_table(a, links)]


def _config_value(a: Analysis, arm: str, key: str) -> str:
    """A config value of an arm: its pretraining run's logged param, else the plan's config (the control)."""
    rows = a.collected.pretrain[a.collected.pretrain["arm"] == arm]
    logged = rows[key].dropna() if key in rows else pd.Series(dtype=object)
    if not logged.empty:
        return str(logged.iloc[0])
    value: Any = (a.collected.manifest.get("configs") or {}).get(arm) or {}
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "—" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _arms_table(a: Analysis, links: _Links) -> list[Block]:
    declared = a.collected.manifest.get("declared") or {}
    table = pretrain_table(a).set_index("arm")
    rows = []
    for arm in a.collected.arms:
        if arm == a.collected.control:
            change = "no pretraining: the shared base config's encoder, randomly initialised per seed"
        else:
            change = ", ".join(f"{k}={v}" for k, v in (declared.get(arm) or {}).items()) or "—"
        model = "/".join(_config_value(a, arm, f"model.{k}") for k in ("num_layers", "hidden_size", "num_heads"))
        vocab = (a.collected.manifest.get("configs") or {}).get(arm, {}).get("tokenizer", {}).get("vocab_size")
        family = _config_value(a, arm, "tokenizer.family")
        tokenizer = f"{family} {vocab:,}" if isinstance(vocab, int) else f"{family} (default size)"
        stats = table.loc[arm].to_dict() if arm in table.index else {"runs": []}
        get = stats.get
        rows.append([arm, change, tokenizer, model, _config_value(a, arm, "data.input_format"),
                     _config_value(a, arm, "training.batch_size"), _config_value(a, arm, "training.max_steps"),
                     _count(get("tokens_seen")), _fmt(get("epochs")),
                     f"{_count(get('params_total'))} / {_count(get('params_non_embedding'))}",
                     duration(get("wall_seconds")), tuple(links.run(r) for r in stats["runs"]) or "—"])
    caption = ("Config values are the pretraining runs' MLflow params (the control, never pretrained, shows its "
               "planned config). model: layers/hidden/heads. params: total / without embeddings. Tokens seen, "
               "epochs, parameters and wall time are the runs' run/* metrics.")
    header = ["arm", "changes", "tokenizer", "model", "input", "batch", "steps", "tokens seen", "epochs",
              "params", "wall time", "pretrain run"]
    return [Table(header, rows, align="LlllLrrrrrrl", caption=caption)]


def _seed_links(a: Analysis, links: _Links, rows: pd.DataFrame) -> Cell:
    several = a.collected.pretrain["pretrain_seed"].nunique() > 1
    cells = []
    for r in rows.sort_values(["pretrain_seed", "seed"]).itertuples(index=False):
        text = (f"p{r.pretrain_seed}s{r.seed}" if several else f"s{r.seed}") + ("×" if r.collapsed else "")
        cells.append(links.run(r.run_id, text))
    return tuple(cells)


def _summary_cells(s: Summary, digits: int = 1) -> list[str]:
    collapsed = str(s.n_collapsed) if s.n_collapsed else "0"
    return [str(s.n), collapsed, _fmt(s.median, digits), f"{_fmt(s.iqr, digits)} ({_fmt(s.q1, digits)}–"
            f"{_fmt(s.q3, digits)})", f"{_fmt(s.min, digits)}–{_fmt(s.max, digits)}",
            f"{_fmt(s.mean, digits)} {_ci(s.ci_low, s.ci_high, digits)}"]


def _scores(a: Analysis, links: _Links, figures: dict[str, Figure]) -> list[Block]:
    rows = []
    for task in a.tasks:
        first = True
        for arm in a.collected.arms:
            summary = a.summaries.get((arm, task))
            if summary is None:
                continue
            scale = "×100" if a.scales.get(task) == 100 else "points"
            label = f"{task}: {metric_label(a.metric(task))}, {scale}" if first else ""
            seeds = a.scores[(a.scores["arm"] == arm) & (a.scores["task"] == task)]
            rows.append([label, arm, *_summary_cells(summary), _seed_links(a, links, seeds)])
            first = False
    blocks: list[Block] = [Heading("Fine-tuning scores")]
    if not rows:
        return [*blocks, Paragraph("No finished fine-tuning run was found.")]
    caption = ("Scores in points: GLUE and CoNLL-2003 are logged as fractions and shown ×100; SQuAD is logged in "
               "points. Each seed's final-epoch score on the headline split. n: seeds found; collapsed: runs "
               "predicting one class (marked × in the runs column), kept in every statistic. IQR with the "
               "quartiles (linear interpolation); mean with its 95% percentile-bootstrap interval.")
    header = ["task", "arm", "n", "collapsed", "median", "IQR (q1–q3)", "min–max", "mean [95% CI]", "runs"]
    blocks.append(Table(header, rows, align="llrrrrrrl", caption=caption))
    if "scores" in figures:
        blocks.append(figures["scores"])
    return blocks


def _pair_label(key: tuple[int, int]) -> str:
    """A (pretraining seed, fine-tuning seed) pair as a reader names it: 'seed 3', 'seed 3 of pretraining seed 1'."""
    pretrain_seed, seed = key
    return f"seed {seed}" + (f" of pretraining seed {pretrain_seed}" if pretrain_seed else "")


def _comparison_rows(comparisons: Sequence[Comparison]) -> list[list[Cell]]:
    rows = []
    for c in comparisons:
        p, d = c.paired, _digits(c.metric)
        unpaired = ", ".join(_pair_label(key) for key in p.unpaired) or "—"
        rows.append([c.task, c.name, str(p.n), _signed(p.mean_diff, d), _ci(p.ci_low, p.ci_high, d),
                     "yes" if p.distinguishable else "no", c.verdict, unpaired])
    return rows


def _comparisons(a: Analysis, figures: dict[str, Figure]) -> list[Block]:
    between = [c for c in a.comparisons if c.task != PRETRAIN_TASK]
    header = ["task", "b − a", "pairs", "mean difference", "95% CI", "distinguishable", "verdict", "unpaired runs"]
    blocks: list[Block] = [
        Heading("Paired comparisons"),
        Paragraph("Each difference is b − a in points, paired by (task, pretraining seed, fine-tuning seed): the two "
                  "runs of a pair share data order and head initialisation, so the difference cancels much of the "
                  "seed noise. Distinguishable: the 95% bootstrap interval of the mean difference excludes 0. With "
                  "3 to 5 seeds this is a screening statement about this run of the suite, not a significance test."),
    ]
    if between:
        blocks.append(Table(header, _comparison_rows(between), align="lLrrrlll"))
    if a.control:
        blocks += [Heading("Against no pretraining", 3),
                   Paragraph(f"Each pretrained arm minus the {a.collected.control} control (a randomly initialised "
                             "encoder of the same shape, fine-tuned the same way; pretraining seed 0 only)."),
                   Table(header, _comparison_rows(a.control), align="lLrrrlll")]
    if not between and not a.control:
        blocks.append(Paragraph("No pair of arms to compare."))
    if "differences" in figures:
        blocks.append(figures["differences"])
    return blocks


def _published_rows(a: Analysis) -> list[list[Cell]]:
    """Direction of each effect in the paper and here, for every pair of our arms the paper also has."""
    rows = []
    for c in a.comparisons:
        pub = a.published
        if c.published is None:
            continue
        label = pub.loc[(pub["task"] == c.task) & (pub["metric"] == c.metric), "metric_label"].dropna()
        value = {arm: pub.loc[(pub["arm"] == arm) & (pub["task"] == c.task) & (pub["metric"] == c.metric),
                              "value"].iloc[0] for arm in (c.a, c.b)}
        d = _digits(c.metric)
        rows.append([label.iloc[0] if not label.empty else c.task, c.name, _fmt(value[c.a], d), _fmt(value[c.b], d),
                     _signed(c.published, d), c.paper, f"{_signed(c.paired.mean_diff, d)} "
                     f"{_ci(c.paired.ci_low, c.paired.ci_high, d)}", c.ours, c.agreement])
    return rows


def _beside_rows(a: Analysis) -> tuple[list[str], list[list[Cell]], list[str]]:
    """Our medians beside the paper's values, per arm the two share and per published column of a task we ran;
    then the headings of the columns left out."""
    pub = a.published.dropna(subset=["task"])
    ran = {*a.tasks, PRETRAIN_TASK}
    every = list(pub[["task", "metric", "metric_label"]].drop_duplicates(["task", "metric"]).itertuples(index=False))
    columns = [c for c in every if c.task in ran]
    skipped = [c.metric_label or c.task for c in every if c.task not in ran]
    ppl = pretrain_table(a).set_index("arm")["val/perplexity"]
    rows = []
    for arm in [arm for arm in a.collected.pretrained_arms if arm in set(pub["arm"])]:
        cells: list[Cell] = [arm]
        for col in columns:
            paper = pub.loc[(pub["arm"] == arm) & (pub["task"] == col.task) & (pub["metric"] == col.metric), "value"]
            d = _digits(col.metric)
            if col.task == PRETRAIN_TASK:
                ours = ppl.get(arm, math.nan)
            else:
                summary = a.summaries.get((arm, col.task))
                ours = summary.median if summary is not None and a.metric(col.task) == col.metric else math.nan
            cells.append(f"{_fmt(paper.iloc[0] if not paper.empty else None, d)} / {_fmt(ours, d)}")
        rows.append(cells)
    return ["arm", *[f"{c.metric_label or c.task} paper / ours" for c in columns]], rows, skipped


def _published(a: Analysis) -> list[Block]:
    key = a.collected.manifest.get("published")
    blocks: list[Block] = [Heading("Beside the paper")]
    if a.published.empty:
        why = (f"reports/published.yaml has no table for '{key}'." if key else
               "No published table informs this ablation.")
        return [*blocks, Paragraph(why)]
    first = a.published.iloc[0]
    blocks.append(Paragraph(f"{first['source']}: {first['setting']}. Paper values in points as printed; ours are "
                            "medians (and paired differences) in points over our seeds, at our far smaller scale."))
    direction = _published_rows(a)
    if direction:
        header = ["paper column", "b − a", "paper a", "paper b", "paper Δ", "paper says", "our Δ [95% CI]",
                  "we see", "agreement"]
        caption = ("agreement: our interval excludes 0 and has the paper's sign (agree) or the other sign "
                   "(disagree); inconclusive when our interval covers 0.")
        blocks.append(Table(header, direction, align="lLrrrllll", caption=caption))
    header, beside, skipped = _beside_rows(a)
    if beside and len(header) > 1:
        caption = "'—' where the paper has no value or our runs are missing." + (
            f" Published columns for tasks this ablation does not run: {', '.join(skipped)}." if skipped else "")
        blocks.append(Table(header, beside, align="L" + "r" * (len(header) - 1), caption=caption))
    words = a.published[a.published["task"].isna()]
    if not words.empty:
        blocks.append(Bullets(tuple(f"{r.arm_label}: {r.note}" for r in words.itertuples(index=False))))
    if not direction and words.empty:
        blocks.append(Paragraph("None of the paper's arm pairs was measured here (yet)."))
    return blocks


def _pretraining(a: Analysis, links: _Links, figures: dict[str, Figure]) -> list[Block]:
    table = pretrain_table(a)
    blocks: list[Block] = [Heading("Pretraining")]
    if table.empty:
        return [*blocks, Paragraph("No finished pretraining run was found.")]
    rows = [[r["arm"], _fmt(r["train/mlm_loss"], 3), _fmt(r["val/mlm_loss"], 3), _fmt(r["val/perplexity"], 2),
             _fmt(r["val/nsp_acc"] * 100 if not pd.isna(r["val/nsp_acc"]) else None), _rate(r["tokens_per_s"]),
             duration(r["wall_seconds"]), _count(r["steps"]), tuple(links.run(x) for x in r["runs"])]
            for r in table.to_dict("records")]
    header = ["arm", "train MLM loss", "val MLM loss", "val perplexity", "val NSP acc (%)", "tokens / s", "wall time",
              "last step", "runs"]
    caption = ("Last logged values. tokens / s: median of the logged training throughput (validation excluded). "
               "Perplexity counts tokens of the arm's own vocabulary.")
    blocks.append(Table(header, rows, align="lrrrrrrrl", caption=caption))
    ppl = [c for c in a.comparisons if c.task == PRETRAIN_TASK]
    if ppl:
        rows = [[c.name, str(c.paired.n), _signed(c.paired.mean_diff, 2), _signed(c.published, 2), c.verdict,
                 c.agreement] for c in ppl]
        blocks.append(Table(["b − a", "pretraining seeds", "Δ perplexity", "paper Δ", "verdict", "agreement"], rows,
                            align="lrrrll"))
    blocks += [figures[k] for k in ("curves", "throughput", "parameters") if k in figures]
    return blocks


def _methods(a: Analysis) -> list[Block]:
    return [Heading("How to read this report"), Bullets((
        "Every number is read from the MLflow run the manifest names for it, not from the manifest's copies; run "
        f"ids link to the MLflow UI ({MLFLOW_UI} when `mlflow ui` runs in the folder of the store).",
        "Scores are in points: GLUE and CoNLL-2003 metrics are logged as fractions and multiplied by 100; SQuAD "
        "is logged in points. metrics.json uses the same units.",
        "Medians and quartiles use linear interpolation; the mean's interval is a percentile bootstrap over seeds "
        f"({DEFAULT_BOOTSTRAPS:,} resamples, generator seed 0), so a re-render gives the same intervals.",
        "Collapsed runs (predicting one class, tag bvr.collapsed) are kept in every statistic and counted; leaving "
        "them out would flatter an arm that collapses more often.",
        "plots/*.csv hold the data behind the figures for `dvc plots show`: scores.csv and differences.csv one row "
        "per point, scores_TASK.csv and pretrain_*.csv one column per arm.",
    ))]


def report_blocks(a: Analysis, figures: dict[str, Figure]) -> list[Block]:
    """One ablation's report, results first; ``figures`` maps a figure's name ('scores', 'curves') to its block."""
    links = _Links(a.collected)
    return [*_title(a), *_headline(a), *_missing(a), *_scores(a, links, figures), *_comparisons(a, figures),
            *_published(a), *_pretraining(a, links, figures), *_context(a, links), *_methods(a)]


# ---------------------------------------------------------------------------------------------------------------
# The index across ablations


def _agreement_counts(a: Analysis) -> str:
    found = [c.agreement for c in a.comparisons if c.published is not None]
    if not found:
        return "no published comparison measured"
    counts = {k: found.count(k) for k in ("agree", "disagree", "inconclusive") if found.count(k)}
    return f"{len(found)} published comparison(s): " + ", ".join(f"{v} {k}" for k, v in counts.items())


def summary_blocks(analyses: Sequence[Analysis], reports: Sequence[str | None]) -> list[Block]:
    """The index across ablations: a status table, then each ablation's headline sentences.

    Args:
        analyses: one analysis per ablation.
        reports: per ablation, the link to its ``report.html`` relative to the index (None: not rendered yet).
    """
    overview = []
    sections: list[Block] = []
    for a, href in zip(analyses, reports, strict=True):
        name = a.collected.ablation
        link: Cell = Link("report", href) if href else "not rendered yet"
        status = "complete" if not a.collected.missing else f"partial ({len(a.collected.missing)} missing)"
        overview.append([name, status, ", ".join(a.collected.arms), str(len(a.collected.tasks)),
                         _agreement_counts(a), link])
        lines = headlines(a) or ["no comparison yet"]
        sections += [Heading(name), Paragraph(str(a.collected.manifest.get("description") or "").strip()),
                     Bullets(tuple(lines))]
    head = [Heading("bvr: ablation reports", 1),
            Paragraph("Each ablation's headline verdicts, read from MLflow; differences are in points (GLUE and "
                      "CoNLL-2003 ×100) with 95% bootstrap intervals over paired seeds. Follow a report link for "
                      "the tables, figures and runs."),
            Table(["ablation", "status", "arms", "tasks", "beside the paper", "report"], overview)]
    return head + sections


def _relative(path: str | None) -> str:
    """A path relative to the working directory where it lies under it (reports are read from the repository)."""
    if not path:
        return "—"
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path
