"""Evaluations of pretrained encoders without fine-tuning, what pretraining alone put in them: BLiMP by
pseudo-log-likelihood (:mod:`bvr.evaluation.blimp`), linear probes on frozen features (:mod:`bvr.evaluation.probe`),
and one of either inside an ablation, cached and logged (:mod:`bvr.evaluation.run`).

The BLiMP names below load on first use, so importing this package loads no torch.
"""

from importlib import import_module
from typing import Any

__all__ = ["BlimpPair", "BlimpResult", "BlimpSummary", "evaluate_blimp", "load_blimp", "pll_scores", "published_blimp",
           "published_summaries", "score_pairs"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module("bvr.evaluation.blimp"), name)
    raise AttributeError(f"module 'bvr.evaluation' has no attribute '{name}'")
