"""Progress bars: one style (rich's), and only on a terminal.

Without a terminal (``bvr ablate ... > log 2>&1``, a pipe, CI), bvr draws no bar at all: a bar redrawn in a file is
carriage returns and cursor codes, thousands of them in a long run's log, so the commands say what they finished in
plain lines instead. On a terminal every bar is a rich bar with the same columns (:data:`COLUMNS`), Lightning's
(:mod:`bvr.training.trainer`) included; the ``datasets`` library's own tqdm bars are never drawn. Only light
imports here (rich): the data side uses it too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import TypeVar

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")

COLUMNS = (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
           TextColumn("left"), TimeRemainingColumn())


def on_terminal() -> bool:
    """Whether standard output, where every bar is drawn, is a terminal that can redraw a line (not a file, a pipe
    or ``TERM=dumb``)."""
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM", "") != "dumb"


def bars(requested: bool = True) -> bool:
    """Whether to draw progress bars: asked for (``--progress``, the default) and on a terminal.

    >>> bars(False)
    False
    """
    return requested and on_terminal()


def track(items: Iterable[T], description: str, *, enabled: bool = True) -> Iterable[T]:
    """``items`` with a bar over them when :func:`bars` says so."""
    if not bars(enabled):
        return items
    total = None
    with suppress(TypeError):  # no len: a bar without a total
        total = len(items)  # type: ignore[arg-type]
    return _tracked(items, description, total)


def _tracked(items: Iterable[T], description: str, total: int | None) -> Iterator[T]:
    with counter(description, total) as advance:
        for item in items:
            yield item
            advance(1)


@contextmanager
def counter(description: str, total: int | None, *, enabled: bool = True) -> Iterator[Callable[[int], None] | None]:
    """A bar of ``total`` things advanced by hand: yields its ``advance(n)``, or None when no bar is drawn."""
    if not bars(enabled):
        yield None
        return
    with Progress(*COLUMNS) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)


OTHER_BARS = {"HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}
"""Environment variables that keep other libraries' tqdm bars (``datasets.map``, downloads) from being drawn; both
libraries read them when first imported."""


def silence_other_bars() -> None:
    """Keep the other libraries' bars off (:data:`OTHER_BARS`), unless the environment already says otherwise; the
    command line calls it before anything imports those libraries."""
    for name, value in OTHER_BARS.items():
        os.environ.setdefault(name, value)
