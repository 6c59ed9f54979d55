"""`bvr ablate` end to end on a generated corpus and the GLUE fixtures, and the DVC pipeline in a temporary git
repository: every unit runs once, a second invocation trains nothing, a partial run continues, a failed unit is
recorded without losing the others, MLflow holds one experiment with nested runs, and `dvc repro` reproduces
the same stages."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from bvr import cli
from bvr.ablation.manifest import MANIFEST_VERSION, Manifest, find_manifest
from bvr.ablation.plan import Unit, UnitKind, make_plan
from bvr.ablation.records import FinetuneRecord
from bvr.errors import BvrError
from bvr.ops.dvc.pipeline import pipeline_spec, render_pipeline
from bvr.ops.dvc.plots import PAGE_TEMPLATE, PLOT_TEMPLATES, TEMPLATES_DIR, page_template, plot_templates
from bvr.ops.views import saved_view
from bvr.runner.units import HANDLERS, UnitContext, find_model, run_context
from bvr.tracking import (
    CURVES_VIEW,
    DEFAULT_UI,
    EFFECTS_VIEW,
    SCORES_VIEW,
    RunContext,
    find_runs,
    run_tags,
    tracking_uri,
    ui_address,
    view_url,
)
from bvr.tracking.moved import reroot_artifacts
from tests.test_prepare import write_wiki_corpus

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[1]

EXPERIMENT = """\
description: Static vs dynamic masking on a generated corpus, a few steps.
published: {ablation: masking}
base:
  corpus: {path: corpus/wiki, validation_fraction: 0.1}
  tokenizer: {vocab_size: 400}
  data: {max_length: 64, shard_documents: 50}
  model: {num_layers: 2, hidden_size: 32, num_heads: 4, intermediate_size: 64}
  training: {batch_size: 8, learning_rate: 3.0e-3, warmup_steps: 2, max_steps: 20, val_every_steps: 10,
             checkpoint_every_steps: 10, log_every_steps: 2}
  masking: {dupe_factor: 1}
  finetune: {tasks: [sst2], seeds: 2, optional: [], epochs: 1, batch_size: 4, max_length: 64, max_eval_examples: null}
  evaluate:
    blimp: {per_paradigm: 2}
    probes: {tasks: [sst2], seeds: 2, max_train_examples: null}
arms:
  static: {masking: {mode: static}}
  dynamic: {masking: {mode: dynamic}}
control: true
"""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_wiki_corpus(root, documents=60)
    shutil.copytree(FIXTURES / "glue", root / "glue")
    shutil.copytree(FIXTURES / "blimp", root / "blimp")
    return root


def invoke(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["bvr", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exit_:
        code = exit_.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def bvr_env() -> dict[str, str]:
    """The environment of a ``bvr`` subprocess: this checkout's bvr, one thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def finished(data_dir, tmp_path_factory):
    """One full `bvr ablate` in its own working directory (the MLflow store lives there), run as a user runs the
    main job into a log: a subprocess whose standard output and error go to a pipe, progress bars asked for (the
    default). The directory is a git and DVC repository holding the ablation's pipeline (`bvr pipeline`),
    committed, as a clone of bvr is. What `bvr ablate` printed is in ``ablate.log``."""
    work = tmp_path_factory.mktemp("ablate")
    (work / "tiny-masking.yaml").write_text(EXPERIMENT + "pretrain_seeds: [0, 1]\n")
    shutil.copy(REPO / ".gitignore", work / ".gitignore")
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["bvr", "pipeline", "tiny-masking.yaml"],
                ["git", "add", "-A"], ["git", "commit", "-qm", "pipeline"]):
        done = _git_dvc(work, *cmd)
        assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-m", "bvr.cli", "ablate", "tiny-masking.yaml", "--data-dir", str(data_dir)],
                          cwd=work, env=bvr_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    log = done.stdout.decode()
    (work / "ablate.log").write_text(log)
    with (work / ".git" / "info" / "exclude").open("a") as exclude:  # the user's log, not the run's output
        exclude.write("ablate.log\n")
    assert done.returncode == 0, log[-3000:]
    return work


