"""Pretraining instances as columns: a family's :class:`Template` of specials around one segment or a pair, and
:class:`Columns`, which collects wrapped instances (``input_ids``, ``token_type_ids``, ``sentence_label``).

``sentence_label`` is the label of the configured ``data.sentence_objective``: NSP's :data:`IS_NEXT` /
:data:`NOT_NEXT`, SOP's :data:`IN_ORDER` / :data:`SWAPPED` (as Hugging Face's ``AlbertForPreTraining``
``sentence_order_label``), or ``IGNORE_INDEX`` without one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bvr.errors import BvrError
from bvr.ignore_index import IGNORE_INDEX

IS_NEXT = 0
NOT_NEXT = 1
IN_ORDER = 0
SWAPPED = 1


# family -> (number of separators between A and B, whether B gets token type 1)
_FAMILY_LAYOUT: dict[str, tuple[int, bool]] = {"bert": (1, True), "roberta": (2, False)}


@dataclass(frozen=True)
class Template:
    """How a family wraps segments."""

    cls_id: int  # opens every sequence ([CLS] or <s>)
    sep_id: int  # closes every sequence ([SEP] or </s>)
    # Ids between A and B: BERT's (sep,) gives [CLS] A [SEP] B [SEP], RoBERTa's (sep, sep) <s> A </s></s> B </s>.
    pair_middle: tuple[int, ...]
    doc_sep_id: int  # separator between two documents inside one full-sentences sequence
    pair_token_types: bool  # B and its closing separator get token type 1 (BERT); else all types are 0
    single_overhead = 2  # specials around one segment: the opening and closing tokens (a constant, not a field)

    @classmethod
    def for_family(cls, family: str, cls_id: int, sep_id: int) -> Template:
        """The template of a tokenizer family ("bert" or "roberta", another refused) with its opening and separator
        token ids."""
        if family not in _FAMILY_LAYOUT:
            raise BvrError(f"unknown tokenizer family {family!r}", hint=f"choose one of {', '.join(_FAMILY_LAYOUT)}")
        n_middle, token_types = _FAMILY_LAYOUT[family]
        return cls(cls_id, sep_id, (sep_id,) * n_middle, sep_id, token_types)

    @property
    def pair_overhead(self) -> int:
        """Specials around a pair: opening, middle and closing tokens."""
        return self.single_overhead + len(self.pair_middle)


class Columns:
    """Collects instances as columns, wrapping segments in a template's specials."""

    def __init__(self, template: Template) -> None:
        self.template = template
        self._open = np.array([template.cls_id], dtype=np.int32)
        self._close = np.array([template.sep_id], dtype=np.int32)
        self._middle = np.array(template.pair_middle, dtype=np.int32)
        self.input_ids: list[np.ndarray] = []
        self.token_type_ids: list[np.ndarray] = []
        self.sentence_label: list[int] = []

    def add_single(self, pieces: list[np.ndarray]) -> None:
        """Adds ``opening + concatenated pieces + closing``, all token type 0."""
        ids = np.concatenate([self._open, *pieces, self._close])
        self._add(ids, np.zeros(len(ids), dtype=np.int8), IGNORE_INDEX)

    def add_pair(self, a: np.ndarray, b: np.ndarray, label: int) -> None:
        """Adds ``opening A middle B closing``; with BERT's template B and the closing token are type 1."""
        ids = np.concatenate([self._open, a, self._middle, b, self._close])
        types = np.zeros(len(ids), dtype=np.int8)
        if self.template.pair_token_types:
            types[1 + len(a) + len(self._middle) :] = 1
        self._add(ids, types, label)

    def _add(self, ids: np.ndarray, types: np.ndarray, label: int) -> None:
        self.input_ids.append(ids)
        self.token_type_ids.append(types)
        self.sentence_label.append(label)

    def as_dict(self) -> dict[str, list]:
        return {"input_ids": self.input_ids, "token_type_ids": self.token_type_ids,
                "sentence_label": self.sentence_label}


def documents_of(table: pa.Table) -> list[list[np.ndarray]]:
    """Rebuild a shard's documents as lists of sentence arrays, without a Python loop over tokens."""
    ids = pc.list_flatten(table["token_ids"]).to_numpy()
    lengths = table["sentence_lengths"].to_pylist()
    sentence_counts = np.fromiter((len(doc) for doc in lengths), dtype=np.int64, count=len(lengths))
    flat_lengths = np.fromiter((n for doc in lengths for n in doc), dtype=np.int64)
    sentences = np.split(ids, np.cumsum(flat_lengths)[:-1]) if len(flat_lengths) else []
    bounds = np.concatenate([[0], np.cumsum(sentence_counts)])
    return [sentences[bounds[i] : bounds[i + 1]] for i in range(len(lengths))]


def count_tokens(ds: datasets.Dataset, column: str = "input_ids") -> int:
    """The ids in a column of id lists, summed over its rows."""
    return int(pc.sum(pc.list_value_length(ds.data.table[column])).as_py() or 0)


def instance_stats(ds: datasets.Dataset, max_length: int, objective: str = "none") -> dict[str, Any]:
    """Counts that matter for comparing formats, JSON-able: sequences, tokens, fill, and (``objective`` ``nsp`` or
    ``sop``) the sentence labels' balance: ``OBJECTIVE_label_0``, ``OBJECTIVE_label_1`` (NotNext, or swapped) and
    ``OBJECTIVE_label_1_share``."""
    table = ds.data.table
    lengths = pc.list_value_length(table["input_ids"]).to_numpy()
    labels = table["sentence_label"].to_numpy()
    out = {
        "sequences": int(len(lengths)),
        "tokens": int(lengths.sum()),
        "mean_length": round(float(lengths.mean()), 2) if len(lengths) else 0.0,
        "full_length_share": round(float((lengths == max_length).mean()), 4) if len(lengths) else 0.0,
        "max_length": max_length,
    }
    if objective != "none":
        ones = int((labels == 1).sum())
        out[f"{objective}_label_0"] = int((labels == 0).sum())
        out[f"{objective}_label_1"] = ones
        out[f"{objective}_label_1_share"] = round(ones / len(labels), 4) if len(labels) else 0.0
    return out
