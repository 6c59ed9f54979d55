"""Ctrl-C and SIGTERM: where they may stop a run, and how a stop is told apart from a failure.

A signal handler that raises does so wherever the main thread is. Two places must not be cut: a C++ writer calling
back into Python (``torch.save``: the process aborts), and a call to an SQLite MLflow store (its write is lost, or
the store stays locked and the clean-up that ends the run KILLED hangs on it instead of exiting 143).
:func:`signals_deferred` holds both signals over such a block.

Inside a Lightning loop SIGTERM does not raise at all: Lightning's own handler has marked the trainer, and its loop
stops after the current batch with a ``SIGTERMException``; :func:`terminated_stop` turns that into
:class:`Terminated` once the loop has cleaned up. :func:`handle_sigterm` installs the handler for the CLI.
"""

from __future__ import annotations

import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as an interrupt so that the same clean-up as for Ctrl-C runs (MLflow runs end KILLED, the
    ablation manifest is saved); the exit status is 128 + the signal's number, 143."""

    signum = signal.SIGTERM


_state = {"received": False}


def _on_sigterm(signum: int, frame: object) -> None:
    """Raise :class:`Terminated`; inside a Lightning loop, leave the stop to the loop; a second SIGTERM ends the
    process at once, without waiting for clean-up."""
    if _state["received"]:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
        return
    _state["received"] = True
    # Lightning's handler (a fit or validate is running) has already marked its trainer, whose loop then raises
    # SIGTERMException after the current batch.
    handlers = getattr(signal.getsignal(signal.SIGTERM), "signal_handlers", ())
    if any(getattr(getattr(h, "__self__", None), "received_sigterm", False) for h in handlers):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # until Lightning puts ours back, a second one kills
        return
    raise Terminated


def sigterm_received() -> bool:
    """Whether SIGTERM arrived since :func:`handle_sigterm` began (a Lightning loop may have finished without
    stopping for it: its last batch was under way)."""
    return _state["received"]


@contextmanager
def handle_sigterm() -> Iterator[None]:
    """Raise SIGTERM as :class:`Terminated` while the block runs (the CLI's ``main``); the previous handler after."""
    _state["received"] = False
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        _state["received"] = False


def is_sigterm_exit(err: BaseException | None) -> bool:
    """Whether ``err`` is Lightning's stop on SIGTERM (``SIGTERMException``, a ``SystemExit`` with status 0, so a
    terminated run would look finished); without Lightning loaded it is not."""
    exceptions = sys.modules.get("lightning.pytorch.utilities.exceptions")
    return exceptions is not None and isinstance(err, exceptions.SIGTERMException)


def is_interrupt(err: BaseException | None) -> bool:
    """Whether ``err`` stopped a run on purpose: Ctrl-C, SIGTERM (:class:`Terminated` or Lightning's stop), or
    Lightning's exit after either.

    >>> is_interrupt(KeyboardInterrupt()), is_interrupt(Terminated()), is_interrupt(ValueError("bad"))
    (True, True, False)
    """
    return (isinstance(err, KeyboardInterrupt) or is_sigterm_exit(err)
            or (isinstance(err, SystemExit) and isinstance(err.__context__, KeyboardInterrupt)))


@contextmanager
def terminated_stop() -> Iterator[None]:
    """Around a Lightning ``fit``/``validate``: Lightning's ``sys.exit(1)`` after Ctrl-C and its ``SIGTERMException``
    (exit status 0) come out as :class:`KeyboardInterrupt` / :class:`Terminated`, so that the callers' clean-up and
    the CLI's exit status see an interrupt. A SIGTERM during the loop's last batch is raised when the block ends."""
    try:
        yield
    except SystemExit as exit_:
        if isinstance(exit_.__context__, KeyboardInterrupt):
            raise exit_.__context__ from None
        if is_sigterm_exit(exit_):
            raise Terminated from None
        raise
    if sigterm_received():
        raise Terminated


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while the block runs, then deliver them to their own handlers (the module says which
    blocks must not be cut: a handler raising in ``torch.save``'s C++ callback aborts with ``terminate called after
    throwing an instance of 'pybind11::error_already_set'``). Python runs signal handlers in the main thread only,
    so off it this does nothing. Nested blocks deliver at the end of the outermost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous: dict[int, Any] = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda signum, _frame: received.append(signum))
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)


def deferring(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run under :func:`signals_deferred`."""
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with signals_deferred():
            return fn(*args, **kwargs)
    return call
