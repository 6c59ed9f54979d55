"""The command line: every command explains itself; user errors are one line and a non-zero exit."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import typer
import yaml
from typer.testing import CliRunner

from bvr import cli
from bvr.ablation.declare import EXPERIMENTS_DIR, list_experiments
from bvr.config import FAMILIES, INPUT_FORMATS, PRESETS_DIR, preset_names
from bvr.errors import BvrError
from bvr.tasks.registry import TASKS

runner = CliRunner()


def all_commands() -> list[list[str]]:
    """Every command path of the app, e.g. ['data', 'prepare']."""
    root = typer.main.get_command(cli.app)
    paths: list[list[str]] = []

    def walk(cmd, prefix: list[str]) -> None:
        paths.append(prefix)
        if hasattr(cmd, "commands"):  # a group (typer ships its own copy of click)
            for name, sub in cmd.commands.items():
                walk(sub, [*prefix, name])

    walk(root, [])
    return paths


@pytest.mark.parametrize("path", all_commands(), ids=lambda p: " ".join(p) or "bvr")
def test_help_explains_every_command_and_option(path):
    result = runner.invoke(cli.app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output
    command = typer.main.get_command(cli.app)
    for name in path:
        command = command.commands[name]
    assert command.help, f"bvr {' '.join(path)} has no help text"
    for param in command.params:
        if getattr(param, "param_type_name", "") == "option" and param.name != "help":
            assert param.help, f"option {param.opts} of bvr {' '.join(path)} has no help"


def test_expected_commands_exist():
    names = {" ".join(p) for p in all_commands()}
    assert {"config show", "tokenizer train", "tokenizer stats", "data prepare", "data show", "pretrain", "finetune",
            "fill-mask", "export", "ablate", "report", "pipeline"} <= names


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["bvr", *args])
    with pytest.raises(SystemExit) as info:
        cli.main()
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_user_error_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("masking:\n  split: [0.8, 0.1, 0.2]\n")
    code, _, err = run_main(monkeypatch, capsys, "config", "show", "--config", str(bad))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert f"error: {bad}:2: masking.split: [0.8, 0.1, 0.2] sums to 1.1, not 1" in lines[0]
    assert "Traceback" not in err


def test_a_line_number_is_not_an_emoji(monkeypatch, capsys, tmp_path):
    # Rich turns ":100:" into an emoji unless told not to; an error at line 100 must say ":100:".
    bad = tmp_path / "long.yaml"
    bad.write_text("# filler\n" * 98 + "masking:\n  mask_prob: 2\n")
    code, _, err = run_main(monkeypatch, capsys, "config", "show", "--config", str(bad))
    assert code == 2 and f"{bad}:100: masking.mask_prob" in err and "\N{HUNDRED POINTS SYMBOL}" not in err


def test_ctrl_c_says_how_to_continue(monkeypatch, capsys):
    # Typer turns KeyboardInterrupt into a silent exit 130; the CLI says what to do next.
    import bvr.config

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bvr.config, "load_config", interrupted)
    code, _, err = run_main(monkeypatch, capsys, "config", "show")
    assert code == 130 and "interrupted; run the same command again" in err


def test_debug_shows_the_traceback(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bvr", "--debug", "config", "show", "--set", "masking.mask_prob=2"])
    with pytest.raises(BvrError, match="masking.mask_prob"):
        cli.main()


def test_config_show_prints_resolved_yaml(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bvr", "config", "show", "--preset", "tiny", "--set", "masking.mode=static"])
    with pytest.raises(SystemExit) as info:
        cli.main()
    out = capsys.readouterr().out
    assert info.value.code in (0, None)
    assert "mode: static" in out and "name: tiny" in out
    shown = yaml.safe_load(out)  # the fine-tuning and evaluation sections too, the tiny preset's values in them
    assert shown["finetune"]["learning_rate"] == 1e-4 and shown["finetune"]["per_task"]["squad"]["stride"] == 64
    assert shown["evaluate"]["probes"]["tasks"] == ["sst2", "conll2003"]
    assert shown["training"]["learning_rate"] == 1e-3


PLAN_ONLY = {"status": "picks a manifest by its preset", "pipeline": "writes dvc.yaml for an ablation and preset"}
"""Commands with --preset that read no other configuration, and why."""


def test_every_command_that_reads_a_configuration_takes_preset_config_and_set():
    """The README: every command takes the same configuration options. `bvr ablate` had no --config, `bvr probe`
    and `bvr blimp` flags of their own only."""
    checked = []
    for path in all_commands():
        command = typer.main.get_command(cli.app)
        for part in path:
            command = command.commands[part]
        name, params = " ".join(path), {p.name for p in command.params}
        if "preset" in params and name not in PLAN_ONLY:
            assert {"config", "preset", "set_"} <= params, name
            checked.append(name)
    assert {"ablate", "report", "probe", "blimp", "pretrain", "finetune", "config show"} <= set(checked)


def test_config_show_of_an_ablation_prints_the_arms_the_main_job_runs(monkeypatch, capsys, tmp_path):
    layer = tmp_path / "more.yaml"
    layer.write_text("finetune:\n  seeds: 3\n")
    code, out, _ = run_main(monkeypatch, capsys, "config", "show", "masking", "--preset", "tiny", "--config",
                            str(layer), "--set", "evaluate.blimp.per_paradigm=20")
    assert code in (0, None)
    shown = yaml.safe_load(out)
    assert (shown["ablation"], shown["preset"], shown["pretrain_seeds"]) == ("masking", "tiny", list(range(4)))
    assert list(shown["arms"]) == ["static", "dynamic", "no-pretraining"] and len(shown["models"]) == 12
    assert [arm["masking"]["mode"] for arm in shown["arms"].values()] == ["static", "dynamic", "dynamic"]
    static = shown["arms"]["static"]  # the experiment's tiny block over the tiny preset, then the file, then --set
    assert static["corpus"]["max_documents"] == 4500 and static["training"]["max_steps"] == 2400
    assert shown["finetune_seeds"] == [0, 1, 2] and static["evaluate"]["blimp"]["per_paradigm"] == 20
    assert "control_seeds" not in shown  # paired: the control's initialisations are the pretraining seeds
    code, out, _ = run_main(monkeypatch, capsys, "config", "show", "masking", "--preset", "tiny", "--set",
                            "control_seeds=[0, 1, 2, 3, 4, 5]")
    shown = yaml.safe_load(out)
    assert shown["control_seeds"] == list(range(6))
    assert shown["models"][8:] == [f"no-pretraining-p{s}" for s in range(6)]


def test_a_config_file_laid_over_an_ablation_names_its_line_in_an_error(monkeypatch, capsys, tmp_path):
    layer = tmp_path / "layer.yaml"
    layer.write_text("finetune:\n  seeds: 2\nmasking:\n  mode: static\n")
    code, _, err = run_main(monkeypatch, capsys, "ablate", "masking", "--preset", "tiny", "--config", str(layer))
    assert code == 2 and f"{layer}:4: masking.mode: this key is what the arms differ in" in err
    code, _, err = run_main(monkeypatch, capsys, "config", "show", "masking", "--config", str(tmp_path / "none.yaml"))
    assert code == 2 and "none.yaml: config file not found" in err


def test_probe_and_blimp_flags_are_shorthands_for_the_evaluate_keys(monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "probe", "model", "--task", "sst2", "--seeds", "0")
    assert code == 2 and "--seeds: evaluate.probes.seeds: expected an integer >= 1, got 0" in err
    code, _, err = run_main(monkeypatch, capsys, "blimp", "model", "--set", "evaluate.blimp.per_paradigm=0")
    assert code == 2 and "--set evaluate.blimp.per_paradigm=0: evaluate.blimp.per_paradigm: expected" in err


def test_finetune_takes_the_config_options_of_every_command():
    params = {p.name: p for p in typer.main.get_command(cli.app).commands["finetune"].params}
    assert {"config", "preset", "set_"} <= set(params)
    assert params["hparams"].hidden  # only there to say what replaced it
    assert "--hparams" not in runner.invoke(cli.app, ["finetune", "--help"]).output


def test_old_hparams_option_says_to_use_a_config_file(monkeypatch, capsys, tmp_path):
    code, _, err = run_main(monkeypatch, capsys, "finetune", "--task", "sst2", "--checkpoint", str(tmp_path),
                            "--hparams", str(tmp_path / "hp.yaml"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--hparams was removed" in err and "use --config FILE with a finetune: section" in err


def help_text(*args: str) -> str:
    """The help of a command, one line (the table borders and wrapping removed)."""
    result = runner.invoke(cli.app, [*args, "--help"], terminal_width=1000)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.replace("│", " ").split())


def test_finetune_help_lists_every_registered_task():
    text = help_text("finetune")
    assert "boolq" in TASKS
    for name in TASKS:
        assert f" {name}," in text or f" {name};" in text or f" {name}." in text, name


def test_probe_help_lists_the_tasks_a_probe_takes():
    task = next(p for p in typer.main.get_command(cli.app).commands["probe"].params if p.name == "task")
    for name, spec in TASKS.items():
        assert (name in re.findall(r"\w+", task.help)) == (spec.kind != "span"), name


def test_ablate_help_lists_every_experiment_file():
    names = sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.yaml"))
    assert names == list_experiments() and names
    for command in ("ablate", "pipeline"):
        text = help_text(command)
        assert all(name in text for name in names), (command, names)


def test_preset_help_lists_every_preset_file():
    names = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
    assert names == preset_names() and names
    for command in (["config", "show"], ["pretrain"], ["finetune"], ["ablate"], ["report"]):
        text = help_text(*command)
        assert all(name in text for name in names), (command, names)


def test_help_lists_the_input_formats_families_and_data_folders():
    assert all(name in help_text("data", "prepare") for name in INPUT_FORMATS)
    assert all(name in help_text("tokenizer", "train") for name in FAMILIES)
    assert "superglue/" in help_text("finetune")  # BoolQ's folder: every task's folder is listed


def test_help_does_not_load_torch():
    code = "import sys; import bvr.cli; print(sorted({'torch', 'lightning', 'mlflow'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_an_old_key_says_what_to_write(monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "config", "show", "--set", "training.lr=1e-4")
    assert code == 2 and "training.lr was renamed: use training.learning_rate" in err


def test_console_script_runs():
    result = subprocess.run([sys.executable, "-m", "bvr.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert "tokenizer" in result.stdout and "data" in result.stdout


def test_offline_without_data_folder_says_what_to_do(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BVR_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = run_main(monkeypatch, capsys, "data", "prepare", "--output-dir", str(tmp_path / "out"))
    assert code == 2
    assert "no data folder is set and the Hugging Face hub cannot be reached" in err
    assert "--data-dir" in err and "BVR_DATA_DIR" in err


@pytest.mark.parametrize("verbose", [False, True])
def test_third_party_notices_show_only_with_verbose(tmp_path, verbose):
    """MLflow's "Creating initial MLflow database tables" (and Lightning's per-run tips) repeat for every run: shown
    with --verbose only. A subprocess, because MLflow configures its loggers once, when first imported."""
    script = ("from bvr.cli import _main\n"
              f"_main(None, verbose={verbose}, debug=False)\n"
              "from bvr import tracking\n"
              "tracking.ensure_experiment('x')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_LOGGING_LEVEL")}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=True)
    assert ("INFO mlflow.store.db.utils: Creating initial MLflow database tables" in done.stderr) is verbose


@pytest.mark.parametrize("path", all_commands(), ids=lambda p: " ".join(p) or "bvr")
def test_help_shows_values_as_words_not_python_types(path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_main(monkeypatch, capsys, *path, "--help")
    assert code == 0 and "Usage" in out
    assert not re.search(r"<(str|bool|int|float|path|list\[[^]]*\])>", out), out  # TEXT, N, PATH; flags bare
    if path == ["ablate"]:
        text = " ".join(out.replace("│", " ").split())
        assert "--set -s TEXT Override" in text and "--report --no-report Render" in text
        assert "name TEXT Ablation:" in text
