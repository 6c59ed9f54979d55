"""Shared set-up of the reliability battery: run ``bvr`` as a user does (in this process, or as a second process
where a signal or a concurrent run is needed) and get back its exit status, stdout and stderr; a tiny checkpoint
and data folders built from ``tests/fixtures``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bvr import cli
from tests.test_finetune import make_checkpoint

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO = Path(__file__).resolve().parents[2]

Result = tuple[int, str, str]
"""(exit status, stdout, stderr) of one ``bvr`` command."""


@pytest.fixture
def bvr(monkeypatch, capsys) -> Callable[..., Result]:
    """Run ``bvr ARGS...`` in this process through :func:`bvr.cli.main` (a BvrError: one line on stderr, exit 2).

    Returns:
        A function ``bvr(*args) -> (exit status, stdout, stderr)``.
    """

    def run(*args: str | Path) -> Result:
        capsys.readouterr()  # drop what earlier set-up printed
        monkeypatch.setattr(sys, "argv", ["bvr", *map(str, args)])
        code = 0
        try:
            cli.main()
        except SystemExit as exit_:
            code = 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return run


def start_bvr(*args: str | Path, cwd: Path, prelude: str = "") -> subprocess.Popen:
    """Start ``bvr ARGS...`` as a second process in ``cwd`` (stdout and stderr piped).

    Args:
        prelude: Python run before the command line, in the same interpreter (to add a fault, say).
    """
    code = f"import sys\n{prelude}\nfrom bvr import cli\nsys.argv = ['bvr', *sys.argv[1:]]\ncli.main()\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@dataclass(frozen=True)
class StandInDvc:
    """A DVC repository (no git) whose stages run a stand-in ``bvr`` that writes its arguments, one a line, to
    ``argv`` and does nothing else: DVC's shell and what reaches bvr through it, without bvr's work."""

    repo: Path
    argv: Path
    env: dict[str, str]

    def dvc(self, *args: str) -> subprocess.CompletedProcess:
        """Run ``dvc ARGS...`` in the repository."""
        return subprocess.run(["dvc", *args], cwd=self.repo, env=self.env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def stand_in_dvc(tmp_path) -> StandInDvc:
    """``tmp_path/repo`` after ``dvc init --no-scm``, with the stand-in ``bvr`` first on the PATH of its commands."""
    repo, bin_dir = tmp_path / "repo", tmp_path / "bin"
    repo.mkdir()
    bin_dir.mkdir()
    argv = tmp_path / "argv.txt"
    (bin_dir / "bvr").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > '{argv}'\n")
    (bin_dir / "bvr").chmod(0o755)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1",
           "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    stand_in = StandInDvc(repo, argv, env)
    assert stand_in.dvc("init", "-q", "--no-scm").returncode == 0
    return stand_in


def error_line(err: str) -> str:
    """The one line a refused command printed, without ``error: ``; fails unless stderr is exactly one such line."""
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0].removeprefix("error: ")


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer, 32-wide BERT with a WordPiece tokenizer trained on the fixtures (HF folder)."""
    return make_checkpoint(tmp_path_factory.mktemp("checkpoint"), "bert", sentence_head=True)


def copy_task(data_dir: Path, *names: str) -> Path:
    """Copy fixture task folders into ``data_dir``: ``glue/SST-2``, ``conll`` (as conll2003's three splits) or
    ``squad`` (v1.1's dev file only, as offline)."""
    for name in names:
        if name == "conll":
            (data_dir / "conll2003").mkdir(parents=True)
            for split in ("train.txt", "valid.txt", "test.txt"):
                shutil.copy(FIXTURES / "conll" / "sample.txt", data_dir / "conll2003" / split)
        elif name == "squad":
            (data_dir / "squad" / "v1.1").mkdir(parents=True)
            shutil.copy(FIXTURES / "squad" / "v1.1.json", data_dir / "squad" / "v1.1" / "dev-v1.1.json")
        else:
            shutil.copytree(FIXTURES / name, data_dir / name)
    return data_dir
