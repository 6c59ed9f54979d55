"""Pseudo-log-likelihood scores (Salazar et al. 2020): each token masked in turn, the log-probabilities of the true
tokens summed, with the masked copies of many sentences batched together; and one BLiMP evaluation of a pretrained
model (:func:`evaluate_blimp`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from tokenizers import Encoding, Tokenizer

from bvr.errors import BvrError
from bvr.evaluation.blimp.pairs import load_blimp, paradigm_files
from bvr.evaluation.blimp.published import published_blimp, published_summaries, summary_file
from bvr.evaluation.blimp.scores import BlimpResult, score_pairs
from bvr.model import PretrainingModel
from bvr.progress import counter
from bvr.tokenization import plain_tokenizer, vocab_info

if TYPE_CHECKING:
    from bvr.pretrained import Pretrained

DEFAULT_TOKENS_PER_BATCH = 16_384
"""Tokens (masked copies x length) per forward pass. On 2 busy CPU cores a 4-layer, 256-wide encoder took 148, 118,
89, 67 and 72 s for the same 1,340 sentences with 2,048, 4,096, 8,192, 16,384 and 32,768; the largest activation is
then 16,384 x intermediate_size floats (64 MB for the tiny preset, 200 MB for base)."""

_LOGITS_PER_CHUNK = 2**24
"""Most (rows x vocabulary) logits held at once (64 MB in float32): with a 50K vocabulary and a batch of very short
sentences, the head's output would otherwise be the largest tensor of the pass."""


class _Batch(NamedTuple):
    """Masked copies of equally long sentences: one copy per scored token, that token replaced by the mask."""

    input_ids: torch.Tensor  # (copies, length) token ids, one mask in each row
    positions: torch.Tensor  # (copies,) where each row's mask is
    targets: torch.Tensor  # (copies,) the true token under each mask
    owners: np.ndarray  # (copies,) index of each copy's sentence
    finished: int  # sentences whose last copy is in this batch (for progress)


