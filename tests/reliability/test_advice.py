"""Commands bvr advises run as printed: the experiment as `bvr ablate` takes it and every option that picks the
same plan, shell-quoted (issue 28)."""

from __future__ import annotations

import shlex
from types import SimpleNamespace

import bvr.runner.run as ablation_run
from bvr.ablation.manifest import Manifest
from bvr.ablation.plan import make_plan
from tests.test_ablate import EXPERIMENT


def test_status_advises_an_ablate_command_that_continues_the_same_plan(bvr, tmp_path, monkeypatch):
    """`bvr status my.yaml` advised `bvr ablate my --preset tiny`: an unknown experiment 'my', and without the
    --set and --data-dir that entered the plan hash, another plan had it been found."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.yaml").write_text(EXPERIMENT)
    data_dir = tmp_path / "data dir"
    data_dir.mkdir()
    plan = make_plan("my.yaml", preset="tiny", overrides=["finetune.seeds=1"], data_dir=data_dir)
    plan.folder.mkdir(parents=True)
    Manifest.new(plan, {}).save(plan.manifest_path)
    code, out, err = bvr("status", "my.yaml")
    assert code == 0, err
    advice = out.rstrip().splitlines()[-1]
    assert advice == (f"next: bvr ablate my.yaml --preset tiny --set finetune.seeds=1 --data-dir '{data_dir}' "
                      "(finished units are reused)")

    planned = []
    monkeypatch.setattr(ablation_run, "run_ablation", lambda plan, **_: planned.append(plan) or SimpleNamespace(
        ran=[], reused=[], seconds=0.0, report=None))
    command = shlex.split(advice.removeprefix("next: ").removesuffix(" (finished units are reused)"))
    code, _, err = bvr(*command[1:])
    assert command[0] == "bvr" and code == 0, err
    assert [p.manifest_path.resolve() for p in planned] == [plan.manifest_path.resolve()]
