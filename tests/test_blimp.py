"""Zero-shot BLiMP: reading the pairs, batched pseudo-log-likelihood, accuracies, the published models and the CLI.

The fixture ``tests/fixtures/blimp/`` is laid out like the release (``data/PARADIGM.jsonl`` beside
``models_summary.jsonl``) with lines copied from it (BLiMP, CC BY 4.0): 5 pairs of anaphor_gender_agreement, 4 of
principle_A_case_2 (whose field the release spells ``syntax/semantics``; pair 105 has two identical sentences) and 3
of only_npi_scope. Models are tiny, random and built offline, their weights redrawn at scale 0.2 so that log-
probabilities differ by more than rounding.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bvr import cli
from bvr.errors import BvrError
from bvr.evaluation.blimp import (
    BlimpPair,
    evaluate_blimp,
    load_blimp,
    pll_scores,
    published_blimp,
    published_summaries,
    score_pairs,
)
from bvr.evaluation.blimp import pll as blimp_pll
from bvr.evaluation.blimp.published import published_terms
from bvr.model import EncoderConfig, PretrainingModel
from bvr.pretrained import load_pretrained
from bvr.pretraining.export import export_model
from bvr.tokenization import save_tokenizer, train_tokenizer, vocab_info

FIXTURE = Path(__file__).parent / "fixtures" / "blimp"
PARADIGMS = {"anaphor_gender_agreement": 5, "principle_A_case_2": 4, "only_npi_scope": 3}
ATOL = 1e-4


def fixture_sentences() -> list[str]:
    pairs = load_blimp(FIXTURE)
    return [p.good for p in pairs] + [p.bad for p in pairs]


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Redraw every parameter at scale 0.2 (LayerNorm gains around 1), as tests/test_hf.py does."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            gain = name.endswith("weight") and ("LayerNorm" in name or "layer_norm" in name)
            param.copy_(torch.randn(param.shape, generator=gen) * 0.2 + (1.0 if gain else 0.0))


def make_folder(folder: Path, family: str, **sizes) -> Path:
    """A random 2-layer, 32-wide MLM and a tokenizer trained on the fixture's sentences, as a HF folder."""
    # Trained on the sentences themselves, so they come out as about 11 tokens each (6 to 18), not letters.
    tokenizer = train_tokenizer(family, fixture_sentences(), vocab_size={"bert": 400, "roberta": 600}[family],
                                min_frequency=1, show_progress=False)
    tokenizer_dir = save_tokenizer(tokenizer, family, folder / "tokenizer")
    vocab = vocab_info(tokenizer, family)
    config = EncoderConfig(family=family, vocab_size=vocab.vocab_size, pad_token_id=vocab.pad_id, num_layers=2,
                           hidden_size=32, num_heads=4, intermediate_size=37, **sizes)
    model = PretrainingModel(config)
    randomize(model, seed=1)
    return export_model(model, tokenizer_dir, {"name": f"tiny-{family}"}, folder / "model")


@pytest.fixture(scope="module", params=["bert", "roberta"])
def folder(request, tmp_path_factory) -> Path:
    return make_folder(tmp_path_factory.mktemp(request.param), request.param)


def naive_pll(logits_of, ids: list[int], special: list[int], mask_id: int) -> float:
    """One masked copy per forward pass, dense logits at every position, log_softmax, then the true token."""
    total = 0.0
    for position, is_special in enumerate(special):
        if is_special:
            continue
        masked = torch.tensor([ids])  # (1, seq)
        masked[0, position] = mask_id
        with torch.no_grad():
            total += float(logits_of(masked)[0, position].log_softmax(-1)[ids[position]])
    return total


# ---------------------------------------------------------------------------------------------------------------
# (a) batched PLL equals the naive loop


@pytest.fixture(scope="module")
def naive(folder) -> list[float]:
    """The fixture sentences' PLLs by :func:`naive_pll` with our model's dense forward."""
    ours = load_pretrained(folder)
    mask_id = vocab_info(ours.tokenizer, ours.family).mask_id
    return [naive_pll(lambda ids: ours.model(ids).mlm_logits, e.ids, e.special_tokens_mask, mask_id)
            for e in ours.tokenizer.encode_batch(fixture_sentences())]


@pytest.mark.parametrize("budget", [1, 40, 16_384])  # one copy a batch; copies straddling batches; one per length
def test_batched_pll_equals_one_copy_per_forward(folder, naive, budget):
    ours = load_pretrained(folder)
    sentences = fixture_sentences()
    expected = naive
    got = pll_scores(ours.model, ours.tokenizer, ours.family, sentences, max_tokens_per_batch=budget)
    assert got.shape == (len(sentences),) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)
    assert len(set(np.round(got, 3))) > len(sentences) // 2  # scores differ: the comparison is not vacuous