def test_a_log_without_a_terminal_has_one_plain_line_per_unit_and_ends_with_the_result(finished, data_dir):
    """The main job's log had 1,647 carriage returns, 240 cursor-up codes and four bar styles, scores as fractions,
    and ended on a path and an address; piped, it is one line per unit, then the headline and working addresses."""
    log = (finished / "ablate.log").read_text()
    assert "\r" not in log and "\x1b" not in log and "━" not in log and "it/s" not in log  # no bar, no code
    assert "\n\n" not in log  # nor the blank lines a hidden tokenizers bar leaves
    plan = make_plan(finished / "tiny-masking.yaml", data_dir=data_dir, output_dir=finished / "outputs")
    lines = log.splitlines()
    # The opening describes the run being made (not the experiment file's words), and states the thread budget.
    assert lines[0] == ("ablation tiny-masking (preset default): 2 layers, hidden 32, 20 steps of 8 x 64 tokens, "
                        "static masks (dupe factor 1)/dynamic masks")
    assert lines[1] == "  experiment file: Static vs dynamic masking on a generated corpus, a few steps."
    assert any(line.startswith("  units to run or reuse: ") and "; threads " in line for line in lines[:8])
    for unit in plan.units():  # what it was, how it ended, how long it took
        mine = [line for line in lines if re.match(rf"{unit}: (done|reused|failed) in ", line)]
        assert len(mine) == 1 and re.match(rf"{unit}: (done|reused) in \d+\.\d s", mine[0]), (unit, mine)
    assert not any(line.startswith("▶") for line in lines)  # the "now running" headers are for a terminal
    probe = next(line for line in lines if line.startswith("probe:static-p0:sst2: done in "))
    points = r"\d{1,3}\.\d"  # a score in points, as the report has it
    assert re.search(rf"accuracy {points} \(probe seeds {points}–{points}\), trivial baseline {points}$", probe)
    finetune = next(line for line in lines if line.startswith("finetune:static-p0:sst2: done in "))
    assert re.search(r"dev/accuracy median \d{1,3}\.\d \(min \d{1,3}\.\d, max \d{1,3}\.\d\) over 2 seeds", finetune)
    assert not re.search(r"\b0\.\d{4}\b", log)  # no score as a fraction
    # The closing lines: the report's headline bullets, the report, the MLflow views and how to open them.
    report = (finished / "reports" / "tiny-masking" / "report.md").read_text()
    first = report.split("## Headline")[1].split("In full:")[0]  # the line per question, above the full sentences
    bullets = [line for line in first.splitlines() if line.startswith("- ")]
    assert bullets and all(len(line) <= 170 for line in bullets)  # a line a question, readable in a terminal
    level = re.search(r"with (\d+\.?\d*%) simultaneous intervals", report).group(1)  # the report's one level
    end = lines[lines.index(f"headline (Δ [{level} simultaneous interval]; verdicts: Holm, family-wise error 5%):"):]
    assert bullets and end[1:1 + len(bullets)] == bullets
    assert end[1 + len(bullets)] == "report: reports/tiny-masking/report.html"
    experiment = MlflowClient(tracking_uri(finished)).get_experiment_by_name("tiny-masking").experiment_id
    parent = Manifest.load(find_manifest("tiny-masking", finished / "outputs")).parent_run_id
    assert end[2 + len(bullets):] == [
        f"MLflow, effects with intervals and verdicts: {view_url(DEFAULT_UI, experiment, EFFECTS_VIEW)}",
        f"MLflow, scores by arm: {view_url(DEFAULT_UI, experiment, SCORES_VIEW)}",
        f"MLflow, pretraining curves by arm: {view_url(DEFAULT_UI, experiment, CURVES_VIEW)}",
        f"MLflow, the ablation's run (headline, report): {ui_address(DEFAULT_UI, experiment, parent)}",
        "  (start the UI first, in this folder: bvr ui tiny-masking; or mlflow ui --backend-store-uri "
        "sqlite:///mlflow.db)"]


def test_every_unit_runs_and_the_manifest_indexes_mlflow(finished):
    path = find_manifest("tiny-masking", finished / "outputs")
    manifest = Manifest.load(path)
    assert Manifest.from_dict(json.loads(path.read_text())).to_dict() == json.loads(path.read_text())  # layout kept
    assert manifest.arms == ["static", "dynamic", "no-pretraining"]
    assert manifest.labels == ["static-p0", "static-p1", "dynamic-p0", "dynamic-p1", "no-pretraining-p0",
                               "no-pretraining-p1"]
    assert manifest.tasks == ["sst2"] and manifest.finetune_seeds == [0, 1]
    assert manifest.declared == {"static": {"masking.mode": "static"}, "dynamic": {"masking.mode": "dynamic"}}
    assert [p.status for p in manifest.pretrain] == ["done"] * 4
    assert len(manifest.finetune) == 6 * 1 * 2 and all(f.status == "done" for f in manifest.finetune)
    # Every model (each arm at each pretraining seed, and each control initialisation) gets BLiMP and the probe.
    evaluations = {(e.label, e.kind, e.task): e for e in manifest.evaluations}
    assert set(evaluations) == {(label, kind, task) for label in manifest.labels
                                for kind, task in (("blimp", None), ("probe", "sst2"))}
    assert all(e.status == "done" and 0.0 <= e.score <= 1.0 for e in evaluations.values())
    assert all(len(e.seeds) == 2 for e in evaluations.values() if e.kind == "probe")

    runs = find_runs("tiny-masking", workdir=finished).set_index("run_id")
    parents = runs[runs["tags.bvr.stage"] == "ablation"]
    assert list(parents.index) == [manifest.parent_run_id]
    assert parents["tags.mlflow.runName"].iloc[0] == "tiny-masking (default)"
    pretrain = runs[runs["tags.bvr.stage"] == "pretrain"]
    assert sorted(pretrain["tags.mlflow.runName"]) == ["dynamic-p0/pretrain", "dynamic-p1/pretrain",
                                                       "static-p0/pretrain", "static-p1/pretrain"]
    assert set(pretrain["tags.mlflow.parentRunId"]) == {manifest.parent_run_id}
    for entry in manifest.finetune:
        run = runs.loc[entry.run_id]
        assert run["tags.mlflow.runName"] == f"{entry.label}/finetune/sst2/seed{entry.seed}"
        assert run["metrics.dev/accuracy"] == pytest.approx(entry.score)
        task_parent = runs.loc[run["tags.mlflow.parentRunId"]]
        assert task_parent["tags.mlflow.parentRunId"] == manifest.parent_run_id
    # Every run of a model names its arm, its label and its pretraining seed, so the runs table groups by arm.
    for entry in [*manifest.pretrain, *manifest.evaluations, *manifest.finetune]:
        run = runs.loc[entry.run_id]
        assert (run["tags.bvr.arm"], run["tags.bvr.label"], run["tags.bvr.pretrain_seed"]) == (
            entry.arm, entry.label, str(entry.pretrain_seed)), entry.label
        # ... and what the arm changes, so a seed's run shows the ablated setting (the control changes nothing).
        declared = run.get("tags.bvr.declared.masking.mode")
        assert pd.isna(declared) if entry.arm == "no-pretraining" else declared == entry.arm  # static, dynamic
        if isinstance(entry, FinetuneRecord):
            assert runs.loc[run["tags.mlflow.parentRunId"], "tags.bvr.arm"] == entry.arm  # the task's run too
    for entry in manifest.evaluations:
        run = runs.loc[entry.run_id]
        name = f"{entry.label}/blimp" if entry.kind == "blimp" else f"{entry.label}/probe/sst2"
        assert run["tags.mlflow.runName"] == name and run["tags.mlflow.parentRunId"] == manifest.parent_run_id
        assert run[f"metrics.{entry.main_key}"] == pytest.approx(entry.score)
        assert run["metrics.score"] == pytest.approx(100 * entry.score)  # one name, in points, for every kind
    # The saved views find exactly one run per model and measure: what the scores view groups by arm.
    measured = runs[runs["tags.bvr.measure"].notna()] if "tags.bvr.measure" in runs else runs.iloc[:0]
    expected = {(label, measure) for label in manifest.labels for measure in ("blimp", "probe/sst2", "finetune/sst2")}
    assert sorted(zip(measured["tags.bvr.label"], measured["tags.bvr.measure"], strict=True)) == sorted(expected)
    assert measured["metrics.score"].notna().all()
    client = MlflowClient(tracking_uri(finished))
    experiment = client.get_experiment_by_name("tiny-masking")
    views = {k: v for k, v in experiment.tags.items() if k.startswith("mlflow.sharedViewState.")}
    assert sorted(views) == [f"mlflow.sharedViewState.bvr-{key}" for key in ("curves", "effects", "scores")]
    # The effects view: a row per comparison, ablation's pair first (2 arms x 3 measures against the control, and
    # dynamic - static on the same 3 and the MLM loss).
    effects_view = saved_view(experiment.tags, "bvr-effects")
    effects = client.search_runs([experiment.experiment_id], effects_view["searchFilter"],
                                 order_by=[effects_view["orderByKey"]])
    assert [r.data.tags["bvr.comparison"] for r in effects][:4] == [
        f"dynamic|static|{key}" for key in ("blimp", "probe/sst2", "finetune/sst2", "mlm")]
    assert len(effects) == 4 + 6
    scores_view = saved_view(experiment.tags, "bvr-scores")
    shown = client.search_runs([experiment.experiment_id], scores_view["searchFilter"], max_results=1000)
    # The scores view: the report's rows, one per arm and measure, the pretrained arms' MLM loss among them.
    rows = {f"{arm}|{key}" for arm in manifest.arms for key in ("blimp", "probe/sst2", "finetune/sst2")}
    assert sorted(r.data.tags["bvr.summary"] for r in shown) == sorted(rows | {"static|mlm", "dynamic|mlm"})
    # The control fine-tunes from its initialisation at each pretraining seed: the weights the arms started from.
    control = [f for f in manifest.finetune if f.arm == "no-pretraining"]
    checkpoints = {f.pretrain_seed: runs.loc[f.run_id, "tags.bvr.checkpoint"] for f in control}
    assert len(set(checkpoints.values())) == 2 and all("init-" in c for c in checkpoints.values())


