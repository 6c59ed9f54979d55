"""SQuAD's official metrics: exact match and F1 as the v1.1 and v2.0 evaluation scripts compute them, as
functions (:func:`squad_scores`), a torchmetrics metric (:class:`SquadMetric`) and v2.0's no-answer threshold
search (:func:`best_threshold`)."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torchmetrics import Metric

from bvr.errors import BvrError

VERSIONS = ("1.1", "2.0")

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", flags=re.UNICODE)


def normalize_answer(text: str) -> str:
    """The official scripts' normalisation: lower case, no ASCII punctuation, no articles, single spaces.

    The steps run in that order, so "The." loses its full stop before "the" is recognised as an article.

    >>> normalize_answer("  The Denver-Broncos,  an NFL team! ")
    'denverbroncos nfl team'
    """
    lowered = text.lower()
    unpunctuated = "".join(char for char in lowered if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", unpunctuated).split())


def _check_version(version: str) -> str:
    if version not in VERSIONS:
        raise BvrError(f"unknown SQuAD version {version!r}", where="version", hint=f"use one of {list(VERSIONS)}")
    return version


def _gold(references: Sequence[str], version: str) -> list[str]:
    """The references a prediction is compared with."""
    if version == "1.1":
        if not references:
            raise ValueError("SQuAD v1.1 questions all have reference answers")
        return list(references)
    # v2.0 drops references that normalise to nothing; a question left with none expects the empty answer.
    return [text for text in references if normalize_answer(text)] or [""]


def _token_f1(prediction: str, reference: str, version: str) -> float:
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if version == "2.0" and (not predicted or not gold):
        return float(predicted == gold)  # no answer matches only no answer
    shared = sum((Counter(predicted) & Counter(gold)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(gold)
    return (2 * precision * recall) / (precision + recall)


def exact_match(prediction: str, references: Sequence[str], version: str = "2.0") -> float:
    """1.0 when the normalised prediction equals a normalised reference, else 0.0.

    Args:
        prediction: the answer given ("" for no answer).
        references: reference texts; empty means the question has no answer (v2.0 only).
        version: "1.1" or "2.0"; they differ only on references that normalise to nothing.
    """
    normal = normalize_answer(prediction)
    return float(any(normal == normalize_answer(text) for text in _gold(references, _check_version(version))))


def token_f1(prediction: str, references: Sequence[str], version: str = "2.0") -> float:
    """The best bag-of-tokens F1 between the normalised prediction and a normalised reference.

    Under v2.0 an empty prediction or reference scores 1.0 only against an empty counterpart; under v1.1 it
    scores 0.0, as in that script.

    Args:
        prediction: the answer given ("" for no answer).
        references: reference texts; empty means the question has no answer (v2.0 only).
        version: "1.1" or "2.0".
    """
    return max(_token_f1(prediction, text, version) for text in _gold(references, _check_version(version)))


@dataclass
class ScoreSums:
    """Sums of per-question scores, from which the reported percentages follow.

    Attributes:
        exact: sum of exact-match scores, overall, over answerable and over no-answer questions.
        f1: sum of F1 scores, likewise.
        total: questions counted, likewise.
        missing: questions with no prediction (scored 0 under v1.1; left out under v2.0, as in each script).
    """

    exact: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    f1: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    total: list[int] = field(default_factory=lambda: [0, 0, 0])
    missing: int = 0


_GROUPS = ("", "HasAns_", "NoAns_")


def score_sums(
    predictions: Mapping[str, str], references: Mapping[str, Sequence[str]], version: str = "1.1"
) -> ScoreSums:
    """Add up exact match and F1 over the questions in ``references``."""
    _check_version(version)
    sums = ScoreSums()
    for qid, gold in references.items():
        if qid in predictions:
            scores = (exact_match(predictions[qid], gold, version), token_f1(predictions[qid], gold, version))
        else:
            sums.missing += 1
            if version == "2.0":
                continue  # the v2.0 script leaves unanswered questions out of every total
            scores = (0.0, 0.0)  # the v1.1 script scores them 0
        for group in (0, 1 if gold else 2):
            sums.exact[group] += scores[0]
            sums.f1[group] += scores[1]
            sums.total[group] += 1
    return sums


def summarise(sums: ScoreSums, version: str = "1.1") -> dict[str, float]:
    """Percentages from score sums, keyed as the v2.0 script keys them.

    Returns:
        ``exact``, ``f1``, ``total`` and ``missing``; under v2.0 also ``HasAns_exact``, ``HasAns_f1``,
        ``HasAns_total`` and the ``NoAns_`` three, each group only when it has questions (as in the script).
    """
    result: dict[str, float] = {}
    groups = _GROUPS if version == "2.0" else _GROUPS[:1]
    for group, prefix in enumerate(groups):
        if prefix and not sums.total[group]:
            continue
        total = sums.total[group]
        result[f"{prefix}exact"] = 100.0 * sums.exact[group] / total if total else 0.0
        result[f"{prefix}f1"] = 100.0 * sums.f1[group] / total if total else 0.0
        result[f"{prefix}total"] = total
    result["missing"] = sums.missing
    return result


def squad_scores(
    predictions: Mapping[str, str], references: Mapping[str, Sequence[str]], version: str = "1.1"
) -> dict[str, float]:
    """Exact match and F1 in percent, as the official evaluation script of ``version`` reports them.

    Args:
        predictions: question id -> answer ("" for no answer).
        references: question id -> reference texts (see :func:`~bvr.tasks.readers.squad_json.references`); empty
            means no answer (v2.0).
        version: "1.1" or "2.0".

    Returns:
        See :func:`summarise`.
    """
    return summarise(score_sums(predictions, references, version), version)


def best_threshold(
    predictions: Mapping[str, str], null_diffs: Mapping[str, float], references: Mapping[str, Sequence[str]]
) -> dict[str, float]:
    """The no-answer thresholds that maximise exact match and F1, searched as the official v2.0 script does.

    Start from answering "" everywhere (every no-answer question right, every answerable one wrong), then switch
    questions to their span in increasing order of null-score difference, keeping the best score seen; the
    threshold is the difference of the question where it was reached (0.0 when answering nothing is best).

    Args:
        predictions: question id -> the best non-empty span
            (:attr:`~bvr.tasks.squad_decode.SquadPredictions.best_spans`).
        null_diffs: question id -> null score minus span score
            (:attr:`~bvr.tasks.squad_decode.SquadPredictions.null_diffs`).
        references: question id -> reference texts; empty means no answer.

    Returns:
        ``best_exact``, ``best_exact_thresh``, ``best_f1``, ``best_f1_thresh`` (scores in percent).

    Raises:
        ValueError: a question lacks a prediction or a difference.
    """
    missing = [qid for qid in references if qid not in predictions or qid not in null_diffs]
    if missing:
        raise ValueError(f"{len(missing)} questions lack a prediction or a null-score difference, e.g. {missing[0]}")
    result = {}
    for name, score in (("exact", exact_match), ("f1", token_f1)):
        best, thresh = _threshold_search(predictions, null_diffs, references, score)
        result[f"best_{name}"], result[f"best_{name}_thresh"] = best, thresh
    return result


def _threshold_search(
    predictions: Mapping[str, str],
    null_diffs: Mapping[str, float],
    references: Mapping[str, Sequence[str]],
    score: Any,
) -> tuple[float, float]:
    current = best = sum(not gold for gold in references.values())
    thresh = 0.0
    for qid in sorted(references, key=lambda qid: null_diffs[qid]):
        gold = references[qid]
        if gold:
            current += score(predictions[qid], gold, "2.0")
        elif predictions[qid]:
            current -= 1  # the script checks the raw string: any non-empty span loses the no-answer point
        if current > best:
            best, thresh = current, null_diffs[qid]
    return 100.0 * best / len(references) if references else 0.0, thresh


class SquadMetric(Metric):
    """Exact match and F1 accumulated over batches; equal to :func:`squad_scores` on all of them.

    The state is the sums of per-question scores and counts (overall, answerable, no-answer), summed across
    processes.

    Args:
        version: "1.1" or "2.0".
        **kwargs: passed to ``torchmetrics.Metric``.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    exact: torch.Tensor
    f1: torch.Tensor
    total: torch.Tensor
    missing: torch.Tensor

    def __init__(self, version: str = "1.1", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.version = _check_version(version)
        # float64: per-question F1 values are fractions, and their sum over 10,000 questions should not drift.
        self.add_state("exact", default=torch.zeros(3, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("f1", default=torch.zeros(3, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", default=torch.zeros(3, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("missing", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]) -> None:
        """Score a batch: question id -> answer, and question id -> reference texts for the same questions."""
        sums = score_sums(predictions, references, self.version)
        self.exact += torch.tensor(sums.exact, dtype=torch.float64, device=self.exact.device)
        self.f1 += torch.tensor(sums.f1, dtype=torch.float64, device=self.f1.device)
        self.total += torch.tensor(sums.total, dtype=torch.long, device=self.total.device)
        self.missing += sums.missing

    def compute(self) -> dict[str, torch.Tensor]:
        """The :func:`squad_scores` figures, each a float64 scalar tensor."""
        sums = ScoreSums(self.exact.tolist(), self.f1.tolist(), self.total.tolist(), int(self.missing))
        return {key: torch.tensor(value, dtype=torch.float64) for key, value in summarise(sums, self.version).items()}
