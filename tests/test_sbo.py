"""SpanBERT's span-boundary objective: the boundaries found from the labels, the loss against a plain per-token
implementation, its gradient path, its size, logging through a real run, exact resume, and export without it."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from bvr.config import load_config
from bvr.errors import BvrError
from bvr.model import EncoderConfig, PretrainingModel
from bvr.model.heads import span_boundaries
from bvr.model.hf import export_hf
from bvr.pretrained import load_pretrained
from bvr.pretraining.run import pretrain
from tests.test_pretrain import assert_same_weights, config, killed_then_resumed, weights

IGNORE = -100


def small_config(family: str = "bert", sbo: bool = False) -> EncoderConfig:
    return EncoderConfig(family=family, vocab_size=50, hidden_size=16, num_layers=2, num_heads=2,
                         intermediate_size=32, max_position_embeddings=40, pad_token_id=0 if family == "bert" else 1,
                         sbo=sbo)


def test_boundaries_of_several_runs_ends_and_padding():
    # Row 0: runs 1-2 and 4 (boundaries 0|3 and 3|5); row 1: a run at the very start and one at the very end
    # (clamped to themselves); row 2: a run just before padding (its right boundary is the first pad position).
    labels = torch.tensor([
        [IGNORE, 9, 9, IGNORE, 9, IGNORE, IGNORE, IGNORE],
        [9, 9, IGNORE, IGNORE, IGNORE, IGNORE, 9, 9],
        [IGNORE, IGNORE, 9, 9, 9, IGNORE, IGNORE, IGNORE],
    ])
    left, right = span_boundaries(labels)
    masked = labels.ne(IGNORE)
    assert left[masked].tolist() == [0, 0, 3, 0, 0, 5, 5, 1, 1, 1]
    assert right[masked].tolist() == [3, 3, 5, 2, 2, 7, 7, 5, 5, 5]
    positions = torch.arange(8).expand(3, 8)
    assert torch.equal(left[~masked], positions[~masked]) and torch.equal(right[~masked], positions[~masked])


def _reference_sbo_loss(model: PretrainingModel, input_ids, labels, attention_mask) -> torch.Tensor:
    """The objective written out token by token: for each masked token, walk to its span's ends."""
    hidden = model.encoder(input_ids, attention_mask)  # (batch, seq, hidden)
    losses = []
    for b in range(labels.shape[0]):
        for i in range(labels.shape[1]):
            if labels[b, i] == IGNORE:
                continue
            s = i
            while s > 0 and labels[b, s - 1] != IGNORE:
                s -= 1
            e = i
            while e < labels.shape[1] - 1 and labels[b, e + 1] != IGNORE:
                e += 1
            logits = model.sbo(hidden[b, s - 1][None], hidden[b, e + 1][None], torch.tensor([i - s]))
            losses.append(F.cross_entropy(logits, labels[b, i][None]))
    return torch.stack(losses).mean()


@pytest.mark.parametrize(("family", "nsp"), [("bert", True), ("bert", False), ("roberta", False)])
def test_sbo_loss_equals_the_token_by_token_definition(family, nsp):
    torch.manual_seed(0)
    model = PretrainingModel(small_config(family, sbo=True), sentence_head=nsp).eval()
    input_ids = torch.randint(5, 50, (3, 12))
    input_ids[:, 0], input_ids[:, -1] = 2, 3
    attention_mask = torch.ones_like(input_ids)
    attention_mask[2, 9:] = 0
    labels = torch.full_like(input_ids, IGNORE)
    for b, i in [(0, 2), (0, 3), (0, 4), (0, 7), (1, 1), (1, 9), (1, 10), (2, 4), (2, 5)]:
        labels[b, i] = input_ids[b, i]
    sentence_labels = torch.tensor([0, 1, 0]) if nsp else None
    out = model.pretraining_loss(input_ids, labels, attention_mask, None, sentence_labels)
    expected = _reference_sbo_loss(model, input_ids, labels, attention_mask)
    torch.testing.assert_close(out.sbo_loss, expected, atol=1e-5, rtol=1e-5)
    total = out.mlm_loss + out.sbo_loss + (out.sentence_loss if nsp else 0)
    torch.testing.assert_close(out.loss, total)
    # The MLM loss is the same with or without the head: the sparse forward only selects more rows.
    torch.manual_seed(0)
    plain = PretrainingModel(small_config(family), sentence_head=nsp).eval()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("sbo.")})
    plain_loss = plain.pretraining_loss(input_ids, labels, attention_mask, None, sentence_labels).mlm_loss
    torch.testing.assert_close(plain_loss, out.mlm_loss, atol=1e-5, rtol=1e-5)


