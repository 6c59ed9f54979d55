"""Writes through links or over the user's files (issue 53, item 6): no bvr write follows a symbolic link or replaces a
file bvr did not write. ``bvr export`` into a folder with links at its file names, ``bvr pipeline`` with a link at
dvc.yaml or a dangling one at params.yaml, and ``bvr report`` with a link at report.html or figures/ are refused in
one line naming the link, and the files the links point to stay whole (a dangling link's target is not created).
``bvr export`` into a folder holding files it did not write needs ``--force``; it knows its own by ``.bvr-written``.
``bvr pipeline`` replaces the dvc.yaml it wrote, never the user's own without ``--force``."""

from __future__ import annotations

from pathlib import Path

import pytest

from bvr.errors import BvrError
from bvr.fs import WRITTEN, replace_dir, write_text
from bvr.report.render import render_report
from tests.reliability.conftest import error_line
from tests.report_fixtures import Store, filled

VICTIM_TEXT = "the user's own file\n"
LINK_WHY = "where bvr writes; bvr does not write through links or over them. remove the link or choose another path"


@pytest.fixture
def victims(tmp_path) -> dict[str, Path]:
    """Two files of the user's, outside every folder bvr writes, for links to point to."""
    folder = tmp_path / "mine"
    folder.mkdir()
    paths = {name: folder / f"{name}.txt" for name in ("first", "second")}
    for path in paths.values():
        path.write_text(VICTIM_TEXT)
    return paths


def _intact(*paths: Path) -> bool:
    return all(path.read_text() == VICTIM_TEXT for path in paths)


def _link_line(link: Path) -> str:
    """The one line a link at ``link`` is refused with."""
    return f"{link}: a symbolic link (to {link.readlink()}) {LINK_WHY}"


# ---------------------------------------------------------------------------------------------------------------
# bvr export


def test_export_refuses_links_at_its_file_names_and_their_targets_stay_whole(bvr, checkpoint, tmp_path, victims):
    out = tmp_path / "exported"
    out.mkdir()
    (out / "config.json").symlink_to(victims["first"])
    (out / "tokenizer.json").symlink_to(victims["second"])
    code, out_text, err = bvr("export", checkpoint, out)
    assert (code, out_text) == (2, "")
    assert error_line(err) == _link_line(out / "config.json")
    assert _intact(*victims.values())
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "tokenizer.json"]  # nothing written beside them
    code, _, err = bvr("export", checkpoint, out, "--force")  # --force replaces the user's files, never links
    assert code == 2 and error_line(err) == _link_line(out / "config.json") and _intact(*victims.values())


def test_export_into_a_folder_holding_the_users_files_needs_force(bvr, checkpoint, tmp_path):
    out = tmp_path / "exported"
    out.mkdir()
    (out / "config.json").write_text(VICTIM_TEXT)
    (out / "notes.txt").write_text(VICTIM_TEXT)
    code, out_text, err = bvr("export", checkpoint, out)
    assert (code, out_text) == (2, "")
    assert error_line(err) == (f"{out}: the folder holds files bvr export did not write (config.json, notes.txt). "
                               "export into a new or empty folder, or pass --force to write there anyway (bvr's "
                               "files replace those of their names; the others stay)")
    assert _intact(out / "config.json", out / "notes.txt") and not (out / "model.safetensors").exists()

    code, _, err = bvr("export", checkpoint, out, "--force")
    assert code == 0, err
    assert (out / "config.json").read_text() != VICTIM_TEXT and _intact(out / "notes.txt")
    listed = (out / WRITTEN).read_text().splitlines()
    assert listed[0].startswith("# ") and "config.json" in listed and "notes.txt" not in listed


def test_export_again_into_its_own_folder_needs_no_force(bvr, checkpoint, tmp_path):
    out = tmp_path / "exported"
    assert bvr("export", checkpoint, out)[0] == 0
    written = sorted(p.name for p in out.iterdir())
    assert WRITTEN in written and "model.safetensors" in written
    code, _, err = bvr("export", checkpoint, out)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == written  # no temporary file left


