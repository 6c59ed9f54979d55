"""What a pretraining run saw: passes over its data, the masks each sequence got, the loss of guessing each
masked token from its frequency alone (the unigram plateau), how often each id of the vocabulary occurs in the
training sequences, and the tokens seen counted in words; recorded with the run's metrics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import datasets
import numpy as np
import pyarrow.compute as pc

from bvr.config import Config
from bvr.corpus import STATS_FILE
from bvr.pretraining.instances import count_tokens
from bvr.pretraining.masking import mask_exposure

RARE_OCCURRENCES = 10
"""An id that occurs fewer times than this in the training sequences is rare (``run/id_rare_share``): its row of the
embedding table gets next to no training signal."""


def exposure(cfg: Config, steps: int, train: datasets.Dataset, tokens_seen: int) -> dict[str, float]:
    """Passes over the data, and how many distinct masks each sequence got and how often each was seen.

    Passes are sequences fed over sequences held, or with ``training.tokens_per_batch`` tokens seen over tokens
    held (the batches then hold varying numbers of sequences).
    """
    if cfg.training.tokens_per_batch is None:
        epochs = steps * cfg.training.batch_size / train.num_rows
    else:
        epochs = tokens_seen / count_tokens(train)
    seen = mask_exposure(cfg.masking.mode, math.ceil(epochs), cfg.masking.dupe_factor)  # the epochs started
    return {"epochs": epochs, "mask_distinct_per_sequence": float(seen["distinct_masks"]),
            "mask_max_times_seen": float(seen["max_times_seen"])}


def unigram_entropy(instances: datasets.Dataset, vocab) -> float:
    """Entropy in nats of the token distribution of ``instances`` (special tokens left out).

    The validation MLM loss of a model that ignores context and predicts each masked token by its frequency in
    these very tokens: a loss not clearly below it has learned no more than which tokens are frequent (the unigram
    plateau).
    """
    counts = id_counts(instances, vocab.vocab_size).astype(np.float64)
    counts[list(vocab.special_ids)] = 0.0
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def id_counts(instances: datasets.Dataset, vocab_size: int) -> np.ndarray:
    """Occurrences of each id in the ``input_ids`` of ``instances``, specials included: ``(vocab_size,)`` int64.

    Counted one Arrow chunk at a time, so the split's ids are never copied whole into memory.

    >>> id_counts(datasets.Dataset.from_dict({"input_ids": [[2, 5, 5], [2, 7]]}), 8).tolist()
    [0, 0, 2, 0, 0, 2, 0, 1]
    """
    counts = np.zeros(vocab_size, dtype=np.int64)
    for chunk in instances.data.table["input_ids"].chunks:
        ids = pc.list_flatten(chunk).to_numpy(zero_copy_only=False)  # (tokens in the chunk,)
        counts += np.bincount(ids, minlength=vocab_size)[:vocab_size]
    return counts


def vocabulary_exposure(train: datasets.Dataset, vocab, tokens_seen: int,
                        ids_per_word: float | None) -> dict[str, float]:
    """How often the vocabulary's ids occur in the training sequences, and the tokens seen counted in words.

    ``id_occurrences_median``: the median, over every id that is not a special token (those never seen counting as
    0), of its occurrences in ``train``; ``id_rare_share``: the share of those ids seen fewer than
    :data:`RARE_OCCURRENCES` times. ``words_seen``: ``tokens_seen`` times the share of the training sequences' tokens
    that are text (not specials) over ``ids_per_word`` (:func:`ids_per_word`, given back beside it); both left out
    without it. Occurrences are the training text's, once: the model saw each about ``epochs`` times that.

    >>> from types import SimpleNamespace
    >>> train = datasets.Dataset.from_dict({"input_ids": [[0, 3, 3, 4, 1], [0, 3, 5, 1]]})
    >>> vocabulary_exposure(train, SimpleNamespace(vocab_size=7, special_ids=(0, 1, 2)), 810, 1.5)
    {'id_occurrences_median': 1.0, 'id_rare_share': 1.0, 'ids_per_word': 1.5, 'words_seen': 300.0}
    """
    counts = id_counts(train, vocab.vocab_size)  # (vocab_size,)
    specials = list(vocab.special_ids)
    text = np.delete(counts, specials)  # (ids that are not special,)
    out = {"id_occurrences_median": float(np.median(text)) if text.size else math.nan,
           "id_rare_share": float((text < RARE_OCCURRENCES).mean()) if text.size else math.nan}
    if ids_per_word:
        out["ids_per_word"] = ids_per_word
        out["words_seen"] = tokens_seen * (int(text.sum()) / max(int(counts.sum()), 1)) / ids_per_word
    return out


def ids_per_word(corpus_dir: Path, tokenized_dir: Path) -> float | None:
    """Text ids per whitespace-separated word of the corpus: the ids of every document's sentences as tokenized
    (specials not added, both splits) over the words the corpus build counted in the same sentences (its
    ``corpus_stats.json``). No text is read or tokenized again. None where a corpus written before its statistics
    has no count of words.
    """
    stats = corpus_dir / "documents" / STATS_FILE
    words = json.loads(stats.read_text(encoding="utf-8")).get("words") if stats.is_file() else None
    if not words:
        return None
    tokenized = datasets.load_from_disk(str(tokenized_dir / "tokenized"))
    ids = sum(count_tokens(split, "token_ids") for split in tokenized.values())
    return ids / words