def _masked_batches(encodings: Sequence[Encoding], mask_id: int, tokens_per_batch: int) -> Iterator[_Batch]:
    """Every masked copy of every sentence, in batches of one length (so no padding) of about ``tokens_per_batch``;
    a sentence's copies may straddle two batches. Built batch by batch: memory stays that of one batch."""
    lengths = np.array([len(e.ids) for e in encodings])  # (sentences,)
    for length in np.unique(lengths):
        owners = np.flatnonzero(lengths == length)  # (m,) sentences of this length
        ids = np.array([encodings[i].ids for i in owners], dtype=np.int64)  # (m, length)
        # Only what the post-processor added ([CLS]/[SEP], <s>/</s>) is left unscored; [UNK] is scored, as by Salazar.
        scored = np.array([encodings[i].special_tokens_mask for i in owners]) == 0  # (m, length)
        rows, cols = np.nonzero(scored)  # (copies,) each, row-major: a sentence's copies are contiguous
        last = np.append(rows[1:] != rows[:-1], True)  # (copies,) True at each sentence's last copy
        step = max(1, tokens_per_batch // int(length))
        for start in range(0, len(rows), step):
            r, c = rows[start:start + step], cols[start:start + step]
            copies = ids[r]  # (rows, length), a fresh array
            every = np.arange(len(r))
            targets = copies[every, c]
            copies[every, c] = mask_id
            yield _Batch(torch.from_numpy(copies), torch.from_numpy(c), torch.from_numpy(targets), owners[r],
                         int(last[start:start + step].sum()))


def _target_log_probs(model: PretrainingModel, batch: _Batch, device: torch.device) -> np.ndarray:
    """log p(true token | its masked copy) of each row, (copies,) float64, the last layer and the head run only at
    the mask. No attention mask (a batch has one length) and no token types (one segment is type 0 in both families)."""
    ids = batch.input_ids.to(device)  # (copies, length)
    rows = torch.arange(ids.shape[0], device=device)
    selected = torch.zeros(ids.shape, dtype=torch.bool, device=device)
    selected[rows, batch.positions.to(device)] = True  # one position per row, so states come one per row, in order
    states = model.encoder.forward_selected(ids, selected)  # (copies, hidden)
    targets = batch.targets.to(device)
    chunk = max(1, _LOGITS_PER_CHUNK // model.config.vocab_size)
    out = []
    for start in range(0, len(states), chunk):
        logits = model.mlm_head(states[start:start + chunk]).float()  # (chunk, vocab)
        target_logits = logits.gather(1, targets[start:start + chunk, None]).squeeze(1)  # (chunk,)
        out.append(target_logits - logits.logsumexp(dim=1))  # log_softmax at the target, one pass fewer
    return torch.cat(out).double().cpu().numpy()


def pll_scores(model: PretrainingModel, tokenizer: Tokenizer, family: str, sentences: Sequence[str], *,
               max_tokens_per_batch: int = DEFAULT_TOKENS_PER_BATCH,
               on_progress: Callable[[int], None] | None = None) -> np.ndarray:
    """Pseudo-log-likelihood of each sentence (Salazar et al. 2020): ``sum_t log p(s_t | s with s_t masked)`` over
    every token but the special ones the post-processor adds.

    A sentence of n scored tokens costs n forward passes, so the masked copies of all the sentences are batched
    (:func:`_masked_batches`), with dropout off. The tokenizer's own padding and truncation are ignored, and a
    sentence longer than the model's positions is refused. ``on_progress`` gets the sentences finished per batch.
    Returns (len(sentences),) float64 PLLs, natural log; 0 for a sentence with no token to score.
    """
    sentences = list(sentences)
    mask_id = vocab_info(tokenizer, family).mask_id
    # Whole sentences, unpadded: a tokenizer.json that pads or truncates would change every score and hide length.
    encodings = plain_tokenizer(tokenizer).encode_batch_fast(sentences)  # with the special tokens
    max_tokens = model.config.max_tokens
    for index, (encoding, sentence) in enumerate(zip(encodings, sentences, strict=True)):
        if len(encoding.ids) > max_tokens:
            shown = sentence if len(sentence) <= 80 else sentence[:77] + "..."
            raise BvrError(f"{len(encoding.ids)} tokens, more than the model's {max_tokens} positions: {shown!r}",
                           where=f"sentence {index}",
                           hint="pseudo-log-likelihood scores whole sentences and does not truncate; shorten it")
    scores = np.zeros(len(sentences))  # (sentences,)
    device = next(model.parameters()).device
    if on_progress is not None:
        on_progress(sum(1 for e in encodings if 0 not in e.special_tokens_mask))  # nothing to score: done
    was_training = model.training
    model.eval()  # dropout off while scoring; the model's mode is restored afterwards
    try:
        with torch.inference_mode():
            for batch in _masked_batches(encodings, mask_id, max_tokens_per_batch):
                np.add.at(scores, batch.owners, _target_log_probs(model, batch, device))
                if on_progress is not None:
                    on_progress(batch.finished)
    finally:
        model.train(was_training)
    return scores


def evaluate_blimp(pretrained: Pretrained, folder: Path, per_paradigm: int | None = None, seed: int = 0,
                   progress: bool = False, *, max_tokens_per_batch: int = DEFAULT_TOKENS_PER_BATCH) -> BlimpResult:
    """Zero-shot BLiMP accuracy of a pretrained encoder on ``per_paradigm`` pairs of each paradigm (None: all). The
    folder's ``models_summary.jsonl``, when there, fills :attr:`BlimpResult.published` over the same paradigms."""
    pairs = load_blimp(folder, per_paradigm, seed)
    summary = summary_file(paradigm_files(folder)[0].parent)
    sentences = [pair.good for pair in pairs] + [pair.bad for pair in pairs]
    start = time.perf_counter()
    with counter("BLiMP sentences", len(sentences), enabled=progress) as advance:
        scores = pll_scores(pretrained.model, pretrained.tokenizer, pretrained.family, sentences,
                            max_tokens_per_batch=max_tokens_per_batch, on_progress=advance)
    result = score_pairs(pairs, scores[:len(pairs)], scores[len(pairs):], seconds=time.perf_counter() - start)
    if summary is not None:
        result.published = published_summaries(published_blimp(summary.parent), result.paradigm_terms)
    return result