@pytest.mark.slow
def test_dvc_repro_right_after_bvr_ablate_runs_nothing_and_leaves_git_and_dvc_clean(finished):
    # Before the other tests re-render the report. bvr ablate wrote the stage folder and recorded it in dvc.lock,
    # BLiMP and the probes included; the user commits dvc.lock, DVC's record of the run, as DVC asks.
    lock = yaml.safe_load((finished / "dvc.lock").read_text())["stages"]
    assert list(lock) == ["ablate"]
    outs = {out["path"] for out in lock["ablate"]["outs"]}
    assert {"pipeline/tiny-masking", "reports/tiny-masking/report.md"} <= outs
    assert (finished / "pipeline" / "tiny-masking" / "static-p0" / "blimp.json").is_file()  # BLiMP, the probes too
    for cmd in (["git", "add", "dvc.lock"], ["git", "commit", "-qm", "bvr ablate"]):
        assert _git_dvc(finished, *cmd).returncode == 0
    for cmd in (["dvc", "repro"], ["dvc", "repro", "--dry"]):  # --dry: every stage's dependency is there
        done = _git_dvc(finished, *cmd)
        assert done.returncode == 0 and "Running stage" not in done.stdout, done.stdout + done.stderr
        assert "Data and pipelines are up to date." in done.stdout
    status = _git_dvc(finished, "dvc", "status")
    assert status.returncode == 0 and status.stdout.strip() == "Data and pipelines are up to date.", status.stdout
    # Nothing for git: pipeline/ and reports/NAME/ are ignored (DVC tracks them), outputs/ and mlflow.db too.
    assert _git_dvc(finished, "git", "status", "--porcelain").stdout == ""


def test_the_report_is_rendered_and_logged(finished):
    report = finished / "reports" / "tiny-masking"
    for name in ("report.md", "report.html", "metrics.json"):
        assert (report / name).is_file(), name
    html = (report / "report.html").read_text()
    assert "static" in html and "dynamic" in html and "no-pretraining" in html


def test_bvr_report_renders_one_ablation_and_the_summary(finished, monkeypatch, capsys):
    monkeypatch.chdir(finished)
    report = finished / "reports" / "tiny-masking"
    files = lambda: {str(p.relative_to(report)): p.read_bytes() for p in report.rglob("*") if p.is_file()}  # noqa: E731
    before = files()
    code, out, _ = invoke(monkeypatch, capsys, "report", "tiny-masking", "--all")
    assert code == 0, out
    # Rendered again from the same runs, byte for byte: no timestamp, no wall time that moved; DVC stays clean.
    after = files()
    assert sorted(after) == sorted(before) and [n for n in before if after[n] != before[n]] == []
    status = _git_dvc(finished, "dvc", "status")
    assert status.stdout.strip() == "Data and pipelines are up to date.", status.stdout
    assert "reports/tiny-masking/report.html" in out and (finished / "reports" / "index.html").is_file()
    assert "tiny-masking" in (finished / "reports" / "index.html").read_text()
    code, _, err = invoke(monkeypatch, capsys, "report", "masking")
    assert code == 2 and "no runs of ablation 'masking'" in err and "bvr ablate masking" in err


