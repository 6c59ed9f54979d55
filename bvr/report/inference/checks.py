"""Argument checks shared by the inference functions: finite values, levels in (0, 1), power above alpha."""

from __future__ import annotations

import math
from collections.abc import Mapping


def check_finite(values: Mapping, name: str) -> None:
    """Refuse NaN and infinite values: a broken run must be left out before statistics, and visibly."""
    bad = [key for key, value in values.items() if not math.isfinite(value)]
    if bad:
        raise ValueError(f"{name} must be finite; {sorted(bad)} are not")


def check_level(level: float, name: str) -> None:
    """Refuse a level (alpha, confidence, power) outside (0, 1); ``name`` names it in the error."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {level}")


def check_power(alpha: float, power: float) -> None:
    """Refuse an ``alpha`` outside (0, 1) or a ``power`` outside (alpha, 1)."""
    check_level(alpha, "alpha")
    if not alpha < power < 1.0:
        raise ValueError(f"power must be in (alpha, 1) = ({alpha}, 1), got {power}")
