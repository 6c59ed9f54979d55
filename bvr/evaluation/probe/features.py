"""Frozen features for linear probes: the encoder's hidden states pooled per sentence (``cls``, ``mean``,
``last4``) or read per word at its first sub-token (``last``, ``last4``), extracted in length-sorted batches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bvr.config import DataSettings
from bvr.model.encoder import Encoder
from bvr.pretrained import Pretrained
from bvr.progress import track
from bvr.tasks.batching import collate
from bvr.tasks.kinds import KINDS
from bvr.tasks.registry import TaskSpec

LAST_LAYERS = 4
"""Layers concatenated by ``last4`` (BERT's best feature-based choice in Table 7 concatenates the last four)."""
BATCH_SIZE = 64
"""Sequences per encoder batch during feature extraction."""


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Average (batch, seq, hidden) over the positions where ``mask`` (batch, seq) is 1: (batch, hidden)."""
    weights = mask.to(hidden.dtype).unsqueeze(-1)  # (batch, seq, 1)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1)


def sentence_vectors(layers: Sequence[torch.Tensor], mask: torch.Tensor,
                     kinds: Sequence[str]) -> dict[str, torch.Tensor]:
    """Sentence features of one batch from each layer's (batch, seq, hidden) output, embeddings excluded:
    kind -> (batch, dim), ``hidden`` for cls and mean, ``hidden * min(4, layers)`` for last4."""
    builders = {
        "cls": lambda: layers[-1][:, 0],
        "mean": lambda: mean_pool(layers[-1], mask),
        "last4": lambda: torch.cat([mean_pool(h, mask) for h in layers[-LAST_LAYERS:]], dim=-1),
    }
    return {kind: builders[kind]() for kind in kinds}


def word_vectors(layers: Sequence[torch.Tensor], rows: torch.Tensor, cols: torch.Tensor,
                 kinds: Sequence[str]) -> dict[str, torch.Tensor]:
    """Features at the tokens (rows, cols), each (n,): kind -> (n, dim), for kinds among :data:`TOKEN_FEATURES`."""
    builders = {
        "last": lambda: layers[-1][rows, cols],
        "last4": lambda: torch.cat([h[rows, cols] for h in layers[-LAST_LAYERS:]], dim=-1),
    }
    return {kind: builders[kind]() for kind in kinds}


def first_subwords(word_ids: Sequence[int | None]) -> list[tuple[int, int]]:
    """(position, word) of each word's first sub-token, in order; specials (None) are skipped.

    >>> first_subwords([None, 0, 0, 1, 2, 2, None])
    [(1, 0), (3, 1), (4, 2)]
    """
    seen: set[int] = set()
    firsts = []
    for position, word in enumerate(word_ids):
        if word is not None and word >= 0 and word not in seen:
            seen.add(word)
            firsts.append((position, word))
    return firsts


def feature_dim(config: Any, kind: str) -> int:
    return config.hidden_size * (min(LAST_LAYERS, config.num_layers) if kind == "last4" else 1)


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first, so padding stays small.

    >>> length_batches([3, 9, 1, 9, 4], 2)
    [[1, 3], [4, 0], [2]]
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


@dataclass
class FeatureExtractor:
    """A frozen encoder with what feature extraction needs to run it."""

    encoder: Encoder
    pad_id: int
    device: torch.device
    batch_size: int
    progress: bool

    def layers(self, encoded: Mapping[str, list], batch: list[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Every layer's output for a batch of rows (embeddings excluded), and its (batch, seq) mask."""
        rows = [{"input_ids": encoded["input_ids"][i], "token_type_ids": encoded["token_type_ids"][i]} for i in batch]
        tensors = {key: value.to(self.device) for key, value in collate(rows, self.pad_id).items()}
        states = self.encoder.hidden_states(tensors["input_ids"], tensors["attention_mask"], tensors["token_type_ids"])
        return states[1:], tensors["attention_mask"]


def extract_features(extractor: FeatureExtractor, encoded: Mapping[str, list], kinds: Sequence[str],
                     description: str = "features",
                     firsts: Sequence[Sequence[tuple[int, int]]] | None = None) -> dict[str, torch.Tensor]:
    """Features of the encoded examples, float32 on the CPU: kind -> (rows, dim). Without ``firsts``, one row per
    example (:func:`sentence_vectors`), in example order; with them (per sentence, the :func:`first_subwords` of
    :func:`~bvr.tasks.ner.encode_ner`'s ``word_ids``), one row per word that kept a token (:func:`word_vectors`),
    sentence after sentence."""
    config, device = extractor.encoder.config, extractor.device
    n = len(encoded["input_ids"])
    offsets = range(n + 1) if firsts is None else np.cumsum([0, *map(len, firsts)]).tolist()  # example i's rows
    out = {kind: torch.empty(offsets[-1], feature_dim(config, kind)) for kind in kinds}
    batches = length_batches([len(ids) for ids in encoded["input_ids"]], extractor.batch_size)
    for batch in track(batches, description, enabled=extractor.progress):
        with torch.inference_mode():
            layers, mask = extractor.layers(encoded, batch)
            if firsts is None:
                vectors = sentence_vectors(layers, mask, kinds)
            else:
                rows = torch.tensor([r for r, i in enumerate(batch) for _ in firsts[i]], dtype=torch.long)
                cols = torch.tensor([position for i in batch for position, _ in firsts[i]], dtype=torch.long)
                vectors = word_vectors(layers, rows.to(device), cols.to(device), kinds)
        index = torch.tensor([j for i in batch for j in range(offsets[i], offsets[i + 1])], dtype=torch.long)
        for kind in kinds:
            out[kind][index] = vectors[kind].float().cpu()
    return out


# --- A split's features ----------------------------------------------------------------------------------------


@dataclass
class ProbeSplit:
    """One split as features: rows, their labels, and which rows belong to which example.

    Attributes:
        features: kind -> (rows, dim), float32.
        labels: (rows,) class ids (int64) or scores (float64).
        offsets: example ``i``'s rows are ``offsets[i]:offsets[i + 1]`` (one row per example for sentence tasks).
        words: tagging only: per example, the word each of its rows stands for (words cut off by truncation, or
            turned into no token, have no row and are scored as predicted O).
    """

    examples: list[Any]
    features: dict[str, torch.Tensor]
    labels: torch.Tensor
    offsets: list[int]
    words: list[list[int]] | None = None

    def rows(self, picked: Sequence[int]) -> torch.Tensor:
        """(rows,) indices of the rows of the examples ``picked``, in that order."""
        parts = [torch.arange(self.offsets[i], self.offsets[i + 1]) for i in picked]
        return torch.cat(parts) if parts else torch.empty(0, dtype=torch.long)


def sentence_split(spec: TaskSpec, examples: list[Any], features: dict[str, torch.Tensor]) -> ProbeSplit:
    """A sentence or pair task's split: one row per example, its label a class id (int64) or a score (float64)."""
    dtype = torch.float64 if spec.kind == "regression" else torch.long
    labels = torch.tensor([example.label for example in examples], dtype=dtype)
    return ProbeSplit(examples, features, labels, list(range(len(examples) + 1)))


def featurise(spec: TaskSpec, examples: list[Any], pretrained: Pretrained, extractor: FeatureExtractor,
              kinds: Sequence[str], max_length: int, description: str) -> ProbeSplit:
    """Encode ``examples`` with the task's own encoder (:data:`bvr.tasks.kinds.KINDS`) and extract features."""
    settings = DataSettings(max_length=max_length)
    encoded = KINDS[spec.kind].encode(spec, pretrained.tokenizer, pretrained.family, examples, settings)
    if spec.kind != "tagging":
        return sentence_split(spec, examples, extract_features(extractor, encoded, kinds, description))
    firsts = [first_subwords(word_ids) for word_ids in encoded["word_ids"]]
    features = extract_features(extractor, encoded, kinds, description, firsts)
    labels = torch.tensor([encoded["labels"][i][position] for i, first in enumerate(firsts) for position, _ in first],
                          dtype=torch.long)
    offsets = np.cumsum([0, *map(len, firsts)]).tolist()
    return ProbeSplit(examples, features, labels, offsets, [[word for _, word in first] for first in firsts])
