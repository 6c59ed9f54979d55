"""Frozen-feature linear probes: BERT's feature-based approach (Devlin et al. 2019, section 5.3).

Each example is encoded once by the frozen encoder, in batches of similar length, and features are read from its
hidden states (:mod:`~bvr.evaluation.probe.features`):

- sentence and pair tasks, :data:`~bvr.config.SENTENCE_FEATURES`: ``cls``, the last layer at the first token;
  ``mean``, the last layer averaged over the real tokens (specials included, padding never); ``last4``, that average
  for each of the last four layers (fewer when the model has fewer), concatenated;
- CoNLL-2003, :data:`~bvr.config.TOKEN_FEATURES`, one row per word at its first sub-token: ``last``, the last layer;
  ``last4``, the last four layers concatenated.

The probe, on standardised features in float64, is multinomial logistic regression by preconditioned L-BFGS, or
ridge regression for STS-B (:mod:`~bvr.evaluation.probe.fit`); both are deterministic. Its L2 strength is chosen
from :data:`L2_GRID` on a held-out part of the training subsample, then it is refit on the whole subsample
(:mod:`~bvr.evaluation.probe.selection`).

Seed ``s`` draws the training subsample and nothing else: the encoder is frozen, the dev subset is the same for every
model and seed, and the fit is deterministic. Features are extracted once, for the union of the seeds' subsamples, so
more seeds cost only probe fits. Beside the trivial baseline (the majority class, or the training mean), sentence and
pair tasks get a bag-of-words baseline (:mod:`~bvr.evaluation.probe.bow`), identical for every model.
"""

from bvr.evaluation.probe.bow import bag_of_words, count_matrix, vocabulary, words
from bvr.evaluation.probe.features import FeatureExtractor, ProbeSplit, extract_features, featurise
from bvr.evaluation.probe.fit import GRAD_TOLERANCE, fit_probe
from bvr.evaluation.probe.results import describe
from bvr.evaluation.probe.run import ProbeSample, feature_kinds, heldout_split, probe_task, run_probe
from bvr.evaluation.probe.selection import L2_GRID, train_probe

__all__ = [
    "GRAD_TOLERANCE", "L2_GRID", "FeatureExtractor", "ProbeSample", "ProbeSplit", "bag_of_words", "count_matrix",
    "describe", "extract_features", "feature_kinds", "featurise", "fit_probe", "heldout_split", "probe_task",
    "run_probe", "train_probe", "vocabulary", "words",
]
