"""`bvr ablate --launcher local|slurm`: the plan's graph, what a launcher starts, manifests saved by processes side by
side, and the local launcher end to end (the SLURM launcher's run is in tests/test_cluster.py)."""

from __future__ import annotations

import json
import multiprocessing
import re
import shutil
import subprocess
import sys

import pytest
from mlflow import MlflowClient

from bvr.ablation.manifest import Manifest
from bvr.ablation.plan import Unit, UnitKind, make_plan
from bvr.ops.launch.launch import finished, to_run
from tests.test_ablate import EXPERIMENT, FIXTURES, bvr_env
from tests.test_prepare import write_wiki_corpus

SMALL = (EXPERIMENT.replace("seeds: 2, optional", "seeds: 1, optional")
         .replace("blimp: {per_paradigm: 2}", "blimp: {enabled: false}")
         .replace("probes: {tasks: [sst2], seeds: 2, max_train_examples: null}", "probes: {tasks: []}")
         .replace("control: true", "control: false"))
"""Two arms without a control, one task and seed: the smallest plan with every kind of unit a launcher orders."""


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan")
    (root / "tiny-masking.yaml").write_text(EXPERIMENT + "pretrain_seeds: [0, 1]\n")
    return make_plan(root / "tiny-masking.yaml", data_dir=None, output_dir=root / "outputs")


def test_every_unit_needs_only_units_that_run_before_it(plan):
    units = plan.units()
    for i, unit in enumerate(units):
        assert set(plan.needs(unit)) <= set(units[:i]), unit
    assert plan.needs(Unit(UnitKind.CORPUS)) == []
    assert plan.needs(Unit(UnitKind.REPORT)) == units[:-1]
    assert plan.needs(Unit(UnitKind.PRETRAIN, "static-p1")) == [Unit(UnitKind.DATA, "static-p1")]
    assert plan.needs(Unit(UnitKind.PRETRAIN, "no-pretraining-p0")) == [Unit(UnitKind.TOKENIZER, "bert")]
    assert plan.needs(Unit(UnitKind.FINETUNE, "dynamic-p0", "sst2")) == [Unit(UnitKind.PRETRAIN, "dynamic-p0")]
    assert plan.needs(Unit(UnitKind.DATA, "static-p0")) == [Unit(UnitKind.TOKENIZER, "bert")]


def test_a_launcher_starts_what_is_not_done_and_only_what_that_needs(plan):
    manifest = Manifest.new(plan, {})
    assert to_run(plan, manifest) == plan.units()  # nothing done: everything
    for record in manifest.records():
        if record.label != "dynamic-p1":
            record.update(status="done")
    ids = [unit.id for unit in to_run(plan, manifest)]
    # dynamic-p1's units, the data and tokenizer its pretraining reads (from their caches), and the report.
    assert ids == ["corpus", "tokenizer:bert", "data:dynamic-p1", "pretrain:dynamic-p1", "probe:dynamic-p1:sst2",
                   "finetune:dynamic-p1:sst2", "report"]
    manifest.pretrain_record("dynamic-p1").update(status="done")
    assert "pretrain:dynamic-p1" not in [unit.id for unit in to_run(plan, manifest)]
    assert finished(manifest, Unit(UnitKind.PRETRAIN, "dynamic-p1"))
    assert not finished(manifest, Unit(UnitKind.DATA, "dynamic-p1"))  # no record: never "done" by itself
    for record in manifest.records():
        record.update(status="done")
    assert to_run(plan, manifest) == []


def _save_marked(path, labels: list[str], rounds: int) -> None:
    """A process that records each of ``labels``'s fine-tuning done, saving after each (as a unit's process does)."""
    manifest = Manifest.load(path)
    mine: set = set()
    for _ in range(rounds):
        for label in labels:
            for record in manifest.finetune:
                if record.label == label:
                    record.update(status="done", score=float(len(label)))
                    mine.add(Manifest.mark(record))
            manifest.save(path, mine=mine)


