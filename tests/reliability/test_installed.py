"""A regular install: the wheel built from this tree, installed (not editable) and run from a folder outside the
repository, starts, finds the shipped presets and experiments inside the package, and pretrains."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bvr.config import PRESETS_DIR
from tests.reliability.conftest import REPO
from tests.test_prepare import write_wiki_corpus

SOURCES = ("pyproject.toml", "setup.py", "README.md", "bvr", "experiments", "reports/published.yaml",
           ".dvc/plots/bvr-page.html")
"""What a build reads: a copy of them is built, so that the build's own folders stay out of the checkout."""
TINY = ["--preset", "tiny", "--set", "corpus.path=corpus/wiki", "--set", "tokenizer.vocab_size=300",
        "--set", "data.max_length=64", "--set", "data.shard_documents=50", "--set", "model.num_layers=1",
        "--set", "model.hidden_size=16", "--set", "model.num_heads=2", "--set", "model.intermediate_size=32",
        "--set", "training.batch_size=8", "--set", "training.max_steps=2", "--set", "training.warmup_steps=0",
        "--set", "training.val_every_steps=1", "--set", "training.checkpoint_every_steps=1"]
"""A pretraining of two steps on a tiny corpus."""


def _pip(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    """``pip ARGS...`` of this interpreter, offline."""
    return subprocess.run([sys.executable, "-m", "pip", *map(str, args), "--no-deps", "--no-index", "-q"], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _wheel(root: Path) -> Path:
    """The wheel of a copy of this tree's sources, built offline with this environment's setuptools."""
    if importlib.util.find_spec("setuptools") is None or importlib.util.find_spec("pip") is None:
        pytest.skip("building a wheel offline needs pip and setuptools in this environment")
    source = root / "source"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / name, source / name)
    built = _pip("wheel", "--no-build-isolation", "-w", root / "dist", ".", cwd=source)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (root / "dist").glob("bvr-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The folder the wheel is installed into (``--target``: the package and ``bin/bvr``); put first on PYTHONPATH,
    it is found before this checkout, and this environment gives the dependencies."""
    root = tmp_path_factory.mktemp("install")
    done = _pip("install", "--target", root / "site", _wheel(root), cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "site"


def _run(installed: Path, cwd: Path, *args: str | Path) -> subprocess.CompletedProcess:
    """The installed ``bvr ARGS...`` in ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(installed), "OMP_NUM_THREADS": "1", "MLFLOW_TRACKING_URI": ""}
    return subprocess.run([installed / "bin" / "bvr", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_checkout_reads_its_top_level_experiments():
    assert PRESETS_DIR == REPO / "experiments" / "presets"


@pytest.mark.slow
def test_an_installed_wheel_starts_shows_a_preset_and_pretrains_outside_the_repository(installed, tmp_path):
    helped = _run(installed, tmp_path, "--help")
    assert helped.returncode == 0 and "pretrain" in helped.stdout, helped.stderr[-3000:]
    code = ("import bvr.config as c, bvr.report.published as p, bvr.ops.dvc.plots as d; print(c.PRESETS_DIR); "
            "print(p.load_published().shape); print(len(d.page_template()))")
    package = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": str(installed)}, capture_output=True, text=True)
    presets, published, page = package.stdout.split("\n")[:3]
    assert presets == str(installed / "bvr" / "_experiments" / "presets"), package.stderr
    assert not published.startswith("(0,"), package.stderr  # the papers' numbers, for every report
    assert page == str(len((REPO / ".dvc" / "plots" / "bvr-page.html").read_text())), package.stderr  # its copy
    shown = _run(installed, tmp_path, "config", "show", "masking", "--preset", "tiny")
    assert shown.returncode == 0 and "ablation: masking\npreset: tiny\n" in shown.stdout, shown.stderr[-3000:]
    data = write_wiki_corpus(tmp_path / "data", documents=60)
    trained = _run(installed, tmp_path, "pretrain", *TINY, "--data-dir", data, "--output-dir", tmp_path / "out")
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-3000:]
    assert list((tmp_path / "out" / "runs").glob("pretrain-tiny-*/DONE")), trained.stdout[-2000:]
