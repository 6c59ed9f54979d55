"""Running probes: checking the options, reading and featurising the task's data once, and fitting one probe per
feature kind and seed (:func:`run_probe`)."""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from bvr.config import PROBE_KINDS, SENTENCE_FEATURES, TOKEN_FEATURES, DataSettings
from bvr.errors import BvrError
from bvr.evaluation.probe.bow import MAX_WORDS, MIN_COUNT, bag_of_words
from bvr.evaluation.probe.features import BATCH_SIZE, FeatureExtractor, ProbeSplit, featurise
from bvr.evaluation.probe.results import ProbeResult, SeedProbe
from bvr.evaluation.probe.selection import baseline_scores, score, train_probe
from bvr.model.encoder import Encoder, initialize
from bvr.pretrained import Pretrained
from bvr.tasks.data import subset
from bvr.tasks.readers import read_task
from bvr.tasks.registry import TaskSpec, get_task
from bvr.tokenization import vocab_info

EVAL_SUBSET_SEED = 0
"""Seed of the dev cap (``max_eval_examples``): the same dev examples for every model and seed."""
SET_ASIDE_SEED = 0
"""Seed of the training examples set aside as a test set (``heldout_examples``): the same for every model and seed
(not :data:`HELD_OUT_SEED`, which draws the part of a subsample that chooses the L2 strength)."""
SCRATCH_SEED = 0
"""Seed of the random weights of ``from_scratch`` (one encoder for every probe seed)."""


# --- Options ---------------------------------------------------------------------------------------------------


def probe_task(task: str) -> TaskSpec:
    """The spec of ``task``, which must be a sentence, pair or tagging task (errors name the ``task`` option)."""
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
    """The requested feature kinds, in the task's order, duplicates dropped; None means all of them."""
    known = feature_kinds(spec)
    if features is None:
        return known
    unknown = [kind for kind in features if kind not in known]
    if unknown or not features:
        what = f"unknown feature kind {', '.join(map(repr, unknown))}" if unknown else "no feature kind given"
        raise BvrError(f"{what} for {spec.name}", where="features", hint=f"choose from {', '.join(known)}")
    return tuple(kind for kind in known if kind in features)


@dataclass(frozen=True)
class ProbeSample:
    """Which examples the probes train on and are scored on."""

    seeds: Sequence[int] = (0,)
    """Each draws its own training subsample; nothing else depends on it."""
    max_train_examples: int | None = None
    """Examples (sentences, for tagging) each seed draws from the train file; None: all."""
    max_eval_examples: int | None = None
    """Dev examples scored, a fixed subset for every model and seed; None: all."""
    heldout_examples: int | None = None
    """Also set this many training examples aside (a fixed draw, the same for every model and seed), draw the seeds'
    subsamples from the rest, and score every probe on them too. A second test set from the same task, larger than a
    small dev split (SST-2's has 872 sentences, so one model's accuracy has a sampling error of about 1.7 points):
    comparisons between encoders see smaller differences."""


def _check_options(sample: ProbeSample) -> list[int]:
    seeds = sample.seeds
    if not seeds:
        raise BvrError("give at least one seed", where="seeds")
    if len(set(seeds)) != len(seeds):
        raise BvrError(f"seeds repeat: {list(seeds)}", where="seeds")
    # Choosing the L2 strength needs a held-out example and at least one to train on: 2 training examples.
    for key, least in (("max_train_examples", 2), ("max_eval_examples", 1), ("heldout_examples", 1)):
        value = getattr(sample, key)
        if value is not None and value < least:
            raise BvrError(f"must be at least {least}, got {value}", where=key)
    return list(seeds)


# --- Running ---------------------------------------------------------------------------------------------------


