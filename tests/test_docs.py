"""The documented commands run: every ```` ```bash runnable ```` block in README.md and docs/ executes, on a data
folder built from the fixtures, as a user would type it, so the guides cannot drift from the CLI.

A block marked ``runnable`` must run at smoke size (seconds) on a generated corpus and the GLUE and BLiMP fixtures;
blocks that need the real data, a GPU or a finished ablation stay plain ``bash``. Each block runs in a fresh working
folder (its own MLflow store and outputs), one command after another, with ``BVR_DATA_DIR`` pointing at that data.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_prepare import write_wiki_corpus

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
BLOCK = re.compile(r"^```bash runnable\n(.*?)^```", re.MULTILINE | re.DOTALL)


def runnable_blocks() -> list[tuple[str, int, str]]:
    """(file, line, text) of every runnable block."""
    blocks = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            blocks.append((str(path.relative_to(REPO)), text.count("\n", 0, match.start()) + 1, match.group(1)))
    return blocks


def commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines left out."""
    joined = block.replace("\\\n", " ")
    return [line for line in (raw.split("  #")[0].strip() for raw in joined.splitlines())
            if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """A data folder with the default corpus path (a generated WikiExtractor corpus) and the GLUE and BLiMP
    fixtures."""
    root = tmp_path_factory.mktemp("data")
    write_wiki_corpus(root, documents=60)
    (root / "corpus" / "wiki").rename(root / "corpus" / "enwiki-2021-extract")
    shutil.copytree(FIXTURES / "glue", root / "glue")
    shutil.copytree(FIXTURES / "blimp", root / "blimp")
    return root


def test_the_docs_mark_their_runnable_commands():
    places = {file for file, _, _ in runnable_blocks()}
    assert {"docs/pretraining.md", "docs/ablations.md", "docs/configuration.md"} <= places
    assert all(commands(text) for _, _, text in runnable_blocks())


@pytest.mark.slow
@pytest.mark.parametrize(("file", "line", "block"), runnable_blocks(), ids=lambda v: str(v) if isinstance(v, int) else
                         (v if v.endswith(".md") else None))
def test_a_runnable_block_runs_as_documented(file, line, block, data_dir, tmp_path):
    env = {**os.environ, "BVR_DATA_DIR": str(data_dir), "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
           f"{os.environ.get('PATH', '')}", "OMP_NUM_THREADS": "1", "MLFLOW_TRACKING_URI": ""}
    env.pop("BVR_OUTPUT_DIR", None)
    for command in commands(block):
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"{file}:{line}: `{command}` exited {done.returncode}\n{done.stderr[-2000:]}"
