"""Zero-shot BLiMP by pseudo-log-likelihood: does the encoder prefer the grammatical sentence of each minimal pair?

BLiMP (Warstadt et al. 2020) has 67 paradigms of 1,000 minimal pairs, one file each (``data/PARADIGM.jsonl``): a
grammatical ``sentence_good`` and an ungrammatical ``sentence_bad`` that differ in one place. A masked language model
has no left-to-right probability, so each sentence is scored by its pseudo-log-likelihood (PLL, Salazar et al. 2020):
mask each token in turn and sum the log-probabilities of the true tokens. :func:`load_blimp` reads the pairs,
:func:`pll_scores` scores sentences, :func:`score_pairs` turns the scores into accuracies, :func:`evaluate_blimp`
does all three, and :func:`published_blimp` reads the paper's accuracies of its four language models.

Accuracies are fractions in [0, 1]; the macro accuracy (the mean over paradigms) is the paper's headline figure, and a
linguistic term's or field's is likewise the mean over its paradigms. Importing the package loads no torch: the
scorer's names load on first use, so reports can read the published models' accuracies.
"""

from importlib import import_module
from typing import Any

from bvr.evaluation.blimp.pairs import BlimpPair, load_blimp
from bvr.evaluation.blimp.published import published_blimp, published_summaries
from bvr.evaluation.blimp.scores import CHANCE, score_pairs

__all__ = ["CHANCE", "BlimpPair", "evaluate_blimp", "load_blimp", "pll_scores", "published_blimp",
           "published_summaries", "score_pairs"]


def __getattr__(name: str) -> Any:
    if name in ("evaluate_blimp", "pll_scores"):  # in bvr.evaluation.blimp.pll, which loads torch
        return getattr(import_module("bvr.evaluation.blimp.pll"), name)
    raise AttributeError(f"module 'bvr.evaluation.blimp' has no attribute '{name}'")
