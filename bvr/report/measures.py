"""What a report measures: a :class:`Measure` (values per arm, per pretraining and inner seed, in points) for BLiMP,
each probe, each fine-tuning task and validation MLM loss, read from the collected runs; and how metrics are named
and scaled to points."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from bvr.report.collect import Collected
from bvr.report.inference import VarianceComponents, compare, unit_values, variance_components
from bvr.report.stats import is_higher_better
from bvr.tasks.registry import TASKS

PRETRAIN_TASK = "pretrain"  # the task name published tables (and comparisons) use for the pretraining stage
MLM = "mlm"  # the key of the validation MLM loss measure: the one in nats per token (the rest are in points)


def display_scale(task: str, values: Sequence[float] = ()) -> float:
    """Factor from logged scores to points: 1 for span tasks (SQuAD logs points), 100 for the rest.

    A task the registry does not know is taken to be logged as fractions when every value lies in [-1, 1].

    >>> display_scale("sst2"), display_scale("squad_v2"), display_scale("mystery", [12.5])
    (100.0, 1.0, 1.0)
    """
    spec = TASKS.get(task)
    if spec is not None:
        return spec.points_scale
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
class Measure:
    """One evaluation's values across models, in points (loss for the MLM measure)."""

    key: str  # ``blimp``, ``probe/TASK``, ``finetune/TASK`` or ``mlm``
    title: str  # how tables name it ("BLiMP macro accuracy, zero-shot")
    metric: str  # the logged key (``blimp/macro_accuracy``, ``dev/accuracy``, ``val/mlm_loss``)
    task: str | None  # as a published table names it (``sst2`` for fine-tuning; ``pretrain`` for MLM loss)
    higher_is_better: bool
    values: dict[str, dict[tuple[int, int], float]]  # arm -> (pretraining seed, inner seed; 0 for one number) -> value
    baseline: float | None = None  # the trivial baseline in the same units (majority class, chance)
    bow: float | None = None  # a sentence probe's bag-of-words baseline on the same examples, in points (or None)

    @property
    def kind(self) -> str:
        return self.key.partition("/")[0]

    @property
    def unit(self) -> str:
        return "nats" if self.key == MLM else "points"

    @property
    def digits(self) -> int:
        """Decimals the report prints the measure and its differences to: a loss in nats to 3, points to 1."""
        return 3 if self.key == MLM else 1

    @property
    def short_title(self) -> str:
        """The measure's name where space is short (a brief line, MLflow's views).

        >>> [_bare(key).short_title for key in ("blimp", "probe/sst2", "finetune/sst2", "mlm")]
        ['BLiMP', 'sst2 probe', 'sst2 fine-tuned', 'validation MLM loss']
        """
        task = self.key.partition("/")[2]
        return {"blimp": "BLiMP", MLM: "validation MLM loss", "probe": f"{task} probe",
                "finetune": f"{task} fine-tuned"}.get(self.kind, self.key)

    @property
    def in_sentence(self) -> str:
        """How a sentence names the measure (the budget curve's turns).

        >>> [_bare(key).in_sentence for key in ("blimp", "probe/sst2", "finetune/sst2")]
        ['BLiMP', 'the sst2 probe', 'fine-tuned sst2']
        """
        task = self.key.partition("/")[2]
        return {"blimp": "BLiMP", "probe": f"the {task} probe", "finetune": f"fine-tuned {task}"}.get(self.kind,
                                                                                                   self.title)

    def units(self, arm: str) -> dict[int, float]:
        """The arm's value per pretraining seed (the mean over inner seeds)."""
        return unit_values(self.values.get(arm, {}))

    def mean_interval(self, arm: str, confidence: float = 0.95) -> tuple[float, float, float]:
        """The arm's mean over pretraining seeds and its t interval, (mean, low, high): the ends NaN below
        :data:`~bvr.report.inference.MIN_UNITS` pretraining seeds, all three with none."""
        units = self.units(arm)
        if not units:
            return math.nan, math.nan, math.nan
        t = compare(units, dict.fromkeys(units, 0.0), confidence=confidence)
        return t.estimate, t.ci_low, t.ci_high

    def components(self, arm: str) -> VarianceComponents | None:
        """Between-pretraining-seed and within (inner-seed) variance of the arm's values."""
        return variance_components(self.values[arm]) if self.values.get(arm) else None


