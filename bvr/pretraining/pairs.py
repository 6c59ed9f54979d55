"""The two pair formats of RoBERTa (section 4.2), ``segment-pair`` (BERT's) and ``sentence-pair``, with BERT's
truncation of a pair to its budget (see :mod:`bvr.pretraining.formats` for the rules)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from bvr.pretraining.instances import NOT_NEXT, SWAPPED, Columns


@dataclass(frozen=True)
class Pairing:
    """How pairs are labelled: ``label`` for a true continuation in order; ``not_next`` whether NotNext may be drawn
    (NSP); ``swap`` whether a fair coin swaps a true continuation's segments, labelled ``SWAPPED`` (SOP)."""

    label: int
    not_next: bool
    swap: bool = False


def segment_pairs(docs: list[list[np.ndarray]], budget: int, pairing: Pairing, rng: random.Random,
                  short_seq_prob: float, out: Columns) -> None:
    """SEGMENT-PAIR: chunks of whole sentences up to a target length (one per document), cut into A and B."""
    for d, doc in enumerate(docs):
        target = rng.randint(2, budget) if rng.random() < short_seq_prob else budget  # one per document, as BERT
        start, length, i = 0, 0, 0
        while i < len(doc):
            length += len(doc[i])
            if length >= target or i == len(doc) - 1:
                # A NotNext pair uses only A's sentences; the rest of the chunk is read again.
                start += _emit_segment_pair(docs, d, doc[start:i + 1], target, budget, pairing, rng, out)
                i, length = start, 0
            else:
                i += 1


def _emit_segment_pair(docs: list[list[np.ndarray]], d: int, chunk: list[np.ndarray], target: int, budget: int,
                       pairing: Pairing, rng: random.Random, out: Columns) -> int:
    """Makes one pair from ``chunk``, consecutive sentences of document ``d`` (a NotNext B is drawn from another
    document of ``docs``); returns how many of the sentences it used."""
    n_a = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
    a = np.concatenate(chunk[:n_a])
    # The coin decides first, so a one-sentence chunk that draws IsNext is cut inside (formats: "Lone units").
    if pairing.not_next and rng.random() < 0.5:
        # B: whole sentences of another document, from a random one on, until the target (at least one sentence).
        other = docs[_other_document(len(docs), d, rng)]
        first = rng.randrange(len(other))
        stop, length = first, 0
        while stop < len(other) and (stop == first or length < target - len(a)):
            length += len(other[stop])
            stop += 1
        _add_truncated(a, np.concatenate(other[first:stop]), NOT_NEXT, budget, rng, out)
        return n_a
    if len(chunk) >= 2:
        _add_continuation(a, np.concatenate(chunk[n_a:]), pairing, budget, rng, out)
    else:
        _add_split(a, pairing, budget, rng, out)
    return len(chunk)


def _other_document(n_docs: int, d: int, rng: random.Random) -> int:
    """A uniformly random document index other than ``d`` (exact, unlike retrying a few times)."""
    k = rng.randrange(n_docs - 1)
    return k + 1 if k >= d else k


def sentence_pairs(docs: list[list[np.ndarray]], budget: int, pairing: Pairing, rng: random.Random,
                   out: Columns) -> None:
    """SENTENCE-PAIR: a sentence and the next one (IsNext, or SOP's pair in either order) or one from another
    document (NotNext)."""
    for d, doc in enumerate(docs):
        i = 0
        while i < len(doc):
            if pairing.not_next and rng.random() < 0.5:
                other = docs[_other_document(len(docs), d, rng)]
                _add_truncated(doc[i], other[rng.randrange(len(other))], NOT_NEXT, budget, rng, out)
                i += 1
            elif i + 1 < len(doc):
                _add_continuation(doc[i], doc[i + 1], pairing, budget, rng, out)
                i += 2
            else:
                _add_split(doc[i], pairing, budget, rng, out)
                i += 1


def _add_split(unit: np.ndarray, pairing: Pairing, budget: int, rng: random.Random, out: Columns) -> None:
    """A lone unit with no continuation, cut at a random token into A and B; a one-token unit is left out."""
    if len(unit) < 2:
        return
    cut = rng.randint(1, len(unit) - 1)
    _add_continuation(unit[:cut], unit[cut:], pairing, budget, rng, out)


def _add_continuation(a: np.ndarray, b: np.ndarray, pairing: Pairing, budget: int, rng: random.Random,
                      out: Columns) -> None:
    """Adds B after A (``pairing.label``), or with SOP and a fair coin's heads A after B (``SWAPPED``).

    The coin is drawn only with SOP, so NSP and no-objective instances are those of a pairing without ``swap``.
    The segments are swapped before truncation: the first segment is then the one that keeps the larger half
    whatever the label, so the lengths say nothing about the order.
    """
    if pairing.swap and rng.random() < 0.5:
        _add_truncated(b, a, SWAPPED, budget, rng, out)
    else:
        _add_truncated(a, b, pairing.label, budget, rng, out)


def _add_truncated(a: np.ndarray, b: np.ndarray, label: int, budget: int, rng: random.Random, out: Columns) -> None:
    """Adds the pair after truncating it to ``budget`` tokens."""
    keep_a, keep_b = truncated_lengths(len(a), len(b), budget)
    out.add_pair(_trim(a, keep_a, rng), _trim(b, keep_b, rng), label)


def truncated_lengths(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """The kept lengths of A and B after removing tokens one at a time from the longer segment (B on ties) until
    they fit ``budget`` together.

    >>> truncated_lengths(10, 3, 8), truncated_lengths(6, 6, 9), truncated_lengths(2, 2, 9)
    ((5, 3), (5, 4), (2, 2))
    """
    excess = len_a + len_b - budget
    if excess <= 0:
        return len_a, len_b
    if len_a - len_b >= excess:
        return len_a - excess, len_b
    if len_b - len_a >= excess:
        return len_a, len_b - excess
    # Both were cut until equal, then in turns starting with B: A keeps the larger half.
    return budget - budget // 2, budget // 2


def _trim(segment: np.ndarray, keep: int, rng: random.Random) -> np.ndarray:
    """Keeps ``keep`` tokens, each removed token taken from the front or the back by a fair coin."""
    drop = len(segment) - keep
    if drop == 0:
        return segment
    front = rng.getrandbits(drop).bit_count()  # heads among `drop` fair coins
    return segment[front : front + keep]
