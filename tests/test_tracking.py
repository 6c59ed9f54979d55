"""bvr.tracking against a real MLflow: an SQLite store in a temporary folder, written and read back.

Creating an SQLite store costs a couple of seconds, so one store is shared by the module (``store``); tests that
change runs use experiments of their own in it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
import yaml
from mlflow import MlflowClient

from bvr import logger as logger_module
from bvr import tracking
from bvr.errors import BvrError
from bvr.tracking import MAX_PARAM_VAL_LENGTH, TRUNCATION_MARKER

EXPERIMENT = "bvr-masking"
ARMS = ("static", "dynamic")
STEPS = 3


def _config() -> dict:
    """A config with nested sections, a list, a None, an odd key, a value over MLflow's limit, >100 keys."""
    return {
        "name": "masking",
        "masking": {"mode": "dynamic", "mask_prob": 0.15, "split": [0.8, 0.1, 0.1], "scheme": "whole-word"},
        "evaluate": {"blimp": {"enabled": False}},
        "tokenizer": {"path": None, "vocab_size": 30000},
        "sweep": {f"k{i:03d}": i for i in range(120)},
        "notes": "x" * (MAX_PARAM_VAL_LENGTH + 500),
        "odd key!": 1,
    }


def _tokenizer_folder(root: Path) -> Path:
    folder = root / "tokenizer-src"
    (folder / "extra").mkdir(parents=True)
    (folder / "tokenizer.json").write_text("{}", encoding="utf-8")
    (folder / "extra" / "vocab.txt").write_text("[PAD]\n[UNK]\n", encoding="utf-8")
    return folder


def _log_arm(arm: str, parent_id: str, tokenizer: Path) -> str:
    """One nested pretraining run logged through the Lightning logger, as a training run would."""
    tags = tracking.run_tags(tracking.RunContext(ablation="masking", label=arm), stage="pretrain",
                             extra={tracking.TAG_COLLAPSED: False})
    logger = logger_module.make_logger(
        EXPERIMENT, run_name=tracking.run_name(arm, "pretrain"), tags=tags, parent_run_id=parent_id
    )
    for step in range(STEPS):
        logger.log_metrics({"train/mlm_loss": 5.0 - step, "val/perplexity": 100.0 / (step + 1)}, step=step)
    tracking.log_config(logger, None, _config())
    tracking.log_artifact_dir(logger.experiment, logger.run_id, tokenizer, "tokenizer")
    logger.finalize("success")
    return logger.run_id


@dataclasses.dataclass
class Store:
    workdir: Path
    parent: mlflow.entities.Run
    children: dict[str, str]
    """Arm -> run id."""
    client: MlflowClient


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    workdir = tmp_path_factory.mktemp("store")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.chdir(workdir)  # anything MLflow writes relative to the working directory lands in tmp
        tags = tracking.run_tags(tracking.RunContext(ablation="masking"), stage="ablation")
        with tracking.parent_run(EXPERIMENT, "masking", tags=tags, description="static vs dynamic") as parent:
            tokenizer = _tokenizer_folder(workdir)
            children = {arm: _log_arm(arm, parent.info.run_id, tokenizer) for arm in ARMS}
        yield Store(workdir, parent, children, MlflowClient(tracking.tracking_uri()))


# ---------------------------------------------------------------------------------------------------------------
# The shared store, read back


def test_default_store_is_sqlite_with_artifacts_beside_it(store: Store) -> None:
    assert tracking.tracking_uri() == f"sqlite:///{store.workdir / 'mlflow.db'}"
    assert (store.workdir / "mlflow.db").is_file()
    experiment = store.client.get_experiment_by_name(EXPERIMENT)
    assert experiment.artifact_location == (store.workdir / "mlartifacts" / EXPERIMENT).as_uri()
    assert (store.workdir / "mlartifacts" / EXPERIMENT / store.children["static"] / "artifacts").is_dir()


