"""The encoder and pretraining heads alone: shapes, sparse prediction, positions, padding, tying, sizes, init."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bvr.config import PRESETS_DIR, ModelConfig, load_config
from bvr.errors import BvrError
from bvr.model import EncoderConfig, PretrainingModel, count_parameters, cpu, fast, losses
from bvr.model.cpu import dropout
from bvr.model.encoder import Encoder, init_weights, initialize
from bvr.model.losses import linear_cross_entropy
from tests.test_architecture import ROOT, imports_of

VOCAB = 101
PAD = {"bert": 0, "roberta": 1}
FAMILY_NSP = [("bert", True), ("bert", False), ("roberta", False), ("roberta", True)]


def small_config(family: str, **overrides) -> EncoderConfig:
    fields = {"vocab_size": VOCAB, "hidden_size": 32, "num_layers": 2, "num_heads": 4, "intermediate_size": 37,
              "max_position_embeddings": 40, "pad_token_id": PAD[family]}
    return EncoderConfig(family=family, **{**fields, **overrides})


def preset_encoder(name: str, family: str, vocab_size: int, pad_token_id: int, **overrides) -> EncoderConfig:
    """An encoder of a shipped preset's sizes (``experiments/presets/NAME.yaml``), its other knobs at their defaults
    (post-LayerNorm, BERT's initialisation) unless ``overrides`` set them."""
    model = load_config(preset=name).model
    sizes = {key: getattr(model, key) for key in ("num_layers", "hidden_size", "num_heads", "intermediate_size")}
    return EncoderConfig(family=family, vocab_size=vocab_size, pad_token_id=pad_token_id, **{**sizes, **overrides})


def build(family: str, sentence_head: bool, seed: int = 0, **overrides) -> PretrainingModel:
    torch.manual_seed(seed)
    return PretrainingModel(small_config(family, **overrides), sentence_head=sentence_head)


def padded_batch(family: str, seed: int = 1) -> dict[str, torch.Tensor]:
    """Three sequences of lengths 12, 9 and 5 (right-padded), two segments, a few labelled positions per row."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (3, 12), generator=gen)
    mask = torch.ones_like(ids)
    for row, length in ((1, 9), (2, 5)):
        ids[row, length:] = PAD[family]
        mask[row, length:] = 0
    types = torch.zeros_like(ids)
    types[:, 3:] = 1
    types[mask == 0] = 0
    labels = torch.full_like(ids, -100)
    for row, col in ((0, 1), (0, 7), (0, 11), (1, 2), (1, 8), (2, 4)):
        labels[row, col] = int(torch.randint(5, VOCAB, (1,), generator=gen))
    if family == "roberta":
        types = None  # one token type, as roberta-base
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "labels": labels,
            "sentence_labels": torch.tensor([0, 1, 1])}


# ---------------------------------------------------------------------------------------------------------------
# Shapes and sparse prediction


@pytest.mark.parametrize(("family", "nsp"), FAMILY_NSP)
def test_output_shapes(family, nsp):
    model = build(family, nsp).eval()
    batch = padded_batch(family)
    dense = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    sparse = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels=batch["labels"])
    assert dense.hidden.shape == (3, 12, 32)
    assert dense.mlm_logits.shape == (3, 12, VOCAB)
    assert dense.mlm_targets is None
    assert sparse.mlm_logits.shape == (6, VOCAB)
    assert sparse.mlm_targets.tolist() == batch["labels"][batch["labels"] != -100].tolist()
    assert (dense.sentence_logits.shape == (3, 2)) if nsp else dense.sentence_logits is None
    assert model.encoder(batch["input_ids"]).shape == (3, 12, 32)


@pytest.mark.parametrize(("family", "nsp"), FAMILY_NSP)
def test_sparse_logits_equal_dense_at_masked_positions(family, nsp):
    model = build(family, nsp).eval()
    batch = padded_batch(family)
    args = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    masked = batch["labels"] != -100
    with torch.no_grad():
        dense = model(*args).mlm_logits[masked]  # (n_masked, vocab)
        sparse = model(*args, labels=batch["labels"])
        # The training path also runs the last layer at the masked tokens only.
        selected = model.mlm_head(model.encoder.forward_selected(batch["input_ids"], masked, *args[1:]))
    torch.testing.assert_close(sparse.mlm_logits, dense, rtol=0, atol=1e-6)
    torch.testing.assert_close(selected, dense, rtol=0, atol=1e-5)
    assert torch.equal(sparse.mlm_targets, batch["labels"][masked])


@pytest.mark.parametrize(("family", "nsp"), FAMILY_NSP)
def test_pretraining_loss_is_cross_entropy_of_dense_logits(family, nsp):
    model = build(family, nsp).eval()
    batch = padded_batch(family)
    with torch.no_grad():
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        result = model.pretraining_loss(**batch)
    selected = batch["labels"] != -100
    expected_mlm = F.cross_entropy(out.mlm_logits[selected], batch["labels"][selected])
    torch.testing.assert_close(result.mlm_loss, expected_mlm, rtol=1e-5, atol=1e-5)
    assert result.n_masked == int(selected.sum())
    assert 0.0 <= float(result.mlm_accuracy) <= 1.0
    if nsp:
        expected_nsp = F.cross_entropy(out.sentence_logits, batch["sentence_labels"])
        torch.testing.assert_close(result.sentence_loss, expected_nsp, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(result.loss, expected_mlm + expected_nsp, rtol=1e-5, atol=1e-5)
    else:
        assert result.sentence_loss is None and result.sentence_accuracy is None
        torch.testing.assert_close(result.loss, expected_mlm, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("family", "nsp"), [("bert", True), ("roberta", False)])
def test_pretraining_loss_gradients_equal_the_dense_path(family, nsp):
    """The sparse last layer and the fused cross-entropy give the textbook gradients."""
    model = build(family, nsp).eval()  # no dropout: both paths see the same function
    batch = padded_batch(family)
    model.pretraining_loss(**batch).loss.backward()
    sparse_grads = {name: param.grad.clone() for name, param in model.named_parameters()}
    model.zero_grad()
    out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    selected = batch["labels"] != -100
    loss = F.cross_entropy(out.mlm_logits[selected], batch["labels"][selected])
    if nsp:
        loss = loss + F.cross_entropy(out.sentence_logits, batch["sentence_labels"])
    loss.backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(sparse_grads[name], param.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("chunk", [4096, 16, 7])  # one slice; 50 words as 16+16+16+2; as 7-row slices
def test_linear_cross_entropy_equals_functional(monkeypatch, chunk):
    monkeypatch.setattr(losses, "VOCAB_CHUNK", chunk)
    gen = torch.Generator().manual_seed(0)
    x, weight, bias = (torch.randn(shape, generator=gen, requires_grad=True) for shape in ((9, 8), (50, 8), (50,)))
    targets = torch.randint(0, 50, (9,), generator=gen)
    targets[:4] = F.linear(x, weight, bias)[:4].argmax(-1)  # four rows right, so the accuracy is not trivially 0
    targets[4], targets[5] = 0, 49  # the first and last word
    loss, accuracy = linear_cross_entropy(x, weight, bias, targets)
    (loss * 3).backward()
    grads = [t.grad.clone() for t in (x, weight, bias)]
    for t in (x, weight, bias):
        t.grad = None
    logits = F.linear(x, weight, bias)
    (F.cross_entropy(logits, targets) * 3).backward()
    torch.testing.assert_close(loss, F.cross_entropy(logits, targets))
    assert accuracy == (logits.argmax(-1) == targets).float().mean() >= 4 / 9
    for got, t in zip(grads, (x, weight, bias), strict=True):
        torch.testing.assert_close(got, t.grad)


def test_linear_cross_entropy_is_finite_when_one_slice_dwarfs_the_others(monkeypatch):
    """Slices are softmaxed against their own maxima and rescaled: a slice 1,000 nats below another underflows
    to zero weight instead of overflowing, and the loss still equals the functional one."""
    monkeypatch.setattr(losses, "VOCAB_CHUNK", 4)
    x = torch.ones(2, 1, requires_grad=True)
    weight = torch.tensor([[0.0], [1.0], [2.0], [3.0], [-1000.0], [-1001.0], [-999.0], [-998.0]], requires_grad=True)
    bias = torch.zeros(8, requires_grad=True)
    targets = torch.tensor([3, 6])
    loss, _ = linear_cross_entropy(x, weight, bias, targets)
    loss.backward()
    expected = F.cross_entropy(F.linear(x.detach(), weight.detach(), bias.detach()), targets)
    torch.testing.assert_close(loss, expected)
    assert torch.isfinite(weight.grad).all() and torch.isfinite(x.grad).all()


def test_pretraining_loss_needs_sentence_labels_with_a_sentence_head():
    model = build("bert", sentence_head=True)
    batch = padded_batch("bert")
    with pytest.raises(ValueError, match="sentence_labels"):
        model.pretraining_loss(batch["input_ids"], batch["labels"], batch["attention_mask"])


def test_sentence_labels_of_minus_100_are_ignored():
    model = build("bert", sentence_head=True).eval()
    batch = padded_batch("bert")
    with torch.no_grad():
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        partial = model.pretraining_loss(**{**batch, "sentence_labels": torch.tensor([0, -100, 1])})
        none = model.pretraining_loss(**{**batch, "sentence_labels": torch.full((3,), -100)})
    expected = F.cross_entropy(out.sentence_logits[[0, 2]], torch.tensor([0, 1]))
    torch.testing.assert_close(partial.sentence_loss, expected, rtol=1e-5, atol=1e-6)
    assert partial.n_sentence == 2 and none.n_sentence == 0
    assert none.sentence_loss.item() == 0.0 and torch.isfinite(none.loss)


def test_no_masked_token_gives_zero_loss_not_nan():
    model = build("bert", sentence_head=False)
    ids = torch.randint(5, VOCAB, (2, 6))
    result = model.pretraining_loss(ids, torch.full_like(ids, -100))
    assert result.n_masked == 0 and result.loss.item() == 0.0
    result.loss.backward()  # still part of the graph


# ---------------------------------------------------------------------------------------------------------------
# Positions and padding


def test_roberta_position_ids_count_real_tokens_after_the_padding_offset():
    model = build("roberta", sentence_head=False)
    pad = PAD["roberta"]
    ids = torch.tensor([[0, 7, 8, 2], [0, 9, 2, pad]])
    expected = torch.tensor([[2, 3, 4, 5], [2, 3, 4, pad]])  # offset pad + 1; pad tokens get pad itself
    assert torch.equal(model.encoder.embeddings.position_ids(ids), expected)
    assert model.config.position_offset == 2 and model.config.max_tokens == 38


def test_bert_position_ids_start_at_zero_whatever_the_padding():
    model = build("bert", sentence_head=False)
    ids = torch.tensor([[101, 7, 8, 102], [101, 9, 102, 0]])
    assert model.encoder.embeddings.position_ids(ids).tolist() == [[0, 1, 2, 3]]


def test_one_position_rule_for_the_section_and_the_encoder():
    """roberta numbers positions after the padding id: the ``model`` section counts with the family's own padding
    id (the tokenizer is not trained yet), the encoder with its tokenizer's; bert counts from 0 whatever the pad."""
    for family, tokens in (("bert", 512), ("roberta", 510)):
        section = ModelConfig(family=family)
        assert section.max_tokens == EncoderConfig.from_model(section, 1000, PAD[family]).max_tokens == tokens
    assert EncoderConfig(family="roberta", vocab_size=1000, pad_token_id=0).max_tokens == 511
    assert EncoderConfig(family="roberta", vocab_size=1000, max_position_embeddings=514).max_tokens == 512
    assert EncoderConfig(family="bert", vocab_size=1000, pad_token_id=3).max_tokens == 512


@pytest.mark.parametrize(("family", "nsp"), FAMILY_NSP)
def test_more_padding_does_not_change_real_tokens(family, nsp):
    model = build(family, nsp).eval()
    batch = padded_batch(family)
    extra = 5
    ids = F.pad(batch["input_ids"], (0, extra), value=PAD[family])
    mask = F.pad(batch["attention_mask"], (0, extra), value=0)
    types = None if batch["token_type_ids"] is None else F.pad(batch["token_type_ids"], (0, extra), value=0)
    with torch.no_grad():
        short = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        long = model(ids, mask, types)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(long.hidden[:, :12][real], short.hidden[real], rtol=0, atol=1e-5)
    if nsp:
        torch.testing.assert_close(long.sentence_logits, short.sentence_logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("training", [True, False])
def test_an_all_padding_row_stays_finite(training):
    model = build("bert", sentence_head=True).train(training)
    batch = padded_batch("bert")
    batch["attention_mask"][2] = 0
    batch["labels"][2] = -100
    result = model.pretraining_loss(**batch)
    result.loss.backward()
    assert torch.isfinite(result.loss)
    assert all(torch.isfinite(param.grad).all() for param in model.parameters())


def test_unpadded_batch_equals_all_ones_mask():
    model = build("bert", sentence_head=False).eval()
    ids = torch.randint(5, VOCAB, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(model.encoder(ids), model.encoder(ids, torch.ones_like(ids)), rtol=0, atol=0)


def test_cpu_dropout_keeps_one_minus_p_and_rescales():
    x = torch.ones(200_000, requires_grad=True)
    torch.manual_seed(0)
    y = dropout(x, 0.1, training=True)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.005
    # Four elements share one 64-bit draw: each of the four lanes (the top one included) keeps 0.9 on its own,
    # and a lane's decision does not follow its neighbour's.
    lanes = kept.view(-1, 4).float()
    for lane in range(4):
        assert abs(lanes[:, lane].mean().item() - 0.9) < 0.005
    assert abs((lanes[:, 0] * lanes[:, 3]).mean().item() - 0.81) < 0.005
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.9))
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # the gradient goes through the same mask and scale
    torch.manual_seed(0)
    assert torch.equal(dropout(x, 0.1, training=True), y)  # seeded by torch's generator
    assert dropout(x, 0.1, training=False) is x and dropout(x, 0.0, training=True) is x
    odd = dropout(torch.ones(3, 7, 5), 0.5, training=True)  # a size no multiple of 4
    assert odd.shape == (3, 7, 5) and set(odd.unique().tolist()) <= {0.0, 2.0}


def _device_layer(layer, x: torch.Tensor) -> torch.Tensor:
    """A BERT layer in training mode as on a GPU: SDPA with its own dropout, then ``F.dropout`` twice."""
    sa, heads = layer.attention.self, layer.attention.self.num_heads

    def split(t):
        return t.unflatten(-1, (heads, -1)).transpose(1, 2)

    q, k, v = (split(F.linear(x, m.weight, m.bias)) for m in (sa.query, sa.key, sa.value))
    context = F.scaled_dot_product_attention(q, k, v, dropout_p=sa.dropout.p).transpose(1, 2).flatten(2)
    out = layer.attention.output
    a = out.LayerNorm(F.dropout(out.dense(context), out.dropout.p) + x)
    out = layer.output
    return out.LayerNorm(F.dropout(out.dense(F.gelu(layer.intermediate.dense(a))), out.dropout.p) + a)


def test_off_the_cpu_training_attention_is_sdpa_with_its_dropout(monkeypatch):
    """The device path (CUDA and any non-CPU device), taken here on the CPU by replacing ``cpu.cpu_kernels``:
    attention dropout goes to SDPA (its fused kernels), with no mask when nothing is padded, the other dropouts to
    ``F.dropout``, nothing folded into the weights; the numbers are those of that plain form, masks included."""
    model = build("bert", sentence_head=False, dropout=0.3, attention_dropout=0.2).train()
    layer = model.encoder.encoder.layer[0]
    x = torch.randn(3, 11, 32)
    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, **kwargs):
        calls.append((attn_mask, dropout_p))
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, **kwargs)

    monkeypatch.setattr(cpu, "cpu_kernels", lambda tensor: False)
    monkeypatch.setattr(fast.F, "scaled_dot_product_attention", spy)
    assert cpu.folded_scale(0.3, True, x) == 1.0
    torch.manual_seed(7)
    ours = layer(x, None)
    assert calls == [(None, 0.2)]
    torch.manual_seed(7)
    torch.testing.assert_close(ours, _device_layer(layer, x), rtol=1e-5, atol=1e-5)
    ids = torch.randint(5, VOCAB, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    calls.clear()
    model.encoder(ids, mask)
    assert [p for _, p in calls] == [0.2, 0.2] and all(m is not None for m, _ in calls)  # padded: masked
    model.eval()
    calls.clear()
    model.encoder(ids)
    assert calls == [(None, 0.0), (None, 0.0)]


def test_dropout_only_in_training():
    model = build("bert", sentence_head=False)
    ids = torch.randint(5, VOCAB, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    model.train()
    assert not torch.equal(model.encoder(ids, mask), model.encoder(ids, mask))
    model.eval()
    assert torch.equal(model.encoder(ids, mask), model.encoder(ids, mask))


# ---------------------------------------------------------------------------------------------------------------
# Tying, gradients, initialisation


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_decoder_is_tied_to_word_embeddings(family):
    model = build(family, sentence_head=False)
    embedding = model.encoder.embeddings.word_embeddings.weight
    decoder = model.mlm_head.decoder
    assert decoder.weight is embedding
    assert decoder.weight.data_ptr() == embedding.data_ptr()
    assert decoder.bias is model.mlm_head.bias
    model = model.to(torch.float64)  # conversion keeps the tie
    assert model.mlm_head.decoder.weight is model.encoder.embeddings.word_embeddings.weight
    with torch.no_grad():
        model.encoder.embeddings.word_embeddings.weight[3, 0] = 42.0
    assert model.mlm_head.decoder.weight[3, 0] == 42.0


@pytest.mark.parametrize(("family", "nsp"), FAMILY_NSP)
def test_gradients_reach_every_parameter(family, nsp):
    model = build(family, nsp)
    batch = padded_batch(family)
    model.pretraining_loss(**batch).loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_state_dict_keys_follow_hugging_face_names():
    keys = set(build("bert", sentence_head=True).state_dict())
    expected = [
        "bert.embeddings.word_embeddings.weight",
        "bert.embeddings.LayerNorm.weight",
        "bert.encoder.layer.1.attention.self.query.weight",
        "bert.encoder.layer.0.attention.output.dense.bias",
        "bert.encoder.layer.0.attention.output.LayerNorm.weight",
        "bert.encoder.layer.0.intermediate.dense.weight",
        "bert.encoder.layer.0.output.dense.weight",
        "bert.encoder.layer.0.output.LayerNorm.bias",
        "bert.pooler.dense.weight",
        "cls.predictions.transform.dense.weight",
        "cls.predictions.transform.LayerNorm.weight",
        "cls.predictions.bias",
        "cls.predictions.decoder.weight",
        "cls.seq_relationship.weight",
    ]
    assert set(expected) <= keys, set(expected) - keys
    roberta = set(build("roberta", sentence_head=False).state_dict())
    assert {"lm_head.dense.weight", "lm_head.layer_norm.bias", "lm_head.bias"} <= roberta
    assert not any(".pooler." in key or key.startswith("cls.") for key in roberta)


def test_init_is_deterministic_under_a_seed():
    first, again, other = build("bert", True, seed=3), build("bert", True, seed=3), build("bert", True, seed=4)
    for key, value in first.state_dict().items():
        assert torch.equal(value, again.state_dict()[key]), key
    assert not torch.equal(first.encoder.encoder.layer[0].attention.self.query.weight,
                           other.encoder.encoder.layer[0].attention.self.query.weight)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_init_follows_bert(family):
    torch.manual_seed(0)
    model = PretrainingModel(preset_encoder("tiny", family, 2000, PAD[family]), sentence_head=True)
    emb = model.encoder.embeddings
    assert torch.all(emb.word_embeddings.weight[PAD[family]] == 0)
    assert abs(emb.word_embeddings.weight.std().item() - 0.02) < 1e-3
    dense = model.encoder.encoder.layer[-1].intermediate.dense
    assert abs(dense.weight.std().item() - 0.02) < 1e-3 and torch.all(dense.bias == 0)
    assert torch.all(emb.LayerNorm.weight == 1) and torch.all(emb.LayerNorm.bias == 0)
    assert torch.all(model.mlm_head.bias == 0)
    # roberta's position table has a padding row too (pad tokens point at it); bert's does not
    pos_pad = emb.position_embeddings.weight[PAD[family]]
    assert torch.all(pos_pad == 0) if family == "roberta" else torch.any(pos_pad != 0)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_zero_token_type_init_changes_only_the_token_type_table(family):
    bert_way = preset_encoder("tiny", family, 2000, PAD[family])
    torch.manual_seed(0)
    plain = PretrainingModel(bert_way, sentence_head=True)
    torch.manual_seed(0)
    model = PretrainingModel(dataclasses.replace(bert_way, token_type_init="zero"), sentence_head=True)
    assert torch.all(model.encoder.embeddings.token_type_embeddings.weight == 0)
    # Every other parameter is drawn as BERT's init draws it: the recipe changes one table and no draw.
    changed = f"{family}.embeddings.token_type_embeddings.weight"
    for key, value in plain.state_dict().items():
        assert torch.equal(value, model.state_dict()[key]) != (key == changed), key


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_small_budget_layout_drops_the_embedding_norm_and_the_head_transform(family):
    """model.embedding_norm=false feeds the embeddings' sum to the first layer; model.head_transform=false lets the
    tied decoder read the final LayerNorm: the logits are (LN(encoder(sum)) @ E.T + b), nothing else."""
    config = dataclasses.replace(preset_encoder("tiny", family, 300, PAD[family], norm="pre"),
                                 embedding_norm=False, head_transform=False, dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    model = PretrainingModel(config).eval()
    keys = set(model.state_dict())
    assert not any("embeddings.LayerNorm" in key or "transform" in key or "lm_head.dense" in key
                   or "lm_head.layer_norm" in key for key in keys)
    ids = torch.randint(5, 300, (2, 9))
    emb = model.encoder.embeddings
    summed = emb.word_embeddings(ids) + emb.position_embeddings(emb.position_ids(ids)) + emb.token_type_embeddings(
        torch.zeros_like(ids))
    hidden = model.encoder.LayerNorm(model.encoder.encoder(summed))
    expected = hidden @ emb.word_embeddings.weight.T + model.mlm_head.bias
    torch.testing.assert_close(model(ids).mlm_logits, expected)


def test_small_budget_layout_needs_pre_norm():
    with pytest.raises(BvrError) as info:
        EncoderConfig(family="bert", vocab_size=VOCAB, hidden_size=32, num_heads=4, embedding_norm=False)
    assert info.value.where == "model.embedding_norm"
    with pytest.raises(BvrError, match="model.norm=pre"):
        ModelConfig(head_transform=False)


def test_initialize_with_bert_settings_draws_what_init_weights_draws():
    config = preset_encoder("tiny", "bert", 500, 0)
    torch.manual_seed(1)
    ours = Encoder(config)
    initialize(ours, config)
    torch.manual_seed(1)
    bert = Encoder(config)
    bert.apply(lambda module: init_weights(module, config.initializer_range))
    for key, value in bert.state_dict().items():
        assert torch.equal(value, ours.state_dict()[key]), key


# ---------------------------------------------------------------------------------------------------------------
# Sizes


def hand_count(cfg: EncoderConfig, sentence_head: bool) -> dict[str, int]:
    """Parameters by hand: embeddings; per layer 4 H^2 + 2 H I weights with their biases and two LayerNorms."""
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    embedding = (v + cfg.max_position_embeddings + cfg.type_vocab_size) * h
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    mlm_head = (h * h + h) + 2 * h + v  # transform dense, LayerNorm, output bias (decoder tied)
    rest = 2 * h + cfg.num_layers * layer + mlm_head + ((h * h + h) + (2 * h + 2) if sentence_head else 0)
    return {"total": embedding + rest, "embedding": embedding, "non_embedding": rest}


@pytest.mark.parametrize(("family", "nsp"), FAMILY_NSP)
def test_count_parameters_matches_hand_formula(family, nsp):
    model = build(family, nsp)
    counts = count_parameters(model)
    assert counts == hand_count(model.config, nsp)
    assert counts["total"] == sum(p.numel() for p in set(model.parameters()))


@pytest.mark.parametrize("name", sorted(p.stem for p in PRESETS_DIR.glob("*.yaml")))
def test_presets_build_with_their_sizes(name):
    cfg = preset_encoder(name, "bert", 1000, 0)
    model_cfg = load_config(preset=name).model
    layers, hidden, heads, ffn = (getattr(model_cfg, k) for k in ("num_layers", "hidden_size", "num_heads",
                                                                 "intermediate_size"))
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.intermediate_size) == (layers, hidden, heads, ffn)
    if name in ("tiny", "small"):  # building the two largest would only cost time
        model = PretrainingModel(cfg, sentence_head=False)
        assert len(model.encoder.encoder.layer) == layers
        assert model.encoder.encoder.layer[0].intermediate.dense.weight.shape == (ffn, hidden)
        assert count_parameters(model) == hand_count(cfg, sentence_head=False)
    else:
        with torch.device("meta"):
            model = PretrainingModel(cfg, sentence_head=False)
        assert count_parameters(model) == hand_count(cfg, sentence_head=False)


def test_bert_base_has_bert_base_size():
    with torch.device("meta"):
        model = PretrainingModel(preset_encoder("base", "bert", 30_522, 0), sentence_head=True)
    # BERT-base: 110M parameters as published (109.5M encoder + pooler, plus the MLM/NSP heads)
    assert 109_000_000 < count_parameters(model.encoder)["total"] < 110_000_000


def test_embedding_share_grows_with_vocabulary():
    def share(vocab: int) -> float:
        with torch.device("meta"):
            counts = count_parameters(PretrainingModel(preset_encoder("tiny", "roberta", vocab, 1)))
        return counts["embedding"] / counts["total"]

    assert share(50_000) > share(30_000) > 0.5  # at the tiny size the vocabulary is most of the model


# ---------------------------------------------------------------------------------------------------------------
# Configs


def test_family_defaults():
    bert, roberta = small_config("bert"), small_config("roberta")
    assert (bert.type_vocab_size, bert.layer_norm_eps, bert.initializer_range) == (2, 1e-12, 0.02)
    assert (roberta.type_vocab_size, roberta.layer_norm_eps) == (1, 1e-5)


def test_from_model_carries_every_knob_of_the_section():
    model_cfg = ModelConfig(family="roberta", num_layers=2, hidden_size=64, num_heads=2, intermediate_size=128,
                            max_position_embeddings=130, dropout=0.0, attention_dropout=0.05, norm="pre",
                            token_type_init="zero", embedding_norm=False, head_transform=False, sbo=True)
    cfg = EncoderConfig.from_model(model_cfg, vocab_size=500, pad_token_id=1)
    assert {f.name: getattr(cfg, f.name) for f in dataclasses.fields(ModelConfig)} == dataclasses.asdict(model_cfg)
    assert (cfg.vocab_size, cfg.pad_token_id, cfg.max_tokens) == (500, 1, model_cfg.max_tokens)
    assert (cfg.type_vocab_size, cfg.layer_norm_eps, cfg.initializer_range) == (1, 1e-5, 0.02)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"family": "gpt"}, "model.family"),
        ({"num_heads": 5}, "model.num_heads"),
        ({"hidden_size": 0}, "model.hidden_size"),
        ({"dropout": 1.0}, "model.dropout"),
        ({"attention_dropout": -0.1}, "model.attention_dropout"),
        ({"pad_token_id": VOCAB}, "model.pad_token_id"),
        ({"vocab_size": 0, "pad_token_id": 0}, "model.vocab_size"),
        ({"layer_norm_eps": 0.0}, "model.layer_norm_eps"),
        ({"token_type_init": "uniform"}, "model.token_type_init"),
        ({"head_transform": False}, "model.head_transform"),
    ],
)
def test_bad_config_raises_bvr_error_at_the_key(overrides, key):
    fields = {"family": "bert", "vocab_size": VOCAB, "hidden_size": 32, "num_heads": 4, **overrides}
    with pytest.raises(BvrError) as info:
        EncoderConfig(**fields)
    assert info.value.where == key


