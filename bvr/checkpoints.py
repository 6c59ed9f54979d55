"""Checkpoints that are either whole or absent: written beside their final place and renamed over it, and read back
with a one-line error when they are not. They are read as weights only (no code runs while one is read): a file that
holds anything else was not written by bvr and is refused.

Lightning's own writer streams a checkpoint into a temporary file in the system's temporary folder and then moves it
into place; across file systems that move is a copy, so a full disk or a kill during it leaves a truncated
``last.ckpt`` where the good one was.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from bvr.errors import BvrError
from bvr.fs import atomic_open
from bvr.signals import signals_deferred
from bvr.write_checks import write_error

CHECKPOINT_HINT = ("the last good checkpoint is kept: free space (or choose another --output-dir) and run the same "
                   "command with --resume (bvr ablate: the same command)")
RESTART_HINT = "pass --restart to discard it and train this run again from the start (bvr ablate: delete the file)"

CHECKPOINT_GLOBALS: list[Any] = []
"""The types beyond torch's weights-only defaults (tensors, dicts, lists, tuples, numbers, strings, None) that bvr's
checkpoints hold, allowed when one is read; anything else is refused. None so far:
``torch.serialization.get_unsafe_globals_in_checkpoint`` finds nothing else in a ``bvr pretrain`` ``last.ckpt`` of
any objective. A type that a checkpoint comes to hold goes here, or resuming refuses it."""


@contextmanager
def weights_only_load(path: str | Path) -> Iterator[None]:
    """Around a ``torch.load(path, weights_only=True)``: allow :data:`CHECKPOINT_GLOBALS`, and turn torch's refusal of
    any other type (a pickle that would call ``os.system``, say) into a one-line error naming the file: it is not
    loaded, and nothing in it ran.
    """
    try:
        with torch.serialization.safe_globals(CHECKPOINT_GLOBALS):
            yield
    except pickle.UnpicklingError:
        foreign = _foreign_globals(path)
        if not foreign:
            raise
        raise BvrError(f"the checkpoint was not written by bvr: it holds {', '.join(foreign)}, which could run code "
                       "if loaded, so it was not loaded", where=path, hint=RESTART_HINT) from None


def _foreign_globals(path: str | Path) -> list[str]:
    """The types ``path`` names beyond the allowed ones, read from its pickle without running it (none where it is not
    a zip checkpoint)."""
    try:
        with torch.serialization.safe_globals(CHECKPOINT_GLOBALS):
            return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:  # not a torch.save zip file: the refusal is reported as it came
        return []


class AtomicCheckpointIO(TorchCheckpointIO):
    """Saves each checkpoint to a temporary file in its own folder, fsyncs it, then renames it over the old one: a
    write that fails or is interrupted leaves the last good checkpoint and no partial file. A full disk or read-only
    folder is a :class:`~bvr.write_checks.WriteError` (:data:`CHECKPOINT_HINT`); Ctrl-C and SIGTERM wait for the
    write to end (:func:`bvr.signals.signals_deferred`).
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

    def load_checkpoint(self, path: str | Path, *args: Any, weights_only: bool | None = None,
                        **kwargs: Any) -> dict[str, Any]:
        """Lightning's loader (``trainer.fit(ckpt_path=...)``), as weights only whatever ``weights_only`` says (an old
        torch, or ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``, would otherwise unpickle anything)."""
        with weights_only_load(path):
            return super().load_checkpoint(path, *args, weights_only=True, **kwargs)


def check_checkpoint(path: Path) -> None:
    """Make sure ``path`` reads as a checkpoint before a run resumes from it. The tensors are memory-mapped, not
    read, so this costs little; a truncated file fails here because its zip directory, at the end, is missing."""
    try:
        checkpoint = _mapped(path)
        if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
            raise ValueError("it holds no state_dict")
    except BvrError:
        raise
    except Exception as err:  # torch raises RuntimeError, EOFError, UnpicklingError... for a damaged file
        # The first sentence: torch follows "failed finding central directory." with a paragraph of advice.
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0].split(". ")[0].removesuffix(".")
        raise BvrError(f"the checkpoint is damaged or incomplete and cannot be resumed from ({reason})", where=path,
                       hint=RESTART_HINT) from None


def resume_point(last: Path, resume: bool, restart: bool) -> str | None:
    """The checkpoint a run goes on from (checked readable), or None to start from the first step. ``restart``
    removes ``last`` first; without ``resume`` an unfinished run's ``last`` is refused rather than trained over."""
    if restart and last.exists():
        last.unlink()
        return None
    if last.exists() and not resume:
        raise BvrError(f"an unfinished run of this configuration exists ({last})", where="pretrain",
                       hint="pass --resume to continue it or --restart to start over")
    if not resume or not last.exists():
        return None  # nothing to resume: start, as a first run would
    check_checkpoint(last)
    return str(last)


def _mapped(path: Path) -> Any:
    """The checkpoint at ``path`` read as weights only, its tensors memory-mapped (not read)."""
    with weights_only_load(path):
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def check_fits(path: Path, expected: Mapping[str, torch.Tensor]) -> None:
    """Make sure a checkpoint that :func:`check_checkpoint` passed holds the weights (names and shapes) of
    ``expected``, the state dict of the module built from the configuration: a checkpoint of another model size
    would otherwise fail in Lightning's loader with a traceback listing every size mismatch."""
    saved = _mapped(path)["state_dict"]
    differ = [key for key in expected if key in saved and saved[key].shape != expected[key].shape]
    missing = [key for key in expected if key not in saved]
    extra = [key for key in saved if key not in expected]
    if not (differ or missing or extra):
        return
    if differ:
        first = (f"{differ[0]} is {list(saved[differ[0]].shape)} there, {list(expected[differ[0]].shape)} in the "
                 "configuration")
    else:
        first = f"it lacks {missing[0]}" if missing else f"it holds {extra[0]}, which the configuration's model has not"
    raise BvrError(f"the checkpoint is of another model shape than the configuration: {first} "
                   f"({len(differ) + len(missing) + len(extra)} of {len(expected)} weights differ)", where=path,
                   hint=RESTART_HINT)
