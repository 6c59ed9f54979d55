"""Numbers as people read them, shared by the command line, the ablation runner and the reports (no heavy imports)."""

from __future__ import annotations

import math


def duration(seconds: float | None) -> str:
    """'4.2 s', '3 min 05 s', '2 h 04 min'; '—' when unknown.

    >>> duration(4.24), duration(185), duration(7440), duration(None)
    ('4.2 s', '3 min 05 s', '2 h 04 min', '—')
    """
    if seconds is None or math.isnan(seconds):
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def size(n_bytes: float) -> str:
    """A number of bytes in decimal units: '512 B', '3.4 MB', '12.0 GB'.

    >>> size(512), size(3_400_000), size(12e9), size(2.5e12)
    ('512 B', '3.4 MB', '12.0 GB', '2.5 TB')
    """
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n_bytes) >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{int(n_bytes)} B"


def points(score: float | None, scale: float = 100.0) -> str:
    """A score in points, as the reports print it: a fraction times ``scale`` (1 for a score logged in points,
    SQuAD's), one decimal; '—' when unknown.

    >>> points(0.6130), points(81.04, scale=1), points(None)
    ('61.3', '81.0', '—')
    """
    if score is None or math.isnan(score):
        return "—"
    return f"{score * scale:.1f}"
