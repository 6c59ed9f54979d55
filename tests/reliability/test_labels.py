"""Labels a user gives on the command line follow the rule of run and experiment names (issue 35, item 9).

``bvr finetune --arm '../../../../outside/x'`` was accepted as an arm label. ``--arm`` and ``--experiment`` (of
``bvr pretrain`` and ``bvr finetune``) are now held to :func:`bvr.config.loading.is_name`, the rule an ablation's
experiments and run names follow, and refused in one line naming the option, before any work.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bvr.cli.options import label_option
from bvr.config.loading import NAME_RULE
from tests.reliability.conftest import error_line

BAD = ["../../../../outside/x", "a/b", "x[red]y", ".hidden", "two words", ""]


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("label", BAD)
def test_finetune_refuses_an_arm_label_that_is_not_a_name(bvr, workdir, checkpoint, label):
    code, out, err = bvr("finetune", "--task", "sst2", "--checkpoint", checkpoint, "--arm", label,
                         "--output-dir", workdir / "out")
    assert (code, out) == (2, "")
    assert error_line(err) == f"--arm: {label!r} cannot name an arm. {NAME_RULE}"
    assert list(workdir.iterdir()) == []  # refused before anything was written: no store, no output folder


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_an_experiment_name_that_is_not_a_name_is_refused(bvr, workdir, checkpoint, command):
    task = ["--task", "sst2", "--checkpoint", checkpoint] if command == "finetune" else []
    code, out, err = bvr(command, *task, "--experiment", "../outside/x", "--output-dir", workdir / "out")
    assert (code, out) == (2, "")
    assert error_line(err) == f"--experiment: '../outside/x' cannot name an MLflow experiment. {NAME_RULE}"
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("label", ["static-p0", "no-pretraining-p1", "tiny-bert.v2", "bert_base", None])
def test_names_as_ablations_and_runs_have_them_pass(label):
    assert label_option("--arm", "an arm")(label) == label
