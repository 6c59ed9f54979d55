"""The ``bvr`` command line. Each command parses its options, then calls one function; no logic lives here."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bvr.display import duration
from bvr.errors import BvrError

app = typer.Typer(
    name="bvr",
    help="BERT vs RoBERTa: pretrain encoders under controlled ablations, fine-tune them, and compare with the papers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
config_app = typer.Typer(help="Show and check configurations.", no_args_is_help=True)
tokenizer_app = typer.Typer(help="Train and describe the WordPiece (BERT) and byte-level BPE (RoBERTa) tokenizers.",
                            no_args_is_help=True)
data_app = typer.Typer(help="Prepare pretraining data: corpus, tokenizer, input format; look at masked batches.",
                       no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(tokenizer_app, name="tokenizer")
app.add_typer(data_app, name="data")

console = Console()
err_console = Console(stderr=True)
_state = {"debug": False}

# Options shared by every command that reads a configuration.
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML file of config sections (see experiments/).")
]
PresetOpt = Annotated[
    str | None,
    typer.Option("--preset", "-p", help="Named preset from experiments/presets: tiny, small, base or large."),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override one key, e.g. --set masking.mode=static (repeatable; YAML values)."),
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar="BVR_DATA_DIR",
                 help="Folder with the datasets (corpus/, glue/, conll2003/, squad/). Env: BVR_DATA_DIR."),
]
OutputDirOpt = Annotated[
    Path | None,
    typer.Option("--output-dir", envvar="BVR_OUTPUT_DIR",
                 help="Where prepared data and checkpoints are cached (default: ./outputs). Env: BVR_OUTPUT_DIR."),
]


def _load(config: Path | None, preset: str | None, overrides: list[str] | None, data_dir: Path | None,
          output_dir: Path | None):
    from bvr.config import load_config

    extra: dict[str, str] = {}
    if data_dir is not None:
        extra["data_dir"] = str(data_dir)
    if output_dir is not None:
        extra["output_dir"] = str(output_dir)
    return load_config(config, preset=preset, overrides=overrides, extra=extra)


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback of an error and Lightning's "
                                        "informational messages.")] = False,
) -> None:
    _state["debug"] = debug
    if not debug:
        import logging

        # Lightning's per-run notices ("GPU available", tips) repeat for every seed; warnings still show.
        logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)


# ---------------------------------------------------------------------------------------------------------------
# bvr config


@config_app.command("show")
def config_show(config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
                data_dir: DataDirOpt = None, output_dir: OutputDirOpt = None) -> None:
    """Print the resolved configuration (defaults, preset, file and --set applied) as YAML, the finetune and
    evaluate sections included."""
    import yaml

    cfg = _load(config, preset, set_, data_dir, output_dir)
    console.print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="", markup=False, highlight=False)


# ---------------------------------------------------------------------------------------------------------------
# bvr tokenizer


@tokenizer_app.command("train")
def tokenizer_train(config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
                    data_dir: DataDirOpt = None, output_dir: OutputDirOpt = None) -> None:
    """Read the corpus and train the configured tokenizer on its training documents (cached; reused when done).

    Choose the family with --set tokenizer.family=bert|roberta and the size with --set tokenizer.vocab_size=N.
    """
    from bvr.pretraining.prepare import prepare_corpus, prepare_tokenizer

    cfg = _load(config, preset, set_, data_dir, output_dir)
    corpus_dir = prepare_corpus(cfg)
    tokenizer_dir = prepare_tokenizer(cfg, corpus_dir)
    _print_tokenizer_stats(tokenizer_dir)
    console.print(f"tokenizer: [bold]{tokenizer_dir}[/]  (next: bvr data prepare with the same options)")


@tokenizer_app.command("stats")
def tokenizer_stats_cmd(
    tokenizer: Annotated[Path | None, typer.Argument(help="A tokenizer folder or tokenizer.json; default: the "
                                                     "configured one, trained if needed.")] = None,
    config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
    data_dir: DataDirOpt = None, output_dir: OutputDirOpt = None,
) -> None:
    """Tokens per word, unknown-token rate and share of the vocabulary used, on held-out documents."""
    from bvr.corpus import load_corpus
    from bvr.pretraining.prepare import prepare_corpus, prepare_tokenizer
    from bvr.tokenization import describe_stats, load_tokenizer, tokenizer_stats

    cfg = _load(config, preset, set_, data_dir, output_dir)
    corpus_dir = prepare_corpus(cfg)
    if tokenizer is None:
        _print_tokenizer_stats(prepare_tokenizer(cfg, corpus_dir))
        return
    tok, family = load_tokenizer(tokenizer)
    stats = tokenizer_stats(tok, load_corpus(corpus_dir / "documents")["validation"]["sentences"])
    stats.update(family=family, vocab_size=tok.get_vocab_size(), held_out="validation documents")
    console.print(describe_stats(stats), markup=False, highlight=False)


def _print_tokenizer_stats(tokenizer_dir: Path) -> None:
    from bvr.tokenization import describe_stats

    stats = json.loads((tokenizer_dir / "tokenizer_stats.json").read_text())
    console.print(describe_stats(stats), markup=False, highlight=False)


# ---------------------------------------------------------------------------------------------------------------
# bvr data


@data_app.command("prepare")
def data_prepare(config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
                 data_dir: DataDirOpt = None, output_dir: OutputDirOpt = None) -> None:
    """Corpus → documents → tokenizer → tokenized documents → sequences of the configured input format.

    Every stage is cached under OUTPUT_DIR/cache in a folder named by a hash of its config, so a second run
    reuses it. Pick the format with --set data.input_format=segment-pair|sentence-pair|full-sentences|doc-sentences
    (NSP with --set data.nsp=true|false; the packed formats need nsp=false).
    """
    from bvr.pretraining.prepare import prepare

    cfg = _load(config, preset, set_, data_dir, output_dir)
    prepared = prepare(cfg)
    _print_prepared(prepared)


def _print_prepared(prepared) -> None:
    stats = prepared.stats()
    table = Table(title=f"prepared data in {prepared.instances.parent}")
    table.add_column("stage")
    table.add_column("folder", no_wrap=True)
    table.add_column("figures")
    corpus = stats.get("corpus", {})
    table.add_row("corpus", prepared.corpus.name,
                  f"{corpus.get('train_documents', '?')} train / {corpus.get('validation_documents', '?')} "
                  f"validation documents, {corpus.get('sentences', '?')} sentences")
    tok = stats.get("tokenizer", {})
    table.add_row("tokenizer", prepared.tokenizer.name,
                  f"{tok.get('family')} {tok.get('vocab_size')}: {tok.get('tokens_per_word', 0):.3f} tokens/word, "
                  f"unknown {tok.get('unk_rate', 0):.4%}")
    table.add_row("tokenized", prepared.tokenized.name, "")
    inst = stats.get("instances", {})
    for split in ("train", "validation"):
        s = inst.get(split, {})
        nsp = f"; NSP IsNext/NotNext {s['nsp_is_next']}/{s['nsp_not_next']}" if "nsp_is_next" in s else ""
        table.add_row(f"sequences ({split})", prepared.instances.name if split == "train" else "",
                      f"{s.get('sequences')} sequences, {s.get('tokens')} tokens, mean length {s.get('mean_length')}"
                      f"{nsp}")
    console.print(table)
    console.print("next: [bold]bvr data show[/] with the same options shows masked sequences")


@data_app.command("show")
def data_show(
    count: Annotated[int, typer.Option("--count", "-n", help="How many sequences to show.")] = 3,
    epoch: Annotated[int, typer.Option("--epoch", help="Epoch whose masks to show (static: copy epoch mod "
                                       "dupe_factor).")] = 0,
    config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
    data_dir: DataDirOpt = None, output_dir: OutputDirOpt = None,
) -> None:
    """Print the first prepared training sequences as the model sees them: masked, with their labels."""
    from bvr.pretraining.inspect import render_examples
    from bvr.pretraining.prepare import prepare

    cfg = _load(config, preset, set_, data_dir, output_dir)
    console.print(render_examples(cfg, prepare(cfg), count=count, epoch=epoch), markup=False, highlight=False)


# ---------------------------------------------------------------------------------------------------------------
# bvr pretrain / fill-mask / export


@app.command("pretrain")
def pretrain_cmd(
    resume: Annotated[bool, typer.Option("--resume", help="Continue an unfinished run of this configuration from "
                                         "its last checkpoint (data order, masks and RNG included).")] = False,
    restart: Annotated[bool, typer.Option("--restart", help="Discard an unfinished run of this configuration and "
                                          "start again.")] = False,
    experiment: Annotated[str | None, typer.Option("--experiment", help="MLflow experiment (default: "
                                                   "bvr-pretrain).")] = None,
    config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
    data_dir: DataDirOpt = None, output_dir: OutputDirOpt = None,
) -> None:
    """Pretrain a BERT- or RoBERTa-style encoder from scratch (prepares the data first if needed).

    Logs to MLflow (./mlflow.db and ./mlartifacts unless MLFLOW_TRACKING_URI is set; browse with
    `mlflow ui --backend-store-uri sqlite:///mlflow.db`). A finished run with the same configuration is reused.
    """
    from bvr.pretraining.run import pretrain

    cfg = _load(config, preset, set_, data_dir, output_dir)
    result = pretrain(cfg, resume=resume, restart=restart, experiment=experiment)
    _print_pretrain(result)


def _print_pretrain(result) -> None:
    m = result.metrics
    state = "reused the finished run" if result.reused else "finished"
    console.print(f"{state}: [bold]{result.run_dir}[/]")
    keys = ("steps", "epochs", "tokens_seen", "train/mlm_loss", "val/mlm_loss", "val/perplexity", "val/nsp_acc",
            "wall_seconds", "params_total", "params_non_embedding", "mask_distinct_per_sequence",
            "mask_max_times_seen")
    console.print("  " + ", ".join(f"{k}={m[k]:.4g}" for k in keys if k in m), highlight=False)
    console.print(f"next: bvr fill-mask {result.run_dir} \"Paris is the [MASK] of France.\"", markup=False)


@app.command("finetune")
def finetune_cmd(
    task: Annotated[str, typer.Option("--task", "-t", help="Task: cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli, "
                                      "conll2003, squad, squad_v2.")],
    checkpoint: Annotated[Path, typer.Option("--checkpoint", help="A pretraining run folder, its model/ folder, or a "
                                             "Hugging Face BERT/RoBERTa folder.")],
    seeds: Annotated[int, typer.Option("--seeds", help="Fine-tuning seeds (0 to N-1), each its own MLflow run.")] = 5,
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    from_scratch: Annotated[bool, typer.Option("--from-scratch", help="No-pretraining control: a randomly "
                                               "initialised encoder of the checkpoint's shape.")] = False,
    arm: Annotated[str | None, typer.Option("--arm", help="Arm name for MLflow (default: the checkpoint's "
                                            "name).")] = None,
    experiment: Annotated[str | None, typer.Option("--experiment", help="MLflow experiment (default: "
                                                   "bvr-finetune).")] = None,
    data_dir: DataDirOpt = None,
    output_dir: OutputDirOpt = None,
) -> None:
    """Fine-tune a checkpoint on one task over several seeds; print the median, spread and majority baseline.

    Hyperparameters are the config's finetune section (--preset, --config, --set finetune.learning_rate=3e-5 or
    finetune.per_task.TASK.KEY=VALUE; `bvr config show` prints them). Each seed is a nested MLflow run
    (ARM/finetune/TASK/seedN) under a parent run; runs that collapse to one class are flagged. Finished seeds with
    the same settings are reused.
    """
    from bvr.tasks.results import describe
    from bvr.tasks.run import finetune

    result = finetune(checkpoint, task, seeds=seeds, data_dir=data_dir, output_dir=output_dir or "outputs",
                      preset=preset, overrides=set_, config_file=config, from_scratch=from_scratch, arm=arm,
                      experiment=experiment, progress=True)
    console.print(describe(result), markup=False, highlight=False)


@app.command("probe")
def probe_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="A bvr run folder (pretrain-* or init-*), its model/ folder, or "
                                               "a Hugging Face BERT/RoBERTa folder.")],
    task: Annotated[str, typer.Option("--task", "-t", help="Task: a GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, "
                                      "qnli, rte, wnli) or conll2003.")],
    seeds: Annotated[int, typer.Option("--seeds", help="Probe seeds 0 to N-1; a seed only draws the training "
                                       "subsample (the encoder is frozen and the fit deterministic).")] = 3,
    features: Annotated[list[str] | None, typer.Option("--features", "-f", help="Feature kinds (repeatable or "
                                                       "comma-separated): cls, mean, last4 for GLUE; last, last4 "
                                                       "for conll2003. Default: all.")] = None,
    max_train_examples: Annotated[int | None, typer.Option("--max-train-examples", help="Training examples "
                                                           "(sentences for conll2003) each seed draws from the "
                                                           "train file; default: all.")] = None,
    max_eval_examples: Annotated[int | None, typer.Option("--max-eval-examples", help="Dev examples scored: the "
                                                          "same fixed subset for every model and seed; default: "
                                                          "all.")] = None,
    heldout_examples: Annotated[int | None, typer.Option("--heldout-examples", help="Also set this many training "
                                                         "examples aside (the same for every model and seed), "
                                                         "train on the rest, and score on them too: a larger test "
                                                         "set than a small dev split.")] = None,
    from_scratch: Annotated[bool, typer.Option("--from-scratch", help="No-pretraining control: a randomly "
                                               "initialised encoder of the checkpoint's shape.")] = False,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write every score, the baseline and the "
                                                   "timings to this JSON file.")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bar over feature "
                                           "extraction.")] = True,
    data_dir: DataDirOpt = None,
) -> None:
    """Linear probes on frozen features (BERT section 5.3): how much a task is linearly readable from an encoder.

    The encoder is run once, without gradients, and each example becomes a feature vector: the first token (cls),
    the mean over its tokens (mean) or the means of the last four layers concatenated (last4); for conll2003, each
    word's first sub-token (last, last4). A logistic regression (ridge for stsb) on standardised features, its L2
    strength chosen on 10% of the training examples held out, is scored on dev with the task's headline metric.
    Prints the median and every seed beside the majority-class baseline.
    """
    from bvr.evaluation.probe import describe, run_probe
    from bvr.pretrained import load_pretrained

    kinds = [kind.strip() for value in features for kind in value.split(",") if kind.strip()] if features else None
    if seeds < 1:
        raise BvrError(f"must be at least 1, got {seeds}", where="--seeds")
    result = run_probe(load_pretrained(checkpoint), task, data_dir=data_dir, seeds=list(range(seeds)),
                       features=kinds, max_train_examples=max_train_examples, max_eval_examples=max_eval_examples,
                       heldout_examples=heldout_examples, from_scratch=from_scratch, progress=progress)
    console.print(describe(result), markup=False, highlight=False, soft_wrap=True)  # a table: never wrapped
    if json_file is not None:
        json_file.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
        console.print(f"wrote {json_file}", markup=False, highlight=False)


AblationArg = Annotated[str, typer.Argument(help="Ablation: masking, nsp, batch-size, vocab or bert-vs-roberta "
                                              "(experiments/NAME.yaml), or the path of an experiment file.")]
AblationPresetOpt = Annotated[str | None, typer.Option("--preset", "-p", help="Preset: tiny (2 CPU cores, under an "
                                                       "hour for masking), small or base (GPUs).")]
AblationSetOpt = Annotated[list[str] | None, typer.Option("--set", "-s", help="Override a config key for every arm, "
                                                          "e.g. --set training.devices=8 (not a key the arms "
                                                          "differ in).")]


def _data_dir(value: Path | None) -> Path | None:
    """--data-dir, where an empty value (as DVC passes an unset param) falls back to BVR_DATA_DIR."""
    if value is not None and str(value) not in ("", "."):
        return value
    env = os.environ.get("BVR_DATA_DIR")
    return Path(env) if env else None


def _plan(name: str, preset: str | None, set_: list[str] | None, data_dir: Path | None, output_dir: Path | None):
    from bvr.ablation.plan import make_plan

    return make_plan(name, preset=preset, overrides=set_, data_dir=_data_dir(data_dir),
                     output_dir=output_dir or Path("outputs"))


@app.command("ablate")
def ablate_cmd(
    name: AblationArg,
    preset: AblationPresetOpt = None,
    set_: AblationSetOpt = None,
    only: Annotated[list[str] | None, typer.Option("--only", help="Run just this unit (repeatable): corpus, "
                                                   "tokenizer:FAMILY, data:ARM, pretrain:ARM, finetune:ARM:TASK, "
                                                   "report. DVC stages use it.")] = None,
    stage_dir: Annotated[Path | None, typer.Option("--stage-dir", help="Also write each unit's products here "
                                                   "for DVC to track (pipeline/NAME).")] = None,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Render reports/NAME at the end.")] = True,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bars.")] = True,
    data_dir: DataDirOpt = None,
    output_dir: OutputDirOpt = None,
) -> None:
    """Run an ablation end to end: pretrain every arm, fine-tune every arm on its tasks and seeds, render the report.

    Arms, tasks and seeds come from experiments/NAME.yaml. MLflow gets the experiment NAME with a parent run per
    invocation and nested runs ARM/pretrain, ARM/finetune/TASK and ARM/finetune/TASK/seedN. Finished units are
    reused, so running the same command again runs nothing, and an interrupted run continues where it stopped.
    """
    from bvr.ablation.run import run_ablation

    plan = _plan(name, preset, set_, data_dir, output_dir)
    result = run_ablation(plan, only=only, stage_dir=stage_dir, report=report, progress=progress, console=console)
    ran, reused = len(result.ran), len(result.reused)
    console.print(f"ablation {plan.name}: {ran} unit(s) run, {reused} reused, in {duration(result.seconds)}",
                  highlight=False)
    if result.report is not None:
        console.print(f"report: {result.report.html}", highlight=False)
    elif not only:
        console.print(f"next: bvr report {plan.name}" + (f" --preset {plan.preset}" if plan.preset else ""),
                      highlight=False)


@app.command("report")
def report_cmd(
    name: Annotated[str | None, typer.Argument(help="Ablation to report (default with --all: every ablation "
                                               "that has runs).")] = None,
    preset: AblationPresetOpt = None,
    set_: AblationSetOpt = None,
    all_: Annotated[bool, typer.Option("--all", help="Also (or only) write the summary across ablations, "
                                       "reports/index.html.")] = False,
    out: Annotated[Path, typer.Option("--out", help="Folder of the reports.")] = Path("reports"),
    data_dir: DataDirOpt = None,
    output_dir: OutputDirOpt = None,
) -> None:
    """Render reports/NAME (report.md, report.html, figures, metrics.json, plots) from the ablation's MLflow runs.

    Without --preset or --set, reports the ablation's most recent invocation. Units not finished yet are listed
    as missing. The report is also logged to the ablation's parent MLflow run.
    """
    from bvr.ablation.manifest import Manifest, find_manifest, latest_manifests
    from bvr.report.render import render_report, render_summary

    outputs = output_dir or Path("outputs")
    if name is None and not all_:
        raise BvrError("name an ablation or pass --all", where="report",
                       hint="e.g. bvr report masking --preset tiny")
    if name is not None:
        plan = _plan(name, preset, set_, data_dir, outputs) if preset is not None or set_ else None
        path = plan.manifest_path if plan is not None else find_manifest(name, outputs)
        if not path.is_file():
            raise BvrError(f"no runs of ablation '{name}' with these settings ({path})", where="report",
                           hint=f"run `bvr ablate {name}" + (f" --preset {preset}" if preset else "") + "` first")
        result = render_report(Manifest.load(path), out / Path(name).stem, workdir=Path.cwd())
        console.print(f"wrote {result.html}" + ("" if result.complete else
                                                 f" (partial: {len(result.missing)} item(s) missing)"),
                      highlight=False)
        for line in result.missing:
            console.print(f"  missing: {line}", markup=False, highlight=False)
    if all_:
        summary = render_summary(latest_manifests(outputs), out, workdir=Path.cwd())
        console.print(f"wrote {summary}", highlight=False)


@app.command("pipeline")
def pipeline_cmd(
    name: AblationArg,
    preset: AblationPresetOpt = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="File to write ('-': print).")] = Path("dvc.yaml"),
) -> None:
    """Write the DVC pipeline (dvc.yaml) that runs an ablation stage by stage; then run it with `dvc repro`.

    Stages: corpus, tokenizer (per family), data, pretrain (per arm), init (the control), finetune (per arm and
    task) and report. Each stage's params are the experiment-file keys it reads, so changing one arm re-runs only
    that arm's stages and the report.
    """
    from bvr.ablation.dvc import render_pipeline

    plan = _plan(name, preset, None, None, None)
    text = render_pipeline(plan, Path.cwd(), output="dvc.yaml" if str(output) == "-" else str(output))
    if str(output) == "-":
        sys.stdout.write(text)
        return
    output.write_text(text, encoding="utf-8")
    params = output.parent / "params.yaml"
    if not params.exists():
        params.write_text("# Read by dvc.yaml. data_dir: the data folder; empty: the BVR_DATA_DIR variable.\n"
                          "data_dir: ''\n", encoding="utf-8")
    console.print(f"wrote {output}; run it with: dvc repro", highlight=False)


@app.command("fill-mask")
def fill_mask_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="A pretraining run folder (outputs/runs/pretrain-*), its model/ "
                                                    "folder, or a Hugging Face BERT/RoBERTa folder.")],
    text: Annotated[str, typer.Argument(help="Text with one or more [MASK] (or <mask>) where a word is missing.")],
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="Predictions to show per mask.")] = 5,
) -> None:
    """Print the most likely tokens at each mask, to see what a checkpoint has learned."""
    from bvr.pretrained import fill_mask, load_pretrained

    predictions = fill_mask(load_pretrained(checkpoint), text, top_k=top_k)
    for n, preds in enumerate(predictions, start=1):
        shown = "  ".join(f"{p.token} ({p.probability:.3f})" for p in preds)
        console.print(f"mask {n}: {shown}", markup=False, highlight=False)


@app.command("export")
def export_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="A pretraining run folder or its model/ folder.")],
    out: Annotated[Path, typer.Argument(help="Folder to write (config.json, model.safetensors, tokenizer files).")],
) -> None:
    """Write a checkpoint as a Hugging Face folder that transformers' Auto classes load."""
    from bvr.pretrained import load_pretrained
    from bvr.pretraining.run import export_model

    pretrained = load_pretrained(checkpoint)
    export_model(pretrained.model, pretrained.folder, _bvr_config(pretrained.folder), out)
    console.print(f"wrote {out} (load with transformers.AutoModelForMaskedLM.from_pretrained)")


