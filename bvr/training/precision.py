"""Lightning precision settings: the accepted values, and ``auto`` resolved for the machine at hand."""

from __future__ import annotations

import torch

from bvr.config import PRECISIONS
from bvr.errors import BvrError


def resolve_precision(precision: str, *, where: str = "precision") -> str:
    """The precision to give Lightning: ``auto`` is bf16-mixed on a GPU that has bf16, else 32-true.

    Any other value of :data:`PRECISIONS` is returned as it is; one not among them is refused, ``where`` naming the
    setting.

    >>> resolve_precision("16-mixed")
    '16-mixed'
    >>> resolve_precision("auto") in ("bf16-mixed", "32-true")
    True
    """
    if precision not in PRECISIONS:
        raise BvrError(f"'{precision}' is not one of auto, 32-true, bf16-mixed, 16-mixed", where=where)
    if precision != "auto":
        return precision
    return "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"
