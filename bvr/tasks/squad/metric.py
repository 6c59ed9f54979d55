"""SQuAD's official metrics: exact match and F1 as the v1.1 and v2.0 evaluation scripts compute them, with the v2.0
script's HasAns/NoAns breakdown and no-answer threshold search."""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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
    """1.0 when the normalised prediction ("" for no answer) equals a normalised reference, else 0.0.

    No references means the question has no answer (v2.0 only); the versions differ only on references that
    normalise to nothing.
    """
    normal = normalize_answer(prediction)
    return float(any(normal == normalize_answer(text) for text in _gold(references, _check_version(version))))


def token_f1(prediction: str, references: Sequence[str], version: str = "2.0") -> float:
    """The best bag-of-tokens F1 between the normalised prediction and a normalised reference.

    Under v2.0 an empty prediction or reference scores 1.0 only against an empty counterpart; under v1.1 it
    scores 0.0, as in that script.
    """
    return max(_token_f1(prediction, text, version) for text in _gold(references, _check_version(version)))


@dataclass
class ScoreSums:
    """Sums of exact match, F1 and questions counted, each overall, over answerable and over no-answer questions;
    ``missing`` counts questions with no prediction (scored 0 under v1.1; left out under v2.0, as in each script)."""

    exact: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    f1: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    total: list[int] = field(default_factory=lambda: [0, 0, 0])
    missing: int = 0


_GROUPS = ("", "HasAns_", "NoAns_")


def raw_scores(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]],
               version: str = "2.0") -> tuple[dict[str, float], dict[str, float]]:
    """Exact match and F1 of every question with a prediction, as the v2.0 script's ``get_raw_scores``: (question id
    -> exact match, question id -> F1), in the order of ``references``; questions without a prediction left out."""
    _check_version(version)
    exact, f1 = {}, {}
    for qid, gold in references.items():
        if qid in predictions:
            answer = predictions[qid]
            exact[qid], f1[qid] = exact_match(answer, gold, version), token_f1(answer, gold, version)
    return exact, f1


def _add(sums: ScoreSums, has_answer: bool, exact: float, f1: float) -> None:
    for group in (0, 1 if has_answer else 2):
        sums.exact[group] += exact
        sums.f1[group] += f1
        sums.total[group] += 1


def squad_scores(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]],
                 version: str = "1.1") -> dict[str, float]:
    """Exact match and F1 in percent (:func:`summarise`), as the official evaluation script of ``version`` reports
    them; references as :func:`~bvr.tasks.readers.squad_json.references` gives them (empty: no answer)."""
    exact, f1 = raw_scores(predictions, references, version)
    sums = ScoreSums(missing=len(references) - len(exact))
    for qid, gold in references.items():
        if qid in exact:
            _add(sums, bool(gold), exact[qid], f1[qid])
        elif version == "1.1":
            _add(sums, bool(gold), 0.0, 0.0)  # the v1.1 script scores a missing prediction 0
        # the v2.0 script leaves unanswered questions out of every total
    return summarise(sums, version)


def summarise(sums: ScoreSums, version: str = "1.1") -> dict[str, float]:
    """Percentages from score sums, keyed as the v2.0 script keys them: ``exact``, ``f1``, ``total`` and ``missing``;
    under v2.0 also ``HasAns_exact``, ``HasAns_f1``, ``HasAns_total`` and the ``NoAns_`` three, each group only when
    it has questions (as in the script)."""
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


def na_probability(null_diff: float) -> float:
    """The probability of "no answer" from a question's null score minus its best span score: a softmax over the
    two, ``1 / (1 + exp(-null_diff))`` (1.0 when no span was valid, ``null_diff`` infinite).

    >>> na_probability(0.0), na_probability(math.inf)
    (0.5, 1.0)
    """
    if null_diff >= 0:
        return 1.0 / (1.0 + math.exp(-null_diff))
    odds = math.exp(null_diff)  # no overflow for very negative differences
    return odds / (1.0 + odds)


