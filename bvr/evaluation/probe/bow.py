"""The bag-of-words baseline beside the probes: the probe's own model (:func:`train_probe`) on word counts, fitted
on exactly the training examples each probe seed draws and scored on the same examples, so a reader sees how far
frozen features are from what counting words gives.

A pair's second text contributes its words marked with :data:`SECOND_TEXT`, so the two sides stay apart. The
vocabulary depends only on the data and the seeds' draws, never on a model. The counts are held sparse
(:meth:`~bvr.evaluation.probe.fit.Standardised.of`). Tagging tasks get none: their labels are per word.
"""

from __future__ import annotations

import copy
import functools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bvr.evaluation.probe.features import sentence_split
from bvr.evaluation.probe.fit import LinearProbe
from bvr.evaluation.probe.selection import score, train_probe
from bvr.tasks.registry import TaskSpec, get_task

KIND = "bow"
"""The baseline's name in metric keys: ``probe/TASK/bow/METRIC``, ``probe/TASK/bow/heldout/METRIC``."""
MIN_COUNT = 2
"""Fewest occurrences in the seeds' training examples for a word to be in the vocabulary."""
MAX_WORDS = 4096
"""Largest vocabulary: the most frequent words are kept."""
SECOND_TEXT = "b:"
"""Prefix of the words of a pair's second text."""
CHUNK_ROWS = 2048
"""Examples turned into counts and scored at a time (a held-out set of 10,000 never sits in memory as counts)."""
MEMO_SIZE = 2
"""Results kept per process (:func:`bag_of_words`)."""


def words(example: Any) -> list[str]:
    """An example's lowercase whitespace tokens, the second text's (if any) prefixed by :data:`SECOND_TEXT`.

    >>> from bvr.tasks.readers.common import Example
    >>> words(Example("A dog, a DOG", "a cat", 1, 1))
    ['a', 'dog,', 'a', 'dog', 'b:a', 'b:cat']
    """
    second = example.text_b.lower().split() if example.text_b is not None else []
    return example.text_a.lower().split() + [SECOND_TEXT + word for word in second]


def vocabulary(texts: Iterable[Sequence[str]], size: int = MAX_WORDS) -> dict[str, int]:
    """Word -> column: the words seen at least :data:`MIN_COUNT` times, most frequent first (ties by the word), at
    most ``size`` of them.

    >>> vocabulary([["b", "a", "c"], ["a", "b", "d"], ["a"]], size=2)
    {'a': 0, 'b': 1}
    """
    counts = Counter(word for text in texts for word in text)
    kept = sorted((word for word, count in counts.items() if count >= MIN_COUNT), key=lambda w: (-counts[w], w))
    return {word: column for column, word in enumerate(kept[:size])}


def count_matrix(texts: Sequence[Sequence[str]], columns: Mapping[str, int]) -> torch.Tensor:
    """(texts, vocabulary) float32: how often each vocabulary word occurs in each text (other words are dropped).

    >>> count_matrix([["a", "x", "a"], ["b"]], {"a": 0, "b": 1}).tolist()
    [[2.0, 0.0], [0.0, 1.0]]
    """
    pairs = [(row, columns[word]) for row, text in enumerate(texts) for word in text if word in columns]
    counts = torch.zeros(len(texts), len(columns))
    if pairs:
        index = torch.tensor(pairs, dtype=torch.long)  # (occurrences, 2)
        counts.index_put_((index[:, 0], index[:, 1]), torch.ones(len(pairs)), accumulate=True)
    return counts


@dataclass
class BagOfWords:
    """The baseline's scores over every probe seed (seed -> metric -> value, on dev and on the held-out training
    examples), the L2 strength each seed chose and the vocabulary's size (``words``)."""

    words: int
    scores: dict[int, dict[str, float]]
    heldout_scores: dict[int, dict[str, float]]
    l2: dict[int, float]


def evaluate(spec: TaskSpec, probe: LinearProbe, columns: Mapping[str, int], examples: list[Any]) -> dict[str, float]:
    """Every metric of the task for ``probe`` on the counts of ``examples``, :data:`CHUNK_ROWS` at a time."""
    regression = spec.kind == "regression"
    predictions = torch.cat([
        probe.predict(count_matrix([words(x) for x in examples[start:start + CHUNK_ROWS]], columns), regression)
        for start in range(0, len(examples), CHUNK_ROWS)])  # (examples,)
    return score(spec, sentence_split(spec, examples, {}), range(len(examples)), predictions)


def bag_of_words(spec: TaskSpec, train: Sequence[Any], picks: Mapping[int, Sequence[int]], dev: list[Any],
                 held: list[Any] | None = None) -> BagOfWords | None:
    """Fit the baseline on each seed's training examples (``picks``: seed -> indices into ``train``) and score it on
    ``dev`` (and ``held``, when given); None for a tagging task. The result depends on the examples alone, so it is
    kept (:data:`MEMO_SIZE` per process): every model of an ablation gets a copy of the first one's."""
    if spec.kind == "tagging":
        return None
    union = sorted(set().union(*picks.values()))
    found = _fit_and_score(spec.name, tuple((seed, tuple(indices)) for seed, indices in picks.items()),
                           tuple((i, train[i]) for i in union), tuple(dev), tuple(held or ()))
    return copy.deepcopy(found)


@functools.lru_cache(maxsize=MEMO_SIZE)
def _fit_and_score(task: str, picks: tuple[tuple[int, tuple[int, ...]], ...], chosen: tuple[tuple[int, Any], ...],
                   dev: tuple[Any, ...], held: tuple[Any, ...]) -> BagOfWords:
    """:func:`bag_of_words` on hashable arguments: ``chosen`` holds (index, example) of every example drawn."""
    spec, train = get_task(task), dict(chosen)
    columns = vocabulary(words(example) for example in train.values())
    scores, heldout, l2 = {}, {}, {}
    # One torch thread: the fits' products are small and sparse, so a second thread only adds synchronisation
    # (several times slower on two busy cores).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for seed, indices in picks:
            examples = [train[i] for i in indices]
            split = sentence_split(spec, examples, {KIND: count_matrix([words(x) for x in examples], columns)})
            probe = train_probe(spec, split, range(len(examples)), KIND, sparse=True).probe
            scores[seed], l2[seed] = evaluate(spec, probe, columns, list(dev)), probe.l2
            if held:
                heldout[seed] = evaluate(spec, probe, columns, list(held))
    finally:
        torch.set_num_threads(threads)
    return BagOfWords(len(columns), scores, heldout, l2)
