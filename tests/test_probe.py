"""Frozen-feature linear probes: every layer's states, pooling, the probes' solutions, seeds, CoNLL alignment, CLI."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bvr import cli
from bvr.ablation.declare import Evaluations
from bvr.config import DataSettings
from bvr.errors import BvrError
from bvr.evaluation.probe import (
    GRAD_TOLERANCE,
    L2_GRID,
    FeatureExtractor,
    ProbeSample,
    ProbeSplit,
    bag_of_words,
    count_matrix,
    describe,
    extract_features,
    featurise,
    fit_probe,
    heldout_split,
    run_probe,
    train_probe,
    vocabulary,
    words,
)
from bvr.evaluation.probe.bow import _fit_and_score
from bvr.evaluation.probe.fit import Standardised
from bvr.evaluation.run import EvaluationResult, _compute, _read
from bvr.model import EncoderConfig, PretrainingModel
from bvr.pretrained import load_pretrained
from bvr.pretraining.export import export_model
from bvr.sealed import seal
from bvr.tasks.data import subset
from bvr.tasks.kinds import encode_sentences
from bvr.tasks.readers import read_task
from bvr.tasks.readers.common import Example
from bvr.tasks.readers.conll import read_conll
from bvr.tasks.registry import get_task
from bvr.tokenization import save_tokenizer, train_tokenizer, vocab_info

FIXTURES = Path(__file__).parent / "fixtures"
POSITIVE = ("good", "great", "lovely", "superb", "charming", "fine")
NEGATIVE = ("bad", "awful", "dull", "poor", "boring", "weak")
FILLERS = ("the", "film", "was", "a", "story", "and", "plot", "very", "truly", "quite")


pytestmark = pytest.mark.usefixtures("one_thread")


# --- fixtures: a data folder and tiny checkpoints ---------------------------------------------------------------


def _sentence(rng: random.Random, label: int) -> str:
    words = [rng.choice(FILLERS) for _ in range(rng.randint(2, 9))]
    words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if label else NEGATIVE))
    return " ".join(words)


def _write_sst2(folder: Path, rows: int, seed: int) -> None:
    rng = random.Random(seed)
    labels = [i % 2 for i in range(rows)]
    rng.shuffle(labels)
    lines = ["sentence\tlabel", *(f"{_sentence(rng, label)}\t{label}" for label in labels)]
    folder.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_probe_data(root: Path) -> Path:
    """SST-2 with 40 synthetic training and 12 dev sentences, the GLUE fixtures, and the CoNLL sample as all splits,
    under ``root``."""
    shutil.copytree(FIXTURES / "glue", root / "glue")
    _write_sst2(root / "glue" / "SST-2" / "train.tsv", 40, seed=1)
    _write_sst2(root / "glue" / "SST-2" / "dev.tsv", 12, seed=2)
    (root / "conll2003").mkdir()
    for name in ("train.txt", "valid.txt", "test.txt"):
        shutil.copy(FIXTURES / "conll" / "sample.txt", root / "conll2003" / name)
    return root


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return write_probe_data(tmp_path_factory.mktemp("data"))


def _texts(data_dir: Path) -> list[str]:
    texts = [line for path in sorted((data_dir / "glue").rglob("*.tsv")) for line in path.read_text().splitlines()]
    return texts + [line.split()[0] for line in (FIXTURES / "conll" / "sample.txt").read_text().splitlines() if line]


def make_checkpoint(folder: Path, family: str, texts: list[str]) -> Path:
    """A randomly initialised 2-layer, 32-wide model with a tokenizer trained on ``texts``, as ``initialise`` writes."""
    tokenizer = train_tokenizer(family, texts, vocab_size={"bert": 300, "roberta": 400}[family], min_frequency=1,
                                show_progress=False)
    tokenizer_dir = save_tokenizer(tokenizer, family, folder / "tokenizer")
    vocab = vocab_info(tokenizer, family)
    torch.manual_seed(0)
    config = EncoderConfig(family=family, vocab_size=vocab.vocab_size, pad_token_id=vocab.pad_id, num_layers=2,
                           hidden_size=32, num_heads=4, intermediate_size=64)
    return export_model(PretrainingModel(config), tokenizer_dir, {"name": f"tiny-{family}"}, folder / "model")


@pytest.fixture(scope="module")
def bert(tmp_path_factory, data_dir) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("bert"), "bert", _texts(data_dir))


@pytest.fixture(scope="module")
def roberta(tmp_path_factory, data_dir) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("roberta"), "roberta", _texts(data_dir))


def _extractor(pretrained, batch_size: int = 8) -> FeatureExtractor:
    encoder = pretrained.model.encoder.eval()
    pad = vocab_info(pretrained.tokenizer, pretrained.family).pad_id
    return FeatureExtractor(encoder, pad, torch.device("cpu"), batch_size, progress=False)


# --- the encoder: every layer's hidden states ---------------------------------------------------------------------


def test_every_layer_states_end_with_forward(bert):
    encoder = load_pretrained(bert).model.encoder.eval()
    torch.manual_seed(0)
    ids = torch.randint(5, encoder.config.vocab_size, (3, 7))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0  # padding in one row: the masked path too
    types = torch.zeros_like(ids)
    with torch.inference_mode():
        states = encoder.hidden_states(ids, mask, types)
        assert len(states) == encoder.config.num_layers + 1
        assert all(state.shape == (3, 7, encoder.config.hidden_size) for state in states)
        assert torch.equal(states[0], encoder.embeddings(ids, types))
        assert torch.equal(states[-1], encoder(ids, mask, types))


# --- features -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_mean_pooling_ignores_padding(family, request):
    pretrained = load_pretrained(request.getfixturevalue(family))
    examples = [Example("great film", None, 1, 1),
                Example("the plot was very dull and the story was quite boring and weak", None, 0, 2),
                Example("a truly lovely and charming story", "the film was fine", 1, 3)]
    encoded = encode_sentences(pretrained.tokenizer, examples, 64)
    alone = {i: extract_features(_extractor(pretrained, 1), {k: v[i:i + 1] for k, v in encoded.items()},
                                 ("cls", "mean", "last4")) for i in range(3)}
    batched = extract_features(_extractor(pretrained, 3), encoded, ("cls", "mean", "last4"))
    assert batched["last4"].shape == (3, 2 * 32)  # two layers only: last4 concatenates what there is
    for i in range(3):
        for kind in ("cls", "mean", "last4"):
            torch.testing.assert_close(batched[kind][i], alone[i][kind][0], atol=1e-5, rtol=0)


def test_mean_is_the_average_of_real_tokens(bert):
    pretrained = load_pretrained(bert)
    encoded = encode_sentences(pretrained.tokenizer, [Example("a truly lovely story", None, 1, 1)], 64)
    features = extract_features(_extractor(pretrained), encoded, ("cls", "mean"))
    with torch.inference_mode():
        last = pretrained.model.encoder(torch.tensor(encoded["input_ids"]))[0]  # (seq, hidden)
    torch.testing.assert_close(features["mean"][0], last.mean(dim=0), atol=1e-6, rtol=0)
    torch.testing.assert_close(features["cls"][0], last[0], atol=1e-6, rtol=0)


def test_conll_features_sit_at_each_words_first_subword(bert, data_dir):
    pretrained = load_pretrained(bert)
    sentences, _ = read_conll(FIXTURES / "conll" / "sample.txt")
    split = featurise(get_task("conll2003"), sentences, pretrained, _extractor(pretrained), ("last", "last4"), 128,
                      "test")
    words = sentences[2].tokens  # BRUSSELS 1996-08-22: the date is several sub-tokens
    pieces = [len(pretrained.tokenizer.encode(word, add_special_tokens=False).ids) for word in words]
    assert sum(pieces) > len(words)
    starts = [1 + sum(pieces[:j]) for j in range(len(words))]  # after [CLS]
    ids = pretrained.tokenizer.encode(words, is_pretokenized=True).ids
    with torch.inference_mode():
        last = pretrained.model.encoder(torch.tensor([ids]))[0]  # (seq, hidden)
    rows = split.rows([2])
    assert split.words[2] == list(range(len(words)))
    torch.testing.assert_close(split.features["last"][rows], last[starts], atol=1e-5, rtol=0)
    assert split.labels[rows].tolist() == [get_task("conll2003").label_names.index(t) for t in sentences[2].tags]
    assert split.features["last4"].shape[1] == 2 * 32


# --- the probes' solutions ----------------------------------------------------------------------------------------


def test_logistic_probe_separates_separable_features():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(90, 5, generator=generator)
    y = torch.tensor([i % 3 for i in range(90)])
    x[:, 0] += 6.0 * y  # the classes sit far apart along one axis
    probe = fit_probe(x, y, get_task("mnli"), 1e-3)
    assert probe.converged
    assert torch.equal(probe.predict(x, regression=False), y)


def test_logistic_probe_matches_the_hand_solution():
    # Two points x = -1 (class 0) and 1 (class 1): already standardised. By symmetry the two classes' weights are
    # -u/2 and u/2 with equal biases, and the objective log(1 + exp(-u)) + l2 * u^2 / 4 is stationary where
    # l2 * u / 2 = 1 / (1 + exp(u)); for l2 = 1, u = 0.6739... (bisection below).
    probe = fit_probe(torch.tensor([[-1.0], [1.0]]), torch.tensor([0, 1]), get_task("sst2"), 1.0)
    low, high = 0.0, 2.0
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if middle / 2 < 1 / (1 + math.exp(middle)) else (low, middle)
    weight = probe.weight[0]
    assert float(weight[1] - weight[0]) == pytest.approx(low, abs=1e-5)
    assert float(weight[0] + weight[1]) == pytest.approx(0.0, abs=1e-9)
    assert float(probe.bias[1] - probe.bias[0]) == pytest.approx(0.0, abs=1e-9)


def test_logistic_probe_is_stationary_on_a_random_problem():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(40, 4, generator=generator)
    y = torch.randint(0, 3, (40,), generator=generator)
    probe = fit_probe(x, y, get_task("mnli"), 0.1)
    z = probe.standardise(x)
    residual = torch.softmax(probe.scores(x), dim=-1) - torch.nn.functional.one_hot(y, 3).double()  # (40, 3)
    # Gradients of mean cross-entropy + l2 / 2 ||W||^2, weights and (unpenalised) bias, vanish at the optimum.
    torch.testing.assert_close(z.T @ residual / 40 + 0.1 * probe.weight, torch.zeros(4, 3, dtype=torch.float64),
                               atol=GRAD_TOLERANCE, rtol=0)
    torch.testing.assert_close(residual.mean(dim=0), torch.zeros(3, dtype=torch.float64), atol=GRAD_TOLERANCE, rtol=0)


def test_ridge_probe_solves_the_normal_equations():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 6)) * [1, 2, 3, 0.5, 1, 4] + 2
    y = x @ rng.normal(size=6) + rng.normal(size=30)
    probe = fit_probe(torch.tensor(x), torch.tensor(y), get_task("stsb"), 0.3)
    # Independently: least squares on the centred, standardised data stacked on sqrt(n * l2) I, then the bias.
    z = (x - x.mean(0)) / x.std(0)
    stacked = np.vstack([z, math.sqrt(30 * 0.3) * np.eye(6)])
    w, *_ = np.linalg.lstsq(stacked, np.concatenate([y - y.mean(), np.zeros(6)]), rcond=None)
    np.testing.assert_allclose(probe.weight[:, 0].numpy(), w, atol=1e-10)
    np.testing.assert_allclose(probe.predict(torch.tensor(x), regression=True).numpy(), z @ w + y.mean(), atol=1e-10)


def test_l2_is_chosen_on_held_out_data_then_refit_on_everything():
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(50, 3, generator=generator)
    y = (x[:, 0] + 0.5 * torch.randn(50, generator=generator) > 0).long()
    split = ProbeSplit([Example("", None, int(label), i) for i, label in enumerate(y)], {"mean": x}, y,
                       list(range(51)))
    selection = train_probe(get_task("sst2"), split, list(range(50)), "mean")
    assert set(selection.held_out) == set(L2_GRID)
    best = max(L2_GRID, key=lambda l2: (selection.held_out[l2], l2))
    assert selection.probe.l2 == best
    # The refit starts from the held-out fit's weights; from zeros it reaches the same optimum (to the tolerance).
    cold = fit_probe(x, y, get_task("sst2"), best)
    torch.testing.assert_close(selection.probe.weight, cold.weight, atol=1e-4, rtol=0)
    assert torch.equal(selection.probe.predict(x, regression=False), cold.predict(x, regression=False))


# --- seeds --------------------------------------------------------------------------------------------------------


def test_same_seed_same_result_and_seeds_change_only_the_subsample(bert, data_dir):
    pretrained = load_pretrained(bert)
    options = {"data_dir": data_dir, "features": ["mean", "cls"]}
    first = run_probe(pretrained, "sst2", sample=ProbeSample([0, 1], max_train_examples=20), **options)
    again = run_probe(pretrained, "sst2", sample=ProbeSample([0, 1], max_train_examples=20), **options)
    alone = run_probe(pretrained, "sst2", sample=ProbeSample([1], max_train_examples=20), **options)
    assert first.features == ("cls", "mean")
    for key in ("probes", "baseline", "subsamples"):
        assert getattr(first, key) == getattr(again, key)
    assert first.subsamples[0] != first.subsamples[1] and len(first.subsamples[1]) == 20
    assert alone.probes["mean"][1] == first.probes["mean"][1]  # other seeds do not matter
    # With every training example in each seed's subsample, the seeds have nothing left to change.
    full = run_probe(pretrained, "sst2", sample=ProbeSample([0, 1]), data_dir=data_dir, features=["mean"])
    assert full.probes["mean"][0] == full.probes["mean"][1]
    assert any("the seeds then give the same probe" in line for line in full.reports)


def test_metrics_are_flat_fractions_with_the_baseline(bert, data_dir):
    result = run_probe(load_pretrained(bert), "sst2", data_dir=data_dir, sample=ProbeSample([3], max_eval_examples=10))
    metrics = result.metrics(3)
    assert set(metrics) == {f"probe/sst2/{kind}/accuracy" for kind in ("cls", "mean", "last4", "baseline", "bow")}
    assert all(0.0 <= value <= 1.0 for value in metrics.values())
    # Training labels are balanced, so the majority is the lowest id, 0; the dev subset is seed 0's, as fine-tuning's.
    dev = subset(read_task(get_task("sst2"), data_dir, DataSettings()).splits["dev"][0], 10, seed=0)
    assert metrics["probe/sst2/baseline/accuracy"] == sum(example.label == 0 for example in dev) / 10
    assert result.eval_size == 10 and result.eval_total == 12
    json.dumps(result.to_dict())
    with pytest.raises(BvrError, match="no probe with seed 4"):
        result.metrics(4)


def test_pair_and_regression_tasks(bert, data_dir):
    pretrained = load_pretrained(bert)
    mrpc = run_probe(pretrained, "mrpc", data_dir=data_dir, features=["last4"]).metrics(0)
    assert set(mrpc) == {f"probe/mrpc/{kind}/{name}" for kind in ("last4", "baseline", "bow")
                         for name in ("accuracy", "f1", "accuracy_f1")}
    stsb = run_probe(pretrained, "stsb", data_dir=data_dir, features=["mean"])
    assert {"probe/stsb/mean/pearson_spearman", "probe/stsb/bow/pearson_spearman"} <= set(stsb.metrics(0))
    assert stsb.probes["mean"][0].iterations == 0  # ridge: closed form


def test_conll_probe_scores_entities_and_tokens(bert, data_dir):
    result = run_probe(load_pretrained(bert), "conll2003", data_dir=data_dir, sample=ProbeSample([0]))
    assert result.features == ("last", "last4") and result.main_metric == "f1"
    metrics = result.metrics(0)
    for kind in ("last", "last4", "baseline"):
        for name in ("f1", "precision", "recall", "accuracy"):
            assert 0.0 <= metrics[f"probe/conll2003/{kind}/{name}"] <= 1.0
    assert metrics["probe/conll2003/baseline/f1"] == 0.0  # all O: no entity found
    assert not any("/bow/" in key for key in metrics) and result.bow == {} and result.bow_words == 0
    assert "bag of words: none for a tagging task (its labels are per word)" in result.reports


def test_from_scratch_is_one_fixed_random_encoder(bert, data_dir):
    pretrained = load_pretrained(bert)
    options = {"data_dir": data_dir, "features": ["mean"], "sample": ProbeSample([0])}
    scratch = run_probe(pretrained, "sst2", from_scratch=True, **options)
    assert scratch.from_scratch and scratch.probes == run_probe(pretrained, "sst2", from_scratch=True, **options).probes
    assert scratch.probes["mean"][0].held_out != run_probe(pretrained, "sst2", **options).probes["mean"][0].held_out


def test_heldout_examples_are_never_trained_on_and_scored_beside_dev(bert, data_dir):
    pretrained = load_pretrained(bert)
    options = {"data_dir": data_dir, "features": ["mean"]}
    sample = ProbeSample([0, 1], max_train_examples=15)
    result = run_probe(pretrained, "sst2", sample=dataclasses.replace(sample, heldout_examples=10), **options)
    held, pool = heldout_split(result.train_size, 10, 15)
    assert result.heldout_size == 10 and len(pool) == result.train_size - 10
    for seed in (0, 1):
        assert not set(result.subsamples[seed]) & set(held) and set(result.subsamples[seed]) <= set(pool)
        metrics = result.metrics(seed)
        assert {"probe/sst2/mean/accuracy", "probe/sst2/mean/heldout/accuracy"} <= set(metrics)
        # The baseline on the held-out examples: the seed's majority training label, by hand.
        train = read_task(get_task("sst2"), data_dir, DataSettings()).splits["train"][0]
        labels = [train[i].label for i in result.subsamples[seed]]
        majority = max(sorted(set(labels)), key=labels.count)
        assert metrics["probe/sst2/baseline/heldout/accuracy"] == sum(train[i].label == majority for i in held) / 10
    # The held-out draw is the same for every model: a random encoder of the same shape is scored on the same rows.
    scratch = run_probe(pretrained, "sst2", sample=dataclasses.replace(sample, heldout_examples=10), from_scratch=True,
                        **options)
    assert scratch.subsamples == result.subsamples
    # Without held-out examples the seeds draw exactly as before (cached results stay valid).
    plain = run_probe(pretrained, "sst2", sample=sample, **options)
    assert plain.subsamples[0] == subset(range(result.train_size), 15, seed=0) and plain.heldout_size == 0
    assert "probe/sst2/mean/heldout/accuracy" not in plain.metrics(0)
    with pytest.raises(BvrError, match="leaves fewer than 2") as info:
        run_probe(pretrained, "sst2", sample=dataclasses.replace(sample, heldout_examples=result.train_size - 1),
                  **options)
    assert info.value.where == "heldout_examples"


# --- the bag-of-words baseline --------------------------------------------------------------------------------------


def test_bow_words_vocabulary_and_counts_by_hand():
    examples = [Example("Good good film", None, 1, 1), Example("bad film", None, 0, 2),
                Example("Bad plot", None, 0, 3), Example("good", None, 1, 4)]
    texts = [words(example) for example in examples]
    assert texts == [["good", "good", "film"], ["bad", "film"], ["bad", "plot"], ["good"]]
    assert words(Example("A b", "b C", 1, 1)) == ["a", "b", "b:b", "b:c"]  # a pair's second text stays apart
    # good 3, bad 2, film 2 (the tie goes to the word), plot 1 (seen once: left out).
    columns = vocabulary(texts)
    assert columns == {"good": 0, "bad": 1, "film": 2}
    assert vocabulary(texts, size=2) == {"good": 0, "bad": 1}
    assert count_matrix(texts, columns).tolist() == [[2, 0, 1], [0, 1, 1], [0, 1, 0], [1, 0, 0]]
    assert count_matrix([[]], columns).tolist() == [[0, 0, 0]]


def _separable(count: int, start: int = 0) -> list[Example]:
    """Examples whose label is told by one word: 'great' (1) or 'awful' (0), among shared fillers."""
    return [Example(f"the {'great' if i % 2 else 'awful'} film number{i % 3}", None, i % 2, i + 1)
            for i in range(start, start + count)]


def test_bow_scores_a_separable_set_perfectly():
    train = [*_separable(40), Example("zebra unicorn", None, 1, 41)]
    picks = {0: list(range(0, 30)), 1: list(range(10, 40))}
    dev, held = _separable(12, start=100), _separable(5, start=200)
    for task in ("sst2", "stsb"):
        found = bag_of_words(get_task(task), train, picks, dev, held)
        # the, film, great, awful, number0-2: each seen at least twice in the union; index 40 was drawn by no seed.
        assert found.words == 7
        if task == "sst2":
            assert found.scores == {0: {"accuracy": 1.0}, 1: {"accuracy": 1.0}}
            assert found.heldout_scores == {0: {"accuracy": 1.0}, 1: {"accuracy": 1.0}}
        else:  # the label as a score: a word that tells it is read off linearly
            assert all(scores["pearson"] > 0.99 for scores in found.scores.values())
    assert bag_of_words(get_task("conll2003"), train, picks, dev, held) is None


def test_sparse_counts_reach_the_dense_optimum():
    generator = torch.Generator().manual_seed(3)
    x = (torch.rand(60, 12, generator=generator) < 0.3).float() * torch.randint(1, 3, (60, 12), generator=generator)
    y = (x[:, 0] + x[:, 1] - x[:, 2] + 0.3 * torch.randn(60, generator=generator) > 0.5).long()
    sparse = Standardised.of(x, sparse=True)
    assert sparse.z.is_sparse_csr and sparse.eigenvectors is None and not sparse.mean.any()
    # Logistic: the gradient of the centred problem vanishes at the sparse fit's weights (the free bias absorbs the
    # means), so it predicts as the dense fit does.
    probe, dense = fit_probe(sparse, y, get_task("sst2"), 0.01), fit_probe(x, y, get_task("sst2"), 0.01)
    assert probe.converged and not probe.mean.any()
    centred = (x.double() - x.double().mean(dim=0)) / probe.scale
    residual = torch.softmax(probe.scores(x), dim=-1) - torch.nn.functional.one_hot(y, 2).double()  # (60, 2)
    torch.testing.assert_close(centred.T @ residual / 60 + 0.01 * probe.weight, torch.zeros(12, 2, dtype=torch.float64),
                               atol=GRAD_TOLERANCE, rtol=0)
    assert torch.equal(probe.predict(x, regression=False), dense.predict(x, regression=False))
    # Ridge centres the data itself: the same closed-form solution.
    target = x[:, 0] - x[:, 3] + 0.1 * torch.randn(60, generator=generator)
    ridge, dense = fit_probe(sparse, target, get_task("stsb"), 0.01), fit_probe(x, target, get_task("stsb"), 0.01)
    torch.testing.assert_close(ridge.weight, dense.weight, atol=1e-10, rtol=0)
    torch.testing.assert_close(ridge.scores(x), dense.scores(x), atol=1e-10, rtol=0)


def test_bow_is_fitted_on_the_probe_seeds_picks_and_is_the_same_for_every_model(bert, roberta, data_dir):
    options = {"data_dir": data_dir, "features": ["mean"],
               "sample": ProbeSample([0, 1], max_train_examples=15, max_eval_examples=10, heldout_examples=10)}
    results = []
    for model, scratch in ((bert, False), (roberta, False), (bert, True)):
        _fit_and_score.cache_clear()  # computed afresh for each model, not read from the memo
        results.append(run_probe(load_pretrained(model), "sst2", from_scratch=scratch, **options))
    first = results[0]
    for other in results[1:]:
        assert (other.bow, other.heldout_bow, other.bow_words) == (first.bow, first.heldout_bow, first.bow_words)
    # A second model probed on the same examples gets a copy of the first one's (one fit per ablation).
    hits = _fit_and_score.cache_info().hits
    repeat = run_probe(load_pretrained(roberta), "sst2", **options)
    assert _fit_and_score.cache_info().hits == hits + 1 and repeat.bow == first.bow
    # Recomputed from the same picks, the same dev subset and the same held-out examples.
    splits = read_task(get_task("sst2"), data_dir, DataSettings()).splits
    train, dev = splits["train"][0], splits["dev"][0]
    held, _ = heldout_split(len(train), 10, 15)
    again = bag_of_words(get_task("sst2"), train, first.subsamples, subset(dev, 10, seed=0), [train[i] for i in held])
    assert (again.scores, again.heldout_scores, again.words) == (first.bow, first.heldout_bow, first.bow_words)
    for seed in (0, 1):
        metrics = first.metrics(seed)
        assert metrics["probe/sst2/bow/accuracy"] == first.bow[seed]["accuracy"]
        assert metrics["probe/sst2/bow/heldout/accuracy"] == first.heldout_bow[seed]["accuracy"]
    assert first.bow_words > 0 and first.seconds["bow"] >= 0
    assert any(line.startswith(f"bag of words: {first.bow_words:,} words") for line in first.reports)
    assert sum(line.strip().startswith("bow") for line in describe(first).splitlines()) == 2  # dev and held out


def test_evaluation_logs_the_bow_and_reads_results_cached_before_it(bert, data_dir, tmp_path, capsys):
    settings = Evaluations(probe_seeds=2, probe_max_train_examples=15, probe_heldout_examples=10)
    result = _compute(bert, "probe", "sst2", settings, data_dir, progress=False)
    probe = run_probe(load_pretrained(bert), "sst2", data_dir=data_dir, features=["mean"],
                      sample=ProbeSample([0, 1], max_train_examples=15, heldout_examples=10))
    assert result.main_key == "probe/sst2/heldout/accuracy"
    assert result.metrics["probe/sst2/bow/heldout/accuracy"] == pytest.approx(
        (probe.heldout_bow[0]["accuracy"] + probe.heldout_bow[1]["accuracy"]) / 2)
    assert result.metrics["probe/sst2/bow/accuracy"] == pytest.approx(
        (probe.bow[0]["accuracy"] + probe.bow[1]["accuracy"]) / 2)
    # A result written before the bag of words: no bow keys, and it still loads.
    old = {"settings": {"kind": "probe"}, "kind": "probe", "task": "sst2", "main_key": result.main_key,
           "score": result.score, "seeds": {"0": result.seeds[0], "1": result.seeds[1]},
           "metrics": {k: v for k, v in result.metrics.items() if "/bow/" not in k}, "baseline": result.baseline,
           "seconds": 1.0, "run_id": "abc", "detail": {}}
    path = tmp_path / "probe-sst2-old.json"
    path.write_text(json.dumps(seal(old, path.name)), encoding="utf-8")
    cached, why = _read(path, path.name)
    assert why is None and isinstance(cached, EvaluationResult) and cached.reused and cached.score == result.score
    assert not any("/bow/" in key for key in cached.metrics)
    # Edited by hand, copied under another result's name, or never sealed: evaluated again, said in one line each.
    for text, producer in ((json.dumps({**seal(old, path.name), "score": 0.99}), path.name),
                           (json.dumps(seal(old, path.name)), "probe-sst2-other.json"), (json.dumps(old), path.name)):
        path.write_text(text, encoding="utf-8")
        cached, why = _read(path, producer)
        assert cached is None and why.startswith(("does not match its checksum", "carries no checksum")), why
    path.write_text(json.dumps(seal(old, path.name))[:50], encoding="utf-8")  # truncated
    assert _read(path, path.name)[1].startswith("cannot be read (JSONDecodeError: ")


# --- bad input ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("task", "features", "where", "text"), [
    ("nope", None, "task", "unknown task 'nope'"),
    ("squad", None, "task", "span task"),
    ("sst2", ["cls", "bogus"], "features", "unknown feature kind 'bogus'"),
    ("conll2003", ["cls"], "features", "unknown feature kind 'cls'"),
    ("sst2", [], "features", "no feature kind"),
])
def test_bad_options_name_the_option(bert, data_dir, task, features, where, text):
    with pytest.raises(BvrError, match=text) as info:
        run_probe(load_pretrained(bert), task, data_dir=data_dir, features=features)
    assert info.value.where == where


def test_bad_caps_and_seeds(bert, data_dir):
    pretrained = load_pretrained(bert)
    for options, where in (({"max_train_examples": 1}, "max_train_examples"), ({"max_eval_examples": 0},
                           "max_eval_examples"), ({"seeds": []}, "seeds"), ({"seeds": [1, 1]}, "seeds")):
        with pytest.raises(BvrError) as info:
            run_probe(pretrained, "sst2", data_dir=data_dir, sample=ProbeSample(**options))
        assert info.value.where == where


# --- the command line -----------------------------------------------------------------------------------------------


def test_cli_prints_the_table_and_writes_json(bert, data_dir, tmp_path):
    out = tmp_path / "probe.json"
    result = CliRunner().invoke(cli.app, ["probe", "--task", "sst2", str(bert.parent), "--data-dir", str(data_dir),
                                          "--set", "evaluate.probes.seeds=2", "--features", "cls,mean",
                                          "--max-train-examples", "30", "--json", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "median" in result.output and "seed 1" in result.output and "baseline" in result.output
    mean = next(line.split() for line in result.output.splitlines() if line.strip().startswith("mean"))
    assert all(re.fullmatch(r"\d{1,3}\.\d", value) for value in mean[1:4])  # median and two seeds, in points
    assert any(line.strip().startswith("bow") and "bag of words" in line for line in result.output.splitlines())
    assert all(any(line.strip().startswith(kind) for line in result.output.splitlines()) for kind in ("cls", "mean"))
    saved = json.loads(out.read_text())
    assert saved["features"] == ["cls", "mean"] and saved["seeds"] == [0, 1]
    assert {"probe/sst2/mean/accuracy", "probe/sst2/bow/accuracy"} <= set(saved["metrics"]["1"])


def test_cli_bad_feature_is_one_line_naming_the_option(bert, data_dir, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bvr", "probe", "--task", "sst2", str(bert), "--data-dir", str(data_dir),
                                      "--features", "pooler", "--no-progress"])
    with pytest.raises(SystemExit) as info:
        cli.main()
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert "features: unknown feature kind 'pooler'" in err and "cls, mean, last4" in err
