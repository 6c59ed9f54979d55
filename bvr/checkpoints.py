"""Checkpoints that are either whole or absent: written beside their final place and renamed over it, and read back
with a one-line error when they are not.

Lightning's own writer streams a checkpoint into a temporary file in the system's temporary folder and then moves it
into place; across file systems that move is a copy, so a full disk or a kill during it leaves a truncated
``last.ckpt`` where the good one was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from bvr.errors import BvrError
from bvr.fs import atomic_open
from bvr.resources import write_error
from bvr.signals import signals_deferred

CHECKPOINT_HINT = ("the last good checkpoint is kept: free space (or choose another --output-dir) and run the same "
                   "command with --resume (bvr ablate: the same command)")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Saves each checkpoint to a temporary file in its own folder, fsyncs it, then renames it over the old one.

    Until the rename the previous checkpoint is untouched, so a write that fails (a full disk) or is interrupted
    leaves the last good checkpoint to resume from, and no partial file; a full disk or read-only folder is
    reported as a :class:`~bvr.resources.WriteError` that says so (:data:`CHECKPOINT_HINT`). Ctrl-C and SIGTERM
    wait for the write to end (:func:`bvr.signals.signals_deferred`).
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