@app.command("blimp")
def blimp_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="A pretraining run folder (outputs/runs/pretrain-*), its model/ "
                                                    "folder, or a Hugging Face BERT/RoBERTa folder.")],
    data_dir: Annotated[Path | None, typer.Option("--data-dir", envvar="BVR_DATA_DIR",
                                                  help="Data folder holding blimp/ (data/*.jsonl and "
                                                  "models_summary.jsonl), or the BLiMP folder itself. Env: "
                                                  "BVR_DATA_DIR.")] = None,
    per_paradigm: Annotated[int | None, typer.Option("--per-paradigm", "-n", min=1,
                                                     help="Score a fixed subsample of N pairs per paradigm (default: "
                                                     "all 1,000). The same --seed gives every model the same "
                                                     "pairs.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Which subsample --per-paradigm takes.")] = 0,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the metrics, each paradigm and every "
                                                  "pair's scores and correctness (for paired comparisons between "
                                                  "models) to this JSON file.")] = None,
) -> None:
    """Zero-shot BLiMP: how often the model prefers the grammatical sentence of each of 67 paradigms' minimal pairs.

    Each sentence is scored by its pseudo-log-likelihood (Salazar et al. 2020: mask each token in turn, sum the
    log-probabilities of the true tokens); a pair is right when the good sentence scores strictly higher (ties are
    wrong). Prints the macro accuracy (mean over paradigms, as the BLiMP paper reports it) beside the paper's 5-gram,
    LSTM, Transformer-XL and GPT-2 and chance (50%), then the accuracy per linguistic term. The full set is 134,000
    sentences; --per-paradigm 100 takes a tenth of the time.
    """
    from bvr.evaluation.blimp import evaluate_blimp
    from bvr.pretrained import load_pretrained

    folder = _data_dir(data_dir)
    if folder is None:
        raise BvrError("no data folder: BLiMP is read from DATA_DIR/blimp/data/*.jsonl", where="--data-dir",
                       hint="pass --data-dir PATH or set BVR_DATA_DIR")
    pretrained = load_pretrained(checkpoint)
    result = evaluate_blimp(pretrained, folder, per_paradigm=per_paradigm, seed=seed, progress=True)
    model = pretrained.folder.parent if pretrained.folder.name == "model" else pretrained.folder  # a run: its name
    _print_blimp(result, model.resolve().name, per_paradigm, seed)
    if json_out is not None:
        json_out.write_text(json.dumps(result.to_dict(), indent=1) + "\n", encoding="utf-8")
        console.print(f"wrote {json_out}", markup=False, highlight=False)


