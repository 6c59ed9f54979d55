"""Bad configuration at the command line, as a user meets it: every case is one line on stderr naming the file and
line (or the ``--set``) and the key, or the folder, saying what to write instead, and exit status 2, before any work
starts. ``~`` in a folder option is the home folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bvr.config import preset_names
from tests.reliability.conftest import error_line
from tests.test_prepare import write_wiki_corpus

CONFIG_CASES = [
    ("training:\n  lerning_rate: 1.0e-4\n",
     "{file}:2: training.lerning_rate: unknown key. did you mean 'training.learning_rate'?"),
    ("training:\n  max_steps: many\n", "{file}:2: training.max_steps: expected int, got 'many' (str)"),
    ("training:\n  max_steps: 3\n  max_steps: 4\n", "{file}:3: key 'training.max_steps' is given twice"),
    ("- training\n- masking\n", "{file}:1: expected a mapping of keys at the top level, got list"),
    ("training:\n  lr: 1.0e-4\n", "{file}:2: training.lr: training.lr was renamed: use training.learning_rate"),
    ("data:\n  nsp: false\n", "{file}:2: data.nsp: data.nsp was replaced by data.sentence_objective: write "
                              "data.sentence_objective: nsp (for true) or none (for false)"),
    ("masking:\n  whole_word: true\n", "{file}:2: masking.whole_word: masking.whole_word was replaced by "
                                       "masking.scheme: write masking.scheme: whole-word (or token)"),
    ("name: ../escape\n", "{file}:1: name: '../escape' cannot name a folder: use letters, digits, '.', '_' and '-' "
                          "(not starting with '.')"),
]


@pytest.mark.parametrize(("text", "expected"), CONFIG_CASES,
                         ids=["unknown-key", "bad-value", "duplicate-key", "not-a-mapping", "training.lr", "data.nsp",
                              "masking.whole_word", "name-with-dotdot"])
def test_a_bad_config_file_is_one_line_naming_file_line_and_key(bvr, tmp_path, text, expected):
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    code, out, err = bvr("config", "show", "--config", path)
    assert code == 2 and out == ""
    assert error_line(err) == expected.format(file=path)


def test_a_config_file_not_in_utf8_names_its_line_and_byte(bvr, tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("training:\n  max_steps: 3  # café\n".encode("latin-1"))
    code, _, err = bvr("config", "show", "--config", path)
    assert code == 2 and error_line(err) == f"{path}:2: not UTF-8 text (byte 0xe9)"


BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True))
"""Nine aliases of the line before on each of nine lines: 9**9 values once expanded, a few hundred bytes written."""


@pytest.mark.parametrize(("text", "expected"), [
    ("a: &a [*a]\n", "{file}:1: an alias refers to the value that holds it (a loop, such as a: &a [*a]). write the "
                     "value out instead of the alias"),
    (BILLION_LAUGHS, "{file}:6: its aliases expand this value to more than 100,000 values (aliases of aliases). write "
                     "the values out, or nest fewer aliases"),
    ("a: " + "[" * 3000 + "]" * 3000 + "\n", "{file}: values nested too deeply to read (lists or mappings inside one "
                                             "another, hundreds of levels down). write the file with fewer levels"),
], ids=["alias-loop", "billion-laughs", "nested-too-deeply"])
def test_a_yaml_alias_loop_or_bomb_is_one_line(bvr, tmp_path, text, expected):
    """Refused before anything expands them (how long that takes is no test's business: a wall-clock bound here
    failed under load)."""
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    code, out, err = bvr("config", "show", "--config", path)
    assert code == 2 and out == ""
    assert error_line(err) == expected.format(file=path)


def test_a_missing_config_file_is_named(bvr, tmp_path):
    code, _, err = bvr("config", "show", "--config", tmp_path / "nope.yaml")
    assert code == 2 and error_line(err).startswith(f"{tmp_path / 'nope.yaml'}: ")


SET_SYNTAX = "--set expects KEY=VALUE with a dotted key such as masking.mask_prob=0.2, got '{text}'"


@pytest.mark.parametrize("text", ["training.max_steps", "=3", "training..max_steps=3", "training.=3"])
def test_bad_set_syntax_shows_the_grammar(bvr, text):
    code, _, err = bvr("config", "show", "--set", text)
    assert code == 2 and error_line(err) == SET_SYNTAX.format(text=text)


SET_CASES = [
    ("training.lr=1e-4", "training.lr: training.lr was renamed: use training.learning_rate"),
    ("data.nsp=true", "data.nsp: data.nsp was replaced by data.sentence_objective: write data.sentence_objective: "
                      "nsp (for true) or none (for false)"),
    ("masking.whole_word=true", "masking.whole_word: masking.whole_word was replaced by masking.scheme: write "
                                "masking.scheme: whole-word (or token)"),
    ("name=../x", "name: '../x' cannot name a folder: use letters, digits, '.', '_' and '-' (not starting with '.')"),
    ("training.adam_eps=-1", "training.adam_eps: -1.0 must be positive (RoBERTa: 1e-6)"),
    ("training.grad_clip=-1", "training.grad_clip: -1.0 must be non-negative (0: no clipping)"),
    ("training.strategy=foo", "training.strategy: 'foo' is not one of auto, ddp, ddp_spawn, "
                              "ddp_find_unused_parameters_true, fsdp"),
    ("training.max_stepz=3", "training.max_stepz: unknown key. did you mean 'training.max_steps'?"),
    ("learning_rate=1e-4", "learning_rate: learning_rate is a fine-tuning setting: use finetune.learning_rate"),
    ("training.seed=-1", "training.seed: -1 is not a seed: use an integer from 0 to 4294967295"),
    ("training.seed=4294967296", "training.seed: 4294967296 is not a seed: use an integer from 0 to 4294967295"),
    ("training.learning_rate=.inf", "training.learning_rate: must be a finite number, got inf"),
    ("training.learning_rate=.nan", "training.learning_rate: must be a finite number, got nan"),
    ("training.learning_rate=0", "training.learning_rate: must be positive"),
    ("training.weight_decay=.inf", "training.weight_decay: must be a finite number, got inf"),
    ("training.grad_clip=.inf", "training.grad_clip: must be a finite number, got inf"),
    ("training.adam_eps=.inf", "training.adam_eps: must be a finite number, got inf"),
    ("finetune.learning_rate=.inf", "finetune.learning_rate: must be a finite number, got inf"),
    ("finetune.adam_eps=.nan", "finetune.adam_eps: must be a finite number, got nan"),
]


@pytest.mark.parametrize(("text", "expected"), SET_CASES, ids=[text for text, _ in SET_CASES])
def test_a_bad_set_is_one_line_naming_the_set_and_the_key(bvr, text, expected):
    code, out, err = bvr("config", "show", "--set", text)
    assert code == 2 and out == ""
    assert error_line(err) == f"--set {text}: {expected}"


def test_an_unknown_preset_lists_the_known_ones(bvr):
    code, _, err = bvr("config", "show", "--preset", "huge")
    assert code == 2
    assert error_line(err) == f"--preset: unknown preset 'huge'. known presets: {', '.join(preset_names())}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="asks for a GPU on a machine without one")
@pytest.mark.parametrize(("command", "key"), [("pretrain", "training.accelerator"),
                                              ("finetune", "finetune.accelerator")])
def test_a_gpu_accelerator_on_a_cpu_machine_is_refused_before_any_work(bvr, tmp_path, checkpoint, command, key):
    extra = ["--task", "sst2", "--checkpoint", checkpoint] if command == "finetune" else []
    code, _, err = bvr(command, *extra, "--set", f"{key}=gpu", "--data-dir", tmp_path / "data",
                       "--output-dir", tmp_path / "out")
    assert code == 2
    assert error_line(err) == f"{key}: accelerator 'gpu' asked for, but this machine has no CUDA GPU. use auto (the " \
                              "GPU when there is one) or cpu"
    assert not (tmp_path / "out").exists()  # refused before the corpus or the task data were read


# ---------------------------------------------------------------------------------------------------------------
# Folders given on the command line


@pytest.mark.parametrize("place", ["a-file", "dev-null", "under-a-file"])
def test_an_output_dir_that_cannot_be_a_folder_is_one_line(bvr, tmp_path, place):
    file = tmp_path / "results.txt"
    file.write_text("not a folder\n")
    out, found = {"a-file": (file, "it exists"), "dev-null": (Path("/dev/null"), "it exists"),
                  "under-a-file": (file / "out", f"{file} exists")}[place]
    code, _, err = bvr("data", "prepare", "--data-dir", tmp_path / "data", "--output-dir", out)
    assert code == 2
    assert error_line(err) == (f"{out}: cannot use it as the output folder (--output-dir): {found} and is not a "
                               "folder. choose a folder (a new or an existing one), not a file")
    assert file.read_text() == "not a folder\n"


@pytest.mark.parametrize("command", [["data", "prepare"], ["status", "masking"]])
def test_an_output_dir_name_too_long_for_the_file_system_is_one_line(bvr, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / ("x" * 300)
    code, _, err = bvr(*command, "--output-dir", out)
    assert code == 2
    assert error_line(err) == (f"{out}: cannot use it as the output folder (--output-dir): a name in it is 300 bytes "
                               "long, more than the 255 a file system allows. choose a shorter name")


def test_a_tilde_in_the_folder_options_is_the_home_folder(bvr, tmp_path, monkeypatch):
    home, work = tmp_path / "home", tmp_path / "work"
    write_wiki_corpus(home / "data", documents=10)
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("BVR_DATA_DIR", "~/data")  # as a quoted "~/data" leaves it: no shell expanded it
    code, _, err = bvr("data", "prepare", "--output-dir", "~/out", "--set", "corpus.path=corpus/wiki",
                       "--set", "tokenizer.vocab_size=400", "--set", "data.max_length=64")
    assert code == 0, err
    assert (home / "out" / "cache").is_dir()
    assert list(work.iterdir()) == []  # no folder named '~'