def test_a_moved_clone_reports_into_its_own_store(finished, tmp_path):
    """MLflow records artifact folders as absolute URIs: a moved or copied clone logged its report into the old
    folder (or failed where that was gone). Opening the store re-roots them beside it; a database moved without its
    mlartifacts/ keeps them. `bvr report` runs in a process of its own, as after a `mv` (MLflow caches each run's
    artifact folder for the life of a process)."""
    moved = tmp_path / "moved"
    shutil.copytree(finished, moved)
    (tmp_path / "db-only").mkdir()
    shutil.copy(finished / "mlflow.db", tmp_path / "db-only" / "mlflow.db")
    assert reroot_artifacts(tmp_path / "db-only" / "mlflow.db") == 0
    before = time.time()
    done = subprocess.run([sys.executable, "-m", "bvr.cli", "report", "tiny-masking"], cwd=moved, env=bvr_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    parent = Manifest.load(find_manifest("tiny-masking", moved / "outputs")).parent_run_id
    here, there = MlflowClient(tracking_uri(moved)), MlflowClient(tracking_uri(finished))
    experiment = here.get_experiment_by_name("tiny-masking")
    assert experiment.artifact_location == (moved / "mlartifacts" / "tiny-masking").as_uri()
    runs = here.search_runs([experiment.experiment_id], max_results=1000)
    assert runs and all(run.info.artifact_uri.startswith(experiment.artifact_location + "/") for run in runs)
    logged = moved / "mlartifacts" / "tiny-masking" / parent / "artifacts" / "report" / "report.html"
    assert logged.stat().st_mtime >= before  # this invocation's report, logged here (copytree kept the old time)
    assert there.get_experiment_by_name("tiny-masking").artifact_location.startswith(finished.as_uri())  # untouched


def test_a_second_invocation_trains_nothing(finished, data_dir, monkeypatch, capsys):
    monkeypatch.chdir(finished)
    before = find_runs("tiny-masking", workdir=finished)
    code, out, err = invoke(monkeypatch, capsys, "ablate", "tiny-masking.yaml", "--data-dir", str(data_dir),
                            "--no-progress")
    assert code == 0, out
    assert "lock file" not in out + err  # DVC's own line is folded into bvr's, below
    after = find_runs("tiny-masking", workdir=finished)
    assert set(after["run_id"]) == set(before["run_id"])  # no new run: the ablation's one parent is reopened
    parents = after[after["tags.bvr.stage"] == "ablation"]
    assert list(parents["run_id"]) == [Manifest.load(find_manifest("tiny-masking", finished / "outputs")).parent_run_id]
    assert list(parents["status"]) == ["FINISHED"]
    assert "1 unit(s) run" in out and "reused" in out  # the report is re-rendered, nothing else
    # The folder's dvc.yaml runs this ablation: the run stands for `dvc repro` and records itself in dvc.lock.
    said = ("DVC: recorded 1 stage in dvc.lock (commit it with git); dvc status is clean and dvc repro runs "
            f"nothing. Data folder {data_dir.resolve()}; dvc repro reads it from BVR_DATA_DIR, as data_dir in "
            "params.yaml is empty")
    assert said in " ".join(out.split())


def test_a_partial_run_continues_and_a_failed_unit_is_recorded(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    finetune_rte = EXPERIMENT.replace("finetune: {tasks: [sst2], seeds: 2", "finetune: {tasks: [sst2, rte], seeds: 2")
    (tmp_path / "exp.yaml").write_text(finetune_rte)
    broken = tmp_path / "data"
    shutil.copytree(data_dir, broken)
    (broken / "glue" / "RTE" / "dev.tsv").write_text("index\tsentence1\n0\tonly one column\n")
    base = ["ablate", "exp.yaml", "--data-dir", str(broken), "--no-progress", "--no-report"]

    code, out, _ = invoke(monkeypatch, capsys, *base, "--only", "pretrain:static")
    assert code == 0, out
    manifest = Manifest.load(find_manifest("exp", tmp_path / "outputs"))
    assert [p.status for p in manifest.pretrain] == ["done", "missing"]

    code, out, err = invoke(monkeypatch, capsys, *base)
    assert code == 2
    assert "3 unit(s) failed" in err and "finetune:static:rte" in err and "RTE" in err
    assert "run the same command again" in err
    manifest = Manifest.load(find_manifest("exp", tmp_path / "outputs"))
    assert [p.status for p in manifest.pretrain] == ["done", "done"]
    status = {(f.arm, f.task): f.status for f in manifest.finetune}
    assert {k: v for k, v in status.items() if k[1] == "sst2"} == {
        ("static", "sst2"): "done", ("dynamic", "sst2"): "done", ("no-pretraining", "sst2"): "done"}
    assert {v for k, v in status.items() if k[1] == "rte"} == {"failed"}
    assert "pretrain:static" not in out.split("pretrain:dynamic")[1]  # static was not run again
    assert out.count(": reused in ") >= 2  # corpus, tokenizer, static's data and pretraining


def test_unknown_unit_and_unfair_override_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    code, _, err = invoke(monkeypatch, capsys, "ablate", "exp.yaml", "--only", "pretrain:nope")
    assert code == 2 and "no unit 'pretrain:nope'" in err and "pretrain:static" in err
    code, _, err = invoke(monkeypatch, capsys, "ablate", "exp.yaml", "--set", "masking.mode=static")
    assert code == 2 and "what the arms differ in" in err


def test_a_smoke_run_without_its_report_names_the_report_command_with_its_sets(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    import bvr.runner.run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    plans = []

    def run_nothing(plan, **_):
        plans.append(plan)
        return SimpleNamespace(ran=[], reused=[], seconds=0.0, report=None)

    monkeypatch.setattr(bvr.runner.run, "run_ablation", run_nothing)
    data_dir = tmp_path / "my data"
    code, out, _ = invoke(monkeypatch, capsys, "ablate", "exp.yaml", "--preset", "tiny", "--no-report", "--set",
                          "finetune.seeds=1", "--set", "finetune.tasks=[rte, sst2]", "--data-dir", str(data_dir))
    assert code == 0 and (plans[0].tasks, plans[0].seeds) == (["rte", "sst2"], [0])
    assert out.splitlines()[-1] == ("next: bvr report exp.yaml --preset tiny --set finetune.seeds=1 --set "
                                    f"'finetune.tasks=[rte, sst2]' --data-dir '{data_dir}'")


# ---------------------------------------------------------------------------------------------------------------
# The plan and the manifest, without running anything

V2_KEYS = ["version", "ablation", "description", "source", "preset", "overrides", "plan_hash", "experiment",
           "parent_run_id", "store", "published", "kind", "arms", "labels", "control_arm", "declared", "configs",
           "pretrain_seeds", "control_seeds", "tasks", "finetune_seeds", "finetune_hparams", "evaluations_settings",
           "pretrain", "evaluations", "finetune", "context"]
"""The top-level keys of a version-2 manifest.json, in the order they are written."""


def test_units_run_in_order_and_each_kind_has_a_handler(data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    plan = make_plan("exp.yaml", data_dir=data_dir)
    assert [unit.id for unit in plan.units()] == [
        "corpus", "tokenizer:bert", "data:static", "data:dynamic", "pretrain:static", "pretrain:dynamic",
        "pretrain:no-pretraining", "blimp:static", "blimp:dynamic", "blimp:no-pretraining", "probe:static:sst2",
        "probe:dynamic:sst2", "probe:no-pretraining:sst2", "finetune:static:sst2", "finetune:dynamic:sst2",
        "finetune:no-pretraining:sst2", "report"]
    assert set(HANDLERS) == set(UnitKind)
    assert [u.id for u in plan.select(["finetune:static:sst2", "corpus"])] == ["corpus", "finetune:static:sst2"]
    assert [u.id for u in plan.select(["pretrain", "blimp:static"])] == [  # a bare kind: all its units
        "pretrain:static", "pretrain:dynamic", "pretrain:no-pretraining", "blimp:static"]
    with pytest.raises(BvrError, match="no unit 'probe:static'"):
        plan.select(["probe:static"])


def test_a_new_manifest_is_written_in_the_version_2_layout_and_read_back(data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    plan = make_plan("exp.yaml", data_dir=data_dir)
    manifest = Manifest.new(plan, {"cpu": "test", "gpu": None})
    manifest.save(plan.manifest_path)
    data = json.loads(plan.manifest_path.read_text())
    assert list(data) == V2_KEYS and data["version"] == MANIFEST_VERSION == 2
    assert list(data["pretrain"][0]) == ["arm", "label", "pretrain_seed", "status", "run_id", "run_dir", "error",
                                         "metrics"]
    assert list(data["evaluations"][0]) == ["arm", "label", "pretrain_seed", "kind", "task", "status", "run_id",
                                            "main_key", "score", "seeds", "baseline", "seconds", "error"]
    assert list(data["finetune"][0]) == ["arm", "label", "pretrain_seed", "task", "seed", "status", "run_id",
                                         "parent_run_id", "main_key", "score", "collapsed", "seconds", "baseline",
                                         "grid_point", "selection", "error"]
    assert list(data["context"]) == ["git_commit", "data_dir", "output_dir", "started", "updated", "wall_seconds",
                                     "hardware"]
    assert [(e["label"], e["kind"], e["task"]) for e in data["evaluations"][:2]] == [("static", "blimp", None),
                                                                                     ("static", "probe", "sst2")]
    assert {e["status"] for e in [*data["pretrain"], *data["evaluations"], *data["finetune"]]} == {"missing"}
    again = Manifest.load(plan.manifest_path)
    assert again.to_dict() == manifest.to_dict() == data
    assert data["control_seeds"] == []  # paired: the control's initialisations are the pretraining seeds
    older = {key: value for key, value in data.items() if key != "control_seeds"}  # written before the key existed
    assert Manifest.from_dict(older).control_seeds == []
    again.finetune_records("dynamic", "sst2")[0].update(status="done", run_id="r1", score=0.5)
    assert Manifest.from_dict(again.to_dict()).finetune[2].run_id == "r1"
    with pytest.raises(AttributeError, match="no field 'scor'"):
        again.pretrain_record("static").update(scor=1.0)


def test_a_manifest_of_another_version_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"version": 1, "ablation": "masking", "arms": ["static"]}))
    with pytest.raises(BvrError, match="manifest version 1 is not 2") as err:
        Manifest.load(path)
    assert str(path) in str(err.value) and "run `bvr ablate masking`: it resets a damaged unit" in str(err.value)
    path.write_text("{")
    with pytest.raises(BvrError, match="cannot read the ablation manifest"):
        Manifest.load(path)


def test_put_replaces_the_record_of_the_same_unit_and_seed_in_place(data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    manifest = Manifest.new(make_plan("exp.yaml", data_dir=data_dir), {})
    done = dataclasses.replace(manifest.finetune_records("dynamic", "sst2")[1], status="done", score=0.75)
    manifest.put(done)
    assert manifest.finetune[3] is done and [r.key for r in manifest.finetune].count(done.key) == 1
    assert [r.status for r in manifest.finetune] == ["missing"] * 3 + ["done"] + ["missing"] * 2
    evaluation = dataclasses.replace(manifest.evaluation_record("static", "probe", "sst2"), run_id="r2")
    manifest.put(evaluation)
    assert manifest.evaluations[1] is evaluation and evaluation.key == ("static", "probe", "sst2")
    with pytest.raises(KeyError, match="has no FinetuneRecord \\('static', 'rte', 0\\)"):
        manifest.put(FinetuneRecord("static", "static", 0, task="rte", seed=0))


def _context(tmp_path: Path, data_dir: Path, **changes) -> UnitContext:
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    plan = make_plan("exp.yaml", data_dir=data_dir, output_dir=tmp_path / "outputs")
    values = {"models": {}, "run": RunContext(), "stage_dir": None, "rank": 0, "progress": False, **changes}
    return UnitContext(plan, Manifest.new(plan, {}), **values)


def test_a_handler_returns_what_it_built_and_changes_nothing(data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = _context(tmp_path, data_dir)
    before = ctx.manifest.to_dict()
    first = HANDLERS[UnitKind.CORPUS](ctx, Unit(UnitKind.CORPUS))
    again = HANDLERS[UnitKind.CORPUS](ctx, Unit(UnitKind.CORPUS))
    assert (first.built, again.built) == (True, False) and first.records == again.records == ()
    assert [p.path for p in first.products] == [("corpus.json",)] and again.products == first.products
    folder = json.loads(first.products[0].text)["folder"]
    assert folder.startswith("corpus-") and (tmp_path / "outputs" / "cache" / folder / "DONE").is_file()
    assert ctx.manifest.to_dict() == before and not (tmp_path / "pipeline").exists()


def test_every_run_of_a_unit_gets_its_model_s_context(tmp_path, data_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = _context(tmp_path, data_dir)
    arm = ctx.plan.arm("static")
    run = run_context(ctx.plan, ctx.manifest, Unit(UnitKind.PROBE, arm.label, "sst2"), "parent-id")
    assert (run.experiment, run.ablation, run.label, run.parent_run_id) == (
        ctx.plan.experiment, ctx.plan.name, arm.label, "parent-id")
    assert run.tags == {"bvr.arm": "static", "bvr.label": arm.label, "bvr.pretrain_seed": arm.pretrain_seed,
                        "bvr.declared.masking.mode": "static"}
    assert run_tags(run, stage="probe", task="sst2")["bvr.declared.masking.mode"] == "static"
    corpus = run_context(ctx.plan, ctx.manifest, Unit(UnitKind.CORPUS), "parent-id")
    assert (corpus.label, corpus.tags, corpus.parent_run_id) == (None, {}, "parent-id")


def test_looking_a_model_up_never_trains_one(data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = _context(tmp_path, data_dir)
    before = ctx.manifest.to_dict()
    with pytest.raises(BvrError, match="'static' has no pretrained model yet; nothing to fine-tune") as err:
        find_model(ctx, "static", what="fine-tune", where="finetune:static:sst2")
    assert "run the unit pretrain:static first" in str(err.value)
    assert not (tmp_path / "outputs").exists()  # nothing prepared, nothing trained
    control = find_model(ctx, "no-pretraining", what="evaluate", where="blimp:no-pretraining")
    runs = [p.name.rsplit("-", 1)[0] for p in (tmp_path / "outputs" / "runs").iterdir() if p.is_dir()]
    assert control.name == "model" and (control / "config.json").is_file()
    assert runs == ["init-no-pretraining"] and ctx.manifest.to_dict() == before  # initialised, nothing recorded

    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text("{}")
    ctx.manifest.pretrain_record("static").update(status="done", run_dir=str(run))
    assert find_model(ctx, "static", what="evaluate", where="blimp:static") == run / "model"
    staged = tmp_path / "pipeline"
    (staged / "static" / "model").mkdir(parents=True)
    (staged / "static" / "model" / "config.json").write_text("{}")
    here = {"no-pretraining": tmp_path / "init" / "model"}
    ctx = dataclasses.replace(ctx, stage_dir=staged, models=here)
    assert find_model(ctx, "static", what="evaluate", where="blimp:static") == staged / "static" / "model"
    assert find_model(ctx, "no-pretraining", what="evaluate", where="x") == here["no-pretraining"]
    ctx.manifest.pretrain_record("static").update(status="failed")
    with pytest.raises(BvrError, match="pretraining of 'static' failed; nothing to evaluate"):
        find_model(ctx, "static", what="evaluate", where="blimp:static")


# ---------------------------------------------------------------------------------------------------------------
# DVC


def test_the_shipped_dvc_yaml_is_the_generated_masking_pipeline():
    plan = make_plan("masking", preset="tiny")
    assert (REPO / "dvc.yaml").read_text() == render_pipeline(plan, REPO)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    assert params == {"data_dir": ""}
    shipped = {p.name: p.read_text(encoding="utf-8") for p in (REPO / TEMPLATES_DIR).glob("bvr-*")}
    assert shipped == {**plot_templates(), PAGE_TEMPLATE: page_template()}
    assert "html_template = plots/bvr-page.html" in (REPO / ".dvc" / "config").read_text()


def test_the_pipeline_is_one_stage_whose_params_are_the_arms_and_whose_metric_is_the_small_folder():
    spec = pipeline_spec(make_plan("masking", preset="tiny"), REPO)
    assert list(spec["stages"]) == ["ablate"]
    stage = spec["stages"]["ablate"]
    assert stage["cmd"] == ("bvr ablate experiments/masking.yaml --preset tiny --data-dir-from params.yaml "
                            "--stage-dir pipeline/masking --no-progress")
    # What dvc exp show puts in a column: data_dir, each arm's block, the experiment files' folder (one hash).
    assert stage["params"] == [{"params.yaml": ["data_dir"]},
                               {"experiments/masking.yaml": ["arms.static", "arms.dynamic"]}]
    assert stage["deps"] == ["experiments"]  # the experiment file and experiments/presets/tiny.yaml
    assert stage["metrics"] == ["reports/masking/metrics"]  # bvr ablate writes it too: nothing missing
    assert stage["outs"] == ["pipeline/masking", *(f"reports/masking/{out}" for out in (
        "report.md", "report.html", "figures", "metrics.json", "plots"))]
    # Every output is in DVC's cache (git ignores pipeline/ and reports/NAME/): none is left for git to track.
    assert all(isinstance(out, str) for out in stage["outs"])
    # An experiment file outside a folder of its own: the file and its preset, each a dependency.
    outside = pipeline_spec(make_plan(REPO / "experiments" / "masking.yaml", preset="tiny"), REPO / "experiments")
    assert outside["stages"]["ablate"]["deps"] == ["masking.yaml", "presets/tiny.yaml"]


def test_dvc_plots_colour_arms_keep_seeds_categorical_and_mark_zero():
    entries = pipeline_spec(make_plan("masking", preset="tiny"), REPO)["plots"]
    assert entries[0] == "reports/masking/figures"  # the report's figures, as images: drawn with no network
    plots = {name: body for entry in entries[1:] for name, body in entry.items()}
    folder = "reports/masking/plots"
    assert {name: (body["template"], body["x"], body["y"]) for name, body in plots.items()} == {
        "training MLM loss per arm": ("bvr-curves", "step", {f"{folder}/pretrain_train_mlm_loss.csv": "value"}),
        "validation perplexity per arm": ("bvr-curves", "step", {f"{folder}/pretrain_val_perplexity.csv": "value"}),
        "sst2 score per seed": ("bvr-seeds", "pretrain_seed", {f"{folder}/scores_sst2.csv": "score"}),
        "paired differences": ("bvr-differences", "measure", {f"{folder}/differences.csv": "difference"}),
    }
    curves, seeds = PLOT_TEMPLATES["bvr-curves"]["encoding"], PLOT_TEMPLATES["bvr-seeds"]["encoding"]
    arm = {"field": "arm", "type": "nominal", "sort": None, "title": "arm"}
    assert curves["color"] == seeds["color"] == seeds["xOffset"] == arm  # DVC's own colour is the revision's
    assert seeds["x"]["type"] == "ordinal" and curves["x"]["type"] == "quantitative"
    assert curves["y"]["scale"] == seeds["y"]["scale"] == {"zero": False}
    differences = PLOT_TEMPLATES["bvr-differences"]
    zero, points = differences["spec"]["layer"]
    assert zero["mark"]["type"] == "rule" and zero["encoding"] == {"y": {"datum": 0}}
    assert points["encoding"]["x"]["type"] == "nominal" and differences["facet"]["column"]["field"] == "comparison"
    for name, template in PLOT_TEMPLATES.items():  # every anchor DVC fills when dvc.yaml gives it
        text = json.dumps(template)
        assert all(f"<DVC_METRIC_{a}>" in text for a in ("DATA", "TITLE", "X", "Y", "X_LABEL", "Y_LABEL")), name


def _git_dvc(cwd: Path, *args: str, columns: int | None = None, data_dir: Path | None = None
             ) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "DVC_NO_ANALYTICS": "1", **({"COLUMNS": str(columns)} if columns else {}),
           **({"BVR_DATA_DIR": str(data_dir)} if data_dir else {})}
    bindir = str(Path(sys.executable).parent)  # the `bvr` and `dvc` of this environment
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))  # this checkout's bvr
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_dvc_reads_the_metrics_and_plots_bvr_ablate_wrote(finished):
    repo = finished  # a clone of bvr where `bvr pipeline`, then `bvr ablate` ran
    assert sorted(p.name for p in (repo / TEMPLATES_DIR).iterdir()) == sorted([*plot_templates(), PAGE_TEMPLATE])
    assert "html_template = plots/bvr-page.html" in (repo / ".dvc" / "config").read_text()
    shown = _git_dvc(repo, "dvc", "metrics", "show")  # no dvc repro: what bvr ablate left
    assert shown.returncode == 0 and "failed" not in shown.stderr, shown.stderr
    assert [line.split() for line in shown.stdout.splitlines()][0] == [
        "Path", "blimp", "finetune_sst2", "mlm", "probe_sst2"]
    assert shown.stdout.splitlines()[1].split()[0] == "reports/tiny-masking/metrics/dynamic-minus-static.json"

    # dvc exp show, without flags, in a terminal of 200 columns: every column whole (DVC cuts what does not fit to
    # `…`): the differences, data_dir, the arms' keys and the experiment file's hash.
    table = _git_dvc(repo, "dvc", "exp", "show", "--no-pager", columns=200)
    assert table.returncode == 0, table.stderr
    assert "…" not in table.stdout and max(map(len, table.stdout.splitlines())) <= 200, table.stdout
    header = table.stdout.splitlines()[1].split()
    assert header == ["Experiment", "Created", "blimp", "probe_sst2", "finetune_sst2", "mlm", "data_dir",
                      "arms.static.masking.mode", "arms.dynamic.masking.mode", "tiny-masking.yaml"], table.stdout

    plots = _git_dvc(repo, "dvc", "plots", "show", "--json", "--split")
    assert plots.returncode == 0 and "WARNING" not in plots.stderr, plots.stderr
    shown = json.loads(plots.stdout)
    assert "errors" not in shown, shown.get("errors")
    shown = shown["data"]
    figures = [f"reports/tiny-masking/figures/{name}.png" for name in ("curves", "differences", "scores", "throughput")]
    assert sorted(shown) == sorted(["paired differences", "sst2 score per seed", "training MLM loss per arm",
                                    "validation perplexity per arm", *figures])
    assert all(shown[f][0]["type"] == "image" for f in figures)
    seeds = shown["sst2 score per seed"][0]
    arms = {point["arm"] for point in seeds["anchor_definitions"]["<DVC_METRIC_DATA>"]}
    assert arms == {"static", "dynamic", "no-pretraining"} and seeds["content"]["encoding"]["color"]["field"] == "arm"

    # The HTML page: the figures as local images, and bvr's page, which says in place of each Vega plot that
    # Vega did not load, instead of leaving it blank, when there is no network.
    page = _git_dvc(repo, "dvc", "plots", "show")
    assert page.returncode == 0, page.stderr
    html = (repo / "dvc_plots" / "index.html").read_text()
    assert "bvr-offline" in html and "<img" in html and "vegaEmbed(" in html
    assert sorted(p.name for p in (repo / "dvc_plots" / "static").iterdir()) == sorted(
        f"workspace_{f.replace('/', '_')}" for f in figures)


@pytest.mark.slow
def test_dvc_repro_runs_the_ablation_then_nothing_and_an_experiment_trains_only_the_changed_arm(data_dir, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    # One fine-tuning seed, no BLiMP, no probe and no control: the DVC layout is the subject here. BLiMP, the probes
    # and the control in the stage folder are checked by test_dvc_repro_right_after_bvr_ablate_runs_nothing_...
    (repo / "tiny-masking.yaml").write_text(EXPERIMENT.replace("seeds: 2, optional", "seeds: 1, optional")
                                            .replace("blimp: {per_paradigm: 2}", "blimp: {enabled: false}")
                                            .replace("probes: {tasks: [sst2], seeds: 2, max_train_examples: null}",
                                                     "probes: {tasks: []}")
                                            .replace("control: true", "control: false"))
    (repo / "params.yaml").write_text("data_dir: ''\n")  # as shipped: the data folder from BVR_DATA_DIR
    shutil.copy(REPO / ".gitignore", repo / ".gitignore")
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["bvr", "pipeline", "tiny-masking.yaml"],
                ["git", "add", "-A"], ["git", "commit", "-qm", "pipeline"]):
        done = _git_dvc(repo, *cmd)
        assert done.returncode == 0, done.stderr

    first = _git_dvc(repo, "dvc", "repro", data_dir=data_dir)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "Running stage 'ablate'" in first.stdout
    for unit in ("corpus", "tokenizer:bert", "data:static", "pretrain:dynamic", "finetune:static:sst2", "report"):
        assert f"\n{unit}: done in " in first.stdout, unit
    assert (repo / "pipeline" / "tiny-masking" / "static" / "model" / "model.safetensors").is_file()
    scores = json.loads((repo / "pipeline" / "tiny-masking" / "dynamic" / "finetune-sst2.json").read_text())
    assert scores["main_key"] == "dev/accuracy" and len(scores["seeds"]) == 1
    assert (repo / "reports" / "tiny-masking" / "report.html").is_file()
    metrics = _git_dvc(repo, "dvc", "metrics", "show", "--json")
    rows = json.loads(metrics.stdout)[""]["data"]  # "": the workspace
    assert metrics.returncode == 0 and "failed" not in metrics.stderr, metrics.stderr
    assert set(rows["reports/tiny-masking/metrics/dynamic-minus-static.json"]["data"]) == {"mlm", "finetune_sst2"}

    again = _git_dvc(repo, "dvc", "repro", data_dir=data_dir)
    assert again.returncode == 0 and "Running stage" not in again.stdout, again.stdout
    for cmd in (["git", "add", "dvc.lock"], ["git", "commit", "-qm", "run"]):
        assert _git_dvc(repo, *cmd).returncode == 0

    # An experiment that changes one arm's masking seed (+: a key the file lacks): DVC runs the stage; bvr trains
    # that arm and reuses the rest, the dynamic arm's data among them (its masks are drawn while it trains).
    exp = _git_dvc(repo, "dvc", "exp", "run", "-n", "seed-1", "-S", "tiny-masking.yaml:+arms.dynamic.masking.seed=1",
                   data_dir=data_dir)
    assert exp.returncode == 0, exp.stdout[-3000:] + exp.stderr[-3000:]
    for unit in ("corpus", "tokenizer:bert", "data:static", "data:dynamic", "pretrain:static", "finetune:static:sst2"):
        assert f"\n{unit}: reused in " in exp.stdout, (unit, exp.stdout)
    for unit in ("pretrain:dynamic", "finetune:dynamic:sst2", "report"):
        assert f"\n{unit}: done in " in exp.stdout, (unit, exp.stdout)
    # Both runs side by side, within 200 columns: the changed key has its own column.
    table = _git_dvc(repo, "dvc", "exp", "show", "--no-pager", "--csv")
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    seeds = {"baseline" if r["typ"] == "baseline" and r["rev"] != "workspace" else r["Experiment"] or r["rev"]:
             r["arms.dynamic.masking.seed"] for r in rows}
    assert seeds["baseline"] == "" and seeds["seed-1"] == "1", seeds
    assert all(r["mlm"] and r["finetune_sst2"] for r in rows)
    wide = _git_dvc(repo, "dvc", "exp", "show", "--no-pager", columns=200)
    assert "…" not in wide.stdout and "seed-1" in wide.stdout, wide.stdout