def test_processes_saving_one_manifest_side_by_side_keep_each_others_records(plan, tmp_path):
    path = tmp_path / "manifest.json"
    Manifest.new(plan, {}).save(path)
    labels = [arm.label for arm in plan.arms]
    halves = [labels[::2], labels[1::2]]
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_save_marked, args=(path, half, 15)) for half in halves]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    saved = Manifest.load(path)
    assert {record.label for record in saved.finetune if record.status == "done"} == set(labels)
    assert all(record.score == len(record.label) for record in saved.finetune)
    # A plain save (no `mine`) still writes this process's view whole, as before.
    saved.finetune[0].update(status="missing")
    saved.save(path)
    assert Manifest.load(path).finetune[0].status == "missing"


@pytest.mark.parametrize(("args", "message"), [
    (["--jobs", "2"], "--jobs: --jobs goes with --launcher local: inline runs one unit at a time"),
    (["--launcher", "slurm", "--jobs", "2"], "--jobs: --jobs goes with --launcher local: SLURM decides"),
    (["--launcher", "local", "--only", "corpus"], "--launcher: --launcher local runs the units of the whole plan"),
])
def test_options_that_do_not_go_with_a_launcher_are_refused_naming_them(tmp_path, args, message):
    (tmp_path / "exp.yaml").write_text(SMALL)
    done = subprocess.run([sys.executable, "-m", "bvr.cli", "ablate", "exp.yaml", *args], cwd=tmp_path,
                          env=bvr_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.slow
def test_the_local_launcher_runs_units_side_by_side_and_the_inline_runner_then_reuses_every_one(tmp_path):
    data = write_wiki_corpus(tmp_path / "data", documents=60)
    shutil.copytree(FIXTURES / "glue", data / "glue")
    (tmp_path / "exp.yaml").write_text(SMALL)
    command = [sys.executable, "-m", "bvr.cli", "ablate", "exp.yaml", "--data-dir", str(data)]
    done = subprocess.run([*command, "--launcher", "local", "--jobs", "2"], cwd=tmp_path, env=bvr_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"launcher local: 9 unit\(s\), up to 2 at a time; logs in .*/logs", lines[0]), lines[0]
    units = ["corpus", "tokenizer:bert", "data:static", "data:dynamic", "pretrain:static", "pretrain:dynamic",
             "finetune:static:sst2", "finetune:dynamic:sst2", "report"]
    ended = [line.split(": ")[0] for line in lines[1:10]]
    assert sorted(ended) == sorted(units) and ended[-1] == "report", lines
    assert all(re.search(": (done|reused) in ", line) for line in lines[1:10]), lines  # a data stage the other made
    assert re.match(r"ablation exp: 9 unit\(s\) run by the local launcher \(2 at a time\), 0 failed, 0 skipped",
                    lines[10]), lines[10]
    (folder,) = (tmp_path / "outputs" / "ablations").glob("exp-default-*")
    assert len(list((folder / "logs").glob("*.log"))) == 9
    manifest = Manifest.load(folder / "manifest.json")
    assert manifest.complete and manifest.parent_run_id
    report = (tmp_path / "reports" / "exp" / "report.md").read_text()

    # Each unit's process nested its runs under the one parent this process opened; nothing was logged twice.
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("exp").experiment_id], max_results=1000)
    names = [run.info.run_name for run in runs]
    assert len(names) == len(set(names)) and all(run.info.status == "FINISHED" for run in runs)
    assert [run.info.run_name for run in runs if run.data.tags.get("bvr.stage") == "ablation"] == ["exp (default)"]
    children = {run.info.run_name for run in runs if run.data.tags.get("mlflow.parentRunId") == manifest.parent_run_id}
    assert {"static/pretrain", "dynamic/pretrain", "static/finetune/sst2", "dynamic/finetune/sst2"} <= children

    # The inline runner finds every unit finished: the launcher's products are the ones it would have made.
    again = subprocess.run(command, cwd=tmp_path, env=bvr_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert re.search(r"ablation exp: 1 unit\(s\) run, 8 reused", again.stdout), again.stdout[-2000:]
    assert (tmp_path / "reports" / "exp" / "report.md").read_text() == report
    assert json.loads((folder / "manifest.json").read_text())["parent_run_id"] == manifest.parent_run_id
