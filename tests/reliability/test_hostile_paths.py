"""Paths a hostile user plants (issue 39): shell code in params.yaml runs nothing under `dvc repro`; a link at a lock
or temporary file's name is never written through (the file it points to stays whole); a sharded model's index reads
no file outside its folder. Each refusal is one line naming the path."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file, save_file

from bvr.errors import BvrError
from bvr.fs import temp_sibling, write_text
from bvr.locks import file_lock, lock_path
from bvr.ops.dvc.pipeline import read_data_dir
from tests.reliability.conftest import error_line
from tests.test_ablate import EXPERIMENT

# ---------------------------------------------------------------------------------------------------------------
# Shell code in params.yaml

SHELL_CODE = "/data/$(touch pwned-dollar)/`touch pwned-backtick`/'single'/\";touch pwned-quote;\""
"""A data folder holding each way into a shell. In double quotes, as dvc.yaml had ``"${data_dir}"``, the first two
run, the double quote ends the quoted word so that the third runs, and the shell parses the whole line; the single
quotes would end a single-quoted word."""
MARKERS = ["pwned-dollar", "pwned-backtick", "pwned-quote"]


@pytest.mark.parametrize("planted", [SHELL_CODE, f"{SHELL_CODE}\nsecond line"], ids=["shell-code", "line-break"])
def test_dvc_repro_runs_no_shell_code_from_params_yaml(bvr, stand_in_dvc, monkeypatch, planted):
    """Every stage's command as DVC expands it names no value of params.yaml, and the one DVC runs, through its
    shell, with a ``bvr`` that records its arguments, creates no marker; bvr then reads data_dir as written."""
    repo, argv, dvc = stand_in_dvc.repo, stand_in_dvc.argv, stand_in_dvc.dvc
    (repo / "tiny-masking.yaml").write_text(EXPERIMENT)
    monkeypatch.chdir(repo)
    code, _, err = bvr("pipeline", "tiny-masking.yaml")
    assert code == 0, err
    (repo / "params.yaml").write_text(yaml.safe_dump({"data_dir": planted}))
    assert read_data_dir(repo / "params.yaml") == planted

    done = dvc("repro")  # fails after the command: the stand-in bvr writes none of the outputs
    assert [name for name in MARKERS if (repo / name).exists()] == []
    assert argv.read_text().splitlines()[:5] == ["ablate", "tiny-masking.yaml", "--data-dir-from", "params.yaml",
                                                 "--stage-dir"], done.stderr
    dry = dvc("repro", "--dry", "--force")  # every stage's command, expanded, none run
    commands = [line.removeprefix("> ") for line in dry.stdout.splitlines() if line.startswith("> ")]
    assert dry.returncode == 0 and len(commands) == dry.stdout.count("Running stage"), dry.stdout + dry.stderr
    for command in commands:
        words = shlex.split(command)
        assert words[:3] == ["bvr", "ablate", "tiny-masking.yaml"] and "pwned" not in command, command
        assert words[words.index("--data-dir-from") + 1] == "params.yaml", command


# ---------------------------------------------------------------------------------------------------------------
# Links at lock and temporary files

VICTIM_TEXT = "another file's content\n"


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM_TEXT)
    return path


def test_a_symbolic_link_at_the_stores_lock_is_refused_and_its_target_stays_whole(bvr, tmp_path, monkeypatch,
                                                                                  victim):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".mlflow.db.lock").symlink_to(victim)
    code, _, err = bvr("pretrain", "--data-dir", tmp_path / "nothing", "--output-dir", tmp_path / "out")
    assert victim.read_text() == VICTIM_TEXT
    assert code == 2
    assert error_line(err) == (f"{tmp_path / '.mlflow.db.lock'}: a symbolic link where bvr keeps a lock file; bvr "
                               "does not write through links. remove it: bvr creates its lock file itself")


@pytest.mark.parametrize("planted", ["symbolic", "dangling", "hard", "folder"])
def test_a_link_or_folder_at_a_lock_file_is_refused_and_writes_nothing(tmp_path, victim, planted):
    lock = lock_path(tmp_path / "target")
    if planted == "hard":
        os.link(victim, lock)
    elif planted == "folder":
        lock.mkdir()
    else:
        lock.symlink_to(victim if planted == "symbolic" else tmp_path / "missing")
    with pytest.raises(BvrError) as error, file_lock(lock):
        pass
    what = {"hard": "a file of 2 names (a hard link)", "folder": "a folder"}.get(planted)
    why = f"{what} where bvr keeps a lock file; bvr writes to and empties it" if what else (
        "a symbolic link where bvr keeps a lock file; bvr does not write through links")
    assert str(error.value) == f"{lock}: {why}. remove it: bvr creates its lock file itself"
    assert victim.read_text() == VICTIM_TEXT and not (tmp_path / "missing").exists()


def test_a_link_at_a_temporary_files_name_is_replaced_not_written_through(tmp_path, victim):
    target = tmp_path / "metrics.json"
    temp_sibling(target).symlink_to(victim)  # the name this process's next write of target uses
    write_text(target, "{}\n")
    assert target.read_text() == "{}\n" and not target.is_symlink()
    assert victim.read_text() == VICTIM_TEXT and not temp_sibling(target).exists()


# ---------------------------------------------------------------------------------------------------------------
# Sharded model folders


def _sharded(checkpoint: Path, root: Path) -> tuple[Path, Path]:
    """A copy of ``checkpoint`` in ``root/a/b/model`` with its weights in two shards and their index; returns the
    folder and its index (which names ``first.safetensors`` and ``second.safetensors``)."""
    folder = root / "a" / "b" / "model"
    shutil.copytree(checkpoint, folder)
    tensors = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    keys = sorted(tensors)
    halves = {"first.safetensors": keys[: len(keys) // 2], "second.safetensors": keys[len(keys) // 2:]}
    for name, names in halves.items():
        save_file({key: tensors[key] for key in names}, folder / name, metadata={"format": "pt"})
    index = folder / "model.safetensors.index.json"
    _write_index(index, {key: name for name, names in halves.items() for key in names})
    return folder, index


def _write_index(index: Path, weight_map: dict[str, str]) -> None:
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def _point_second_shard(index: Path, name: str) -> None:
    weight_map = json.loads(index.read_text())["weight_map"]
    _write_index(index, {key: name if shard == "second.safetensors" else shard for key, shard in weight_map.items()})


def test_a_sharded_folder_loads_from_its_own_shards(bvr, checkpoint, tmp_path):
    folder, _ = _sharded(checkpoint, tmp_path)
    code, out, err = bvr("fill-mask", folder, "the [MASK] sat")
    assert code == 0 and out, err


@pytest.mark.parametrize("how", ["dot-dot", "absolute", "link"])
def test_a_shard_outside_the_model_folder_is_refused_in_one_line(bvr, checkpoint, tmp_path, how):
    folder, index = _sharded(checkpoint, tmp_path)
    outside = tmp_path / "outside" / "x.safetensors"
    outside.parent.mkdir()
    shutil.move(folder / "second.safetensors", outside)  # the weights are there: only the place is wrong
    if how == "link":
        (folder / "second.safetensors").symlink_to(outside)
        name, what = "second.safetensors", f"is a link out of the model folder, to {str(outside.resolve())!r}"
    else:
        name = "../../../outside/x.safetensors" if how == "dot-dot" else str(outside)
        _point_second_shard(index, name)
        what = "lies outside the model folder"
    code, out, err = bvr("fill-mask", folder, "the [MASK] sat")
    assert code == 2 and out == ""
    assert error_line(err) == (f"{index}: the shard {name!r} {what}. keep every shard in the model folder itself "
                               "(a file, not a link out of it)")
