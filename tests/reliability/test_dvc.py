"""`bvr pipeline` on bad input: an --output folder that does not exist is one line on stderr and exit status 2,
and nothing is written (no dvc.yaml, no plot templates, no params.yaml)."""

from __future__ import annotations

import sys

from bvr import cli


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
