"""What the CPU runs differently: dropout with a cheaper mask and its scale folded into weights, and the switch that
sends every other device to torch's own kernels (plain ``F.dropout`` there). Used by the fast path
(:mod:`bvr.model.fast`); the figures behind each choice are in docs/benchmarks.md ("What each change gave on its own").
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def cpu_kernels(x: torch.Tensor) -> bool:
    """Whether dropout and attention take the paths written for the CPU (True for a CPU tensor); elsewhere torch's
    fused kernels win. Every branch between the two asks this, so tests can take the device path by replacing it."""
    return x.device.type == "cpu"


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout, as ``F.dropout``, with a cheaper mask on CPU (:func:`drop_mask`); only the mask is saved."""
    scale = folded_scale(p, training, x)  # 1.0 off the CPU, where drop scales itself
    return drop(x if scale == 1.0 else x * scale, p, training)


def drop_mask(shape: torch.Size | tuple[int, ...], p: float) -> torch.Tensor:
    """A CPU boolean mask of ``shape``, True where an element is dropped, each with probability ~``p``.

    torch's CPU dropout draws float Bernoulli noise, several times as slow as this. Here one 64-bit draw of torch's
    generator (uniform on [0, 2**63)) gives four elements 15 random bits each: the int64 buffer is read as int16
    lanes and each lane's low 15 bits, uniform on [0, 2**15), drop their element when under ``p * 2**15``. The drop
    probability is ``round(p * 2**15) / 2**15``, within 2**-16 of ``p`` (0.10001 for p = 0.1), and drawing a quarter
    as many numbers takes the random draw from ~40% of the dropout's time to ~10%.
    """
    n = math.prod(shape)
    lanes = torch.empty((n + 3) // 4, dtype=torch.int64).random_().view(torch.int16)[:n].view(shape)
    return lanes.bitwise_and_(0x7FFF) < round(p * 2**15)  # in place on the fresh buffer


def folded_scale(p: float, training: bool, x: torch.Tensor) -> float:
    """The 1 / (1 - p) that a dropout after a linear map can fold into that map's weights (1.0 when it cannot, off
    the CPU): scaling ``W`` and ``b`` instead of the activation saves a pass each way; :func:`drop` then only zeroes."""
    return 1.0 / (1.0 - p) if training and p > 0.0 and cpu_kernels(x) else 1.0


def fold_into(p: float, training: bool, x: torch.Tensor, weight: torch.Tensor,
              bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` and ``bias`` of the affine map a dropout of rate ``p`` follows, times :func:`folded_scale`."""
    scale = folded_scale(p, training, x)
    return (weight, bias) if scale == 1.0 else (weight * scale, bias * scale)


def drop(y: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout of ``y``, whose map :func:`folded_scale` already scaled: on CPU the dropped elements are zeroed
    (``torch.where`` with a scalar zero, faster than ``masked_fill``); elsewhere ``F.dropout``, scaling included."""
    if not training or p == 0.0:
        return y
    if not cpu_kernels(y):
        return F.dropout(y, p, training=True)
    return torch.where(drop_mask(y.shape, p), 0.0, y)


class Dropout(nn.Dropout):
    """``nn.Dropout`` through :func:`dropout` (same ``p``, same train/eval behaviour)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
