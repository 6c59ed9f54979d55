"""The BLiMP paper's per-paradigm accuracies of its four language models (5-gram, LSTM, Transformer-XL, GPT-2),
read from the release's ``models_summary.jsonl`` and averaged over the paradigms a result has. Torch-free, for
reports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from bvr.errors import BvrError
from bvr.evaluation.blimp.pairs import SUMMARY_FILE, json_lines
from bvr.evaluation.blimp.scores import BlimpSummary, group_means, macro_accuracy

PUBLISHED_MODELS = {"ngram": "5-gram", "lstm": "LSTM", "txl": "Transformer-XL", "gpt2": "GPT-2"}
"""Columns of ``models_summary.jsonl`` and the names the paper gives the models."""


def summary_file(folder: Path) -> Path | None:
    """``models_summary.jsonl`` in ``folder``, its parent (``folder`` is ``blimp/data``) or ``folder/blimp``."""
    folder = Path(folder)
    for candidate in (folder, folder.parent, folder / "blimp"):
        if (candidate / SUMMARY_FILE).is_file():
            return candidate / SUMMARY_FILE
    return None


def _paradigm_rows(folder: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``("file:line", row)`` for each per-paradigm row of :func:`summary_file` (the ``overall`` summary rows
    skipped)."""
    path = summary_file(folder)
    if path is None:
        raise BvrError(f"no {SUMMARY_FILE} here, in its parent or in blimp/", where=folder,
                       hint="it ships with the BLiMP release, beside data/")
    for number, row in json_lines(path):
        where = f"{path}:{number}"
        if not isinstance(row.get("UID"), str) or not row["UID"]:
            raise BvrError("missing key UID", where=where, hint=f"use the BLiMP release's {SUMMARY_FILE}")
        if row["UID"] != "overall":
            yield where, row


def published_blimp(folder: Path) -> dict[str, dict[str, float]]:
    """The paper's per-paradigm accuracies of its four models: model name (``5-gram``, ``LSTM``, ``Transformer-XL``,
    ``GPT-2``) -> paradigm -> accuracy in [0, 1]. :func:`macro_accuracy` of a model's paradigms gives its headline
    figure (5-gram 0.612, LSTM 0.698, Transformer-XL 0.696, GPT-2 0.830)."""
    published: dict[str, dict[str, float]] = {name: {} for name in PUBLISHED_MODELS.values()}
    for where, row in _paradigm_rows(folder):
        for column, name in PUBLISHED_MODELS.items():
            value = row.get(column)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise BvrError(f"{column} must be an accuracy in [0, 1], got {json.dumps(value)}", where=where,
                               hint=f"use the BLiMP release's {SUMMARY_FILE}")
            published[name][row["UID"]] = float(value)
    if not published["GPT-2"]:
        raise BvrError("no per-paradigm rows (only 'overall' summaries or nothing)", where=summary_file(folder))
    return published


def published_terms(folder: Path) -> dict[str, str]:
    """Paradigm -> linguistic term of the per-paradigm rows of ``models_summary.jsonl`` (:func:`summary_file`)."""
    return {row["UID"]: str(row.get("linguistics_term")) for _, row in _paradigm_rows(folder)}


def published_summaries(published: Mapping[str, Mapping[str, float]],
                        paradigm_terms: Mapping[str, str]) -> dict[str, BlimpSummary]:
    """Each published model's macro and per-term accuracies over the paradigms of ``paradigm_terms``
    (:attr:`BlimpResult.paradigm_terms`: a fair comparison when only some were scored); one with none is left out."""
    out = {}
    for name, accuracies in published.items():
        shared = {uid: accuracies[uid] for uid in paradigm_terms if uid in accuracies}
        if shared:
            out[name] = BlimpSummary(macro_accuracy(shared), group_means(shared, paradigm_terms), len(shared))
    return out
