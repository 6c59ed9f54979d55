"""Evaluations of pretrained encoders without fine-tuning: what pretraining alone put in them.

- :mod:`bvr.evaluation.blimp`: BLiMP (Warstadt et al. 2020), 67 paradigms of English minimal pairs, scored by
  pseudo-log-likelihood (Salazar et al. 2020): :func:`load_blimp`, :func:`pll_scores`, :func:`evaluate_blimp`,
  :func:`published_blimp`.
- :mod:`bvr.evaluation.probe`: linear probes on frozen features (BERT section 5.3), sentence, pair and token tasks.
- :mod:`bvr.evaluation.run`: one evaluation of one model inside an ablation, cached by content under
  ``outputs/evaluations/`` and logged as a nested MLflow run.

The BLiMP names below load on first use (``bvr.evaluation.evaluate_blimp``), so importing this package loads no
torch.
"""

from importlib import import_module
from typing import Any

__all__ = ["BlimpPair", "BlimpResult", "BlimpSummary", "evaluate_blimp", "load_blimp", "pll_scores", "published_blimp",
           "published_summaries", "score_pairs"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module("bvr.evaluation.blimp"), name)
    raise AttributeError(f"module 'bvr.evaluation' has no attribute '{name}'")
