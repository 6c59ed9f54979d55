"""Evaluations of pretrained encoders without fine-tuning: what pretraining alone put in them.

- :mod:`bvr.evaluation.blimp`: BLiMP (Warstadt et al. 2020), 67 paradigms of English minimal pairs, scored by
  pseudo-log-likelihood (Salazar et al. 2020): :func:`load_blimp`, :func:`pll_scores`, :func:`evaluate_blimp`,
  :func:`published_blimp`.
- :mod:`bvr.evaluation.probe`: linear probes on frozen features (BERT section 5.3), sentence, pair and token tasks.
- :mod:`bvr.evaluation.run`: one evaluation of one model inside an ablation, cached beside the model and logged as a
  nested MLflow run.
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