def _print_blimp(result, name: str, per_paradigm: int | None, seed: int) -> None:
    sample = f"{per_paradigm} per paradigm, seed {seed}" if per_paradigm else "all pairs"
    rate = result.sentences / result.seconds if result.seconds else float("nan")
    console.print(f"BLiMP: {len(result.pairs):,} pairs in {len(result.paradigm_accuracy)} paradigms ({sample}); "
                  f"{result.sentences:,} sentences scored in {duration(result.seconds)} ({rate:.0f} sentences/s)",
                  markup=False, highlight=False)
    published = list(result.published.items())
    console.print(_blimp_macro_table(name, result.summary(), published))
    console.print(_blimp_term_table(result, published))
    console.print(f"micro accuracy (over pairs) {result.micro_accuracy:.1%}"
                  + ("; published models: all 1,000 pairs of the same paradigms" if published else
                     "; no models_summary.jsonl found, so no published figures"), markup=False, highlight=False)


def _blimp_macro_table(name: str, ours, published: list) -> Table:
    from bvr.evaluation.blimp import CHANCE

    table = Table(title="macro accuracy (mean over paradigms)")
    table.add_column("model")
    table.add_column("accuracy", justify="right")
    table.add_row(name, f"{ours.macro:.1%}")
    for model, summary in published:
        table.add_row(f"{model} (published)", f"{summary.macro:.1%}")
    table.add_row("chance", f"{CHANCE:.1%}")
    return table


