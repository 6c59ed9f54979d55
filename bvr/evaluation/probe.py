"""Frozen-feature linear probes: BERT's feature-based approach (Devlin et al. 2019, section 5.3).

The encoder is frozen. Each example is encoded once under ``torch.inference_mode()``, in batches of similar length
padded to their longest row, and features are read from its hidden states (:meth:`Encoder.hidden_states`):

- sentence and pair tasks (GLUE), :data:`SENTENCE_FEATURES`: ``cls``, the last layer at the first token ([CLS] or
  <s>); ``mean``, the last layer averaged over the sequence's real tokens (specials included, padding never);
  ``last4``, that average for each of the last four layers (fewer when the model has fewer), concatenated;
- CoNLL-2003, :data:`TOKEN_FEATURES`, one row per word at its first sub-token (the token fine-tuning labels):
  ``last``, the last layer; ``last4``, the last four layers concatenated.

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
the same data, hence the same score. Scores use bvr's metric functions (:mod:`bvr.tasks.metrics`, and
:func:`bvr.tasks.ner_metric.entity_f1` for entity-level F1) on the task's headline split.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from rich.progress import track

from bvr.config import DataSettings
from bvr.display import duration
from bvr.errors import BvrError
from bvr.model.encoder import Encoder, init_weights
from bvr.pretrained import Pretrained
from bvr.tasks.batching import collate
from bvr.tasks.data import subset
from bvr.tasks.iob import OUTSIDE
from bvr.tasks.kinds import KINDS
from bvr.tasks.metrics import PLAIN_METRICS, UndefinedMetricWarning, main_score, majority_prediction
from bvr.tasks.ner_metric import entity_f1
from bvr.tasks.readers import read_task
from bvr.tasks.registry import TaskSpec, get_task
from bvr.tokenization import vocab_info

SENTENCE_FEATURES: tuple[str, ...] = ("cls", "mean", "last4")
"""Feature kinds of sentence and pair tasks."""
TOKEN_FEATURES: tuple[str, ...] = ("last", "last4")
"""Feature kinds of tagging tasks (one row per word, at its first sub-token)."""
LAST_LAYERS = 4
"""Layers concatenated by ``last4`` (BERT's best feature-based choice in Table 7 concatenates the last four)."""
PROBE_KINDS: tuple[str, ...] = ("classification", "regression", "tagging")
"""Task kinds a probe can be trained on (span tasks predict positions, not labels)."""

L2_GRID: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
"""L2 strengths tried, on standardised features with a mean (not summed) loss."""
HELD_OUT_FRACTION = 0.1
"""Share of the training subsample held out to choose the L2 strength (at least one example)."""
HELD_OUT_SEED = 0
"""Seed of the held-out draw from the subsample: the same for every probe seed, which so changes only the subsample."""
EVAL_SUBSET_SEED = 0
"""Seed of the dev cap (``max_eval_examples``): the same dev examples for every model and seed."""
SET_ASIDE_SEED = 0
"""Seed of the training examples set aside as a test set (``heldout_examples``): the same for every model and seed
(not :data:`HELD_OUT_SEED`, which draws the part of a subsample that chooses the L2 strength)."""
MAX_ITERATIONS = 500
"""Most L-BFGS iterations of one logistic fit."""
GRAD_TOLERANCE = 1e-5
"""L-BFGS stops when the largest component of the preconditioned gradient is below this. There the Hessian is close
to the identity, so the objective is then within about ``dim * classes * tol**2 / 2`` of its minimum; on CoNLL-2003
the held-out F1 of every grid point agrees to four decimals with that of a 1e-6 tolerance, at 60% of the time."""
CHANGE_TOLERANCE = 1e-12
"""L-BFGS also stops when the loss or the step changes by less than this."""
HISTORY_SIZE = 20
"""L-BFGS curvature pairs kept."""
CURVATURE = 0.25
"""Log-loss curvature the preconditioner assumes per unit of feature variance: ``p (1 - p)`` at its largest."""
BATCH_SIZE = 64
"""Sequences per encoder batch during feature extraction."""
SCRATCH_SEED = 0
"""Seed of the random weights of ``from_scratch`` (one encoder for every probe seed)."""


# ---------------------------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------------------------


def probe_task(task: str) -> TaskSpec:
    """The spec of ``task``, which must be a sentence, pair or tagging task.

    Raises:
        BvrError: the task is unknown or a span task, naming the ``task`` option.
    """
    try:
        spec = get_task(task)
    except BvrError as err:
        raise BvrError(err.message, where="task", hint=err.hint) from None
    if spec.kind not in PROBE_KINDS:
        raise BvrError(f"{spec.name} is a {spec.kind} task; probes need a label per example or per word",
                       where="task", hint="probe a GLUE task or conll2003")
    return spec


def feature_kinds(spec: TaskSpec) -> tuple[str, ...]:
    """The feature kinds a task supports: :data:`TOKEN_FEATURES` for tagging, else :data:`SENTENCE_FEATURES`."""
    return TOKEN_FEATURES if spec.kind == "tagging" else SENTENCE_FEATURES


def check_features(spec: TaskSpec, features: Sequence[str] | None) -> tuple[str, ...]:
    """The requested feature kinds, in the task's order, duplicates dropped; None means all of them.

    Raises:
        BvrError: a kind is unknown for this task, or none is given, naming the ``features`` option.
    """
    known = feature_kinds(spec)
    if features is None:
        return known
    unknown = [kind for kind in features if kind not in known]
    if unknown or not features:
        what = f"unknown feature kind {', '.join(map(repr, unknown))}" if unknown else "no feature kind given"
        raise BvrError(f"{what} for {spec.name}", where="features", hint=f"choose from {', '.join(known)}")
    return tuple(kind for kind in known if kind in features)


def _check_options(seeds: Sequence[int], max_train: int | None, max_eval: int | None,
                   heldout: int | None = None) -> list[int]:
    if not seeds:
        raise BvrError("give at least one seed", where="seeds")
    if len(set(seeds)) != len(seeds):
        raise BvrError(f"seeds repeat: {list(seeds)}", where="seeds")
    # Choosing the L2 strength needs a held-out example and at least one to train on.
    if max_train is not None and max_train < 2:
        raise BvrError(f"must be at least 2, got {max_train}", where="max_train_examples")
    if max_eval is not None and max_eval < 1:
        raise BvrError(f"must be at least 1, got {max_eval}", where="max_eval_examples")
    if heldout is not None and heldout < 1:
        raise BvrError(f"must be at least 1, got {heldout}", where="heldout_examples")
    return list(seeds)


# ---------------------------------------------------------------------------------------------------------------
# Features
# ---------------------------------------------------------------------------------------------------------------


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Average (batch, seq, hidden) over the positions where ``mask`` (batch, seq) is 1: (batch, hidden)."""
    weights = mask.to(hidden.dtype).unsqueeze(-1)  # (batch, seq, 1)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1)


def sentence_vectors(
    layers: Sequence[torch.Tensor], mask: torch.Tensor, kinds: Sequence[str]
) -> dict[str, torch.Tensor]:
    """Sentence features of one batch.

    Args:
        layers: each layer's output (batch, seq, hidden), first to last (embeddings excluded).
        mask: (batch, seq), 1 at real tokens.
        kinds: among :data:`SENTENCE_FEATURES`.

    Returns:
        Kind -> (batch, dim): ``hidden`` for cls and mean, ``hidden * min(4, layers)`` for last4.
    """
    builders = {
        "cls": lambda: layers[-1][:, 0],
        "mean": lambda: mean_pool(layers[-1], mask),
        "last4": lambda: torch.cat([mean_pool(h, mask) for h in layers[-LAST_LAYERS:]], dim=-1),
    }
    return {kind: builders[kind]() for kind in kinds}


def word_vectors(
    layers: Sequence[torch.Tensor], rows: torch.Tensor, cols: torch.Tensor, kinds: Sequence[str]
) -> dict[str, torch.Tensor]:
    """Features at the tokens (rows, cols), each (n,): kind -> (n, dim), for kinds among :data:`TOKEN_FEATURES`."""
    builders = {
        "last": lambda: layers[-1][rows, cols],
        "last4": lambda: torch.cat([h[rows, cols] for h in layers[-LAST_LAYERS:]], dim=-1),
    }
    return {kind: builders[kind]() for kind in kinds}


def first_subwords(word_ids: Sequence[int | None]) -> list[tuple[int, int]]:
    """(position, word) of each word's first sub-token, in order; specials (None) are skipped.

    >>> first_subwords([None, 0, 0, 1, 2, 2, None])
    [(1, 0), (3, 1), (4, 2)]
    """
    seen: set[int] = set()
    firsts = []
    for position, word in enumerate(word_ids):
        if word is not None and word >= 0 and word not in seen:
            seen.add(word)
            firsts.append((position, word))
    return firsts


def feature_dim(config: Any, kind: str) -> int:
    """Width of a feature kind for an encoder config."""
    return config.hidden_size * (min(LAST_LAYERS, config.num_layers) if kind == "last4" else 1)


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first, so padding stays small.

    >>> length_batches([3, 9, 1, 9, 4], 2)
    [[1, 3], [4, 0], [2]]
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


@dataclass
class FeatureExtractor:
    """A frozen encoder with what feature extraction needs to run it."""

    encoder: Encoder
    pad_id: int
    device: torch.device
    batch_size: int
    progress: bool

    @classmethod
    def of(cls, encoder: Encoder, pretrained: Pretrained, batch_size: int, progress: bool) -> FeatureExtractor:
        """An extractor running ``encoder`` where its weights are, padding with ``pretrained``'s tokenizer's pad id."""
        pad_id = vocab_info(pretrained.tokenizer, pretrained.family).pad_id
        return cls(encoder, pad_id, next(encoder.parameters()).device, batch_size, progress)

    def layers(self, encoded: Mapping[str, list], batch: list[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Every layer's output for a batch of rows (embeddings excluded), and its (batch, seq) mask."""
        rows = [{"input_ids": encoded["input_ids"][i], "token_type_ids": encoded["token_type_ids"][i]} for i in batch]
        tensors = {key: value.to(self.device) for key, value in collate(rows, self.pad_id).items()}
        states = self.encoder.hidden_states(tensors["input_ids"], tensors["attention_mask"], tensors["token_type_ids"])
        return states[1:], tensors["attention_mask"]

    def batches(self, encoded: Mapping[str, list], description: str) -> Any:
        batches = length_batches([len(ids) for ids in encoded["input_ids"]], self.batch_size)
        return track(batches, description=description, disable=not self.progress)


def extract_sentences(
    extractor: FeatureExtractor, encoded: Mapping[str, list], kinds: Sequence[str], description: str = "features"
) -> dict[str, torch.Tensor]:
    """One feature row per encoded example, in example order: kind -> (examples, dim), float32 on the CPU."""
    config = extractor.encoder.config
    n = len(encoded["input_ids"])
    out = {kind: torch.empty(n, feature_dim(config, kind)) for kind in kinds}
    for batch in extractor.batches(encoded, description):
        with torch.inference_mode():
            layers, mask = extractor.layers(encoded, batch)
            vectors = sentence_vectors(layers, mask, kinds)
        index = torch.tensor(batch)
        for kind in kinds:
            out[kind][index] = vectors[kind].float().cpu()
    return out


def extract_words(
    extractor: FeatureExtractor, encoded: Mapping[str, list], firsts: Sequence[Sequence[tuple[int, int]]],
    kinds: Sequence[str], description: str = "features",
) -> dict[str, torch.Tensor]:
    """One row per word that kept a token, sentence after sentence: kind -> (words, dim), float32 on the CPU.

    Args:
        extractor: the frozen encoder.
        encoded: :func:`~bvr.tasks.ner.encode_ner` output.
        firsts: per sentence, :func:`first_subwords` of its ``word_ids``.
        kinds: among :data:`TOKEN_FEATURES`.
        description: the progress bar's label.
    """
    config = extractor.encoder.config
    offsets = np.cumsum([0, *map(len, firsts)]).tolist()
    out = {kind: torch.empty(offsets[-1], feature_dim(config, kind)) for kind in kinds}
    for batch in extractor.batches(encoded, description):
        rows = torch.tensor([r for r, i in enumerate(batch) for _ in firsts[i]], dtype=torch.long)
        cols = torch.tensor([position for i in batch for position, _ in firsts[i]], dtype=torch.long)
        with torch.inference_mode():
            layers, _ = extractor.layers(encoded, batch)
            vectors = word_vectors(layers, rows.to(extractor.device), cols.to(extractor.device), kinds)
        index = torch.tensor([j for i in batch for j in range(offsets[i], offsets[i + 1])], dtype=torch.long)
        for kind in kinds:
            out[kind][index] = vectors[kind].float().cpu()
    return out


# ---------------------------------------------------------------------------------------------------------------
# A split's features
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class ProbeSplit:
    """One split as features: rows, their labels, and which rows belong to which example.

    Attributes:
        examples: the examples (:class:`~bvr.tasks.readers.common.Example` or
            :class:`~bvr.tasks.readers.conll.Sentence`).
        features: kind -> (rows, dim), float32.
        labels: (rows,) class ids (int64) or scores (float64).
        offsets: example ``i``'s rows are ``offsets[i]:offsets[i + 1]`` (one row per example for sentence tasks).
        words: tagging only: per example, the word each of its rows stands for (words cut off by truncation, or
            turned into no token, have no row and are scored as predicted O).
    """

    examples: list[Any]
    features: dict[str, torch.Tensor]
    labels: torch.Tensor
    offsets: list[int]
    words: list[list[int]] | None = None

    def rows(self, picked: Sequence[int]) -> torch.Tensor:
        """(rows,) indices of the rows of the examples ``picked``, in that order."""
        parts = [torch.arange(self.offsets[i], self.offsets[i + 1]) for i in picked]
        return torch.cat(parts) if parts else torch.empty(0, dtype=torch.long)


def featurise(
    spec: TaskSpec, examples: list[Any], pretrained: Pretrained, extractor: FeatureExtractor, kinds: Sequence[str],
    max_length: int, description: str,
) -> ProbeSplit:
    """Encode ``examples`` with the task's own encoder (:data:`bvr.tasks.kinds.KINDS`) and extract features."""
    settings = DataSettings(max_length=max_length)
    encoded = KINDS[spec.kind].encode(spec, pretrained.tokenizer, pretrained.family, examples, settings)
    if spec.kind != "tagging":
        features = extract_sentences(extractor, encoded, kinds, description)
        dtype = torch.float64 if spec.kind == "regression" else torch.long
        labels = torch.tensor([example.label for example in examples], dtype=dtype)
        return ProbeSplit(examples, features, labels, list(range(len(examples) + 1)))
    firsts = [first_subwords(word_ids) for word_ids in encoded["word_ids"]]
    features = extract_words(extractor, encoded, firsts, kinds, description)
    labels = torch.tensor([encoded["labels"][i][position] for i, first in enumerate(firsts) for position, _ in first],
                          dtype=torch.long)
    offsets = np.cumsum([0, *map(len, firsts)]).tolist()
    return ProbeSplit(examples, features, labels, offsets, [[word for _, word in first] for first in firsts])


# ---------------------------------------------------------------------------------------------------------------
# Linear probes
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class LinearProbe:
    """A fitted probe: standardisation with its training data's statistics, then a linear map, in float64.

    Attributes:
        mean: (dim,) feature means of the training rows.
        scale: (dim,) their standard deviations (1 where a feature is constant).
        weight: (dim, outputs): classes, or 1 for regression.
        bias: (outputs,).
        l2: the L2 strength it was fitted with.
        iterations: L-BFGS iterations (0 for ridge's closed form).
        converged: stopped by a tolerance rather than by :data:`MAX_ITERATIONS`.
    """

    mean: torch.Tensor
    scale: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor
    l2: float
    iterations: int = 0
    converged: bool = True

    def standardise(self, x: torch.Tensor) -> torch.Tensor:
        return (x.double() - self.mean) / self.scale

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """(rows, dim) features -> (rows, outputs) logits or predicted scores."""
        return self.standardise(x) @ self.weight + self.bias

    def predict(self, x: torch.Tensor, regression: bool) -> torch.Tensor:
        """Predicted class ids (int64), or scores (float64) when ``regression``: (rows,)."""
        scores = self.scores(x)
        return scores[:, 0] if regression else scores.argmax(dim=-1)


def standardisation(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (population) standard deviation of each column of (rows, dim), float64; a constant column gets 1."""
    x = x.double()
    mean = x.mean(dim=0)
    scale = x.std(dim=0, correction=0)
    return mean, torch.where(scale > 1e-12, scale, torch.ones_like(scale))


@dataclass
class Standardised:
    """Training features standardised, with the eigenbasis of their covariance (L-BFGS's preconditioner).

    Attributes:
        z: (rows, dim) standardised features, float64.
        mean: (dim,) the means taken off.
        scale: (dim,) the standard deviations divided by.
        eigenvalues: (dim,) of ``z^T z / rows``, ascending.
        eigenvectors: (dim, dim), one per column.
    """

    z: torch.Tensor
    mean: torch.Tensor
    scale: torch.Tensor
    eigenvalues: torch.Tensor
    eigenvectors: torch.Tensor

    @classmethod
    def of(cls, x: torch.Tensor) -> Standardised:
        """Standardise (rows, dim) features and diagonalise their covariance (once for every L2 strength)."""
        mean, scale = standardisation(x)
        z = (x.double() - mean) / scale
        eigenvalues, eigenvectors = torch.linalg.eigh(z.T @ z / len(z))
        return cls(z, mean, scale, eigenvalues.clamp(min=0.0), eigenvectors)


def fit_logistic(
    data: Standardised, y: torch.Tensor, num_classes: int, l2: float,
    start: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, int, bool]:
    """Multinomial logistic regression by full-batch L-BFGS: mean cross-entropy + ``l2 / 2 * ||W||^2``.

    Frozen features are strongly correlated (covariance condition numbers of 1e6 to 1e8 are usual), which leaves
    plain L-BFGS hundreds of iterations from the optimum at weak penalties. It therefore works in preconditioned
    coordinates ``C``, ``W^T = (C * p) V^T`` with ``V`` the covariance's eigenvectors and
    ``p = (CURVATURE * eigenvalue + l2) ** -0.5``, where the objective's Hessian is close to the identity; the
    optimum is the same (the problem is strictly convex), reached in a few to a few dozen iterations.
    :data:`GRAD_TOLERANCE` applies to the gradient in these coordinates. The gradient is written out: ``(P - Y)^T Z``
    reads ``Z`` row by row, where autograd's ``Z^T (P - Y)`` runs several times slower on a CPU.

    Args:
        data: standardised features and their eigenbasis.
        y: (rows,) class ids.
        num_classes: outputs.
        l2: penalty on the weights (the bias is free).
        start: weight (dim, classes) and bias (classes,) to start from (a neighbouring L2 strength's solution);
            None: zeros.

    Returns:
        weight (dim, classes), bias (classes,), the iterations run, and whether a tolerance (not
        :data:`MAX_ITERATIONS`) stopped them.
    """
    z, basis, n = data.z, data.eigenvectors, len(data.z)
    p = (CURVATURE * data.eigenvalues + l2).rsqrt()  # (dim,)
    # (classes, dim): the gradient (P - Y)^T Z V * p is then contiguous, as L-BFGS needs.
    coords = (start[0].T @ basis) / p if start is not None else torch.zeros(num_classes, z.shape[1], dtype=z.dtype)
    bias = start[1].clone() if start is not None else torch.zeros(num_classes, dtype=z.dtype)
    targets = F.one_hot(y, num_classes).to(z.dtype)  # (rows, classes)
    optimizer = torch.optim.LBFGS([coords, bias], lr=1.0, max_iter=MAX_ITERATIONS, tolerance_grad=GRAD_TOLERANCE,
                                  tolerance_change=CHANGE_TOLERANCE, history_size=HISTORY_SIZE,
                                  line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        weight = (coords * p) @ basis.T  # (classes, dim)
        log_probs = torch.addmm(bias, z, weight.T).log_softmax(dim=-1)  # (rows, classes)
        loss = -(log_probs * targets).sum() / n + 0.5 * l2 * weight.pow(2).sum()
        residual = (log_probs.exp() - targets) / n  # (rows, classes): d loss / d logits
        coords.grad = ((residual.T @ z + l2 * weight) @ basis) * p
        bias.grad = residual.sum(dim=0)
        return loss

    optimizer.step(closure)
    iterations = int(optimizer.state[coords]["n_iter"])
    return ((coords * p) @ basis.T).T, bias, iterations, iterations < MAX_ITERATIONS


def fit_ridge(z: torch.Tensor, y: torch.Tensor, l2: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Ridge regression, exactly: minimise mean squared error / 2 + ``l2 / 2 * ||w||^2`` (the bias is free).

    The bias absorbs the means, so ``w`` solves the normal equations of the centred data,
    ``(Zc^T Zc / n + l2 I) w = Zc^T (y - mean y) / n``, and ``b = mean y - mean z . w``.

    Returns:
        weight (dim, 1) and bias (1,), float64.
    """
    z, y = z.double(), y.double()
    z_mean, y_mean = z.mean(dim=0), y.mean()
    centred = z - z_mean
    n, dim = z.shape
    gram = centred.T @ centred / n + l2 * torch.eye(dim, dtype=torch.float64)
    weight = torch.linalg.solve(gram, centred.T @ (y - y_mean) / n)  # (dim,)
    return weight[:, None], (y_mean - z_mean @ weight)[None]


def fit_probe(
    x: torch.Tensor | Standardised, y: torch.Tensor, spec: TaskSpec, l2: float, start: LinearProbe | None = None
) -> LinearProbe:
    """Fit the task's probe with penalty ``l2`` on (rows, dim) features, standardised here unless they already are.

    ``start`` (logistic probes only) warm-starts L-BFGS from another probe's weights: the same optimum, fewer steps.
    """
    data = x if isinstance(x, Standardised) else Standardised.of(x)
    if spec.kind == "regression":
        weight, bias = fit_ridge(data.z, y, l2)
        return LinearProbe(data.mean, data.scale, weight, bias, l2)
    initial = (start.weight, start.bias) if start is not None else None
    weight, bias, iterations, converged = fit_logistic(data, y, spec.num_labels, l2, initial)
    return LinearProbe(data.mean, data.scale, weight, bias, l2, iterations, converged)


def held_out_split(count: int) -> tuple[list[int], list[int]]:
    """Positions ``0..count-1`` split into (fit, held out): :data:`HELD_OUT_FRACTION` held out, at least one.

    >>> fit, held = held_out_split(20)
    >>> len(fit), len(held), sorted(fit + held) == list(range(20))
    (18, 2, True)
    """
    if count < 2:
        raise BvrError(f"choosing the L2 strength needs at least 2 training examples, got {count}",
                       where="max_train_examples")
    size = max(1, round(HELD_OUT_FRACTION * count))
    held = sorted(random.Random(HELD_OUT_SEED).sample(range(count), size))
    chosen = set(held)
    return [i for i in range(count) if i not in chosen], held


@dataclass
class Selection:
    """The L2 strength chosen on held-out data and the probe refitted with it on the whole subsample.

    Attributes:
        probe: the refitted probe.
        held_out: per L2 strength tried, the held-out headline score.
    """

    probe: LinearProbe
    held_out: dict[float, float]


def train_probe(spec: TaskSpec, split: ProbeSplit, picked: Sequence[int], kind: str) -> Selection:
    """Choose the L2 strength on a held-out part of the examples ``picked``, then refit on all of them.

    The grid is walked from the strongest penalty to the weakest, each fit starting from the previous solution,
    and the refit starts from the chosen strength's; ties in the held-out headline score go to the stronger penalty
    (the simpler model).
    """
    fit, held = held_out_split(len(picked))
    fit_examples, held_examples = [picked[i] for i in fit], [picked[i] for i in held]
    x = split.features[kind]
    fit_rows, held_rows = split.rows(fit_examples), split.rows(held_examples)
    fit_data = Standardised.of(x[fit_rows])
    held_out, probes, previous = {}, {}, None
    for l2 in sorted(L2_GRID, reverse=True):
        probes[l2] = previous = fit_probe(fit_data, split.labels[fit_rows], spec, l2, previous)
        predictions = previous.predict(x[held_rows], spec.kind == "regression")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UndefinedMetricWarning)  # a tiny held-out part may be constant
            held_out[l2] = main_score(spec, score(spec, split, held_examples, predictions))
    best = max(L2_GRID, key=lambda l2: (held_out[l2], l2))
    rows = split.rows(picked)
    return Selection(fit_probe(x[rows], split.labels[rows], spec, best, probes[best]), dict(sorted(held_out.items())))


# ---------------------------------------------------------------------------------------------------------------
# Scores
# ---------------------------------------------------------------------------------------------------------------


def score(spec: TaskSpec, split: ProbeSplit, picked: Sequence[int], predictions: torch.Tensor) -> dict[str, float]:
    """Every metric of the task, and its headline, for predictions on the rows of the examples ``picked``.

    Sentence tasks: the task's metrics (:data:`bvr.tasks.metrics.PLAIN_METRICS`). Tagging: entity-level precision,
    recall and F1 (:func:`bvr.tasks.ner_metric.entity_f1`) and ``accuracy`` over words; a word without a row is
    predicted O.
    """
    if spec.kind == "tagging":
        return _tagging_scores(spec, split, picked, predictions.tolist())
    targets = [split.examples[i].label for i in picked]
    values = {name: PLAIN_METRICS[name](predictions.tolist(), targets) for name in spec.metrics}
    values[spec.main_metric] = main_score(spec, values)
    return values


def _tagging_scores(spec: TaskSpec, split: ProbeSplit, picked: Sequence[int], predictions: list[int]) -> dict:
    names = spec.label_names or ()
    gold = [list(split.examples[i].tags) for i in picked]
    predicted = [[OUTSIDE] * len(tags) for tags in gold]
    row = 0
    for sentence, i in zip(predicted, picked, strict=True):
        for word in split.words[i]:
            sentence[word] = names[predictions[row]]
            row += 1
    entities = entity_f1(gold, predicted)
    words = [(g, p) for tags, guesses in zip(gold, predicted, strict=True) for g, p in zip(tags, guesses, strict=True)]
    values = {name: float(entities[name]) for name in ("f1", "precision", "recall")}
    values["accuracy"] = sum(g == p for g, p in words) / len(words)
    return values


def baseline_scores(spec: TaskSpec, train: ProbeSplit, picked: Sequence[int], dev: ProbeSplit) -> dict[str, float]:
    """The trivial baseline on dev: the majority training class (tag, for tagging) or the mean score everywhere."""
    guess = majority_prediction(spec, train.labels[train.rows(picked)].tolist())
    dtype = torch.float64 if spec.kind == "regression" else torch.long
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)  # expected: the prediction is constant
        return score(spec, dev, range(len(dev.examples)), torch.full((len(dev.labels),), guess, dtype=dtype))


# ---------------------------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class SeedProbe:
    """One probe: one feature kind trained on one seed's subsample.

    Attributes:
        scores: dev metric -> value, the headline (``main_metric``) included.
        l2: the L2 strength chosen on the held-out part.
        heldout_scores: metric -> value on the held-out training examples (empty unless ``heldout_examples``).
        held_out: per L2 strength tried, the held-out headline score.
        iterations: L-BFGS iterations of the final fit (0 for ridge).
        converged: the final fit stopped by a tolerance.
    """

    scores: dict[str, float]
    l2: float
    held_out: dict[float, float]
    iterations: int
    converged: bool
    heldout_scores: dict[str, float] = field(default_factory=dict)


@dataclass
class ProbeResult:
    """Probes of every feature kind over every seed, with the trivial baseline.

    Attributes:
        task: the task name.
        checkpoint: the model folder probed.
        from_scratch: the encoder was randomly initialised (the no-pretraining control).
        split: the evaluation split ('dev', or 'dev_matched' for MNLI).
        main_metric: the headline metric's name ('accuracy', 'mcc', 'accuracy_f1', ...).
        features: the feature kinds probed.
        seeds: the seeds, in the order asked.
        probes: feature kind -> seed -> :class:`SeedProbe`.
        baseline: seed -> the trivial baseline's dev scores (its majority comes from the seed's subsample).
        subsamples: seed -> indices (0-based, file order) of the training examples it drew.
        train_size: examples (sentences) in the training file.
        eval_size: dev examples probed; eval_total: dev examples in the file.
        heldout_size: training examples set aside, never trained on, and scored as a second test set (0: none).
        heldout_baseline: seed -> the trivial baseline's scores on them.
        seconds: 'extract' (features), 'probe' (every fit) and 'total'.
        reports: what was read, one line per file, then the caps.
    """

    task: str
    checkpoint: str
    from_scratch: bool
    split: str
    main_metric: str
    features: tuple[str, ...]
    seeds: list[int]
    probes: dict[str, dict[int, SeedProbe]]
    baseline: dict[int, dict[str, float]]
    subsamples: dict[int, list[int]]
    train_size: int
    eval_size: int
    eval_total: int
    heldout_size: int = 0
    heldout_baseline: dict[int, dict[str, float]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    reports: list[str] = field(default_factory=list)

    def metrics(self, seed: int) -> dict[str, float]:
        """One seed's scores, flat: ``probe/TASK/FEATURE/METRIC`` and ``probe/TASK/baseline/METRIC`` on dev, and
        ``probe/TASK/FEATURE/heldout/METRIC`` (and the baseline's) on the held-out training examples, if any."""
        if seed not in self.baseline:
            raise BvrError(f"no probe with seed {seed}", where="seed", hint=f"seeds run: {self.seeds}")
        flat = {f"probe/{self.task}/{kind}/{name}": value
                for kind in self.features for name, value in self.probes[kind][seed].scores.items()}
        flat.update({f"probe/{self.task}/baseline/{name}": value for name, value in self.baseline[seed].items()})
        flat.update({f"probe/{self.task}/{kind}/heldout/{name}": value
                     for kind in self.features for name, value in self.probes[kind][seed].heldout_scores.items()})
        flat.update({f"probe/{self.task}/baseline/heldout/{name}": value
                     for name, value in self.heldout_baseline.get(seed, {}).items()})
        return flat

    def headline(self, kind: str) -> list[float]:
        """The headline dev score of feature kind ``kind``, per seed in order."""
        return [self.probes[kind][seed].scores[self.main_metric] for seed in self.seeds]

    def median(self, kind: str) -> float:
        """Median over seeds of the headline score of ``kind``."""
        return float(np.median(self.headline(kind)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: everything but the subsample indices (their sizes instead), and every seed's flat metrics."""
        data = dataclasses.asdict(self)
        data["subsamples"] = {seed: len(indices) for seed, indices in self.subsamples.items()}
        data["median"] = {kind: self.median(kind) for kind in self.features}
        data["metrics"] = {seed: self.metrics(seed) for seed in self.seeds}
        return data


# ---------------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------------


def frozen_encoder(pretrained: Pretrained, from_scratch: bool, device: torch.device) -> Encoder:
    """The checkpoint's encoder in eval mode on ``device`` (a copy if it must move), or a random one of its shape."""
    encoder = pretrained.model.encoder
    if from_scratch:
        with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
            torch.manual_seed(SCRATCH_SEED)
            encoder = Encoder(encoder.config)
            encoder.apply(lambda module: init_weights(module, encoder.config.initializer_range))
    elif next(encoder.parameters()).device != device:
        encoder = copy.deepcopy(encoder)
    return encoder.to(device).eval()


def _device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _read(spec: TaskSpec, data_dir: Path | None) -> tuple[list[Any], list[Any], list[str]]:
    """The training examples and the headline split's, with the readers' report lines."""
    read = read_task(spec, data_dir, DataSettings())
    train, train_line = read.splits[spec.splits[0].name]
    dev, dev_line = read.splits[spec.headline_split]
    return train, dev, list(dict.fromkeys([train_line, dev_line]))


def run_probe(
    pretrained: Pretrained,
    task: str,
    *,
    data_dir: Path | None,
    seeds: Sequence[int] = (0,),
    features: Sequence[str] | None = None,
    max_train_examples: int | None = None,
    max_eval_examples: int | None = None,
    heldout_examples: int | None = None,
    from_scratch: bool = False,
    max_length: int | None = None,
    batch_size: int = BATCH_SIZE,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> ProbeResult:
    """Train linear probes on frozen features of ``pretrained`` and score them on the task's dev split.

    Args:
        pretrained: the model and tokenizer (:func:`bvr.pretrained.load_pretrained`).
        task: a GLUE task or conll2003.
        data_dir: the data folder (``glue/``, ``conll2003/``); None reads the Hugging Face hub.
        seeds: each draws its own training subsample; nothing else depends on it.
        features: feature kinds (:data:`SENTENCE_FEATURES`, or :data:`TOKEN_FEATURES` for tagging); None: all.
        max_train_examples: examples (sentences, for tagging) each seed draws from the train file; None: all.
        max_eval_examples: dev examples scored, a fixed subset for every model and seed; None: all.
        heldout_examples: also set this many training examples aside (a fixed draw, the same for every model and
            seed), draw the seeds' subsamples from the rest, and score every probe on them too. A second test set
            from the same task, larger than a small dev split (SST-2's has 872 sentences, so one model's accuracy
            has a sampling error of about 1.7 points): comparisons between encoders see smaller differences.
        from_scratch: probe a randomly initialised encoder of the checkpoint's shape (seed :data:`SCRATCH_SEED`).
        max_length: tokens per sequence, specials included; None: the task's fine-tuning length (128), capped by
            the model's positions.
        batch_size: sequences per encoder batch.
        device: where the encoder runs; None: CUDA when available, else the CPU (probes always fit on the CPU).
        progress: show a progress bar over feature extraction.

    Returns:
        Every probe's dev scores, the trivial baseline, and timings.

    Raises:
        BvrError: an unknown or unsupported task, an unknown feature kind, bad seeds or caps, or unreadable data.
    """
    start = time.perf_counter()
    spec = probe_task(task)
    kinds = check_features(spec, features)
    seeds = _check_options(seeds, max_train_examples, max_eval_examples, heldout_examples)
    train_examples, dev_examples, reports = _read(spec, data_dir)
    held, pool = heldout_split(len(train_examples), heldout_examples, max_train_examples)
    picks = {seed: [pool[i] for i in subset(range(len(pool)), max_train_examples, seed)] for seed in seeds}
    union = sorted(set().union(*picks.values()))
    dev = subset(dev_examples, max_eval_examples, EVAL_SUBSET_SEED)
    reports += _cap_notes(spec, len(pool), max_train_examples, len(dev), len(dev_examples))
    if held:
        reports.append(f"held out: {len(held):,} of {len(train_examples):,} training examples (seed {SET_ASIDE_SEED}),"
                       " never trained on, scored as a second test set")
    extractor = FeatureExtractor.of(frozen_encoder(pretrained, from_scratch, _device(device)), pretrained, batch_size,
                                    progress)
    default_length = spec.finetune.get("max_length", DataSettings.max_length)  # the task's fine-tuning length
    length = min(max_length or default_length, extractor.encoder.config.max_tokens)
    train = featurise(spec, [train_examples[i] for i in union], pretrained, extractor, kinds, length,
                      f"{spec.name} train features")
    dev_split = featurise(spec, dev, pretrained, extractor, kinds, length,
                          f"{spec.name} {spec.headline_split} features")
    held_split = featurise(spec, [train_examples[i] for i in held], pretrained, extractor, kinds, length,
                           f"{spec.name} held-out features") if held else None
    extracted = time.perf_counter()
    position = {index: pos for pos, index in enumerate(union)}
    probes: dict[str, dict[int, SeedProbe]] = {kind: {} for kind in kinds}
    baseline, held_baseline = {}, {}
    for seed in seeds:
        picked = [position[i] for i in picks[seed]]
        baseline[seed] = baseline_scores(spec, train, picked, dev_split)
        if held_split is not None:
            held_baseline[seed] = baseline_scores(spec, train, picked, held_split)
        for kind in kinds:
            probes[kind][seed] = _probe_one(spec, train, picked, dev_split, kind, held_split)
    end = time.perf_counter()
    return ProbeResult(spec.name, str(pretrained.folder), from_scratch, spec.headline_split, spec.main_metric, kinds,
                       seeds, probes, baseline, picks, len(train_examples), len(dev), len(dev_examples),
                       len(held), held_baseline,
                       {"extract": extracted - start, "probe": end - extracted, "total": end - start}, reports)


def _probe_one(spec: TaskSpec, train: ProbeSplit, picked: list[int], dev: ProbeSplit, kind: str,
               held: ProbeSplit | None = None) -> SeedProbe:
    selection = train_probe(spec, train, picked, kind)
    probe = selection.probe

    def evaluate(split: ProbeSplit) -> dict[str, float]:
        predictions = probe.predict(split.features[kind], spec.kind == "regression")
        return score(spec, split, range(len(split.examples)), predictions)

    return SeedProbe(evaluate(dev), probe.l2, selection.held_out, probe.iterations, probe.converged,
                     evaluate(held) if held is not None else {})


def heldout_split(count: int, heldout: int | None, max_train: int | None) -> tuple[list[int], list[int]]:
    """Training-file positions ``0..count-1`` split into (held out, pool the seeds draw from), both in file order.

    The held-out draw (seed :data:`SET_ASIDE_SEED`) depends only on ``count`` and ``heldout``, so every model and seed
    is scored on the same examples.

    >>> held, pool = heldout_split(10, 3, None)
    >>> len(held), len(pool), sorted(held + pool) == list(range(10))
    (3, 7, True)
    >>> heldout_split(4, None, None)
    ([], [0, 1, 2, 3])

    Raises:
        BvrError: fewer than 2 training examples would be left to train on, naming ``heldout_examples``.
    """
    if heldout is None:
        return [], list(range(count))
    if count - heldout < 2:
        raise BvrError(f"holding out {heldout:,} of {count:,} training examples leaves fewer than 2 to train on",
                       where="heldout_examples", hint=f"hold out at most {max(count - 2, 0):,}")
    held = subset(range(count), heldout, SET_ASIDE_SEED)
    chosen = set(held)
    pool = [i for i in range(count) if i not in chosen]
    if max_train is not None and max_train > len(pool):
        warnings.warn(f"only {len(pool):,} training examples are left after holding out {heldout:,}; "
                      f"each probe seed trains on all of them, not {max_train:,}", stacklevel=3)
    return held, pool


def _cap_notes(spec: TaskSpec, train_total: int, cap: int | None, eval_kept: int, eval_total: int) -> list[str]:
    unit = "sentences" if spec.kind == "tagging" else "examples"
    if cap is None or cap >= train_total:
        notes = [f"train: all {train_total:,} {unit} for every seed (the seeds then give the same probe)"]
    else:
        notes = [f"train: each seed draws {cap:,} of {train_total:,} {unit}"]
    if eval_kept < eval_total:
        notes.append(f"{spec.headline_split}: a fixed {eval_kept:,} of {eval_total:,} {unit} "
                     f"(seed {EVAL_SUBSET_SEED}, the same for every model and seed)")
    return notes


# ---------------------------------------------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------------------------------------------


def describe(result: ProbeResult) -> str:
    """A table for the CLI: per feature kind the median and every seed's headline score, beside the baseline."""
    key = result.main_metric
    control = " (no-pretraining control: random encoder of the same shape)" if result.from_scratch else ""
    seeds = "".join(f"  {'seed ' + str(seed):>8}" for seed in result.seeds)
    lines = [f"{result.task}: linear probes on frozen features of {result.checkpoint}{control}",
             f"{key} on {result.split} ({result.eval_size:,} examples), median over {len(result.seeds)} seed(s)",
             f"  {'feature':<9}{'median':>8}{seeds}  L2 chosen"]
    for kind in result.features:
        scores = "".join(f"  {value:>8.4f}" for value in result.headline(kind))
        l2s = " ".join(f"{result.probes[kind][seed].l2:g}" for seed in result.seeds)
        lines.append(f"  {kind:<9}{result.median(kind):>8.4f}{scores}  {l2s}")
    base = [result.baseline[seed][key] for seed in result.seeds]
    lines.append(f"  {'baseline':<9}{float(np.median(base)):>8.4f}{''.join(f'  {v:>8.4f}' for v in base)}  "
                 "(majority class, or the training mean)")
    if result.heldout_size:
        lines.append(f"{key} on {result.heldout_size:,} held-out training examples")
        for kind in result.features:
            held = [result.probes[kind][seed].heldout_scores[key] for seed in result.seeds]
            lines.append(f"  {kind:<9}{float(np.median(held)):>8.4f}{''.join(f'  {v:>8.4f}' for v in held)}")
        held_base = [result.heldout_baseline[seed][key] for seed in result.seeds]
        lines.append(f"  {'baseline':<9}{float(np.median(held_base)):>8.4f}"
                     f"{''.join(f'  {v:>8.4f}' for v in held_base)}")
    unconverged = sorted({kind for kind in result.features for p in result.probes[kind].values() if not p.converged})
    if unconverged:
        lines.append(f"note: L-BFGS hit {MAX_ITERATIONS} iterations for {', '.join(unconverged)}")
    lines.extend(f"data: {line}" for line in result.reports)
    seconds = result.seconds
    lines.append(f"time: {duration(seconds.get('total'))} (features {duration(seconds.get('extract'))}, "
                 f"probes {duration(seconds.get('probe'))})")
    return "\n".join(lines)
