"""What a pretraining run saw: passes over its data, the masks each sequence got, and the loss of guessing each
masked token from its frequency alone (the unigram plateau), recorded with the run's metrics."""

from __future__ import annotations

import math

import datasets
import numpy as np
import pyarrow.compute as pc

from bvr.config import Config
from bvr.pretraining.masking import mask_exposure


def exposure(cfg: Config, steps: int, train: datasets.Dataset, tokens_seen: int) -> dict[str, float]:
    """Passes over the data, and how many distinct masks each sequence got and how often each was seen.

    Passes are sequences fed over sequences held, or with ``training.tokens_per_batch`` tokens seen over tokens
    held (the batches then hold varying numbers of sequences).
    """
    if cfg.training.tokens_per_batch is None:
        epochs = steps * cfg.training.batch_size / train.num_rows
    else:
        epochs = tokens_seen / int(pc.sum(pc.list_value_length(train.data.table["input_ids"])).as_py())
    started = math.ceil(epochs)
    seen = mask_exposure(cfg.masking.mode, started, cfg.masking.dupe_factor)
    return {"epochs": epochs, "mask_distinct_per_sequence": float(seen["distinct_masks"]),
            "mask_max_times_seen": float(seen["max_times_seen"])}


def unigram_entropy(instances: datasets.Dataset, vocab) -> float:
    """Entropy in nats of the token distribution of ``instances`` (special tokens left out).

    The validation MLM loss of a model that ignores context and predicts each masked token by its frequency in
    these very tokens: a loss not clearly below it has learned no more than which tokens are frequent (the unigram
    plateau).
    """
    ids = pc.list_flatten(instances.data.table["input_ids"]).to_numpy()  # (tokens,)
    counts = np.bincount(ids, minlength=vocab.vocab_size).astype(np.float64)
    counts[list(vocab.special_ids)] = 0.0
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