def test_the_sbo_gradient_reaches_the_encoder_through_the_boundaries():
    torch.manual_seed(1)
    model = PretrainingModel(small_config(sbo=True))
    input_ids = torch.randint(5, 50, (2, 10))
    labels = torch.full_like(input_ids, IGNORE)
    labels[0, 3:6] = input_ids[0, 3:6]
    labels[1, 5] = input_ids[1, 5]
    model.pretraining_loss(input_ids, labels).sbo_loss.backward()
    last = model.encoder.encoder.layer[-1]
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in last.parameters())
    assert model.sbo.position_embeddings.weight.grad[:3].abs().sum() > 0  # offsets 0, 1, 2 of the 3-token span
    assert model.sbo.position_embeddings.weight.grad[3:].abs().sum() == 0


def test_sbo_head_size():
    cfg = small_config()
    h, v, p = cfg.hidden_size, cfg.vocab_size, cfg.max_position_embeddings
    expected = p * h + (3 * h * h + h) + 2 * h + (h * h + h) + 2 * h + v  # positions, two layers, LayerNorms, bias
    plain = sum(t.numel() for t in PretrainingModel(cfg).parameters())
    with_sbo = sum(t.numel() for t in PretrainingModel(dataclasses.replace(cfg, sbo=True)).parameters())
    assert with_sbo - plain == expected  # the decoder weight is the tied word embedding, not counted again


def test_export_leaves_the_sbo_head_out_and_loads_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(2)
    ours = PretrainingModel(small_config(sbo=True)).eval()
    folder = export_hf(ours, None, tmp_path / "export")
    reference, info = transformers.AutoModelForMaskedLM.from_pretrained(folder, output_loading_info=True)
    assert not any(info.get(kind) for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    input_ids = torch.randint(5, 50, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(reference.eval()(input_ids).logits, ours(input_ids).mlm_logits,
                                   atol=1e-5, rtol=1e-4)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    from tests.test_prepare import write_wiki_corpus

    return write_wiki_corpus(tmp_path_factory.mktemp("data"), documents=60)


def test_sbo_run_logs_its_loss_and_resumes_exactly(data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    overrides = ["training.max_steps=20", "model.sbo=true", "masking.scheme=span", "data.input_format=full-sentences",
                 "data.sentence_objective=none"]
    full = pretrain(config(data_dir, tmp_path / "a", *overrides), progress=False)
    m = full.metrics
    assert m["train/sbo_loss"] > 0 and m["val/sbo_loss"] > 0 and 0.0 <= m["train/sbo_acc"] <= 1.0
    assert any(key.startswith("model.sbo.") for key in weights(full.run_dir))  # kept in the checkpoint to resume
    loaded = load_pretrained(full.run_dir).model  # fine-tuning starts from the exported encoder, without the head
    assert not loaded.sbo_enabled and not any(key.startswith("sbo.") for key in loaded.state_dict())

    resumed = killed_then_resumed(config(data_dir, tmp_path / "b", *overrides), tmp_path, 9)
    assert_same_weights(full.run_dir, resumed.run_dir)


def test_sbo_must_be_a_boolean():
    with pytest.raises(BvrError, match="model.sbo"):
        load_config(overrides=["model.sbo=maybe"])