def _bare(key: str) -> Measure:
    """A measure with no values (for the examples above)."""
    return Measure(key, key, "", None, True, {})


def _probe_bow(collected: Collected, task: str, metric: str) -> float | None:
    """The bag-of-words baseline of a probe's headline ``probe/TASK[/heldout]/METRIC``, ×100: the runs'
    ``probe/TASK/bow[/heldout]/METRIC`` (every model logs the same value; their mean), or None when none logged it."""
    key = metric.replace(f"probe/{task}/", f"probe/{task}/bow/", 1)
    details = collected.details
    values = details.loc[(details["kind"] == "probe") & (details["task"] == task) & (details["key"] == key), "value"]
    return 100.0 * float(values.mean()) if not values.empty else None


def evaluation_measures(collected: Collected) -> list[Measure]:
    """BLiMP and the probes, each value ×100 (logged as fractions)."""
    frame = collected.evaluations
    features = collected.manifest.evaluations_settings.get("probe_features", "mean")
    out = []
    for (kind, task), rows in frame.groupby(["kind", "task"], sort=False, dropna=False):
        task = None if pd.isna(task) else str(task)
        values: dict[str, dict[tuple[int, int], float]] = {}
        for row in rows.to_dict("records"):
            for seed, value in row["seeds"].items():
                values.setdefault(row["arm"], {})[(int(row["pretrain_seed"]), int(seed))] = 100.0 * float(value)
        baseline = rows["baseline"].dropna()
        base = 100.0 * float(baseline.iloc[0]) if not baseline.empty else None
        metric = str(rows["metric"].iloc[0])
        if kind == "blimp":
            out.append(Measure("blimp", "BLiMP macro accuracy (zero-shot)", metric, "blimp", True, values, base))
        else:
            where = ", on held-out training examples" if "/heldout/" in metric else ""
            out.append(Measure(f"probe/{task}", f"{task} probe ({features} features{where})", metric, task, True,
                               values, base, _probe_bow(collected, task, metric)))
    return sorted(out, key=lambda measure: measure.key != "blimp")  # BLiMP first, the probes in their order


def finetune_measures(frame: pd.DataFrame, tasks: list[str], collected: Collected) -> list[Measure]:
    out = []
    for task in tasks:
        rows = frame[frame["task"] == task]
        if rows.empty:
            continue
        values: dict[str, dict[tuple[int, int], float]] = {}
        for arm, p, s, v in zip(rows["arm"], rows["pretrain_seed"], rows["seed"], rows["points"], strict=True):
            values.setdefault(str(arm), {})[(int(p), int(s))] = float(v)
        metric = str(rows["metric"].iloc[0])
        baseline = _finetune_baseline(collected, task, metric, display_scale(task, rows["value"].tolist()))
        out.append(Measure(f"finetune/{task}", f"{task} fine-tuned ({metric_label(metric)})", metric, task,
                           is_higher_better(metric), values, baseline))
    return out


def _finetune_baseline(collected: Collected, task: str, metric: str, scale: float) -> float | None:
    """The majority/trivial baseline the runner copied into the manifest for ``task``, in points."""
    for unit in collected.manifest.finetune:
        value = (unit.baseline or {}).get(metric) if unit.task == task else None
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value) * scale
    return None


def mlm_measure(collected: Collected) -> Measure | None:
    rows = collected.pretrain[collected.pretrain["val/mlm_loss"].notna()]
    if rows.empty:
        return None
    values: dict[str, dict[tuple[int, int], float]] = {}
    for arm, p, v in zip(rows["arm"], rows["pretrain_seed"], rows["val/mlm_loss"], strict=True):
        values.setdefault(str(arm), {})[(int(p), 0)] = float(v)
    return Measure(MLM, "validation MLM loss (fixed masks)", "val/mlm_loss", PRETRAIN_TASK, False, values)
