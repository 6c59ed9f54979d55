"""One BLiMP evaluation of a pretrained model: read the pairs, score them by PLL, compare with the paper's models."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from bvr.evaluation.blimp.pairs import load_blimp, paradigm_files
from bvr.evaluation.blimp.pll import DEFAULT_TOKENS_PER_BATCH, pll_scores
from bvr.evaluation.blimp.published import published_blimp, published_summaries, summary_file
from bvr.evaluation.blimp.scores import BlimpResult, score_pairs
from bvr.progress import counter

if TYPE_CHECKING:
    from bvr.pretrained import Pretrained


def evaluate_blimp(pretrained: Pretrained, folder: Path, per_paradigm: int | None = None, seed: int = 0,
                   progress: bool = False, *, max_tokens_per_batch: int = DEFAULT_TOKENS_PER_BATCH) -> BlimpResult:
    """Zero-shot BLiMP accuracy of a pretrained encoder on ``per_paradigm`` pairs of each paradigm (None: all). The
    folder's ``models_summary.jsonl``, when there, fills :attr:`BlimpResult.published` over the same paradigms."""
    pairs = load_blimp(folder, per_paradigm, seed)
    summary = summary_file(paradigm_files(folder)[0].parent)
    sentences = [pair.good for pair in pairs] + [pair.bad for pair in pairs]
    start = time.perf_counter()
    with counter("BLiMP sentences", len(sentences), enabled=progress) as advance:
        scores = pll_scores(pretrained.model, pretrained.tokenizer, pretrained.family, sentences,
                            max_tokens_per_batch=max_tokens_per_batch, on_progress=advance)
    result = score_pairs(pairs, scores[:len(pairs)], scores[len(pairs):], seconds=time.perf_counter() - start)
    if summary is not None:
        result.published = published_summaries(published_blimp(summary.parent), result.paradigm_terms)
    return result
