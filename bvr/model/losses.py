"""Losses shared by pretraining and fine-tuning: the ignored label, cross-entropy over labelled positions, accuracy.

:data:`IGNORE_INDEX` labels the positions no loss reads (the masking collator's unmasked tokens, a tagger's later
sub-tokens and specials, a batch without NSP): one definition for the data, the model and the tasks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bvr.ignore_index import IGNORE_INDEX


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of (n, classes) logits over the targets that are not :data:`IGNORE_INDEX`.

    With no such target the loss is a zero still in the graph, not NaN. The logits are used as given: a caller
    that wants the loss in float32 passes ``logits.float()``.

    >>> logits = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
    >>> round(float(cross_entropy(logits, torch.tensor([0, IGNORE_INDEX]))), 4)
    0.1269
    >>> cross_entropy(logits, torch.tensor([IGNORE_INDEX, IGNORE_INDEX]))
    tensor(0.)
    """
    if not bool(targets.ne(IGNORE_INDEX).any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)


def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Share of the targets that are not :data:`IGNORE_INDEX` whose row's argmax is the target (detached).

    With no such target: a detached zero.

    >>> logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [0.0, 2.0]])
    >>> float(accuracy(logits, torch.tensor([0, 0, IGNORE_INDEX])))
    0.5
    """
    valid = targets.ne(IGNORE_INDEX)
    if not bool(valid.any()):
        return (logits.sum() * 0.0).detach()
    return (logits.detach().argmax(dim=-1) == targets)[valid].float().mean()


VOCAB_CHUNK = 4096
"""Vocabulary rows :func:`linear_cross_entropy` computes at a time (a multiple of 8, for the GEMM's blocking)."""


def _chunk_targets(targets: torch.Tensor, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows whose target id is in [lo, hi), and those ids less ``lo``."""
    here = ((targets >= lo) & (targets < hi)).nonzero().squeeze(1)
    return here, targets[here] - lo


class _LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``x @ weight.T + bias``, computed a slice of the vocabulary at a time.

    ``F.cross_entropy(F.linear(...))`` writes four (n, vocab) tensors, each one more pass over memory. Here each
    :data:`VOCAB_CHUNK`-row slice's logits are written by one GEMM and, still in cache, turned in place into
    exponentials (against the slice's own row maxima) and summed; the slices are combined as in an online softmax,
    and the backward pass turns each slice's exponentials into its gradient in place. Slices also stay under the C
    allocator's large-block threshold (32 MB), so they are reused instead of mapped and page-faulted afresh.

    Each slice is laid out (rows, n), the logits' transpose: on CPU ``weight @ x.T`` runs ~20% faster than
    ``x @ weight.T`` here, and the weight gradient ``grad @ x`` lands in the weight's own layout. A row is right when
    its target's logit is the largest (unlike ``argmax == target`` only on an exact tie).
    """

    @staticmethod
    def forward(ctx, x, weight, bias, targets):
        n, vocab = x.shape[0], weight.shape[0]
        target_logit = torch.empty(n, dtype=torch.float32, device=x.device)
        exps, maxima, sums = [], [], []
        for lo in range(0, vocab, VOCAB_CHUNK):
            hi = min(vocab, lo + VOCAB_CHUNK)
            # (rows, n); fp32 softmax under autocast (the GEMM may give bf16)
            logits = torch.mm(weight[lo:hi], x.t()).float().add_(bias[lo:hi, None])
            here, ids = _chunk_targets(targets, lo, hi)
            target_logit[here] = logits[ids, here]
            maxima.append(logits.amax(dim=0))  # (n,)
            exps.append(logits.sub_(maxima[-1]).exp_())  # in place: the logits are not needed again
            sums.append(exps[-1].sum(dim=0))  # (n,)
        maxima = torch.stack(maxima)  # (chunks, n)
        row_max = maxima.amax(dim=0)  # (n,)
        rescale = (maxima - row_max).exp_()  # each slice's exponentials -> against the row's maximum
        total = (torch.stack(sums) * rescale).sum(dim=0)  # (n,) sum of exp(logit - row_max) over the vocabulary
        loss = (row_max + total.log() - target_logit).mean()
        ctx.save_for_backward(x, weight, targets, rescale / total, *exps)
        accuracy = (target_logit >= row_max).float().mean()
        ctx.mark_non_differentiable(accuracy)
        return loss, accuracy

    @staticmethod
    def backward(ctx, grad_loss, _grad_accuracy):
        x, weight, targets, softmax_scale, *exps = ctx.saved_tensors
        n = x.shape[0]
        # d(mean loss)/d(logits) = (softmax - one_hot) / n, written over each slice's saved exponentials.
        softmax_scale = softmax_scale * (grad_loss / n)  # (chunks, n)
        x_w = x.to(weight.dtype)
        grad_x = torch.zeros(n, weight.shape[1], dtype=weight.dtype, device=x.device)
        grad_weight = torch.empty_like(weight)
        grad_bias = torch.empty(weight.shape[0], dtype=weight.dtype, device=x.device)
        for i, grad in enumerate(exps):
            lo = i * VOCAB_CHUNK
            hi = lo + grad.shape[0]
            grad = grad.mul_(softmax_scale[i])  # (rows, n)
            here, ids = _chunk_targets(targets, lo, hi)
            grad[ids, here] -= grad_loss / n
            grad = grad.to(weight.dtype)
            grad_x.addmm_(grad.t(), weight[lo:hi])  # (n, hidden)
            torch.mm(grad, x_w, out=grad_weight[lo:hi])  # (rows, hidden)
            torch.sum(grad, dim=1, out=grad_bias[lo:hi])
        return grad_x.to(x.dtype), grad_weight, grad_bias, None


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                         targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``F.cross_entropy(F.linear(x, weight, bias), targets)`` and the accuracy, in fewer vocabulary-sized passes.

    ``x`` (n, hidden), ``weight`` (vocab, hidden) (the tied word embedding), ``bias`` (vocab,), ``targets`` (n,).
    The accuracy is not differentiable. No rows give a zero loss still in the graph, not NaN.
    """
    if targets.numel() == 0:
        zero = x.sum() * 0.0
        return zero, zero.detach()
    return _LinearCrossEntropy.apply(x, weight, bias, targets)
