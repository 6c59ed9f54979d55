"""Silences and wrong words (issue 53, item 7): what a hostile tester found silent for minutes, or said wrongly.

Each is now one line, said at once: an experiment file of 1,000 arms, a config.json whose vocab_size its weights do
not have, ``bvr ui --port 0``, ``--stage-dir`` where no folder can be made, ``bvr report --all`` with nothing to
summarise, an edited parent run id; ``bvr status`` names itself, ``bvr ui`` ends 143 on SIGTERM, the opening line
says why BLiMP is off, and a log written without a terminal keeps the headline's lines whole.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bvr import tracking
from bvr.ablation.plan import make_plan
from bvr.model import hf
from bvr.ops import ui as served
from bvr.runner.run import Runner, describe_plan
from bvr.threads import ThreadBudget, Usable
from tests.reliability.conftest import FIXTURES, REPO, error_line, start_bvr
from tests.test_ablate import EXPERIMENT
from tests.test_prepare import write_wiki_corpus
from tests.test_ui import _first_line_with, _free_port

UI_STAND_IN = """
import bvr.tracking, bvr.ops.ui as served
bvr.tracking.store_client = lambda uri: None
served.wait_until_up = lambda *args: None
real = served.running
served.running = lambda command, log: real([sys.executable, '-c', 'import time; time.sleep(120)'], log)
"""
"""A prelude for ``bvr ui``: a sleeping process stands in for ``mlflow ui``, answering at once, on no store."""


def test_an_experiment_file_of_1000_arms_is_refused_by_its_count_before_any_arm_is_built(tmp_path, bvr):
    arms = "".join(f"  a{i}: {{training: {{learning_rate: {1e-4 + i * 1e-9}}}}}\n" for i in range(1000))
    (tmp_path / "many.yaml").write_text(f"description: many arms\narms:\n{arms}")
    code, out, err = bvr("config", "show", tmp_path / "many.yaml")
    assert code == 2 and out == ""
    assert error_line(err) == (f"{tmp_path / 'many.yaml'}:2: arms: 1,000, more than the 64 arms an experiment file "
                               "may declare (MAX_ARMS). split the arms over several experiment files")


def test_a_config_json_whose_vocab_size_its_weights_lack_is_refused_before_the_model_is_built(
        checkpoint, tmp_path, bvr, monkeypatch):
    folder = shutil.copytree(checkpoint, tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": 16_000_000}))
    built, real = [], hf.PretrainingModel

    def counted(config, **kwargs):
        if torch.get_default_device().type != "meta":  # on the meta device: shapes only, no memory
            built.append(config.vocab_size)
        return real(config, **kwargs)

    monkeypatch.setattr(hf, "PretrainingModel", counted)
    code, _, err = bvr("fill-mask", folder, "the [MASK] sat")
    assert code == 2 and built == []
    assert error_line(err).startswith(f"{folder / 'model.safetensors'}: weights do not fit the model (wrong shape 2: "
                                      "bert.embeddings.word_embeddings.weight (300, 32) (expected (16000000, 32))")


@pytest.fixture
def ui_folder(tmp_path, monkeypatch) -> Path:
    """A working folder with an MLflow store file, as ``bvr ui`` looks for; no MLFLOW_TRACKING_URI."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlflow.db").touch()
    return tmp_path


def test_bvr_ui_on_port_0_is_one_line_not_a_wait(ui_folder, bvr, monkeypatch):
    monkeypatch.setattr(tracking, "store_client", lambda uri: None)
    monkeypatch.setattr(served, "UI_START_LIMIT", 1.0)  # before: the whole limit waited for an answer at port 0
    real = served.running
    monkeypatch.setattr(served, "running", lambda command, log: real([sys.executable, "-c", "import time; "
                                                                      "time.sleep(30)"], log))
    code, out, err = bvr("ui", "--port", "0")
    assert code == 2 and out == ""
    assert error_line(err) == ("--port: 0 is not a port the UI can be reached at. pass one from 1 to 65535 "
                               "(default 5000)")


def test_bvr_ui_stopped_by_sigterm_exits_143(ui_folder):
    ui = start_bvr("ui", "--port", _free_port(), cwd=ui_folder, prelude=UI_STAND_IN)
    try:
        lines = _first_line_with(ui, "(the UI runs on", 120)
        assert lines[-1] == "  (the UI runs on sqlite:///mlflow.db until Ctrl-C)", lines
        ui.send_signal(signal.SIGTERM)
        _, err = ui.communicate(timeout=60)
    finally:
        ui.kill()
    assert ui.returncode == 143, err
    assert err == "terminated (SIGTERM); run the same command again\n"