def test_pll_reports_progress_turns_dropout_off_and_restores_the_mode(folder):
    ours = load_pretrained(folder)
    sentences = ["", *fixture_sentences()[:6]]  # "" has no token to score: PLL 0, finished at once
    reference = pll_scores(ours.model, ours.tokenizer, ours.family, sentences)
    ours.model.train()
    done: list[int] = []
    again = pll_scores(ours.model, ours.tokenizer, ours.family, sentences, max_tokens_per_batch=30,
                       on_progress=done.append)
    assert ours.model.training
    np.testing.assert_allclose(again, reference, rtol=0, atol=ATOL)  # other batches: other rounding
    assert reference[0] == 0.0 and sum(done) == len(sentences) and len(done) > 2


def test_a_sentence_longer_than_the_positions_is_refused_by_name(tmp_path):
    short = load_pretrained(make_folder(tmp_path, "bert", max_position_embeddings=8))
    with pytest.raises(BvrError, match=r"sentence 1: \d+ tokens, more than the model's 8 positions: 'Only the"):
        pll_scores(short.model, short.tokenizer, short.family, ["Stephen impressed himself.", fixture_sentences()[5]])


# ---------------------------------------------------------------------------------------------------------------
# (b) parity with transformers


def test_pll_matches_transformers_on_the_same_weights(folder):
    transformers = pytest.importorskip("transformers")
    ours = load_pretrained(folder)
    cls = transformers.BertForMaskedLM if ours.family == "bert" else transformers.RobertaForMaskedLM
    reference = cls.from_pretrained(folder).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    sentences = fixture_sentences()
    expected = []
    for sentence in sentences:
        encoded = hf_tokenizer(sentence, return_special_tokens_mask=True)
        expected.append(naive_pll(lambda ids: reference(input_ids=ids).logits, encoded["input_ids"],
                                  encoded["special_tokens_mask"], hf_tokenizer.mask_token_id))
    got = pll_scores(ours.model, ours.tokenizer, ours.family, sentences)
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)


# ---------------------------------------------------------------------------------------------------------------
# (c) accuracies


def fixed_scores(pairs: list[BlimpPair]) -> tuple[list[float], list[float]]:
    """anaphor_gender_agreement 3/5 right, principle_A_case_2 2/4 (pair 105 a tie), only_npi_scope 3/3."""
    right = {*(("anaphor_gender_agreement", i) for i in "024"), *(("only_npi_scope", i) for i in "012"),
             ("principle_A_case_2", "0"), ("principle_A_case_2", "106")}
    good = [-10.0] * len(pairs)
    bad = [-20.0 if (p.uid, p.pair_id) in right else -10.0 if p.pair_id in ("105", "1") else -5.0 for p in pairs]
    return good, bad


def test_accuracies_by_hand():
    pairs = load_blimp(FIXTURE)
    result = score_pairs(pairs, *fixed_scores(pairs))
    assert result.paradigm_accuracy == {"anaphor_gender_agreement": 0.6, "only_npi_scope": 1.0,
                                        "principle_A_case_2": 0.5}
    assert result.paradigm_pairs == PARADIGMS
    assert result.macro_accuracy == pytest.approx((0.6 + 0.5 + 1.0) / 3)
    assert result.micro_accuracy == pytest.approx(8 / 12)
    assert result.term_accuracy == {"anaphor_agreement": 0.6, "binding": 0.5, "npi_licensing": 1.0}
    # "syntax/semantics" (principle_A_case_2) and "syntax_semantics" (only_npi_scope) are one field
    assert result.field_accuracy == {"morphology": 0.6, "syntax_semantics": 0.75}
    assert result.correct.tolist() == [p.uid == "only_npi_scope" or p.pair_id in ("0", "2", "4", "106")
                                       for p in pairs]


def test_ties_count_as_wrong():
    pairs = load_blimp(FIXTURE)
    result = score_pairs(pairs, [-3.0] * len(pairs), [-3.0] * len(pairs))
    assert result.macro_accuracy == 0.0 and not result.correct.any()


