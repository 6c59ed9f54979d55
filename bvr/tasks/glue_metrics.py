"""GLUE's metrics: accuracy, F1 of the positive class, Matthews correlation, Pearson and Spearman correlation.

Two forms of each: the torchmetrics objects the fine-tuning loop updates batch by batch (:func:`make_metrics`), and
plain float64 definitions over lists (:data:`PLAIN_METRICS`), which the baseline uses and the tests hold the objects
to. Undefined values follow scikit-learn: F1 with no positive label or prediction, and Matthews correlation with a
constant prediction or target, are 0 (torchmetrics' own Matthews correlation scores a constant prediction 1 or
about 0.41, so :class:`MatthewsCorrelation` replaces its last step). A Pearson or Spearman correlation with a
constant input (nan in scipy) is 0 with an :class:`UndefinedMetricWarning`, so a collapsed model scores as a
constant predictor and checkpoint selection never meets a nan.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import torch
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import (
    BinaryAccuracy,
    BinaryF1Score,
    BinaryMatthewsCorrCoef,
    MulticlassAccuracy,
    MulticlassMatthewsCorrCoef,
)
from torchmetrics.regression import PearsonCorrCoef, SpearmanCorrCoef

from bvr.errors import BvrError
from bvr.tasks.registry import TaskSpec

Numbers = Sequence[int] | Sequence[float]


class UndefinedMetricWarning(UserWarning):
    """A metric was undefined for its inputs (a constant prediction, no positives) and is reported as 0."""


# --- Plain definitions -----------------------------------------------------------------------------------------


def _check_lengths(preds: Numbers, targets: Numbers) -> None:
    """Programming errors: metrics need equally long, non-empty inputs."""
    if len(preds) != len(targets) or not preds:
        raise ValueError(f"need equally long, non-empty inputs, got {len(preds)} predictions and {len(targets)}")


def accuracy(preds: Numbers, targets: Numbers) -> float:
    """Share of predictions equal to their target.

    >>> accuracy([1, 0, 1, 1], [1, 1, 1, 0])
    0.5
    """
    _check_lengths(preds, targets)
    return sum(p == t for p, t in zip(preds, targets, strict=True)) / len(targets)


def f1(preds: Numbers, targets: Numbers, positive: int = 1) -> float:
    """F1 of the positive class, 2TP / (2TP + FP + FN), as GLUE scores MRPC and QQP; 0 when there is no positive.

    >>> f1([1, 1, 0, 0], [1, 0, 1, 0])
    0.5
    """
    _check_lengths(preds, targets)
    tp = sum(p == positive and t == positive for p, t in zip(preds, targets, strict=True))
    fp = sum(p == positive and t != positive for p, t in zip(preds, targets, strict=True))
    fn = sum(p != positive and t == positive for p, t in zip(preds, targets, strict=True))
    if 2 * tp + fp + fn == 0:
        _warn_undefined("F1 with no positive label or prediction")
        return 0.0
    return 2 * tp / (2 * tp + fp + fn)


def matthews_corrcoef(preds: Numbers, targets: Numbers) -> float:
    """Matthews correlation (Gorodkin's multi-class form, as scikit-learn); 0 when undefined.

    >>> round(matthews_corrcoef([1, 1, 0, 0], [1, 0, 0, 0]), 6)
    0.57735
    """
    _check_lengths(preds, targets)
    classes = sorted(set(preds) | set(targets))
    confusion = Counter(zip(targets, preds, strict=True))
    matrix = [[confusion[(t, p)] for p in classes] for t in classes]
    return _mcc_from_confusion(matrix)


def _mcc_from_confusion(matrix: Sequence[Sequence[float]]) -> float:
    """Matthews correlation of a confusion matrix (rows: targets, columns: predictions); 0 when undefined."""
    n = len(matrix)
    total = sum(map(sum, matrix))
    correct = sum(matrix[k][k] for k in range(n))
    true_counts = [sum(row) for row in matrix]
    pred_counts = [sum(matrix[i][k] for i in range(n)) for k in range(n)]
    cov_tp = correct * total - sum(t * p for t, p in zip(true_counts, pred_counts, strict=True))
    cov_pp = total * total - sum(p * p for p in pred_counts)
    cov_tt = total * total - sum(t * t for t in true_counts)
    if cov_pp == 0 or cov_tt == 0:
        return 0.0
    return cov_tp / math.sqrt(cov_pp * cov_tt)


def pearson(preds: Numbers, targets: Numbers) -> float:
    """Pearson correlation; 0 with an :class:`UndefinedMetricWarning` when either input is constant.

    >>> pearson([1, 2, 3], [2, 4, 7])
    0.9933992677987828
    """
    _check_lengths(preds, targets)
    mean_p = math.fsum(preds) / len(preds)
    mean_t = math.fsum(targets) / len(targets)
    dev_p = [p - mean_p for p in preds]
    dev_t = [t - mean_t for t in targets]
    var_p = math.fsum(d * d for d in dev_p)
    var_t = math.fsum(d * d for d in dev_t)
    if var_p == 0 or var_t == 0:
        _warn_undefined("Pearson correlation with a constant input")
        return 0.0
    return math.fsum(a * b for a, b in zip(dev_p, dev_t, strict=True)) / math.sqrt(var_p * var_t)


def average_ranks(values: Numbers) -> list[float]:
    """1-based ranks; tied values share the mean of the ranks they span (scipy's ``rankdata`` 'average').

    >>> average_ranks([10, 20, 20, 5])
    [2.0, 3.5, 3.5, 1.0]
    """
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1  # mean of the 1-based ranks start+1 .. end+1
        start = end + 1
    return ranks


def spearman(preds: Numbers, targets: Numbers) -> float:
    """Spearman correlation: Pearson of the average ranks; 0 with a warning when either input is constant.

    >>> spearman([1, 2, 2, 3], [1, 3, 2, 4])
    0.9486832980505138
    """
    _check_lengths(preds, targets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)  # re-raised below under Spearman's name
        value = pearson(average_ranks(preds), average_ranks(targets))
    if value == 0.0 and (len(set(preds)) == 1 or len(set(targets)) == 1):
        _warn_undefined("Spearman correlation with a constant input")
    return value


def _warn_undefined(what: str) -> None:
    warnings.warn(f"{what} is undefined; reported as 0", UndefinedMetricWarning, stacklevel=3)


PLAIN_METRICS: dict[str, Callable[[Numbers, Numbers], float]] = {
    "accuracy": accuracy, "f1": f1, "mcc": matthews_corrcoef, "pearson": pearson, "spearman": spearman}
"""Metric name (as in TaskSpec.metrics) to its plain definition, called as ``fn(preds, targets)``."""


# --- torchmetrics objects --------------------------------------------------------------------------------------


class MatthewsCorrelation(BinaryMatthewsCorrCoef):
    """torchmetrics' binary Matthews correlation, finished with scikit-learn's definition (0 when undefined)."""

    def compute(self) -> torch.Tensor:
        return torch.tensor(_mcc_from_confusion(self.confmat.double().tolist()))


class MulticlassMatthewsCorrelation(MulticlassMatthewsCorrCoef):
    """torchmetrics' multi-class Matthews correlation, finished with scikit-learn's definition."""

    compute = MatthewsCorrelation.compute


def _zero_if_undefined(compute: Callable[[], torch.Tensor], name: str) -> torch.Tensor:
    """torchmetrics' ``compute()``, its warning of a constant input silenced, with 0 in place of the nan it then
    returns and our warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The variance of predictions or target is close to zero")
        value = compute()
        if torch.isnan(value).any():
            _warn_undefined(f"{name} with a constant (or near-constant) input")
            return torch.nan_to_num(value, nan=0.0)
        return value


class Pearson(PearsonCorrCoef):
    """torchmetrics' Pearson correlation, 0 (with an UndefinedMetricWarning) instead of nan for a constant input."""

    def compute(self) -> torch.Tensor:
        return _zero_if_undefined(super().compute, "Pearson correlation")


class Spearman(SpearmanCorrCoef):
    """torchmetrics' Spearman correlation (average ranks for ties), 0 instead of nan for a constant input."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            # Ranks need every prediction kept; GLUE's regression split (STS-B, 1,500 dev pairs) is small.
            warnings.filterwarnings("ignore", message="Metric `SpearmanCorrcoef` will save all targets")
            super().__init__()

    def compute(self) -> torch.Tensor:
        return _zero_if_undefined(super().compute, "Spearman correlation")


def _f1(spec: TaskSpec) -> Metric:
    if spec.num_labels != 2:
        raise ValueError(f"task {spec.name!r}: positive-class F1 needs two labels, not {spec.num_labels}")
    return BinaryF1Score()


METRIC_BUILDERS: dict[str, Callable[[TaskSpec], Metric]] = {
    "accuracy": lambda spec: (BinaryAccuracy() if spec.num_labels == 2 else
                              MulticlassAccuracy(spec.num_labels, average="micro")),
    "f1": _f1,
    "mcc": lambda spec: (MatthewsCorrelation() if spec.num_labels == 2 else
                         MulticlassMatthewsCorrelation(spec.num_labels)),
    "pearson": lambda _: Pearson(), "spearman": lambda _: Spearman()}
"""Metric name to a builder of its torchmetrics object for a task."""


def make_metrics(spec: TaskSpec, prefix: str = "") -> MetricCollection:
    """The torchmetrics collection of a classification or regression task's metrics for one split, each key after
    ``prefix`` (``"dev/"``). Update it with ``(preds, targets)``: predicted class ids and label ids (both ``(batch,)``
    integers) for classification; predicted and gold scores (both ``(batch,)`` floats) for regression."""
    unknown = [name for name in spec.metrics if name not in METRIC_BUILDERS]
    if unknown:
        raise ValueError(f"task {spec.name!r}: no torchmetrics object for {unknown}; known: {list(METRIC_BUILDERS)}")
    return MetricCollection({name: METRIC_BUILDERS[name](spec) for name in spec.metrics}, prefix=prefix)


def main_score(spec: TaskSpec, values: Mapping[str, float]) -> float:
    """The headline score: the mean of the task's main metrics.

    GLUE averages F1 and accuracy for MRPC and QQP, and Pearson and Spearman for STS-B.

    >>> from bvr.tasks.registry import get_task
    >>> main_score(get_task("mrpc"), {"accuracy": 0.75, "f1": 0.5})
    0.625
    """
    return math.fsum(float(values[name]) for name in spec.main_metrics) / len(spec.main_metrics)


# --- The trivial baseline --------------------------------------------------------------------------------------


def majority_prediction(spec: TaskSpec, train_labels: Numbers) -> int | float:
    """What the trivial baseline predicts: the most frequent training class (ties: the lowest id) or the mean score."""
    if not train_labels:
        raise BvrError(f"task {spec.name!r}: no training labels to take a baseline from")
    if spec.kind == "regression":
        return math.fsum(train_labels) / len(train_labels)
    counts = Counter(train_labels)
    return min(counts, key=lambda label: (-counts[label], label))


def majority_baseline(spec: TaskSpec, train_labels: Numbers, eval_labels: Numbers) -> dict[str, float]:
    """Every metric of the task, and its headline score, for predicting :func:`majority_prediction` everywhere.

    Its MCC is 0 and its Pearson and Spearman correlations are undefined, reported as 0
    (:func:`baseline_note` says so in words for the report).

    >>> from bvr.tasks.registry import get_task
    >>> majority_baseline(get_task("mrpc"), [1, 1, 0], [1, 0, 0, 0])
    {'accuracy': 0.25, 'f1': 0.4, 'accuracy_f1': 0.325}
    """
    guess = majority_prediction(spec, train_labels)
    preds = [guess] * len(eval_labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)  # expected: the prediction is constant
        values = {name: PLAIN_METRICS[name](preds, eval_labels) for name in spec.metrics}
    values[spec.main_metric] = main_score(spec, values)
    return values


def baseline_note(spec: TaskSpec, train_labels: Numbers) -> str:
    """One sentence for the report: what the baseline predicts, and which of its scores are 0 by definition.

    >>> from bvr.tasks.registry import get_task
    >>> baseline_note(get_task("stsb"), [1.0, 2.0])
    'predicts 1.5 (the training mean) for every example; pearson and spearman are undefined ...'
    """
    guess = majority_prediction(spec, train_labels)
    if spec.label_names is None:
        text = f"predicts {guess:.4g} (the training mean) for every example"
    else:
        share = sum(label == guess for label in train_labels) / len(train_labels)
        text = f"predicts {spec.label_names[int(guess)]!r} (the training majority, {share:.1%}) for every example"
    undefined = [name for name in spec.metrics if name in ("mcc", "pearson", "spearman")]
    if undefined:
        text += f"; {' and '.join(undefined)} {'is' if len(undefined) == 1 else 'are'} undefined for a constant "
        text += "prediction, shown as 0"
    return text
