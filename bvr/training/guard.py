"""The stop on a non-finite training loss, shared by pretraining and fine-tuning."""

from __future__ import annotations

from collections.abc import Callable

import torch

from bvr.errors import BvrError


class NonFiniteLoss(BvrError):
    """The training loss became NaN or infinite."""


def check_finite(loss: torch.Tensor, step: int, *, what: str, hint: str,
                 values: Callable[[], str] | None = None) -> None:
    """Stop training with :class:`NonFiniteLoss` when ``loss`` is NaN or infinite; call it before the backward pass,
    so no weight changes. The message names the optimiser ``step``, the loss as ``what`` (``training loss``) and,
    where ``values`` is given, the loss's parts it returns (``mlm_loss=nan``; called only when the loss is bad).

    >>> check_finite(torch.tensor(1.0), 3, what="training loss", hint="lower the learning rate")
    >>> try:
    ...     check_finite(torch.tensor(float("nan")), 3, what="training loss", hint="lower the learning rate")
    ... except NonFiniteLoss as error:
    ...     print(error.message)
    the training loss is not finite at step 3; training stopped before this step changed any weight
    """
    if torch.isfinite(loss):
        return
    detail = f" ({values()})" if values is not None else ""
    raise NonFiniteLoss(
        f"the {what} is not finite at step {step}{detail}; training stopped before this step changed any weight",
        where="training",
        hint=hint,
    )
