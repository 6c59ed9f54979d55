"""Counter-based random numbers for masking: every draw a pure hash of ``(seed, stream, keys...)``, so a sequence's
mask does not depend on the batch, worker or process it lands in, nor on resuming (:mod:`bvr.pretraining.masking`).
"""

from __future__ import annotations

import numpy as np

# Independent hash streams: one per kind of decision, so e.g. which positions are chosen is uncorrelated with
# how they are replaced even though both are keyed on the same (index, copy, position).
STREAM_CHOOSE = 0
STREAM_CLASS = 1
STREAM_TOKEN = 2
# The span scheme's draws, keyed by attempt number (length, start) or by a span's first position (class).
STREAM_SPAN_LENGTH = 3
STREAM_SPAN_START = 4
STREAM_SPAN_CLASS = 5

# splitmix64's increment and finaliser multipliers (Steele, Lea and Flood, 2014).
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def _fmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection on uint64 whose output bits each depend on all input bits."""
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def uniform(seed: int, *keys: np.ndarray | int) -> np.ndarray:
    """Counter-based uniform random numbers: a pure hash of ``(seed, keys...)``, float64 in [0, 1) with 53 random
    bits each.

    The keys (integer arrays or ints) are broadcast together; each element of the result depends only on the seed
    (any Python int, reduced modulo 2**64) and on the keys at that element, so any subset of a grid can be computed
    alone and agrees with the whole.

    Example:
        >>> u = uniform(7, np.arange(3)[:, None], np.arange(4)[None, :])
        >>> u.shape, bool(((u >= 0) & (u < 1)).all())
        ((3, 4), True)
        >>> bool(uniform(7, 2, 3) == u[2, 3])
        True
    """
    # uint64 products are meant to wrap; numpy warns on scalar overflow, so silence it here only.
    with np.errstate(over="ignore"):
        state = _fmix64(np.asarray(np.uint64(seed & _MASK64) + _GAMMA))
        for key in map(np.asarray, keys):
            if not (np.issubdtype(key.dtype, np.integer) or key.dtype == np.bool_):
                raise TypeError(f"hash keys must be integers, got dtype {key.dtype}")
            # Negative int64 keys wrap to distinct uint64 values; mixing the key before combining spreads small
            # counters (0, 1, 2, ...) over all 64 bits.
            state = _fmix64(state ^ _fmix64(key.astype(np.uint64) + _GAMMA))
    return np.asarray((state >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53)))