def _blimp_term_table(result, published: list) -> Table:
    table = Table(title="accuracy per linguistic term (mean over its paradigms)")
    table.add_column("term", no_wrap=True, min_width=max(map(len, result.term_accuracy)))  # narrow the numbers instead
    table.add_column("paradigms", justify="right")
    table.add_column("this model", justify="right", overflow="fold")  # the macro table gives its name
    for model, _ in published:
        table.add_column(model, justify="right", overflow="fold")
    terms = list(result.paradigm_terms.values())
    for term, accuracy in result.term_accuracy.items():
        theirs = (f"{s.terms[term]:.1%}" if term in s.terms else "—" for _, s in published)
        table.add_row(term, str(terms.count(term)), f"{accuracy:.1%}", *theirs)
    return table


def _bvr_config(folder: Path) -> dict:
    import yaml

    path = folder / "bvr.yaml"
    return yaml.safe_load(path.read_text()) if path.is_file() else {}


def main() -> None:
    """Entry point: run the app; a BvrError becomes one line on stderr and exit status 2."""
    try:
        app()  # standalone mode: usage errors are printed by the parser and exit 2
    except BvrError as err:
        if _state["debug"] or os.environ.get("BVR_DEBUG"):
            raise
        err_console.print(f"[bold red]error:[/] {escape(err.one_line())}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted; run the same command again to continue from the finished stages")
        sys.exit(130)


if __name__ == "__main__":
    main()