def find_best_thresh(predictions: Mapping[str, str], scores: Mapping[str, float], na_probs: Mapping[str, float],
                     has_answer: Mapping[str, bool]) -> tuple[float, float]:
    """The v2.0 script's ``find_best_thresh``: the best score over no-answer thresholds, and that threshold.

    Start from answering "" everywhere, then walk the questions with a score (:func:`raw_scores`' exact match or
    F1) in increasing order of ``na_probs`` (ties in the order of its keys), adding each one's score if answerable
    and taking a point off for a no-answer question given a non-empty answer: the best running total, in percent of
    the questions scored, and the ``na_prob`` where it was first reached (0.0 when answering nothing is best).
    Between tied questions the total may peak where no threshold can stop, as in the script.
    """
    current = best = sum(not answerable for answerable in has_answer.values())
    thresh = 0.0
    for qid in sorted(na_probs, key=lambda qid: na_probs[qid]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1  # the script checks the raw string: any non-empty answer loses the no-answer point
        if current > best:
            best, thresh = current, na_probs[qid]
    return 100.0 * best / len(scores) if scores else 0.0, thresh


def _best_of(predictions: Mapping[str, str], exact: Mapping[str, float], f1: Mapping[str, float],
             na_probs: Mapping[str, float], references: Mapping[str, Sequence[str]]) -> dict[str, float]:
    has_answer = {qid: bool(gold) for qid, gold in references.items()}
    result = {}
    for name, scores in (("exact", exact), ("f1", f1)):
        result[f"best_{name}"], result[f"best_{name}_thresh"] = find_best_thresh(predictions, scores, na_probs,
                                                                                 has_answer)
    return result


def evaluate_v2(predictions: Mapping[str, str], na_probs: Mapping[str, float], references: Mapping[str, Sequence[str]],
                na_prob_thresh: float = 1.0) -> dict[str, float]:
    """What the official v2.0 script prints for a predictions file and a no-answer probability file.

    A question whose ``na_prob`` exceeds ``na_prob_thresh`` (the script's ``--na-prob-thresh``, 1.0: never for a
    probability) counts as answered "". Returns :func:`summarise`'s keys and :func:`find_best_thresh`'s
    ``best_exact``, ``best_exact_thresh``, ``best_f1`` and ``best_f1_thresh``, scores in percent; a question with a
    prediction but no no-answer probability is a ValueError.
    """
    exact, f1 = raw_scores(predictions, references, "2.0")
    lacking = [qid for qid in exact if qid not in na_probs]
    if lacking:
        raise ValueError(f"{len(lacking)} questions lack a no-answer probability, e.g. {lacking[0]}")
    sums = ScoreSums(missing=len(references) - len(exact))
    for qid in exact:
        gold = references[qid]
        if na_probs[qid] > na_prob_thresh:
            _add(sums, bool(gold), float(not gold), float(not gold))
        else:
            _add(sums, bool(gold), exact[qid], f1[qid])
    return summarise(sums, "2.0") | _best_of(predictions, exact, f1, na_probs, references)


def best_threshold(predictions: Mapping[str, str], null_diffs: Mapping[str, float],
                   references: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """The no-answer thresholds that maximise exact match and F1, searched as the official v2.0 script does
    (:func:`find_best_thresh`), on the null-score differences (:class:`~bvr.tasks.squad.decode.SquadPredictions`)
    themselves: ``best_exact``, ``best_exact_thresh``, ``best_f1``, ``best_f1_thresh`` (scores in percent);
    answering "" where the difference exceeds a threshold reproduces its score.
    """
    missing = [qid for qid in references if qid not in predictions or qid not in null_diffs]
    if missing:
        raise ValueError(f"{len(missing)} questions lack a prediction or a null-score difference, e.g. {missing[0]}")
    exact, f1 = raw_scores(predictions, references, "2.0")
    return _best_of(predictions, exact, f1, null_diffs, references)