def test_a_stage_folder_where_no_folder_can_be_made_is_refused_before_any_unit(tmp_path, bvr, monkeypatch):
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "tiny-masking.yaml").write_text(EXPERIMENT)
    data_dir = write_wiki_corpus(tmp_path / "data", documents=60)

    def ran(self, unit):
        raise AssertionError(f"{unit} ran")

    monkeypatch.setattr(Runner, "run_unit", ran)
    code, _, err = bvr("ablate", "tiny-masking.yaml", "--data-dir", data_dir, "--stage-dir", "/proc/stage",
                       "--no-progress")
    assert code == 2
    assert error_line(err) == ("/proc/stage: cannot use it as the DVC stage folder (--stage-dir): /proc takes no new "
                               "folders (No such file or directory). choose a folder on a disk (a new or an existing "
                               "one)")


def test_bvr_status_without_a_manifest_names_status(tmp_path, bvr):
    code, _, err = bvr("status", "masking", "--output-dir", tmp_path / "outputs")
    assert code == 2
    assert error_line(err).startswith("status: no runs of ablation 'masking' under ")


def test_bvr_report_all_with_no_ablation_is_one_line_and_writes_nothing(tmp_path, bvr):
    code, _, err = bvr("report", "--all", "--output-dir", tmp_path / "outputs", "--out", tmp_path / "reports")
    assert code == 2 and not (tmp_path / "reports").exists()
    assert error_line(err) == (f"report --all: no ablation has runs under {tmp_path / 'outputs' / 'ablations'}: "
                               "nothing to summarise. run `bvr ablate NAME` first, or pass the --output-dir it used")


def test_the_opening_line_says_blimp_is_turned_off_not_missing(tmp_path):
    (tmp_path / "tiny-masking.yaml").write_text(EXPERIMENT)
    data_dir = write_wiki_corpus(tmp_path / "data", documents=60)
    shutil.copytree(FIXTURES / "blimp", data_dir / "blimp")
    budget = ThreadBudget(1, Usable(2, 2, None), 1, "", "OMP_WAIT_POLICY=PASSIVE")
    lines = {}
    for enabled in ("true", "false"):
        plan = make_plan(tmp_path / "tiny-masking.yaml", overrides=[f"evaluate.blimp.enabled={enabled}"],
                         data_dir=data_dir, output_dir=tmp_path / "outputs")
        lines[enabled] = describe_plan(plan, plan.units(), budget).splitlines()[3]
    assert lines == {"true": "  evaluations: BLiMP 2 pairs per paradigm; probes sst2 x 2 seeds",
                     "false": "  evaluations: no BLiMP (evaluate.blimp.enabled=false); probes sst2 x 2 seeds"}


@pytest.mark.slow
def test_an_edited_parent_run_id_is_named_as_such_not_another_store(tmp_path):
    data_dir = write_wiki_corpus(tmp_path / "data", documents=60)
    (tmp_path / "tiny-masking.yaml").write_text(EXPERIMENT)
    args = ["ablate", "tiny-masking.yaml", "--data-dir", data_dir, "--no-progress", "--no-report", "--only",
            "pretrain:static"]
    job = start_bvr(*args, cwd=tmp_path)
    assert job.wait(300) == 0, job.communicate()[1]
    (path,) = (tmp_path / "outputs" / "ablations").glob("*/manifest.json")
    manifest = json.loads(path.read_text())
    edited = "0" * 32
    path.write_text(json.dumps({**manifest, "parent_run_id": edited}))
    job = start_bvr(*args, cwd=tmp_path)
    _, err = job.communicate(timeout=300)
    assert job.returncode == 2, err
    assert error_line(err) == (f"{path.relative_to(tmp_path)}: its parent run {edited} is not in "
                               f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}, which holds its finished runs: "
                               "parent_run_id was edited, or that run deleted. write the ablation's run id back "
                               "(bvr ui NAME prints it), or write \"parent_run_id\": null, and bvr finds that run by "
                               "the plan")
    path.write_text(json.dumps({**manifest, "parent_run_id": None}))  # as the hint says
    job = start_bvr(*args, cwd=tmp_path)
    _, err = job.communicate(timeout=300)
    assert job.returncode == 0, err
    runs = tracking.find_runs("tiny-masking", workdir=tmp_path)  # the unit's run found its parent by the plan
    assert list(runs[runs[f"tags.{tracking.TAG_STAGE}"] == "ablation"]["run_id"]) == [manifest["parent_run_id"]]


def test_a_log_written_without_a_terminal_keeps_the_headlines_lines_whole():
    code = ("from types import SimpleNamespace\nfrom bvr.cli.ablate import _print_headline\n"
            "_print_headline(SimpleNamespace(level='98.3%', brief=['static - dynamic: ' + 'no effect, ' * 12]))")
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "headline (Δ [98.3% simultaneous interval]; verdicts: Holm, family-wise error 5%):",
        "- static - dynamic: " + "no effect, " * 12]
