"""Losses shared by pretraining and fine-tuning: the ignored label, cross-entropy over labelled positions, accuracy.

- :data:`IGNORE_INDEX`: the label of positions no loss reads (the masking collator's unmasked tokens, a tagger's
  later sub-tokens and specials, a batch without NSP). One definition for the data, the model and the tasks.
- :func:`cross_entropy` and :func:`accuracy`: mean cross-entropy and detached accuracy over the labelled targets,
  a zero still in the graph (not NaN) when there are none.
- :func:`linear_cross_entropy`: the sparse MLM head's cross-entropy of ``x @ weight.T + bias`` in fewer
  vocabulary-sized passes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
"""Label of positions that are not predicted (``torch.nn.CrossEntropyLoss``'s default ``ignore_index``)."""


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


class _LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``x @ weight.T + bias``, the logits buffer reused for the softmax and its gradient.

    ``F.cross_entropy(F.linear(...))`` writes the logits, their log-softmax, a zero-filled gradient and the
    log-softmax gradient: four (n, vocab) tensors. Here one buffer holds the logits, then (in place) their
    exponentials, then the gradient, and the accuracy comes from the same pass as the row maxima.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, targets):
        logits = torch.addmm(bias, x, weight.t()).float()  # (n, vocab); fp32 softmax under autocast
        row_max, predicted = logits.max(dim=1)  # (n,), (n,)
        target_logit = logits.gather(1, targets[:, None]).squeeze(1)  # (n,)
        exps = logits.sub_(row_max[:, None]).exp_()  # in place: the logits are not needed again
        sums = exps.sum(dim=1)  # (n,)
        loss = (row_max + sums.log() - target_logit).mean()
        ctx.save_for_backward(x, weight, exps, sums, targets)
        accuracy = (predicted == targets).float().mean()
        ctx.mark_non_differentiable(accuracy)
        return loss, accuracy

    @staticmethod
    def backward(ctx, grad_loss, _grad_accuracy):
        x, weight, exps, sums, targets = ctx.saved_tensors
        n = x.shape[0]
        # d(mean loss)/d(logits) = (softmax - one_hot) / n, written over the saved exponentials.
        grad = exps.mul_((grad_loss / n) / sums[:, None])  # (n, vocab)
        grad[torch.arange(n, device=grad.device), targets] -= grad_loss / n
        grad = grad.to(weight.dtype)
        grad_x = (grad @ weight).to(x.dtype)  # (n, hidden)
        grad_weight = grad.t() @ x.to(weight.dtype)  # (vocab, hidden)
        return grad_x, grad_weight, grad.sum(dim=0), None


def linear_cross_entropy(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``F.cross_entropy(F.linear(x, weight, bias), targets)`` and the accuracy, in fewer vocabulary-sized passes.

    Args:
        x: (n, hidden) decoder inputs.
        weight: (vocab, hidden) decoder weight (the tied word embedding).
        bias: (vocab,) decoder bias.
        targets: (n,) target ids.

    Returns:
        ``(loss, accuracy)``: the mean loss (differentiable) and the share of rows whose argmax is the target
        (not differentiable). No rows give a zero loss still in the graph, not NaN.
    """
    if targets.numel() == 0:
        zero = x.sum() * 0.0
        return zero, zero.detach()
    return _LinearCrossEntropy.apply(x, weight, bias, targets)
