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