# ---------------------------------------------------------------------------------------------------------------
# bvr pipeline


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def test_pipeline_refuses_a_link_at_dvc_yaml_and_its_target_stays_whole(bvr, repo, victims):
    (repo / "dvc.yaml").symlink_to(victims["first"])
    code, out, err = bvr("pipeline", "masking", "--preset", "tiny", "-o", "dvc.yaml")
    assert (code, out) == (2, "")
    assert error_line(err) == _link_line(Path("dvc.yaml"))
    assert _intact(victims["first"]) and sorted(p.name for p in repo.iterdir()) == ["dvc.yaml"]


def test_pipeline_refuses_a_dangling_link_at_params_yaml_and_creates_no_target(bvr, repo, victims):
    target = victims["first"].parent / "params.yaml"  # in a folder of the user's that exists
    (repo / "params.yaml").symlink_to(target)
    code, out, err = bvr("pipeline", "masking", "--preset", "tiny", "-o", "dvc.yaml")
    assert (code, out) == (2, "")
    assert error_line(err) == _link_line(Path("params.yaml"))
    assert not target.exists()
    assert sorted(p.name for p in repo.iterdir()) == ["params.yaml"]  # nothing written before the refusal


def test_pipeline_replaces_its_own_dvc_yaml_never_the_users_without_force(bvr, repo):
    assert bvr("pipeline", "masking", "--preset", "tiny")[0] == 0
    code, _, err = bvr("pipeline", "masking", "--preset", "tiny")  # bvr's own, by its header
    assert code == 0, err
    (repo / "dvc.yaml").write_text("stages: {}\n")
    code, out, err = bvr("pipeline", "masking", "--preset", "tiny")
    assert (code, out) == (2, "")
    assert error_line(err) == ("dvc.yaml: a file bvr pipeline did not write (its first line is not bvr's header); "
                               "bvr does not replace it. pass --force to replace it, or --output another file")
    assert (repo / "dvc.yaml").read_text() == "stages: {}\n"
    code, _, err = bvr("pipeline", "masking", "--preset", "tiny", "--force")
    assert code == 0, err
    assert (repo / "dvc.yaml").read_text().startswith("# DVC pipeline of the ablation 'masking'")


# ---------------------------------------------------------------------------------------------------------------
# bvr report and every file written through bvr.fs


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    with filled(tmp_path_factory.mktemp("report-store")) as store:
        yield store


@pytest.mark.parametrize("name", ["report.html", "figures"])
def test_report_refuses_a_link_at_its_files_and_folders(store, tmp_path, victims, name):
    out = tmp_path / "reports" / "masking"
    out.mkdir(parents=True)
    target = victims["first"]
    if name == "figures":
        target = victims["first"].parent
    (out / name).symlink_to(target)
    with pytest.raises(BvrError) as error:
        render_report(store.manifest, out, workdir=store.workdir, log_to_mlflow=False)
    assert str(error.value) == _link_line(out / name)
    assert _intact(*victims.values()) and sorted(p.name for p in victims["first"].parent.iterdir()) == [
        "first.txt", "second.txt"]
    assert sorted(p.name for p in out.iterdir()) == [name]  # nothing moved into place


@pytest.mark.parametrize("dangling", [False, True])
def test_every_atomic_write_refuses_a_link_at_its_name(tmp_path, victims, dangling):
    link = tmp_path / "metrics.json"
    link.symlink_to(tmp_path / "missing.json" if dangling else victims["first"])
    with pytest.raises(BvrError) as error:
        write_text(link, "{}\n")
    assert str(error.value) == _link_line(link)
    assert _intact(victims["first"]) and not (tmp_path / "missing.json").exists() and link.is_symlink()
    built = tmp_path / "built"
    built.mkdir()
    with pytest.raises(BvrError):
        replace_dir(built, link)
    assert built.is_dir() and link.is_symlink()
