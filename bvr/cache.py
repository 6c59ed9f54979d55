"""Cache folders named by a hash of the config that produced them; built atomically, found and reused."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bvr.config import config_hash, dump_config

DONE = "DONE"

BUILT: set[Path] = set()
"""Every folder :func:`build_once` built (rather than reused) in this process, for reports of what ran."""


def cache_dir(root: Path, kind: str, *parts: Any) -> Path:
    """``root/KIND-HASH``, the hash taken over ``parts`` (configs, versions, the names of upstream folders)."""
    return Path(root) / f"{kind}-{config_hash(*parts)}"


def is_done(path: Path) -> bool:
    return (Path(path) / DONE).is_file()


def build_once(target: Path, build: Callable[[Path], None], config: dict[str, Any]) -> tuple[Path, bool]:
    """Run ``build(tmp)`` unless ``target`` is finished already; move the result into place atomically.

    A run killed half-way leaves only a ``.tmp-*`` sibling, which the next call removes and rebuilds.
    The resolved ``config`` is written next to the output as ``config.yaml``.

    Returns:
        The target folder and whether it was built now (False: reused).
    """
    target = Path(target)
    if is_done(target):
        return target, False
    if global_rank() != 0:  # under torchrun or SLURM, rank zero builds; the others wait for its DONE marker
        return _wait_for(target), False
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f"{target.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = target.parent / f"{target.name}.tmp-{os.getpid()}"
    tmp.mkdir()
    build(tmp)
    dump_config(config, tmp / "config.yaml")
    (tmp / DONE).write_text("")
    if target.exists():  # an unfinished folder from an older layout
        shutil.rmtree(target)
    tmp.rename(target)
    BUILT.add(target.resolve())
    return target, True


def global_rank() -> int:
    """This process's global rank as torchrun (``RANK``) or SLURM (``SLURM_PROCID``) set it; 0 when alone."""
    for key in ("RANK", "SLURM_PROCID"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def _wait_for(target: Path, timeout: float = 6 * 3600.0, poll: float = 2.0) -> Path:
    """Wait until rank zero has finished ``target`` (stages are built once, on a shared file system)."""
    deadline = time.monotonic() + timeout
    while not is_done(target):
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {global_rank()} waited {timeout:.0f} s for rank 0 to build {target}")
        time.sleep(poll)
    return target
