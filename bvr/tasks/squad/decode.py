"""SQuAD decoding: the best answer span of each question from its windows' start and end scores, or under v2.0 no
answer (:func:`decode_predictions`; the threshold that scores best is :func:`~bvr.tasks.squad.metric.best_threshold`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bvr.tasks.readers.squad_json import SquadExample
from bvr.tasks.squad.metric import na_probability
from bvr.tasks.squad.windows import CLS_INDEX, Offsets

N_BEST = 20
MAX_ANSWER_LENGTH = 30


@dataclass(frozen=True)
class Candidate:
    """A candidate answer span: the context characters ``[start_char, end_char)``, scored start_logit + end_logit."""

    text: str
    start_char: int
    end_char: int
    score: float
    start_logit: float
    end_logit: float


def window_candidates(start_logits: Any, end_logits: Any, offsets: Offsets, context: str, *, n_best: int = N_BEST,
                      max_answer_length: int = MAX_ANSWER_LENGTH) -> list[Candidate]:
    """Valid spans, unsorted, among the top ``n_best`` start tokens times the top ``n_best`` end tokens of one window:
    both ends context tokens, end >= start, at most ``max_answer_length`` tokens. The logits are (seq,) and may be
    longer than ``offsets`` (padding, ignored)."""
    starts = np.asarray(start_logits, dtype=np.float64)[: len(offsets)]
    ends = np.asarray(end_logits, dtype=np.float64)[: len(offsets)]
    candidates = []
    for start in np.argsort(-starts, kind="stable")[:n_best]:
        for end in np.argsort(-ends, kind="stable")[:n_best]:
            if offsets[start] is None or offsets[end] is None or end < start or end - start + 1 > max_answer_length:
                continue
            first, last = offsets[start][0], offsets[end][1]
            start_logit, end_logit = float(starts[start]), float(ends[end])
            candidates.append(Candidate(context[first:last], first, last, start_logit + end_logit, start_logit,
                                        end_logit))
    return candidates


@dataclass
class SquadPredictions:
    """Decoded answers for a set of questions, each by question id: ``predictions``, the answer given ("" for no
    answer under v2.0); ``best_spans``, the best non-empty span's text ("" when no window had a valid span);
    ``null_diffs``, the null score minus the best span's score (``inf`` when there is no span; v2.0 answers "" when
    this exceeds the threshold); ``candidates``, the ``n_best`` best spans over all windows, best first;
    ``na_probs``, the probability of no answer (:func:`~bvr.tasks.squad.metric.na_probability` of the null-score
    difference), the official ``na_probs.json``."""

    predictions: dict[str, str] = field(default_factory=dict)
    best_spans: dict[str, str] = field(default_factory=dict)
    null_diffs: dict[str, float] = field(default_factory=dict)
    candidates: dict[str, list[Candidate]] = field(default_factory=dict)
    na_probs: dict[str, float] = field(default_factory=dict)


def decode_predictions(examples: Sequence[SquadExample], features: Mapping[str, list], start_logits: Sequence[Any],
                       end_logits: Sequence[Any], *, version_2: bool = False, threshold: float = 0.0,
                       n_best: int = N_BEST, max_answer_length: int = MAX_ANSWER_LENGTH) -> SquadPredictions:
    """The answer to each question from its windows' start and end logits: the best span over all windows
    maximises start_logit + end_logit (see :func:`window_candidates`). Under v2.0 the null score is the smallest CLS
    score over the question's windows, and the answer is "" when ``null score - best span score > threshold``.
    ``features`` are :func:`~bvr.tasks.squad.windows.encode_squad`'s; the logits are (seq,) per window (rows of a
    padded array will do); ``n_best`` candidates are kept per question, and as many starts and ends tried per window.
    """
    windows_by_example: dict[int, list[int]] = {}
    for window, index in enumerate(features["example_index"]):
        windows_by_example.setdefault(index, []).append(window)
    decoded = SquadPredictions()
    for index, windows in windows_by_example.items():
        example = examples[index]
        logits = [(start_logits[w], end_logits[w], features["offsets"][w]) for w in windows]
        spans = [candidate for starts, ends, offsets in logits for candidate in
                 window_candidates(starts, ends, offsets, example.context, n_best=n_best,
                                   max_answer_length=max_answer_length)]
        candidates = sorted(spans, key=lambda candidate: -candidate.score)[:n_best]  # ties keep window order
        best = candidates[0] if candidates else None
        # A window's score for "no answer": its start and end logits at the CLS token.
        null = min(float(np.float64(starts[CLS_INDEX]) + np.float64(ends[CLS_INDEX])) for starts, ends, _ in logits)
        diff = null - best.score if best else math.inf
        decoded.candidates[example.id] = candidates
        decoded.best_spans[example.id] = best.text if best else ""
        decoded.null_diffs[example.id] = diff
        decoded.na_probs[example.id] = na_probability(diff)
        no_answer = best is None or (version_2 and diff > threshold)
        decoded.predictions[example.id] = "" if no_answer else best.text
    return decoded
