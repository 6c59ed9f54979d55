"""What each data stage's cache folder is keyed on, besides its configuration: the stage's code version (per
variant where only one variant's output changed), the tokenizer keys added after tokenizers were cached, and the
data settings under the names they had when data was first cached (:func:`data_stage_key`). Changing any of these
renames cache folders, so every prepared stage after it is rebuilt (:mod:`bvr.pretraining.prepare`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bvr.config import DataConfig

# Bump a stage's version when a code change would change the bytes it writes: its cache folders (and those of
# the stages after it, whose hashes include its folder name) are then rebuilt instead of reused.
STAGE_VERSIONS = {"corpus": 3, "tokenizer": 1, "tokenized": 1, "data": 2}
NEW_TOKENIZER_DEFAULTS = {"min_count": None, "count_percentile": 0.95, "train_documents": 200_000}
"""``tokenizer`` keys added after tokenizers were cached, at their defaults (:func:`~bvr.config.hashed_section`)."""
VARIANT_VERSIONS = {
    "tokenizer": {"roberta": 2},  # 2: byte-level BPE trained on sentences as in running text (their leading space)
    "tokenized": {"roberta": 2},  # 2: byte-level BPE sentences encoded with their leading space
    "data": {"segment-pair": 3},  # 3: segment-pair's short target drawn once per document, as BERT
    "corpus": {"wikitext": 4, "wikiextractor": 4},  # 4: WikiText headings by their blank lines; template debris
}
"""Versions of a stage for the variants whose output changed alone, by tokenizer family (``tokenizer``,
``tokenized``), input format (``data``) or corpus source (``corpus``); every other variant keeps
:data:`STAGE_VERSIONS`, so its cache folders (WordPiece's, the other formats', plain text's) keep their names and
are reused."""


def stage_version(stage: str, variant: str) -> int:
    """The cache version of ``stage`` for ``variant`` (the tokenizer family, or for ``data`` the input format).

    >>> stage_version("tokenized", "bert"), stage_version("tokenized", "roberta")
    (1, 2)
    """
    return VARIANT_VERSIONS.get(stage, {}).get(variant, STAGE_VERSIONS[stage])


def data_stage_key(data: DataConfig) -> dict[str, Any]:
    """The data settings the instance cache is keyed on.

    ``sentence_objective`` ``none`` and ``nsp`` are written as the ``nsp: false|true`` they replaced, which make the
    same instances, so data prepared before the rename (and the pretraining runs keyed on its folder) is reused;
    ``sop`` is keyed by name.
    """
    key = asdict(data)
    objective = key.pop("sentence_objective")
    if objective in ("none", "nsp"):
        key["nsp"] = objective == "nsp"
    else:
        key["sentence_objective"] = objective
    return key
