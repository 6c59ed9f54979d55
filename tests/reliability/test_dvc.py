"""`bvr pipeline` on bad input: an --output folder that does not exist is one line on stderr and exit status 2,
and nothing is written (no dvc.yaml, no plot templates, no params.yaml); an experiment file whose name is shell code
is refused, and shell code in its folder's name stays a file name in dvc.yaml: `dvc repro` runs none of it."""

from __future__ import annotations

import sys

import pytest

from bvr import cli
from tests.reliability.conftest import error_line
from tests.test_ablate import EXPERIMENT

SHELL_CODE = ["$(touch pwned)", "a;touch pwned;"]
"""Names that run ``touch pwned`` where a shell reads them unquoted."""


def test_pipeline_into_a_missing_folder_says_which_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["bvr", "pipeline", "masking", "--preset", "tiny", "--output", "nowhere/dvc.yaml"])
    try:
        cli.main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == ("error: --output nowhere/dvc.yaml: folder nowhere does not exist. give a file in the repository's "
                   "root folder (dvc.yaml and .dvc/ sit there)\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["pipeline", "ablate"])
@pytest.mark.parametrize("name", SHELL_CODE)
def test_an_experiment_file_named_with_shell_code_is_refused(bvr, tmp_path, monkeypatch, name, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / f"{name}.yaml").write_text(EXPERIMENT)
    code, out, err = bvr(command, f"./{name}.yaml", *(["--data-dir", tmp_path] if command == "ablate" else []))
    assert code == 2 and out == ""
    assert error_line(err) == (f"{name}.yaml: the file's name '{name}' cannot name an experiment. rename the file: "
                               "use letters, digits, '.', '_' and '-' (not starting with '.')")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{name}.yaml"]  # no dvc.yaml, no outputs


@pytest.mark.parametrize("folder", SHELL_CODE)
def test_dvc_repro_runs_no_shell_code_from_the_experiment_files_folder(bvr, stand_in_dvc, monkeypatch, folder):
    """The stage's command as DVC runs it, through its shell, with a ``bvr`` that records its arguments: the
    experiment file's path arrives as one argument and ``pwned`` is not created."""
    repo, argv, dvc = stand_in_dvc.repo, stand_in_dvc.argv, stand_in_dvc.dvc
    (repo / folder).mkdir(parents=True)
    (repo / folder / "tiny-masking.yaml").write_text(EXPERIMENT)
    monkeypatch.chdir(repo)
    code, _, err = bvr("pipeline", f"{folder}/tiny-masking.yaml")
    assert code == 0, err
    done = dvc("repro")  # fails after the command: the stand-in bvr writes none of the outputs
    assert not (repo / "pwned").exists()
    assert argv.read_text().splitlines()[:2] == ["ablate", f"{folder}/tiny-masking.yaml"], done.stderr
