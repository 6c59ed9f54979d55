"""From collected runs to the numbers a report prints: summaries per arm and task, paired comparisons, the paper.

Units. bvr logs GLUE and CoNLL-2003 scores as fractions (0.84) and SQuAD's EM and F1 in points (84.0), while the
papers print points throughout. Every score is therefore multiplied by its task's :func:`display_scale` (100 or 1)
before any statistic is taken, so summaries, differences, verdicts and ``metrics.json`` are all in points, and a
measured difference can be read beside a published one. The bootstrap resamples the same seeds whatever the scale,
so scaling first gives the same interval as scaling the interval.

Pairs. Arms are compared two at a time in the manifest's order, ``b - a`` with ``a`` the earlier arm (the paper's
baseline comes first: static before dynamic), pairing runs by (pretraining seed, fine-tuning seed) within a task.
Every pretrained arm is also compared with the no-pretraining control, ``arm - control``; the control is fine-tuned
once, under pretraining seed 0, so it pairs with that pretraining seed only. Collapsed runs are kept in every
statistic and counted; leaving them out would flatter an arm that collapses more often.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from bvr.report.collect import Collected
from bvr.report.published import published_effect
from bvr.report.stats import Paired, Summary, agreement, is_higher_better, paired_difference, summarize, verdict
from bvr.tasks.registry import TASKS

PRETRAIN_TASK = "pretrain"
"""The task name published tables (and comparisons) use for the pretraining stage."""

BOOTSTRAP_SEED = 0
"""Seed of every bootstrap in a report, so a report renders the same intervals each time."""


def display_scale(task: str, values: Sequence[float] = ()) -> float:
    """Factor from logged scores to points: 1 for span tasks (SQuAD logs points), 100 for the rest.

    A task the registry does not know is taken to be logged as fractions when every value lies in [-1, 1].

    >>> display_scale("sst2"), display_scale("squad_v2"), display_scale("mystery", [12.5])
    (100.0, 1.0, 1.0)
    """
    spec = TASKS.get(task)
    if spec is not None:
        return 1.0 if spec.kind == "span" else 100.0
    return 100.0 if all(abs(v) <= 1.0 for v in values) else 1.0


def metric_label(metric: str) -> str:
    """A metric key as a table prints it: the split, then the metric's name.

    >>> metric_label("dev_matched/accuracy"), metric_label("dev/accuracy_f1"), metric_label("val/perplexity")
    ('dev_matched accuracy', 'dev accuracy + F1', 'val perplexity')
    """
    split, _, name = metric.rpartition("/")
    shown = {"f1": "F1", "mcc": "MCC"}
    words = "EM" if name == "exact_match" else " + ".join(shown.get(part, part) for part in name.split("_"))
    return f"{split} {words}" if split else words


def direction(delta: float | None, a: str, b: str, *, higher_is_better: bool) -> str:
    """Which arm a difference ``b - a`` favours, in words.

    >>> direction(0.4, "static", "dynamic", higher_is_better=True)
    'dynamic better'
    >>> direction(-0.31, "256", "2k", higher_is_better=False)
    '2k better'
    """
    if delta is None or math.isnan(delta):
        return "n/a"
    if delta == 0:
        return "no difference"
    return f"{b if (delta > 0) == higher_is_better else a} better"


@dataclass(frozen=True)
class Comparison:
    """Arm ``b`` against arm ``a`` on one task (or on pretraining perplexity), in points."""

    task: str
    metric: str
    a: str
    b: str
    paired: Paired
    verdict: str
    published: float | None = None
    """The paper's ``b - a`` in points (None: the paper has no such pair)."""
    agreement: str = "no published value"
    comparable: bool = True
    """False when the metric means different things in the two arms (perplexity over different vocabularies)."""

    @property
    def higher_is_better(self) -> bool:
        return is_higher_better(self.metric)

    @property
    def name(self) -> str:
        return f"{self.b} − {self.a}"

    @property
    def ours(self) -> str:
        """Our direction: an arm, 'no difference detected', 'too few seeds' or 'not comparable'."""
        if not self.comparable:
            return "not comparable"
        if not self.paired.can_tell:
            return "too few seeds"
        if not self.paired.distinguishable:
            return "no difference detected"
        return direction(self.paired.mean_diff, self.a, self.b, higher_is_better=self.higher_is_better)

    @property
    def paper(self) -> str:
        """The paper's direction, or 'n/a'."""
        return direction(self.published, self.a, self.b, higher_is_better=self.higher_is_better)