def test_runs_are_named_tagged_and_nested(store: Store) -> None:
    runs = tracking.find_runs(EXPERIMENT).set_index("tags.mlflow.runName")
    assert sorted(runs.index) == ["dynamic/pretrain", "masking", "static/pretrain"]
    assert set(runs["status"]) == {"FINISHED"}
    parent_id = store.parent.info.run_id
    assert runs.loc["masking", "run_id"] == parent_id
    assert runs.loc["masking", "tags.mlflow.note.content"] == "static vs dynamic"
    for arm in ARMS:
        child = runs.loc[f"{arm}/pretrain"]
        assert child["run_id"] == store.children[arm]
        assert child["tags.mlflow.parentRunId"] == parent_id
        assert child["tags.bvr.ablation"] == "masking"
        assert (child["tags.bvr.arm"], child["tags.bvr.stage"]) == (arm, "pretrain")
        assert child["tags.bvr.collapsed"] == "false"
    assert store.client.get_parent_run(store.children["static"]).info.run_id == parent_id


def test_find_runs_filters_on_bvr_tags(store: Store) -> None:
    found = tracking.find_runs(EXPERIMENT, filter_string="tags.`bvr.arm` = 'static'")
    assert list(found["run_id"]) == [store.children["static"]]
    nested = tracking.find_runs(EXPERIMENT, filter_string=f"tags.mlflow.parentRunId = '{store.parent.info.run_id}'")
    assert sorted(nested["run_id"]) == sorted(store.children.values())


def test_find_runs_of_an_unknown_experiment_is_empty(store: Store) -> None:
    found = tracking.find_runs("no-such-experiment")
    assert found.empty
    assert "run_id" in found.columns


def test_metric_history_keeps_keys_and_steps(store: Store) -> None:
    history = store.client.get_metric_history(store.children["dynamic"], "train/mlm_loss")
    assert [(m.step, m.value) for m in history] == [(0, 5.0), (1, 4.0), (2, 3.0)]
    metrics = store.client.get_run(store.children["dynamic"]).data.metrics
    assert metrics["val/perplexity"] == pytest.approx(100.0 / STEPS)


def test_params_are_flattened_in_full(store: Store) -> None:
    params = store.client.get_run(store.children["static"]).data.params
    assert params == tracking.flatten_params(_config())
    assert len(params) > 100  # more than one batch
    assert params["masking.mask_prob"] == "0.15"
    assert params["masking.split"] == "[0.8, 0.1, 0.1]"
    assert params["masking.scheme"] == "whole-word"
    assert params["evaluate.blimp.enabled"] == "false"
    assert params["tokenizer.path"] == "null"
    assert params["odd key_"] == "1"
    assert len(params["notes"]) == MAX_PARAM_VAL_LENGTH
    assert params["notes"].endswith(TRUNCATION_MARKER)


