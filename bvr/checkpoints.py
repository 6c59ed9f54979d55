"""Checkpoints that are either whole or absent: written beside their final place and renamed over it, and read back
with a one-line error when they are not.

Lightning's own writer streams a checkpoint into a temporary file in the system's temporary folder and then moves it
into place; across file systems that move is a copy, so a full disk or a kill during it leaves a truncated
``last.ckpt`` where the good one was.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from bvr.errors import BvrError
from bvr.fs import atomic_open
from bvr.resources import write_error

CHECKPOINT_HINT = ("the last good checkpoint is kept: free space (or choose another --output-dir) and run the same "
                   "command with --resume (bvr ablate: the same command)")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Saves each checkpoint to a temporary file in its own folder, fsyncs it, then renames it over the old one.

    Until the rename the previous checkpoint is untouched, so a write that fails (a full disk) or is interrupted
    leaves the last good checkpoint to resume from, and no partial file; a full disk or read-only folder is
    reported as a :class:`~bvr.resources.WriteError` that says so (:data:`CHECKPOINT_HINT`). Ctrl-C and SIGTERM
    wait for the write to end (:func:`signals_deferred`).
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        try:
            with signals_deferred(), atomic_open(Path(path), "wb", fsync=True) as file:
                torch.save(checkpoint, file)
        except Exception as err:
            error = write_error(err, Path(path), what="checkpoint", hint=CHECKPOINT_HINT)
            if error is None:
                raise
            raise error from err


@contextmanager
def signals_deferred(signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while the block runs, then deliver them to their own handlers.

    ``torch.save`` into a Python file writes through a C++ zip writer that calls back into Python. A signal handler
    that raises (the CLI's, on SIGTERM) can raise inside such a callback; the file is then closed while the writer
    still holds it, and the writer's destructor, writing the zip's end into a closed file, aborts the process
    (``terminate called after throwing an instance of 'pybind11::error_already_set'``, exit -6 instead of 143).
    Python runs signal handlers in the main thread only, so off it this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, _frame: received.append(signum)) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)


def check_checkpoint(path: Path) -> None:
    """Make sure ``path`` reads as a checkpoint before a run resumes from it.

    The tensors are memory-mapped, not read, so this costs little; a truncated file fails here because its zip
    directory, at the end, is missing.

    Raises:
        BvrError: the file cannot be read, naming it, with ``--restart`` as the way out.
    """
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
            raise ValueError("it holds no state_dict")
    except Exception as err:  # torch raises RuntimeError, EOFError, UnpicklingError... for a damaged file
        # The first sentence: torch follows "failed finding central directory." with a paragraph of advice.
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0].split(". ")[0].removesuffix(".")
        raise BvrError(f"the checkpoint is damaged or incomplete and cannot be resumed from ({reason})", where=path,
                       hint="pass --restart to discard it and train this run again from the start "
                            "(bvr ablate: delete the file)") from None
