"""Frozen-feature linear probes: BERT's feature-based approach (Devlin et al. 2019, section 5.3).

The encoder is frozen. Each example is encoded once under ``torch.inference_mode()``, in batches of similar length
padded to their longest row, and features are read from its hidden states (:meth:`Encoder.hidden_states`):

- sentence and pair tasks (GLUE), :data:`~bvr.config.SENTENCE_FEATURES`: ``cls``, the last layer at the first
  token ([CLS] or <s>); ``mean``, the last layer averaged over the sequence's real tokens (specials included,
  padding never); ``last4``, that average for each of the last four layers (fewer when the model has fewer),
  concatenated;
- CoNLL-2003, :data:`~bvr.config.TOKEN_FEATURES`, one row per word at its first sub-token (the token fine-tuning
  labels): ``last``, the last layer; ``last4``, the last four layers concatenated.

A linear probe is trained on standardised features (mean 0, variance 1 on its training data), in float64:

- classification and tagging: multinomial logistic regression, mean cross-entropy + ``l2 / 2 * ||W||^2`` (the bias
  is not penalised), minimised full batch by L-BFGS with a strong-Wolfe line search, preconditioned by the
  features' covariance (:func:`fit_logistic`), until the largest gradient component falls below
  :data:`GRAD_TOLERANCE` or the loss changes by less than :data:`CHANGE_TOLERANCE`, at most :data:`MAX_ITERATIONS`
  iterations (the problem is strictly convex, so the start, zeros or the previous L2 strength's solution, changes
  only how many iterations it takes);
- regression (STS-B): ridge regression, mean squared error / 2 + ``l2 / 2 * ||w||^2``, solved exactly from its
  normal equations.

Both are deterministic. ``l2`` is chosen from :data:`L2_GRID` by the task's headline metric on a held-out
:data:`HELD_OUT_FRACTION` of the training subsample (drawn from the subsample with a fixed seed; ties go to the
stronger penalty), then the probe is refit on the whole subsample with it.

Seed ``s`` draws the training subsample (``max_train_examples`` of the train file, :func:`bvr.tasks.data.subset`
with seed ``s``) and nothing else: the encoder is frozen, the dev subset is the same for every model and seed
(seed :data:`EVAL_SUBSET_SEED`), and the fit is deterministic. Features are extracted once, for the union of the
seeds' subsamples, so more seeds cost only probe fits. A cap at least as large as the train file gives every seed
the same data, hence the same score. Scores use bvr's metric functions (:mod:`bvr.tasks.glue_metrics`, and
:func:`bvr.tasks.ner_metric.entity_f1` for entity-level F1) on the task's headline split.

Beside the trivial baseline (the majority class, or the training mean), sentence and pair tasks get a bag-of-words
baseline (:mod:`~bvr.evaluation.probe.bow`): the same probe fitted on word counts of each seed's training examples
and scored on the same examples, identical for every model.
"""

from bvr.evaluation.probe.bow import BagOfWords, bag_of_words, count_matrix, vocabulary, words
from bvr.evaluation.probe.features import (
    BATCH_SIZE,
    LAST_LAYERS,
    FeatureExtractor,
    ProbeSplit,
    extract_sentences,
    extract_words,
    featurise,
)
from bvr.evaluation.probe.fit import GRAD_TOLERANCE, MAX_ITERATIONS, LinearProbe, fit_logistic, fit_probe, fit_ridge
from bvr.evaluation.probe.results import ProbeResult, SeedProbe, describe
from bvr.evaluation.probe.run import (
    Extraction,
    ProbeSample,
    check_features,
    feature_kinds,
    heldout_split,
    probe_task,
    run_probe,
)
from bvr.evaluation.probe.selection import L2_GRID, Selection, baseline_scores, score, train_probe

__all__ = [
    "BATCH_SIZE", "GRAD_TOLERANCE", "L2_GRID", "LAST_LAYERS", "MAX_ITERATIONS", "BagOfWords", "Extraction",
    "FeatureExtractor", "LinearProbe", "ProbeResult", "ProbeSample", "ProbeSplit", "SeedProbe", "Selection",
    "bag_of_words", "baseline_scores", "check_features", "count_matrix", "describe", "extract_sentences",
    "extract_words", "feature_kinds", "featurise", "fit_logistic", "fit_probe", "fit_ridge", "heldout_split",
    "probe_task", "run_probe", "score", "train_probe", "vocabulary", "words",
]