@dataclass
class Analysis:
    """Everything a report prints, in points (see the module docstring).

    Attributes:
        collected: the runs read from MLflow.
        scores: the fine-tuning runs with a ``points`` column (value times the task's scale).
        scales: each task's factor from logged values to points.
        summaries: (arm, task) -> the summary over that arm's runs on the task.
        comparisons: pretrained arms two at a time, per task, then pretraining perplexity.
        control: each pretrained arm against the no-pretraining control, per task.
        published: this ablation's rows of ``reports/published.yaml`` (empty when there are none).
        notes: caveats the reader must see (no published table, perplexities not comparable).
    """

    collected: Collected
    scores: pd.DataFrame
    scales: dict[str, float]
    summaries: dict[tuple[str, str], Summary]
    comparisons: list[Comparison]
    control: list[Comparison]
    published: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def tasks(self) -> list[str]:
        """The manifest's tasks, then any other task a run was found for."""
        planned = self.collected.tasks
        return planned + sorted(set(self.scores["task"]) - set(planned))

    def metric(self, task: str) -> str:
        """The headline key of ``task`` as logged by its runs (or the registry's)."""
        rows = self.scores.loc[self.scores["task"] == task, "metric"]
        return str(rows.iloc[0]) if not rows.empty else _registry_key(task)


def _registry_key(task: str) -> str:
    spec = TASKS.get(task)
    return f"{spec.headline_split}/{spec.main_metric}" if spec else "dev/score"


def _by_pair(frame: pd.DataFrame, arm: str, task: str) -> dict[tuple[int, int], float]:
    """An arm's points on a task keyed by (pretraining seed, fine-tuning seed); tuples sort as seeds do."""
    rows = frame[(frame["arm"] == arm) & (frame["task"] == task)]
    return {(int(p), int(s)): float(v) for p, s, v in zip(rows["pretrain_seed"], rows["seed"], rows["points"],
                                                          strict=True)}


def _compare(frame: pd.DataFrame, task: str, metric: str, a: str, b: str, published: pd.DataFrame,
             ablation: str | None) -> Comparison:
    paired = paired_difference(_by_pair(frame, a, task), _by_pair(frame, b, task), seed=BOOTSTRAP_SEED)
    return _comparison(paired, task, metric, a, b, published, ablation)


def _comparison(paired: Paired, task: str, metric: str, a: str, b: str, published: pd.DataFrame,
                ablation: str | None, comparable: bool = True) -> Comparison:
    digits = 2 if not is_higher_better(metric) or (paired.can_tell and paired.half_width < 0.1) else 1
    text = verdict(paired, a_name=a, b_name=b, metric=metric, scale=1, digits=digits)
    effect = published_effect(published, ablation, a, b, task, metric) if ablation and not published.empty else None
    agree = agreement(effect, paired) if comparable else "not comparable"
    if not comparable:
        text = "not comparable: the arms use different tokenizers, so their perplexities count different units"
    return Comparison(task, metric, a, b, paired, text, effect, agree, comparable)


def _same_tokenizer(pretrain: pd.DataFrame, a: str, b: str) -> bool:
    def tokenizer(arm: str) -> tuple:
        rows = pretrain[pretrain["arm"] == arm]
        return tuple(rows[["tokenizer.family", "tokenizer.vocab_size"]].drop_duplicates().itertuples(index=False))
    return tokenizer(a) == tokenizer(b)


def _perplexities(pretrain: pd.DataFrame, arm: str) -> dict[int, float]:
    """An arm's final validation perplexity per pretraining seed."""
    rows = pretrain[(pretrain["arm"] == arm) & pretrain["val/perplexity"].notna()]
    return {int(p): float(v) for p, v in zip(rows["pretrain_seed"], rows["val/perplexity"], strict=True)}


def _perplexity_comparisons(collected: Collected, published: pd.DataFrame, ablation: str | None) -> list[Comparison]:
    """Pretrained arms two at a time on their final validation perplexity, paired by pretraining seed."""
    pretrain, arms = collected.pretrain, collected.pretrained_arms
    out = []
    for i, a in enumerate(arms):
        for b in arms[i + 1:]:
            ppl_a, ppl_b = _perplexities(pretrain, a), _perplexities(pretrain, b)
            if ppl_a and ppl_b:
                paired = paired_difference(ppl_a, ppl_b, seed=BOOTSTRAP_SEED)
                out.append(_comparison(paired, PRETRAIN_TASK, "val/perplexity", a, b, published, ablation,
                                       comparable=_same_tokenizer(pretrain, a, b)))
    return out


def _scored(collected: Collected) -> tuple[pd.DataFrame, dict[str, float]]:
    frame = collected.finetune.copy()
    tasks = list(dict.fromkeys([*collected.tasks, *frame["task"]]))
    scales = {task: display_scale(task, frame.loc[frame["task"] == task, "value"].tolist()) for task in tasks}
    frame["points"] = [value * scales[task] for task, value in zip(frame["task"], frame["value"], strict=True)]
    return frame, scales