def frozen_encoder(pretrained: Pretrained, from_scratch: bool, device: torch.device) -> Encoder:
    """The checkpoint's encoder in eval mode on ``device`` (a copy if it must move), or a random one of its shape."""
    encoder = pretrained.model.encoder
    if from_scratch:
        with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
            torch.manual_seed(SCRATCH_SEED)
            encoder = Encoder(encoder.config)
            initialize(encoder, encoder.config)
    elif next(encoder.parameters()).device != device:
        encoder = copy.deepcopy(encoder)
    return encoder.to(device).eval()


def run_probe(pretrained: Pretrained, task: str, *, data_dir: Path | None, sample: ProbeSample | None = None,
              features: Sequence[str] | None = None, from_scratch: bool = False, progress: bool = False) -> ProbeResult:
    """Train linear probes on frozen features of ``pretrained`` and score them on the task's dev split, beside the
    trivial and bag-of-words baselines.

    ``data_dir`` None reads the Hugging Face hub; ``sample`` defaults to seed 0, every example, none held out;
    ``from_scratch`` probes a randomly initialised encoder of the checkpoint's shape (seed :data:`SCRATCH_SEED`).
    The encoder runs on CUDA when available (the probes always fit on the CPU), on sequences of the task's
    fine-tuning length (128, specials included) capped by the model's positions.
    """
    start = time.perf_counter()
    sample = sample or ProbeSample()
    max_train_examples = sample.max_train_examples
    spec = probe_task(task)
    kinds = check_features(spec, features)
    seeds = _check_options(sample)
    read = read_task(spec, data_dir, DataSettings())
    train_examples, train_line = read.splits[spec.splits[0].name]
    dev_examples, dev_line = read.splits[spec.headline_split]
    reports = list(dict.fromkeys([train_line, dev_line]))  # the readers' report lines
    held, pool = heldout_split(len(train_examples), sample.heldout_examples, max_train_examples)
    picks = {seed: [pool[i] for i in subset(range(len(pool)), max_train_examples, seed)] for seed in seeds}
    union = sorted(set().union(*picks.values()))
    dev = subset(dev_examples, sample.max_eval_examples, EVAL_SUBSET_SEED)
    reports += _cap_notes(spec, len(pool), max_train_examples, len(dev), len(dev_examples))
    if held:
        reports.append(f"held out: {len(held):,} of {len(train_examples):,} training examples (seed {SET_ASIDE_SEED}),"
                       " never trained on, scored as a second test set")
    encoder = frozen_encoder(pretrained, from_scratch, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    extractor = FeatureExtractor(encoder, vocab_info(pretrained.tokenizer, pretrained.family).pad_id,
                                 next(encoder.parameters()).device, BATCH_SIZE, progress)
    length = min(spec.finetune.get("max_length", DataSettings.max_length), encoder.config.max_tokens)
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
    probed = time.perf_counter()
    bow = bag_of_words(spec, train_examples, picks, dev, [train_examples[i] for i in held])  # the same for any model
    end = time.perf_counter()
    reports.append(f"bag of words: {bow.words:,} words (seen at least {MIN_COUNT} times in the seeds' training "
                   f"examples, at most the {MAX_WORDS:,} most frequent)" if bow is not None else
                   "bag of words: none for a tagging task (its labels are per word)")
    seconds = {"extract": extracted - start, "probe": probed - extracted, "bow": end - probed, "total": end - start}
    return ProbeResult(spec.name, str(pretrained.folder), from_scratch, spec.headline_split, spec.main_metric, kinds,
                       seeds, probes, baseline, picks, len(train_examples), len(dev), len(dev_examples),
                       len(held), held_baseline, seconds, reports, bow=bow.scores if bow else {},
                       heldout_bow=bow.heldout_scores if bow else {}, bow_words=bow.words if bow else 0)


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
    """Training-file positions ``0..count-1`` split into (held out, pool the seeds draw from), both in file order;
    the held-out draw depends only on ``count`` and ``heldout``.

    >>> held, pool = heldout_split(10, 3, None)
    >>> len(held), len(pool), sorted(held + pool) == list(range(10))
    (3, 7, True)
    >>> heldout_split(4, None, None)
    ([], [0, 1, 2, 3])
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
