"""Checkpoint files are whole or absent: a write that fails leaves the previous checkpoint, and a damaged one is
reported in one line with the way out."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bvr import checkpoints
from bvr.checkpoints import AtomicCheckpointIO, check_checkpoint
from bvr.errors import BvrError
from bvr.resources import WriteError


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
