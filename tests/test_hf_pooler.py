"""A stored pooler is loaded (issue 35, item 8): a ``BertModel`` folder (pooler, no NSP head) saved by transformers
is fine-tuned by bvr from its stored pooler, as ``BertForSequenceClassification`` is; the sequence-classification
logits agree to 1e-5, and so do they after two AdamW steps on the same batch. A roberta folder's pooler stays unused,
as in transformers' roberta classes (their head draws its own dense + tanh)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from bvr.model.hf import load_hf
from bvr.pretrained import load_pretrained
from bvr.tasks.kinds import KINDS
from bvr.tasks.module import build_model
from bvr.tasks.registry import get_task
from bvr.tasks.source import EncoderSource
from bvr.tokenization import save_tokenizer, train_tokenizer
from bvr.training.optim import adamw
from tests.test_hf import randomize

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["the cat sat on the mat", "a dog ran in the park", "it was a good film", "it was not a good film",
         "the plot is thin but the acting is fine", "nothing happens for two hours"] * 4
ATOL = 1e-5
SST2 = get_task("sst2")


def _bert_model_folder(folder: Path, dropout: float) -> Path:
    """A random 2-layer, hidden-32 ``BertModel`` (pooler included, weights redrawn at scale 0.2) saved by
    transformers with a bvr WordPiece tokenizer beside it."""
    tokenizer = train_tokenizer("bert", TEXTS, vocab_size=120, min_frequency=1, show_progress=False)
    config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                                     pad_token_id=0, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    torch.manual_seed(0)
    model = transformers.BertModel(config)
    randomize(model, seed=1)
    model.save_pretrained(folder)
    save_tokenizer(tokenizer, "bert", folder)
    return folder


def _batch(vocab: int) -> dict[str, torch.Tensor]:
    """Four two-segment sequences, three right-padded, with labels."""
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(5, vocab, (4, 14), generator=gen)
    mask = torch.ones_like(ids)
    for row, length in ((1, 10), (2, 6), (3, 3)):
        ids[row, length:] = 0
        mask[row, length:] = 0
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types * mask,
            "labels": torch.tensor([0, 1, 1, 0])}


def _both(folder: Path):
    """bvr's fine-tuning model for SST-2 (seed 0), loaded as ``bvr finetune`` loads it, and transformers'
    ``BertForSequenceClassification`` from the same folder with bvr's output layer copied in."""
    encoder = EncoderSource(load_pretrained(folder, need_mlm_head=False), from_scratch=False).build(0)
    ours = build_model(encoder, SimpleNamespace(spec=SST2), seed=0)
    theirs = transformers.BertForSequenceClassification.from_pretrained(folder, num_labels=SST2.num_labels)
    with torch.no_grad():
        theirs.classifier.weight.copy_(ours.head.out.weight)
        theirs.classifier.bias.copy_(ours.head.out.bias)
    return ours, theirs


def _logits(ours, theirs, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    ours.eval()
    theirs.eval()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        return ours(inputs), theirs(**inputs).logits


def test_a_bert_model_folder_keeps_its_pooler_and_classifies_as_transformers(tmp_path):
    folder = _bert_model_folder(tmp_path / "bert", dropout=0.1)
    stored = load_file(folder / "model.safetensors")
    assert "pooler.dense.weight" in stored and not any(key.startswith("cls.") for key in stored)
    ours, theirs = _both(folder)
    assert torch.equal(ours.head.pooler.dense.weight, stored["pooler.dense.weight"])
    assert torch.equal(ours.head.pooler.dense.bias, stored["pooler.dense.bias"])
    mine, reference = _logits(ours, theirs, _batch(theirs.config.vocab_size))
    torch.testing.assert_close(mine, reference, rtol=0, atol=ATOL)


def test_two_adamw_steps_match_transformers(tmp_path):
    """The same AdamW (bvr's groups: no decay on biases and LayerNorms, its linear schedule) and the same batch, with
    dropout off in the config, move both models to the same logits."""
    folder = _bert_model_folder(tmp_path / "bert", dropout=0.0)
    ours, theirs = _both(folder)
    batch = _batch(theirs.config.vocab_size)
    optimizers = [adamw(model.named_parameters(), learning_rate=1e-3, weight_decay=0.01, betas=(0.9, 0.999),
                        eps=1e-6, warmup_steps=0, max_steps=10, fused=False)["optimizer"] for model in (ours, theirs)]
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    for _ in range(2):
        ours.train()
        theirs.train()
        losses = (KINDS[SST2.kind].loss(ours(inputs), batch), theirs(**inputs, labels=batch["labels"]).loss)
        torch.testing.assert_close(losses[0], losses[1], rtol=0, atol=ATOL)
        for loss, optimizer in zip(losses, optimizers, strict=True):
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        mine, reference = _logits(ours, theirs, batch)
        torch.testing.assert_close(mine, reference, rtol=0, atol=ATOL)
    torch.testing.assert_close(ours.head.pooler.dense.weight, theirs.bert.pooler.dense.weight, rtol=0, atol=ATOL)


def test_a_roberta_folders_pooler_stays_unused(tmp_path):
    config = transformers.RobertaConfig(vocab_size=60, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                        intermediate_size=64, max_position_embeddings=40, pad_token_id=1,
                                        type_vocab_size=1, layer_norm_eps=1e-5)
    transformers.RobertaModel(config).save_pretrained(tmp_path)
    model, _ = load_hf(tmp_path, need_mlm_head=False)
    assert model.encoder.pooler is None
