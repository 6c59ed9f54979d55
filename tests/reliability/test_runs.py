"""Interrupted and concurrent runs at the command line: a damaged checkpoint, a booby-trapped one (nothing in it
runs), a pretraining killed mid-run and resumed, two fine-tunings writing to one fresh MLflow store at once, a data
file edited in place, runs left RUNNING by a killed process."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from bvr import checkpoints
from bvr.pretraining import run
from bvr.tracking import find_runs, tracking_uri
from tests.reliability.conftest import copy_task, error_line, start_bvr
from tests.test_ablate import EXPERIMENT
from tests.test_prepare import write_wiki_corpus
from tests.test_pretrain import TINY, KillAt

PRETRAIN = [arg for key in TINY for arg in ("--set", key)]
FINETUNE = ["--set", "finetune.epochs=1", "--set", "finetune.batch_size=2", "--set", "finetune.max_length=64"]


def _pretrain_args(data_dir: Path, out: Path, steps: int) -> list:
    return ["pretrain", *PRETRAIN, "--set", f"training.max_steps={steps}", "--set", "masking.mode=static",
            "--set", "masking.dupe_factor=2", "--data-dir", data_dir, "--output-dir", out]


def _last(out: Path) -> Path:
    return next((out / "runs").glob("pretrain-*")) / "checkpoints" / "last.ckpt"


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> tuple[Path, list]:
    """A working folder and the ``bvr pretrain`` arguments of a run SIGKILLed right after step 11 (mid-epoch; its
    last checkpoint is step 8's), as a pre-empted job leaves it; ``damaged/`` and ``trapped/`` are copies of its
    output folder."""
    work = tmp_path_factory.mktemp("killed")
    data_dir = write_wiki_corpus(work / "data", documents=60)
    args = _pretrain_args(data_dir, work / "out", 26)
    kill = "\n".join([
        "import bvr.pretraining.run as run",
        "from tests.test_pretrain import KillAt",
        "original = run.pretrain",
        "run.pretrain = lambda cfg, **kw: original(cfg, callbacks=[KillAt(11)], **kw)",
    ])
    process = start_bvr(*args, cwd=work, prelude=kill)
    assert process.wait(600) == -signal.SIGKILL, process.communicate()[1]
    shutil.copytree(work / "out", work / "damaged")
    shutil.copytree(work / "out", work / "trapped")
    return work, args


def test_a_damaged_checkpoint_on_resume_is_one_line_naming_restart(bvr, killed, monkeypatch):
    work, args = killed
    monkeypatch.chdir(work)
    last = _last(work / "damaged")
    with last.open("r+b") as file:  # as a full disk leaves it: the first half
        file.truncate(last.stat().st_size // 2)
    code, _, err = bvr(*args, "--output-dir", work / "damaged", "--resume")
    assert code == 2
    assert error_line(err) == (f"{last}: the checkpoint is damaged or incomplete and cannot be resumed from "
                               "(PytorchStreamReader failed reading zip archive: failed finding central directory). "
                               "pass --restart to discard it and train this run again from the start (bvr ablate: "
                               "delete the file)")


def test_a_checkpoint_of_another_model_size_on_resume_is_one_line(bvr, killed, tmp_path, monkeypatch):
    work, args = killed
    shutil.copytree(work / "trapped", tmp_path / "out")  # the killed run, its last.ckpt at step 8
    monkeypatch.chdir(tmp_path)
    last = _last(tmp_path / "out")
    embeddings = "model.bert.embeddings.word_embeddings.weight"
    vocabulary = torch.load(last, weights_only=True)["state_dict"][embeddings].shape[0]
    code, _, err = bvr(*args, "--output-dir", tmp_path / "out", "--set", "model.hidden_size=16",
                       "--set", "training.max_steps=4", "--set", "training.warmup_steps=2")
    assert code == 0, err
    narrow = next(p for p in (tmp_path / "out" / "runs").glob("pretrain-*") if p != last.parents[1])
    shutil.copy(narrow / "checkpoints" / "last.ckpt", last)  # a checkpoint of a 16-wide model in a 32-wide run
    (last.parents[1] / "mlflow_run_id").unlink()  # its run is in the killed run's store, not in this folder's
    code, _, err = bvr(*args, "--output-dir", tmp_path / "out", "--resume")
    assert code == 2
    assert error_line(err) == (
        f"{last}: the checkpoint is of another model shape than the configuration: {embeddings} is [{vocabulary}, 16] "
        f"there, [{vocabulary}, 32] in the configuration (43 of 48 weights differ). pass --restart to discard it and "
        "train this run again from the start (bvr ablate: delete the file)")


@pytest.mark.parametrize("checkpoint", ["kept", "deleted"])
def test_a_damaged_model_of_a_finished_run_is_written_again_from_its_last_checkpoint(bvr, tmp_path, monkeypatch,
                                                                                      checkpoint):
    data_dir = write_wiki_corpus(tmp_path / "data", documents=60)
    monkeypatch.chdir(tmp_path)
    args = _pretrain_args(data_dir, tmp_path / "out", 8)
    assert bvr(*args)[0] == 0
    run_dir = next((tmp_path / "out" / "runs").glob("pretrain-*"))
    model = run_dir / "model"
    before = {f.name: f.read_bytes() for f in model.iterdir()}
    weights = model / "model.safetensors"
    weights.write_bytes(before["model.safetensors"][: len(before["model.safetensors"]) // 2])  # a bad copy
    problem = (f"{weights}: cannot read the weights (Error while deserializing header: incomplete metadata, file not "
               "fully covered); the file is truncated or corrupt")
    if checkpoint == "deleted":
        (run_dir / "checkpoints" / "last.ckpt").unlink()
        code, _, err = bvr(*args)
        assert code == 2 and error_line(err) == (f"{run_dir}: {problem}; and the run's last checkpoint is missing. "
                                                 f"remove {run_dir} to train this run again")
        return
    code, _, err = bvr(*args)
    assert code == 0, err
    assert [line for line in err.splitlines() if "written again" in line] == [
        f"{problem}; the model was written again from {run_dir / 'checkpoints' / 'last.ckpt'} (the run is not "
        "trained again)"]
    assert {f.name: f.read_bytes() for f in model.iterdir()} == before  # the same bytes: evaluations are reused


class _Trap:
    """Unpickled, it runs a shell command that creates ``marker`` (what a hostile checkpoint would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


@pytest.fixture
def trapped(killed, tmp_path, monkeypatch) -> tuple[list, Path, Path]:
    """The killed run's ``bvr pretrain`` arguments, its ``last.ckpt`` written again with one more entry whose
    unpickling would create a marker file, and that marker; the run's output folder is copied into a working folder
    of its own (its own MLflow store: the run starts a new MLflow run)."""
    work, args = killed
    shutil.copytree(work / "trapped", tmp_path / "out")
    monkeypatch.chdir(tmp_path)
    last, marker = _last(tmp_path / "out"), tmp_path / "pwned"
    (last.parents[1] / "mlflow_run_id").unlink()
    torch.save({**torch.load(last, weights_only=True), "trap": _Trap(marker)}, last)
    return [*args, "--output-dir", tmp_path / "out", "--resume"], last, marker


def _trapped_line(last: Path) -> str:
    return (f"{last}: the checkpoint was not written by bvr: it holds posix.system, which could run code if loaded, "
            "so it was not loaded. pass --restart to discard it and train this run again from the start (bvr ablate: "
            "delete the file)")


def test_a_booby_trapped_checkpoint_on_resume_runs_nothing_and_is_one_line(bvr, trapped):
    args, last, marker = trapped
    code, _, err = bvr(*args)
    assert not marker.exists()
    assert code == 2 and error_line(err) == _trapped_line(last)


def test_lightning_loads_a_resumed_checkpoint_as_weights_only_too(bvr, trapped, monkeypatch):
    """Lightning's own loader (``trainer.fit(ckpt_path=...)``) with the checks before it gone (the file swapped after
    them) and torch told to unpickle anything where the caller does not say (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``, as
    torch before 2.6 did): nothing runs either."""
    args, last, marker = trapped
    monkeypatch.setattr(checkpoints, "check_checkpoint", lambda path: None)  # resume_point's check
    monkeypatch.setattr(run, "check_fits", lambda path, expected: None)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    code, _, err = bvr(*args)
    assert not marker.exists()
    assert code == 2 and error_line(err) == _trapped_line(last)


@pytest.fixture
def one_thread():
    """The killed process ran on one thread (``start_bvr``); float sums depend on the thread count, so in-process
    runs compared with it bit for bit run on one thread too."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_sigkill_mid_pretraining_then_the_same_command_with_resume_ends_bit_identical(bvr, killed, monkeypatch,
                                                                                       one_thread):
    work, args = killed
    monkeypatch.chdir(work)
    last = _last(work / "out")
    assert torch.load(last, weights_only=False)["global_step"] == 8
    # Left RUNNING by the killed process; KILLED already if another test's lone command ran in this folder first.
    assert list(find_runs("bvr-pretrain", workdir=work)["status"]) in (["RUNNING"], ["KILLED"])

    code, _, err = bvr(*args)
    assert code == 2
    assert error_line(err) == (f"pretrain: an unfinished run of this configuration exists ({last}). "
                               "pass --resume to continue it or --restart to start over")
    # The next lone command closed the run the killed process left RUNNING; --resume reopens it and finishes it.
    assert list(find_runs("bvr-pretrain", workdir=work)["status"]) == ["KILLED"]
    code, out, _ = bvr(*args, "--resume")
    assert code == 0 and "  26 steps (" in out
    opening = next(line for line in out.splitlines() if line.startswith("pretraining pretrain-"))
    assert ", 26 steps; threads " in opening and "usable CPU" in opening  # the thread budget, stated
    code, _, _ = bvr(*args, "--output-dir", work / "uninterrupted")
    assert code == 0
    full = torch.load(_last(work / "uninterrupted"), weights_only=False)["state_dict"]
    resumed = torch.load(last, weights_only=False)["state_dict"]
    assert full.keys() == resumed.keys()
    assert all(torch.equal(full[key], resumed[key]) for key in full)
    runs = find_runs("bvr-pretrain", workdir=work)
    assert list(runs["status"]) == ["FINISHED", "FINISHED"]  # one reopened
    # The steps the resumed run computed again after its checkpoint are in its history once, as in the other's.
    client = MlflowClient(tracking_uri(work))
    steps = [[m.step for m in client.get_metric_history(run_id, "train/mlm_loss")] for run_id in runs["run_id"]]
    assert sorted(steps[0]) == sorted(steps[1]) and len(set(steps[0])) == len(steps[0]), steps


def test_two_fine_tunings_at_once_into_a_fresh_mlflow_store_both_finish_and_record_every_run(checkpoint, tmp_path):
    data_dir = copy_task(tmp_path / "data", "glue/RTE", "glue/SST-2")
    assert not (tmp_path / "mlflow.db").exists()
    jobs = [start_bvr("finetune", "--task", task, "--checkpoint", checkpoint, "--seeds", "1", "--data-dir", data_dir,
                      "--output-dir", tmp_path / "out", *FINETUNE, cwd=tmp_path) for task in ("rte", "sst2")]
    for job in jobs:
        assert job.wait(300) == 0, job.communicate()[1]
    runs = find_runs("bvr-finetune", workdir=tmp_path)
    names = sorted(runs["tags.mlflow.runName"])
    assert names == sorted(f"tiny-bert/finetune/{task}{seed}" for task in ("rte", "sst2")
                           for seed in ("", "/seed0"))
    assert set(runs["status"]) == {"FINISHED"}


def _cache_folders(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")}


def test_a_task_file_edited_in_place_gets_a_new_cache_folder(bvr, checkpoint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data_dir = copy_task(tmp_path / "data", "glue/RTE")
    args = ["finetune", "--task", "rte", "--checkpoint", checkpoint, "--seeds", "1", "--data-dir", data_dir,
            "--output-dir", tmp_path / "out", *FINETUNE]
    assert bvr(*args)[0] == 0
    first = _cache_folders(tmp_path / "out" / "finetune")
    code, out, _ = bvr(*args)
    assert code == 0 and "1 seed(s) reused" in out
    dev = data_dir / "glue" / "RTE" / "dev.tsv"
    size = dev.stat().st_size
    dev.write_text(dev.read_text().replace("north pier.", "south pier.", 1))  # same size, same path
    assert dev.stat().st_size == size
    code, out, _ = bvr(*args)
    assert code == 0 and "reused" not in out
    folders = _cache_folders(tmp_path / "out" / "finetune")
    (new,) = folders - first
    assert len(first) == 1 and new.startswith("rte-seed0-") and new != next(iter(first))


def test_runs_left_running_by_a_dead_process_are_closed_as_killed_by_the_next_ablate(bvr, tmp_path, monkeypatch):
    from mlflow import MlflowClient

    from bvr.tracking import TAG_CLOSED, TAG_HOST, TAG_PID, tracking_uri

    monkeypatch.chdir(tmp_path)
    data_dir = write_wiki_corpus(tmp_path / "data", documents=60)
    (tmp_path / "tiny-masking.yaml").write_text(EXPERIMENT)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        client = MlflowClient(tracking_uri(tmp_path))
        experiment = client.create_experiment("tiny-masking")
        host = socket.gethostname()
        stale = client.create_run(experiment, tags={TAG_HOST: host, TAG_PID: str(dead.pid)}).info.run_id
        running = client.create_run(experiment, tags={TAG_HOST: host, TAG_PID: str(alive.pid)}).info.run_id
        elsewhere = client.create_run(experiment, tags={TAG_HOST: f"not-{host}", TAG_PID: str(dead.pid)}).info.run_id
        code, out, _ = bvr("ablate", "tiny-masking.yaml", "--only", "corpus", "--data-dir", data_dir, "--no-progress",
                           "--no-report")
        assert code == 0
        assert ("closed 1 MLflow run(s) left running by a process that no longer exists (status KILLED, tag "
                "bvr.closed)") in " ".join(out.split())  # the console wraps long lines
        closed = client.get_run(stale)
        assert closed.info.status == "KILLED" and str(dead.pid) in closed.data.tags[TAG_CLOSED]
        assert client.get_run(running).info.status == "RUNNING" and client.get_run(elsewhere).info.status == "RUNNING"
    finally:
        alive.kill()
        alive.wait()


def test_sigterm_during_pretraining_exits_143_saying_how_to_continue(bvr, tmp_path, monkeypatch):
    import bvr.pretraining.run as run

    monkeypatch.chdir(tmp_path)
    data_dir = write_wiki_corpus(tmp_path / "data", documents=60)
    args = _pretrain_args(data_dir, tmp_path / "out", 8)
    original = run.pretrain
    monkeypatch.setattr(run, "pretrain", lambda cfg, **kw: original(cfg, callbacks=[KillAt(5, signal.SIGTERM)], **kw))
    code, _, err = bvr(*args)
    assert code == 143  # Lightning's SystemExit would have been status 0: a pre-empted job reported as finished
    assert err.strip().splitlines()[-1] == ("terminated (SIGTERM) before the run finished; run the same command again "
                                            "to continue from the finished stages (bvr pretrain: with --resume)")
    run_dir = _last(tmp_path / "out").parents[1]
    assert not (run_dir / "DONE").exists()
    monkeypatch.setattr(run, "pretrain", original)
    code, out, _ = bvr(*args, "--resume")
    assert code == 0 and "  8 steps (" in out


def test_the_same_ablation_started_twice_at_once_leaves_one_parent_and_one_run_per_unit(tmp_path):
    """Twin invocations in one folder: the second finds the first's parent in the manifest (chosen under its lock)
    and waits on the first's units instead of logging them again."""
    import json

    from bvr.tracking import TAG_STAGE

    data_dir = write_wiki_corpus(tmp_path / "data", documents=60)
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "glue", data_dir / "glue")
    (tmp_path / "tiny-masking.yaml").write_text(EXPERIMENT)
    args = ["ablate", "tiny-masking.yaml", "--data-dir", data_dir, "--no-progress", "--no-report",
            "--set", "evaluate.blimp.enabled=false", "--set", "finetune.seeds=1"]
    jobs = [start_bvr(*args, cwd=tmp_path) for _ in range(2)]
    for job in jobs:
        assert job.wait(600) == 0, job.communicate()[1]
    runs = find_runs("tiny-masking", workdir=tmp_path)
    parents = runs[runs[f"tags.{TAG_STAGE}"] == "ablation"]
    assert len(parents) == 1, sorted(runs["tags.mlflow.runName"])
    names = list(runs["tags.mlflow.runName"])
    assert len(names) == len(set(names)), sorted(names)
    (manifest,) = (tmp_path / "outputs" / "ablations").glob("*/manifest.json")
    parent = parents["run_id"].iloc[0]
    assert json.loads(manifest.read_text())["parent_run_id"] == parent
    pretraining = runs[runs[f"tags.{TAG_STAGE}"] == "pretrain"]
    assert len(pretraining) == 2 and set(pretraining["tags.mlflow.parentRunId"]) == {parent}


def test_outputs_copied_away_from_their_store_are_one_line_naming_it(tmp_path):
    """A finished ablation's outputs/ copied into a folder without its MLflow store: a one-line error naming the
    store that holds the runs, not a silent 'Partial' report; the first folder's manifest is left as it was."""
    data_dir = write_wiki_corpus(tmp_path / "data", documents=60)
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    (first / "tiny-masking.yaml").write_text(EXPERIMENT)
    args = ["ablate", "tiny-masking.yaml", "--data-dir", data_dir, "--no-progress", "--no-report", "--only",
            "pretrain:static"]
    job = start_bvr(*args, cwd=first)
    assert job.wait(300) == 0, job.communicate()[1]
    shutil.copytree(first, second, ignore=shutil.ignore_patterns("mlflow.db*", "mlruns", "mlartifacts"))
    (manifest,) = (second / "outputs" / "ablations").glob("*/manifest.json")
    before = (first / manifest.relative_to(second)).read_text()
    for cwd, extra in ((second, []), (second, ["--output-dir", first / "outputs"])):
        job = start_bvr(*args, *extra, cwd=cwd)
        _, err = job.communicate(timeout=300)
        assert job.returncode == 2, err
        store = f"sqlite:///{(first / 'mlflow.db').resolve()}"
        where = first / manifest.relative_to(second) if extra else manifest.relative_to(second)
        assert error_line(err).startswith(f"{where}: its "
                                          f"finished runs are logged in another MLflow store ({store}), not in "
                                          f"sqlite:///{(second / 'mlflow.db').resolve()}. run bvr from the folder")
    assert (first / manifest.relative_to(second)).read_text() == before