def test_config_and_folder_artifacts_are_listed(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    run_id = store.children["static"]
    assert {f.path for f in store.client.list_artifacts(run_id)} == {"config.yaml", "tokenizer"}
    assert {f.path for f in store.client.list_artifacts(run_id, "tokenizer")} == {
        "tokenizer/tokenizer.json",
        "tokenizer/extra",
    }
    assert [f.path for f in store.client.list_artifacts(run_id, "tokenizer/extra")] == ["tokenizer/extra/vocab.txt"]
    local = store.client.download_artifacts(run_id, "config.yaml", str(tmp_path))
    assert yaml.safe_load(Path(local).read_text(encoding="utf-8")) == _config()


def test_logger_leaves_mlflow_globals_alone(store: Store) -> None:
    # Lightning's logger calls mlflow.set_tracking_uri, which would also export MLFLOW_TRACKING_URI.
    assert "MLFLOW_TRACKING_URI" not in os.environ


# ---------------------------------------------------------------------------------------------------------------
# Runs that change: each in an experiment of its own, in the shared store


def test_resumed_logger_continues_the_same_run(store: Store) -> None:
    experiment = "bvr-resume"
    tags = tracking.run_tags(tracking.RunContext(label="bert"), stage="pretrain")
    first = logger_module.make_logger(experiment, run_name="bert/pretrain", tags=tags)
    first.log_metrics({"train/mlm_loss": 2.0}, step=1)
    tracking.log_config(first, None, {"a": {"b": 1}})
    first.finalize("success")

    again = logger_module.make_logger(experiment, run_name="bert/pretrain", tags=tags, run_id=first.run_id)
    assert store.client.get_run(first.run_id).info.status == "RUNNING"
    again.log_metrics({"train/mlm_loss": 1.5}, step=2)
    tracking.log_config(again, None, {"a": {"b": 1}})  # the same values again: accepted
    again.finalize("success")

    assert len(tracking.find_runs(experiment)) == 1
    history = store.client.get_metric_history(first.run_id, "train/mlm_loss")
    assert [(m.step, m.value) for m in history] == [(1, 2.0), (2, 1.5)]
    assert store.client.get_run(first.run_id).info.status == "FINISHED"


def test_resume_of_an_unknown_run_is_a_user_error(store: Store) -> None:
    with pytest.raises(BvrError, match="no MLflow run"):
        logger_module.make_logger("bvr-resume", run_name="x", tags={}, run_id="0" * 32)


def test_parent_run_fails_then_resumes(store: Store) -> None:
    with pytest.raises(RuntimeError), tracking.parent_run("bvr-failing", "invocation") as run:
        raise RuntimeError("boom")
    assert store.client.get_run(run.info.run_id).info.status == "FAILED"

    with tracking.parent_run("bvr-failing", "invocation", tags={"bvr.attempt": "2"}, resume_run_id=run.info.run_id):
        pass
    resumed = store.client.get_run(run.info.run_id)
    assert (resumed.info.status, resumed.data.tags["bvr.attempt"]) == ("FINISHED", "2")
    assert len(tracking.find_runs("bvr-failing")) == 1


def test_runs_of_a_dead_process_are_closed_as_killed(store: Store) -> None:
    # A run opened by a process that was then killed stays RUNNING; the next invocation closes it. Runs of a live
    # process, of another machine and of older versions (no owner tags) are left as they are.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that existed and is now free
    experiment_id = tracking.ensure_experiment("bvr-stale")
    here = socket.gethostname()

    def running(**owner: str) -> str:
        tags = {key: value for key, value in {"bvr.host": owner.get("host"), "bvr.pid": owner.get("pid")}.items()
                if value is not None}
        return store.client.create_run(experiment_id, tags=tags).info.run_id

    dead = running(host=here, pid=str(gone.pid))
    alive = running(host=here, pid=str(os.getpid()))
    elsewhere = running(host=f"{here}-other", pid=str(gone.pid))
    untagged = running()
    assert tracking.close_stale_runs("bvr-stale") == [dead]
    status = {run_id: store.client.get_run(run_id).info.status for run_id in (dead, alive, elsewhere, untagged)}
    assert status == {dead: "KILLED", alive: "RUNNING", elsewhere: "RUNNING", untagged: "RUNNING"}
    assert f"process {gone.pid} on {here} ended" in store.client.get_run(dead).data.tags["bvr.closed"]
    assert tracking.close_stale_runs("bvr-stale") == []  # nothing left to close
    assert tracking.close_stale_runs("no-such-experiment") == []


def test_every_run_names_its_host_and_process(store: Store) -> None:
    tags = tracking.run_tags(tracking.RunContext(ablation="masking", label="static"), stage="pretrain")
    assert (tags["bvr.host"], tags["bvr.pid"]) == (socket.gethostname(), str(os.getpid()))
    with tracking.parent_run("bvr-owner", "invocation") as run:
        pass
    client = store.client
    client.set_tag(run.info.run_id, "bvr.pid", "1")  # as if another process had opened it last
    with tracking.parent_run("bvr-owner", "invocation", resume_run_id=run.info.run_id):
        assert client.get_run(run.info.run_id).data.tags["bvr.pid"] == str(os.getpid())  # the resumer owns it


def test_hyperparams_from_lightning_are_logged_in_full(store: Store) -> None:
    logger = logger_module.make_logger("bvr-hparams", run_name="bert/pretrain", tags={})
    logger.log_hyperparams({"model": {"notes": "y" * 300, "layers": 2}})  # the stock logger cuts at 250
    logger.finalize("success")
    params = store.client.get_run(logger.run_id).data.params
    assert params == {"model.notes": "y" * 300, "model.layers": "2"}


def test_a_deleted_experiment_is_a_user_error(store: Store) -> None:
    store.client.delete_experiment(tracking.ensure_experiment("bvr-deleted"))
    with pytest.raises(BvrError, match="was deleted"):
        tracking.ensure_experiment("bvr-deleted")


# ---------------------------------------------------------------------------------------------------------------
# Several processes on one new store

_RUN_IN_CHILD = """
import sys, time
from pathlib import Path
from bvr import tracking

name, flags = sys.argv[1], Path(sys.argv[2])
(flags / f"ready-{name}").write_text("")
while not (flags / "go").exists():  # all three touch the new store at the same moment
    time.sleep(0.005)
with tracking.parent_run("concurrent", name) as run:
    tracking.client_for(None).log_metric(run.info.run_id, "dev/accuracy", 0.5)
"""


def test_processes_starting_at_once_on_a_new_store_all_record_their_runs(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the lock MLflow's table creation races: "table ... already exists" or a store left half-migrated.
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    flags = tmp_path / "flags"
    flags.mkdir()
    names = ("a", "b", "c")
    root = str(Path(__file__).resolve().parents[1])  # the children import this checkout's bvr
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    children = [subprocess.Popen([sys.executable, "-c", _RUN_IN_CHILD, name, str(flags)], cwd=tmp_path, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for name in names]
    deadline = time.monotonic() + 300
    while len(list(flags.glob("ready-*"))) < len(names) and all(child.poll() is None for child in children):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (flags / "go").write_text("")
    for child in children:
        output, _ = child.communicate(timeout=300)
        assert child.returncode == 0, output
    runs = tracking.find_runs("concurrent", workdir=tmp_path)
    assert sorted(runs["tags.mlflow.runName"]) == list(names)
    assert set(runs["status"]) == {"FINISHED"} and list(runs["metrics.dev/accuracy"]) == [0.5] * 3


# ---------------------------------------------------------------------------------------------------------------
# Another store through MLFLOW_TRACKING_URI


def test_tracking_uri_env_selects_another_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "elsewhere" / "runs.db"
    other.parent.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{other}")
    monkeypatch.chdir(tmp_path)
    assert tracking.tracking_uri(tmp_path) == f"sqlite:///{other}"

    experiment_id = tracking.ensure_experiment("bvr-pretrain", tmp_path)
    assert other.is_file()
    assert not (tmp_path / tracking.DEFAULT_DB).exists()
    location = MlflowClient(f"sqlite:///{other}").get_experiment(experiment_id).artifact_location
    assert location == (other.parent / "mlartifacts" / "bvr-pretrain").as_uri()


def test_artifact_location_is_left_to_a_server() -> None:
    assert tracking.artifact_location("bvr-pretrain", "http://mlflow.example:5000") is None
    assert tracking.artifact_location("a/b c", "sqlite:////data/mlflow.db").startswith("file:///data/mlartifacts/a-b-c-")


# ---------------------------------------------------------------------------------------------------------------
# Pure helpers


def test_flatten_params_cleans_keys_and_values() -> None:
    @dataclasses.dataclass
    class Section:
        rate: float = 0.1
        sizes: tuple[int, ...] = (1, 2)

    params = tracking.flatten_params({"s": Section(), "empty": {}, "a:b": 1, "a_b": 2, ".hidden": "x", "k" * 300: 0})
    assert params["s.rate"] == "0.1"
    assert params["s.sizes"] == "[1, 2]"
    assert params["empty"] == "{}"
    assert params["a_b"] == "1"  # from "a:b"; the later "a_b" is kept apart
    assert [v for k, v in params.items() if k.startswith("a_b_")] == ["2"]
    assert params["_.hidden"] == "x"
    assert all(len(key) <= tracking.MAX_ENTITY_KEY_LENGTH for key in params)


def test_run_name_and_tags() -> None:
    assert tracking.run_name("bert", "finetune", "mnli", 0) == "bert/finetune/mnli/seed0"
    tags = tracking.run_tags(tracking.RunContext(ablation="nsp", label="no-nsp"), stage="finetune", task="rte", seed=3,
                             extra={tracking.TAG_COLLAPSED: True})
    assert {k: v for k, v in tags.items() if k != tracking.TAG_GIT_COMMIT and k.startswith("bvr.")} == {
        "bvr.ablation": "nsp", "bvr.arm": "no-nsp", "bvr.stage": "finetune", "bvr.task": "rte", "bvr.seed": "3",
        "bvr.collapsed": "true", "bvr.host": socket.gethostname(), "bvr.pid": str(os.getpid()),
    }
    assert "bvr.task" not in tracking.run_tags(tracking.RunContext(label="bert"), stage="pretrain")
    # the model's tags win over the label's, and a run's own extra over both
    model = tracking.RunContext(ablation="nsp", label="no-nsp-p1", tags={"bvr.arm": "no-nsp", "bvr.label": "no-nsp-p1"})
    tags = tracking.run_tags(model, stage="blimp", extra={"bvr.label": "mine"})
    assert (tags["bvr.arm"], tags["bvr.label"], tags["bvr.stage"]) == ("no-nsp", "mine", "blimp")
    commit = tracking.git_commit()
    if commit:  # the package runs from a checkout
        assert tags[tracking.TAG_GIT_COMMIT] == commit
        assert tags["mlflow.source.git.commit"] == commit.removesuffix("-dirty")


# ---------------------------------------------------------------------------------------------------------------
# git


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_commit_clean_dirty_and_untracked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # never find a repository above tmp_path
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n", encoding="utf-8")
    _git(repo, "add", "a.txt")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    head = _git(repo, "rev-parse", "HEAD")

    assert tracking.git_commit(repo) == head
    (repo / "new.txt").write_text("untracked\n", encoding="utf-8")
    assert tracking.git_commit(repo) == head  # untracked files do not make the tree dirty
    (repo / "a.txt").write_text("two\n", encoding="utf-8")
    assert tracking.git_commit(repo) == f"{head}-dirty"


def test_git_commit_outside_git_or_without_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    plain = tmp_path / "plain"
    plain.mkdir()
    assert tracking.git_commit(plain) is None
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    assert tracking.git_commit(plain) is None


def test_experiments_open_as_model_development(store: Store) -> None:
    # MLflow 3's UI guesses GenAI for an untagged experiment and opens an empty traces page.
    experiment_id = tracking.ensure_experiment("bvr-kind")
    assert store.client.get_experiment(experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"


def test_saved_views_are_experiment_tags_the_ui_reads(store: Store) -> None:
    """The three views are envelopes the UI lists by name under "Views"; the effects view selects exactly the
    effect runs, in the order written; the scores view exactly the summary runs, one per arm and measure, rounded as
    the report prints them; the curves view fits its y axes and folds every other chart section."""
    from bvr.ops.views import saved_view, set_run_colours, write_effects, write_summaries, write_views
    from bvr.report.shown import EffectRow, ScoreRow

    experiment_id = tracking.ensure_experiment("bvr-views", store.workdir)
    client = store.client
    parent = client.create_run(experiment_id, tags={"bvr.stage": "ablation"}).info.run_id
    client.create_run(experiment_id, tags={tracking.TAG_MEASURE: "finetune/sst2", "bvr.arm": "static"})  # one seed
    rows = [ScoreRow("static", "finetune/sst2", "sst2 fine-tuned", "points", 1, 53.81343283582089, 52.0333, 55.6, 8),
            ScoreRow("static", "mlm", "validation MLM loss", "nats", 3, 7.32812345, float("nan"), float("nan"), 1)]
    first = write_summaries(client, experiment_id, parent, rows)
    assert write_summaries(client, experiment_id, parent, rows) == first  # a report rendered again updates them
    write_views(client, experiment_id, {"val/mlm_loss": (7.1, 7.4)})
    write_views(client, experiment_id, {"val/mlm_loss": (7.1, 7.4)})  # idempotent
    tags = client.get_experiment(experiment_id).tags
    envelope = json.loads(tags["mlflow.sharedViewState.bvr-scores"])
    assert envelope["name"] == "bvr: scores per arm" and isinstance(envelope["state"], str)
    scores, curves = saved_view(tags, "bvr-scores"), saved_view(tags, "bvr-curves")
    assert scores["groupBy"] is None and scores["columnOrder"] == scores["selectedColumns"]
    assert scores["selectedColumns"][:3] == ["attributes.`Run Name`", "metrics.`mean`", "metrics.`ci95_low`"]
    assert scores["columnWidths"]["attributes.`Run Name`"] == 300
    shown = client.search_runs([experiment_id], scores["searchFilter"], order_by=["attributes.run_name"])
    assert [r.info.run_id for r in shown] == first
    assert [r.info.run_name for r in shown] == ["static · sst2 fine-tuned", "static · validation MLM loss"]
    assert shown[0].data.metrics == {"mean": 53.8, "ci95_low": 52.0, "ci95_high": 55.6, "n": 8.0}
    assert shown[1].data.metrics == {"mean": 7.328, "n": 1.0}  # no interval from one seed
    assert {r.data.tags["mlflow.parentRunId"] for r in shown} == {parent}
    effects = [EffectRow("static", "dynamic", "mlm", "validation MLM loss", "nats", 3, -0.11123, -0.13149, -0.0911,
                         0.0123, "99.5%", "dynamic better (Holm p < 0.001)"),
               EffectRow("no-pretraining", "static", "blimp", "BLiMP", "points", 1, 3.5678, math.nan, math.nan,
                         math.nan, "99.5%", "not tested (1 pretraining seed(s); at least 2 needed)")]
    written = write_effects(client, experiment_id, parent, effects)
    assert write_effects(client, experiment_id, parent, effects) == written  # rendered again: updated, not doubled
    view = saved_view(client.get_experiment(experiment_id).tags, "bvr-effects")
    assert view["selectedColumns"] == ["attributes.`Run Name`", "tags.`bvr.difference`", "tags.`bvr.verdict`",
                                       "tags.`bvr.interval`", "metrics.`difference`", "metrics.`low`",
                                       "metrics.`high`", "metrics.`detectable`"]
    shown = client.search_runs([experiment_id], view["searchFilter"], order_by=[view["orderByKey"]])
    assert [r.info.run_id for r in shown] == written
    assert [r.info.run_name for r in shown] == ["dynamic − static · validation MLM loss",
                                                "static − no-pretraining · BLiMP"]
    assert shown[0].data.metrics == {"difference": -0.111, "low": -0.131, "high": -0.091, "detectable": 0.012}
    assert shown[1].data.metrics == {"difference": 3.6}  # not tested: no interval
    assert {k: shown[0].data.tags[k] for k in ("bvr.difference", "bvr.verdict", "bvr.interval")} == {
        "bvr.difference": "-0.111 [-0.131, -0.091] nats", "bvr.verdict": "dynamic better (Holm p < 0.001)",
        "bvr.interval": "99.5% simultaneous"}
    assert shown[1].data.tags["bvr.difference"] == "+3.6 points"
    charts = curves["compareRunCharts"]
    assert [c["metricKey"] for c in charts] == ["val/mlm_loss", "train/mlm_loss"]
    assert charts[0]["range"] == {"yMin": 7.1, "yMax": 7.4} and "range" not in charts[1]  # unknown: the UI scales
    assert curves["groupBy"] is None and curves["useGroupedValuesInCharts"] is False
    sections = curves["compareRunSections"]
    assert (sections[0]["columns"], sections[0]["cardHeight"], sections[0]["display"]) == (2, 400, True)
    assert [s["name"] for s in sections[1:] if not s["display"]] == ["train", "val", "run", "encoder", "Model metrics",
                                                                     "System metrics"]
    set_run_colours(client, {first[0]: "#1f77b4"})
    assert client.get_run(first[0]).data.tags["mlflow.runColor"] == "#1f77b4"
    assert tracking.view_url("http://h:1/", experiment_id, tracking.SCORES_VIEW) == (
        f"http://h:1/#/experiments/{experiment_id}/runs?viewStateShareKey=bvr-scores&workflowType=machine_learning")


def test_a_logged_model_and_its_run_link_both_ways(store: Store) -> None:
    """The run page lists the model under "Logged models" (the run's outputs); the model's page shows a
    description and rounded metrics."""
    client, run_id = store.client, store.parent.info.run_id
    experiment_id = store.parent.info.experiment_id
    model = client.create_logged_model(experiment_id, name="static-p0-encoder", source_run_id=run_id)
    tracking.link_model(client, run_id, model.model_id, description="The encoder of `static-p0/pretrain`.",
                        metrics={"val/mlm_loss": 7.328123456, "val/perplexity": float("nan")})
    outputs = client.get_run(run_id).outputs.model_outputs
    assert [o.model_id for o in outputs] == [model.model_id]
    found = client.get_logged_model(model.model_id)
    assert found.tags["mlflow.note.content"] == "The encoder of `static-p0/pretrain`."
    assert [(m.key, m.value, m.run_id) for m in found.metrics] == [("encoder/val_mlm_loss", 7.3281, run_id)]
    assert client.get_metric_history(run_id, "val/mlm_loss") == []  # the run's own curve gains no point