def test_metrics_and_dict_are_fractions_with_stable_keys():
    pairs = load_blimp(FIXTURE)
    result = score_pairs(pairs, *fixed_scores(pairs), seconds=2.0)
    metrics = result.metrics()
    assert metrics["blimp/macro_accuracy"] == pytest.approx(0.7)
    assert metrics["blimp/micro_accuracy"] == pytest.approx(8 / 12)
    assert metrics["blimp/pairs"] == 12
    assert metrics["blimp/paradigm/principle_A_case_2"] == 0.5
    assert metrics["blimp/term/npi_licensing"] == 1.0
    assert metrics["blimp/field/syntax_semantics"] == 0.75
    assert all(0.0 <= v <= 1.0 for k, v in metrics.items() if k != "blimp/pairs")
    data = json.loads(json.dumps(result.to_dict()))  # JSON-ready
    assert data["metrics"] == metrics and data["sentences"] == 24 and data["seconds"] == 2.0
    assert data["paradigms"]["only_npi_scope"] == {"term": "npi_licensing", "field": "syntax_semantics", "pairs": 3,
                                                   "accuracy": 1.0}
    assert [(p["UID"], p["pairID"], p["correct"]) for p in data["pairs"]] == [
        (p.uid, p.pair_id, bool(c)) for p, c in zip(pairs, result.correct, strict=True)]


def test_evaluate_blimp_with_a_stub_scorer(monkeypatch, folder):
    """Shorter sentences score higher: the good one wins where it is shorter, loses where longer, ties otherwise."""
    def by_length(model, tokenizer, family, sentences, *, max_tokens_per_batch, on_progress):
        assert on_progress is None  # the tests' output is no terminal: no bar to advance
        return -np.array([len(s) for s in sentences], dtype=float)

    monkeypatch.setattr(blimp_pll, "pll_scores", by_length)
    result = evaluate_blimp(load_pretrained(folder), FIXTURE, progress=True)
    expected = [len(p.good) < len(p.bad) for p in load_blimp(FIXTURE)]
    assert result.correct.tolist() == expected
    assert result.micro_accuracy == pytest.approx(np.mean(expected)) and result.seconds >= 0
    gpt2 = result.published["GPT-2"]
    assert gpt2.paradigms == 3 and gpt2.macro == pytest.approx((0.994 + 0.948 + 0.785) / 3)
    assert gpt2.terms == {"anaphor_agreement": 0.994, "binding": 0.948, "npi_licensing": 0.785}


# ---------------------------------------------------------------------------------------------------------------
# published models


def test_published_reads_the_paradigm_rows_and_skips_overall():
    published = published_blimp(FIXTURE)
    assert list(published) == ["5-gram", "LSTM", "Transformer-XL", "GPT-2"]
    assert published["LSTM"] == {"anaphor_gender_agreement": 0.882, "principle_A_case_2": 0.873,
                                 "only_npi_scope": 0.364}
    assert published_blimp(FIXTURE / "data") == published  # from the paradigm folder too
    summaries = published_summaries(published, {"only_npi_scope": "npi_licensing", "unknown": "x"})
    assert summaries["5-gram"].macro == 0.298 and summaries["5-gram"].paradigms == 1
    assert published_terms(FIXTURE) == {"anaphor_gender_agreement": "anaphor_agreement",
                                        "principle_A_case_2": "binding", "only_npi_scope": "npi_licensing"}


# ---------------------------------------------------------------------------------------------------------------
# (d) the subsample


def test_the_subsample_is_fixed_by_the_seed_and_takes_min_n_available():
    def chosen(n, seed, folder=FIXTURE):
        return [(p.uid, p.pair_id) for p in load_blimp(folder, per_paradigm=n, seed=seed)]

    assert chosen(2, 0) == chosen(2, 0)
    for n in (1, 2, 4, 100):
        counts = {uid: sum(u == uid for u, _ in chosen(n, 0)) for uid in PARADIGMS}
        assert counts == {uid: min(n, available) for uid, available in PARADIGMS.items()}
    assert len({tuple(chosen(2, seed)) for seed in range(6)}) > 1  # the seed matters
    assert set(chosen(2, 3)) <= set(chosen(3, 3))  # a larger sample keeps the smaller one's pairs
    assert chosen(100, 0) == [(p.uid, p.pair_id) for p in load_blimp(FIXTURE)]


def test_the_subsample_does_not_depend_on_line_order(tmp_path):
    for path in (FIXTURE / "data").glob("*.jsonl"):
        lines = path.read_text().splitlines(keepends=True)
        random.Random(0).shuffle(lines)
        (tmp_path / path.name).write_text("".join(reversed(lines)))
    first = {(p.uid, p.pair_id) for p in load_blimp(FIXTURE, per_paradigm=2, seed=5)}
    assert {(p.uid, p.pair_id) for p in load_blimp(tmp_path, per_paradigm=2, seed=5)} == first


