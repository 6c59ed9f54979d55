"""Checkpoint files are whole or absent: a write that fails leaves the previous checkpoint, and a damaged one is
reported in one line with the way out."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from bvr import checkpoints
from bvr.checkpoints import AtomicCheckpointIO, check_checkpoint
from bvr.errors import BvrError
from bvr.write_checks import WriteError


def _checkpoint(step: int) -> dict:
    return {"global_step": step, "state_dict": {"weight": torch.full((64, 64), float(step))}}


def test_a_write_that_fails_half_way_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch) -> None:
    io, path = AtomicCheckpointIO(), tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint(_checkpoint(4), path)
    real_save = torch.save

    def disk_full(obj, file) -> None:
        real_save(obj, file)
        file.truncate(file.tell() // 2)  # part of it reached the disk, then the disk was full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoints.torch, "save", disk_full)
    with pytest.raises(WriteError, match="cannot write the checkpoint: the disk is full"):
        io.save_checkpoint(_checkpoint(8), path)
    monkeypatch.undo()
    assert io.load_checkpoint(path)["global_step"] == 4
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]  # no temporary file left
    io.save_checkpoint(_checkpoint(8), path)
    assert io.load_checkpoint(path)["global_step"] == 8


@pytest.mark.parametrize("damage", ["truncated", "empty", "not a checkpoint"])
def test_a_damaged_checkpoint_is_one_line_naming_it_with_restart_as_the_way_out(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint(_checkpoint(4), path)
    check_checkpoint(path)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        torch.save({"weights": 1}, path)
    with pytest.raises(BvrError) as info:
        check_checkpoint(path)
    message = str(info.value)
    assert message.startswith(f"{path}: the checkpoint is damaged or incomplete") and "--restart" in message
    assert "\n" not in message


class _Stop(Exception):
    pass


def test_sigterm_during_the_write_waits_for_it_to_end(tmp_path: Path, monkeypatch) -> None:
    """A SIGTERM whose handler raises, arriving inside torch.save's writes, is delivered after the checkpoint is
    whole and in place: raised inside the zip writer's Python callback it used to abort the process."""
    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    real_save, calls = torch.save, []

    def save_with_a_signal(obj, file) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives before the first byte is written
        real_save(obj, file)
        calls.append(file.tell())

    def handler(signum, frame):
        raise _Stop

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        monkeypatch.setattr(checkpoints.torch, "save", save_with_a_signal)
        with pytest.raises(_Stop):
            io.save_checkpoint(_checkpoint(6), path)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert calls and calls[0] > 0  # torch.save ran to its end before the handler ran
    assert signal.getsignal(signal.SIGTERM) is previous
    monkeypatch.undo()
    assert io.load_checkpoint(path)["global_step"] == 6