def analyse(collected: Collected, published: pd.DataFrame) -> Analysis:
    """Summaries, comparisons and the published rows of one ablation.

    Args:
        collected: the runs read by :func:`bvr.report.collect.collect`.
        published: every published row (:func:`bvr.report.published.load_published`); this ablation's table is
            the manifest's ``published`` key.

    Returns:
        The :class:`Analysis`.
    """
    frame, scales = _scored(collected)
    key = collected.manifest.get("published")
    ours = published[published["ablation"] == key] if key else published.iloc[0:0]
    notes = []
    if key and ours.empty:
        notes.append(f"reports/published.yaml has no table for '{key}'")
    summaries = {}
    for (arm, task), rows in frame.groupby(["arm", "task"], sort=False):
        summaries[(arm, task)] = summarize(rows["points"].to_numpy(), collapsed=rows["collapsed"].to_numpy(),
                                           seed=BOOTSTRAP_SEED)
    analysis = Analysis(collected, frame, scales, summaries, [], [], ours, notes)
    arms = collected.pretrained_arms
    for task in analysis.tasks:
        metric = analysis.metric(task)
        analysis.comparisons += [_compare(frame, task, metric, a, b, ours, key)
                                 for i, a in enumerate(arms) for b in arms[i + 1:]]
        if collected.control:
            analysis.control += [_compare(frame, task, metric, collected.control, arm, ours, key) for arm in arms]
    # A pair with no run on either side says nothing; the report's Missing section lists those runs.
    analysis.comparisons = [c for c in analysis.comparisons if c.paired.n]
    analysis.control = [c for c in analysis.control if c.paired.n]
    analysis.comparisons += _perplexity_comparisons(collected, ours, key)
    if any(not c.comparable for c in analysis.comparisons):
        notes.append("perplexity is per token, so arms with different tokenizers are not compared on it")
    return analysis


def _worth_a_headline(c: Comparison) -> bool:
    """Perplexity from one pretraining seed says nothing, unless the paper has a number to set beside it."""
    return c.task != PRETRAIN_TASK or (c.comparable and (c.paired.can_tell or c.published is not None))


def _subject(c: Comparison) -> str:
    return "perplexity" if c.task == PRETRAIN_TASK else c.task


def magnitude(c: Comparison) -> str:
    """The size of a difference and its '±' (half the interval), in points (perplexity: two decimals)."""
    digits = 2 if c.task == PRETRAIN_TASK else 1
    return f"{abs(c.paired.mean_diff):.{digits}f} ± {c.paired.half_width:.{digits}f}"


def pair_headline(rows: Sequence[Comparison]) -> str:
    """One arm pair across tasks in a sentence: where each arm is better, where no difference shows, the paper.

    Args:
        rows: the comparisons of one pair (same ``a`` and ``b``), in task order.
    """
    a, b = rows[0].a, rows[0].b
    parts = []
    for arm in (b, a):
        won = [f"{_subject(c)} by {magnitude(c)}" for c in rows if c.ours == f"{arm} better"]
        if won:
            parts.append(f"{arm} better on {', '.join(won)}")
    for state in ("no difference detected", "too few seeds"):
        subjects = [_subject(c) for c in rows if c.ours == state]
        if subjects:
            parts.append(f"{state} on {', '.join(subjects)}")
    by_agreement: dict[str, list[str]] = {}
    for c in rows:
        if c.published is not None:
            by_agreement.setdefault(c.agreement, []).append(_subject(c))
    if by_agreement:
        parts.append("beside the paper: " + ", ".join(f"{k} on {', '.join(v)}" for k, v in by_agreement.items()))
    return f"{b} vs {a}: " + "; ".join(parts)


def headlines(analysis: Analysis) -> list[str]:
    """One sentence per pair of pretrained arms, then one per arm against the control (:func:`pair_headline`)."""
    groups: dict[tuple[str, str], list[Comparison]] = {}
    for c in [*analysis.comparisons, *analysis.control]:
        if _worth_a_headline(c):
            groups.setdefault((c.a, c.b), []).append(c)
    return [pair_headline(rows) for rows in groups.values()]


PRETRAIN_TABLE_COLUMNS = ("arm", "runs", "tokens_per_s", "wall_seconds", "tokens_seen", "steps", "epochs",
                          "params_total", "params_embedding", "params_non_embedding", "train/mlm_loss", "val/mlm_loss",
                          "val/perplexity", "val/nsp_acc")


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
        for name in ("steps", "train/mlm_loss", "val/mlm_loss", "val/perplexity", "val/nsp_acc"):
            row[name] = _median([r[name] for r in runs])
        rows.append(row)
    return pd.DataFrame(rows, columns=list(PRETRAIN_TABLE_COLUMNS))


def _median(values: Sequence[float | None]) -> float:
    """The median of the finite values; NaN when there is none."""
    kept = [float(v) for v in values if v is not None and not pd.isna(v)]
    return float(pd.Series(kept).median()) if kept else math.nan