def test_the_folder_may_be_the_data_root_the_release_or_its_data_folder(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "blimp")
    expected = load_blimp(FIXTURE)
    assert load_blimp(tmp_path) == load_blimp(tmp_path / "blimp") == load_blimp(tmp_path / "blimp" / "data") == expected
    assert [p.uid for p in expected[:5]] == ["anaphor_gender_agreement"] * 5  # files sorted by name


# ---------------------------------------------------------------------------------------------------------------
# (e) bad input


def paradigm(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "data" / "broken.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


GOOD_LINE = (FIXTURE / "data" / "anaphor_gender_agreement.jsonl").read_text().splitlines()[0]


@pytest.mark.parametrize(("bad", "message"), [
    ('{"sentence_good": "A cat.",', "not valid JSON"),
    ('["a", "list"]', "expected a JSON object, got list"),
    (json.dumps({k: v for k, v in json.loads(GOOD_LINE).items() if k != "sentence_bad"}), "missing key sentence_bad"),
    (json.dumps(json.loads(GOOD_LINE) | {"sentence_good": 3}), "sentence_good must be a string, got 3"),
    (json.dumps(json.loads(GOOD_LINE) | {"sentence_bad": " "}), "sentence_bad is empty"),
    (GOOD_LINE, "pair 0 of paradigm anaphor_gender_agreement was already read at .*broken.jsonl:1"),
])
def test_a_bad_line_is_named_by_file_and_line(tmp_path, bad, message):
    path = paradigm(tmp_path, GOOD_LINE, "", bad)
    with pytest.raises(BvrError, match=rf"^{path}:3: {message}"):
        load_blimp(tmp_path)


def test_empty_or_missing_folders_say_what_was_expected(tmp_path):
    with pytest.raises(BvrError, match="no BLiMP paradigm files"):
        load_blimp(tmp_path)
    shutil.copy(FIXTURE / "models_summary.jsonl", tmp_path)  # the summary is not a paradigm
    with pytest.raises(BvrError, match=r"no BLiMP paradigm files \(PARADIGM.jsonl\).*data/"):
        load_blimp(tmp_path)
    with pytest.raises(BvrError, match="no such folder"):
        load_blimp(tmp_path / "nowhere")
    empty = paradigm(tmp_path, "")
    with pytest.raises(BvrError, match=f"^{empty}: no pairs"):
        load_blimp(tmp_path)
    with pytest.raises(BvrError, match="per_paradigm: must be at least 1"):
        load_blimp(FIXTURE, per_paradigm=0)


def test_a_bad_summary_line_is_named(tmp_path):
    lines = (FIXTURE / "models_summary.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace('"txl":0.953', '"txl":95.3')
    (tmp_path / "models_summary.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(BvrError, match=r"models_summary.jsonl:2: txl must be an accuracy in \[0, 1\], got 95.3"):
        published_blimp(tmp_path)
    (tmp_path / "elsewhere" / "deeper").mkdir(parents=True)
    with pytest.raises(BvrError, match="no models_summary.jsonl here, in its parent or in blimp/"):
        published_blimp(tmp_path / "elsewhere" / "deeper")


# ---------------------------------------------------------------------------------------------------------------
# (f) the command line


def test_cli_scores_a_saved_model_and_writes_json(folder, tmp_path, monkeypatch):
    shutil.copytree(FIXTURE, tmp_path / "data" / "blimp")
    monkeypatch.setenv("BVR_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "blimp.json"
    result = CliRunner().invoke(cli.app, ["blimp", str(folder), "--per-paradigm", "2", "--seed", "1",
                                          "--json", str(out)])
    assert result.exit_code == 0, result.output
    for text in ("6 pairs in 3 paradigms (2 per paradigm, seed 1)", "12 sentences", "macro accuracy", "GPT-2",
                 "chance", "50.0%", "npi_licensing", "micro accuracy"):
        assert text in result.output, text
    data = json.loads(out.read_text())
    assert len(data["pairs"]) == 6 and "blimp/macro_accuracy" in data["metrics"]
    assert data["published"]["GPT-2"]["paradigms"] == 3
    direct = evaluate_blimp(load_pretrained(folder), FIXTURE, per_paradigm=2, seed=1)
    assert data["metrics"] == pytest.approx(direct.metrics())


def test_cli_without_a_data_folder_is_a_one_line_error(folder, monkeypatch, capsys):
    monkeypatch.delenv("BVR_DATA_DIR", raising=False)
    monkeypatch.setattr("sys.argv", ["bvr", "blimp", str(folder)])
    with pytest.raises(SystemExit) as info:
        cli.main()
    assert info.value.code == 2
    assert "--data-dir: no data folder" in capsys.readouterr().err
