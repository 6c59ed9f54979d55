"""The stop on a non-finite training loss, shared by pretraining and fine-tuning."""

from __future__ import annotations

from collections.abc import Callable

import torch

from bvr.errors import BvrError


class NonFiniteLoss(BvrError):
    """The training loss became NaN or infinite."""


def check_finite(loss: torch.Tensor, step: int, *, what: str, hint: str,
                 values: Callable[[], str] | None = None) -> None:
    """Stop training when ``loss`` is NaN or infinite; call it before the backward pass, so no weight changes.

    Args:
        loss: the step's loss (a scalar tensor).
        step: the optimiser step, for the message.
        what: the loss's name in the message (``training loss``).
        hint: what to do about it.
        values: gives the loss's parts for the message (``mlm_loss=nan``); called only when the loss is bad.

    Raises:
        NonFiniteLoss: the loss is not finite.

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
