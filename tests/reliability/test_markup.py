"""Square brackets in a user's strings are text (issue 35, item 1).

Every command that echoes a path, a name, a description or a term prints it as written: ``[/]`` no longer ends in
a ``rich.errors.MarkupError`` traceback, ``[red]`` is not swallowed as a style (``bvr export RUN 'exp[red]y'``
printed "wrote expy"), ``[link=...]`` is not a hyperlink. Each command runs in this process (the ``bvr`` fixture),
in a working folder of its own so that the paths printed are short and relative.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from bvr.formatting import literal
from tests.reliability.conftest import FIXTURES, error_line
from tests.test_ablate import EXPERIMENT
from tests.test_finetune import make_checkpoint
from tests.test_prepare import write_wiki_corpus

MARKUP = ["[/]", "[red]", "[link=https://x]"]
"""What a user's string may hold that Rich would read as markup: a closing tag with nothing to close (a
``MarkupError``), a style (the text swallowed), a hyperlink."""

TINY = ["--set", "corpus.path=corpus/wiki", "--set", "tokenizer.vocab_size=300", "--set", "data.max_length=64",
        "--set", "data.shard_documents=50", "--set", "model.num_layers=1", "--set", "model.hidden_size=16",
        "--set", "model.num_heads=2", "--set", "model.intermediate_size=32", "--set", "training.batch_size=8",
        "--set", "training.max_steps=1", "--set", "training.warmup_steps=0", "--set", "training.val_every_steps=1",
        "--set", "training.checkpoint_every_steps=1", "--set", "training.log_every_steps=1"]
"""A pretraining of one step on a tiny corpus."""


def shown(name: str) -> str:
    """A path as bvr holds it (``//`` folds to ``/``, as the file system reads it too)."""
    return str(Path(name))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A data folder of 20 generated articles, itself named with markup."""
    return write_wiki_corpus(tmp_path_factory.mktemp("corpus") / "d[red]ata", documents=20)


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """The test's own working folder (the MLflow store and relative output folders land there)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("BVR_OUTPUT_DIR", raising=False)
    monkeypatch.delenv("BVR_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("text", [*MARKUP, "a\\", "[MASK] of [bold]x[/bold]", "ok"])
def test_literal_prints_as_written_inside_markup(text):
    out = io.StringIO()
    Console(file=out, width=200, emoji=False).print(f"[bold]{literal(text)}[/bold]|", highlight=False)
    assert out.getvalue() == f"{text}|\n"


@pytest.mark.parametrize("markup", MARKUP)
def test_config_show_prints_the_folders_as_given(bvr, workdir, corpus, markup):
    code, out, err = bvr("config", "show", "--output-dir", f"out{markup}x", "--data-dir", corpus)
    assert (code, err) == (0, "")
    assert f"output_dir: {shown(f'out{markup}x')}\n" in out and f"data_dir: {corpus}\n" in out


@pytest.mark.parametrize("markup", MARKUP)
def test_data_prepare_and_tokenizer_train_print_the_output_folder(bvr, workdir, corpus, markup):
    output = f"out{markup}x"
    code, out, err = bvr("data", "prepare", "--data-dir", corpus, "--output-dir", output, *TINY)
    assert code == 0, err
    assert out.splitlines()[0].strip() == f"prepared data in {shown(output)}/cache"
    code, out, err = bvr("tokenizer", "train", "--data-dir", corpus, "--output-dir", output, *TINY)
    assert code == 0, err
    [line] = [line for line in out.splitlines() if line.startswith("tokenizer: ")]
    assert line.startswith(f"tokenizer: {shown(output)}/cache/tokenizer-")


def test_pretrain_and_export_print_the_folders_as_written(bvr, workdir, corpus):
    """``bvr pretrain --output-dir 'out[/]x'`` and ``bvr export RUN 'exp[/]x'``: the lines they end with."""
    code, out, err = bvr("pretrain", "--data-dir", corpus, "--output-dir", "out[/]x", *TINY)
    assert code == 0, err
    [line] = [line for line in out.splitlines() if line.startswith("finished: ")]
    run = Path(line.removeprefix("finished: "))
    assert run.parent == Path("out[/]x/runs") and (workdir / run / "DONE").is_file()
    for markup in MARKUP:
        name = f"exp{markup}y"
        code, out, err = bvr("export", run, name)
        assert (code, err) == (0, ""), err
        assert out == f"wrote {shown(name)} (load with transformers.AutoModelForMaskedLM.from_pretrained)\n"
        assert (workdir / name / "config.json").is_file()


def test_blimp_prints_terms_and_model_names_as_written(bvr, workdir):
    """A BLiMP term and the model's folder name holding brackets are table cells, as written."""
    terms = {"anaphor_gender_agreement": "anaphor[/]agreement", "principle_A_case_2": "binding[red]x",
             "only_npi_scope": "npi[link=https://x]"}
    data = workdir / "data" / "blimp" / "data"
    data.mkdir(parents=True)
    for source in (FIXTURES / "blimp" / "data").glob("*.jsonl"):
        lines = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
        (data / source.name).write_text("".join(json.dumps({**line, "linguistics_term": terms[line["UID"]]}) + "\n"
                                                for line in lines), encoding="utf-8")
    shutil.copy(FIXTURES / "blimp" / "models_summary.jsonl", data.parent)
    model = make_checkpoint(workdir / "ck[red]pt", "bert", sentence_head=True)
    code, out, err = bvr("blimp", model, "--data-dir", workdir / "data", "--per-paradigm", "2")
    assert code == 0, err
    cells = {cell.strip() for line in out.splitlines() for cell in line.split("│")}
    assert {*terms.values(), "ck[red]pt"} <= cells


def test_an_ablation_its_report_and_status_print_description_and_folders_as_written(bvr, workdir):
    """``bvr ablate`` (every unit fails at once: no corpus), then ``bvr report --out`` and ``bvr status``."""
    description = "a [/] b [red]c [link=https://x]d"
    text = EXPERIMENT.replace("description: Static vs dynamic masking on a generated corpus, a few steps.",
                              f"description: '{description}'").replace("control: true", "control: false")
    text = text.replace("probes: {tasks: [sst2], seeds: 2, max_train_examples: null}", "probes: {tasks: []}")
    (workdir / "exp.yaml").write_text(text, encoding="utf-8")
    (workdir / "e[red]mpty").mkdir()
    code, out, err = bvr("ablate", "exp.yaml", "--data-dir", "e[red]mpty", "--output-dir", "out[/]x", "--no-report")
    assert code == 2 and "unit(s) failed" in error_line(err)
    lines = out.splitlines()
    assert lines[0].startswith("ablation exp (preset default): 2 layers, hidden 32, ")
    assert lines[1] == f"  experiment file: {description}"
    assert lines[5].startswith("  manifest: out[/]x/ablations/exp-default-")
    missing = f"corpus.path: {workdir}/e[red]mpty/corpus/wiki does not exist"
    assert any(line.startswith("corpus: failed in ") and missing in line for line in lines), out

    code, out, err = bvr("report", "exp.yaml", "--out", "rep[/]x", "--output-dir", "out[/]x")
    assert code == 0, err
    assert out.splitlines()[0].startswith("wrote rep[/]x/exp/report.html (partial: ")
    assert (workdir / "rep[/]x" / "exp" / "report.html").is_file()

    code, out, err = bvr("status", "exp.yaml", "--output-dir", "out[/]x")
    assert code == 0, err
    assert out.splitlines()[0].startswith("exp (preset default), manifest out[/]x/ablations/exp-default-")
