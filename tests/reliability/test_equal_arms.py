"""Arms equal in effect: a static masking arm that never reuses a mask sees the dynamic arm's very masks, so the
ablation is refused once the data shows it, before anything is pretrained."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.test_ablate import EXPERIMENT, FIXTURES, invoke
from tests.test_prepare import write_wiki_corpus


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_wiki_corpus(root, documents=60)  # 150 training sequences of at most 64 tokens
    shutil.copytree(FIXTURES / "glue", root / "glue")
    return root


def test_a_static_arm_that_never_reuses_a_mask_is_refused_before_pretraining(data_dir, tmp_path, monkeypatch,
                                                                              capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "equal.yaml").write_text(EXPERIMENT + "pretrain_seeds: [0]\n")
    # 6 steps of 8 sequences are 0.32 passes over 150 sequences: with 2 masks a sequence, none is ever reused
    code, out, err = invoke(monkeypatch, capsys, "ablate", "equal.yaml", "--data-dir", str(data_dir), "--set",
                            "training.max_steps=6", "--set", "masking.dupe_factor=2", "--no-progress")
    assert code == 2
    assert ("data:static: arm 'static' makes 0.32 passes over its 150 training sequences with masking.dupe_factor 2, "
            "so it never reuses a mask: its masks are the dynamic arm's and the arms cannot differ. give it more "
            "passes than masks: training.max_steps above 37") in " ".join(err.split())
    assert not list((tmp_path / "outputs").glob("runs/pretrain-*"))  # nothing was pretrained
    assert "pretrain:" not in out


def test_a_static_arm_that_reuses_its_masks_passes_the_check():
    from bvr.ablation.arms import check_static_masks_repeat
    from bvr.config import load_config

    cfg = load_config(overrides=["masking.mode=static", "masking.dupe_factor=1", "training.max_steps=20",
                                 "training.batch_size=8", "training.warmup_steps=2"])
    check_static_masks_repeat("static", cfg, {"dynamic"}, {"sequences": 150, "tokens": 6581})  # 1.07 passes
    check_static_masks_repeat("static", cfg, {"static"}, {"sequences": 1500, "tokens": 0})  # no dynamic arm
