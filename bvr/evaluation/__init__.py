"""Zero-shot evaluation of pretrained encoders, before any fine-tuning.

- :mod:`bvr.evaluation.blimp`: BLiMP (Warstadt et al. 2020), 67 paradigms of English minimal pairs, scored by
  pseudo-log-likelihood (Salazar et al. 2020): :func:`load_blimp`, :func:`pll_scores`, :func:`evaluate_blimp`,
  :func:`published_blimp`.
"""

from bvr.evaluation.blimp import (
    BlimpPair,
    BlimpResult,
    BlimpSummary,
    evaluate_blimp,
    load_blimp,
    pll_scores,
    published_blimp,
    published_summaries,
    score_pairs,
)

__all__ = [
    "BlimpPair",
    "BlimpResult",
    "BlimpSummary",
    "evaluate_blimp",
    "load_blimp",
    "pll_scores",
    "published_blimp",
    "published_summaries",
    "score_pairs",
]