def test_roberta_positions_must_leave_room_after_the_offset():
    with pytest.raises(BvrError, match="offset") as info:
        EncoderConfig(family="roberta", vocab_size=VOCAB, pad_token_id=1, max_position_embeddings=2)
    assert info.value.where == "model.max_position_embeddings"


# ---------------------------------------------------------------------------------------------------------------
# Layering


def test_model_package_imports_nothing_of_the_configuration_system():
    """The ``model`` section is the model's own dataclass: bvr.config imports it, never the reverse."""
    package = Path(EncoderConfig.__module__.replace(".", "/")).parent
    for path in sorted((ROOT / package).glob("*.py")):
        found = imports_of(path.read_text(encoding="utf-8"), f"bvr.model.{path.stem}", path.name == "__init__.py")
        assert not [name for name in found if name.split(".")[:2] == ["bvr", "config"]], path.name


def test_model_package_imports_no_lightning_mlflow_or_transformers():
    code = ("import sys, bvr.model, bvr.model.hf; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'lightning', 'pytorch_lightning', 'mlflow', "
            "'transformers'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------------------------
# Packed (unpadded) layers


def test_packing_needs_a_twentieth_of_padding(monkeypatch):
    monkeypatch.setattr(fast, "packed_length", lambda count: count)
    mask = torch.ones(4, 10, dtype=torch.long)
    mask[0, 9] = 0  # 1 of 40 padded: not worth packing
    assert fast.Packing.from_mask(mask) is None
    mask[1, 9] = 0  # 2 of 40 = 5%
    packing = fast.Packing.from_mask(mask)
    assert packing.index.tolist() == [i for i in range(40) if i not in (9, 19)]
    x = torch.arange(40.0).view(4, 10, 1)
    assert torch.equal(packing.unpack(packing.pack(x)), x * mask[..., None])
    assert fast.Packing.from_mask(None) is None and fast.Packing.from_mask(torch.ones(2, 3)) is None


def test_packed_length_rounds_with_the_first_padding_positions():
    mask = torch.ones(2, 100, dtype=torch.long)
    mask[0, 60:] = 0
    mask[1, 10:] = 0  # 70 real tokens: packed as 128, with the first 58 padding positions of the rows
    packing = fast.Packing.from_mask(mask)
    assert fast.packed_length(70) == 128 and len(packing.index) == 128
    real = mask.flatten().nonzero().squeeze(1)
    padding = (mask.flatten() == 0).nonzero().squeeze(1)
    assert set(packing.index.tolist()) == set(real.tolist()) | set(padding[:58].tolist())
    assert packing.index.tolist() == sorted(packing.index.tolist())  # row-major, as the grid
    lengths = {fast.packed_length(n) for n in range(1, 4097)}
    assert len(lengths) <= 40  # a few sizes per octave, for the allocator to reuse
    assert all(fast.packed_length(n) - n <= max(63, n // 8) for n in range(1, 4097))
