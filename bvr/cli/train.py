"""``bvr pretrain``, ``bvr finetune``, ``bvr fill-mask`` and ``bvr export``: train encoders and use them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bvr.cli.options import (
    ConfigOpt,
    DataDirOpt,
    OutputDirOpt,
    PresetOpt,
    SetOpt,
    console,
    label_option,
    load,
    tasks_help,
)
from bvr.errors import BvrError
from bvr.write_checks import check_writable

EXPERIMENT_CHECK = label_option("--experiment", "an MLflow experiment")
"""``--experiment`` of pretrain and finetune: a name as an ablation's experiment has one."""


def pretrain_cmd(
    resume: Annotated[bool, typer.Option("--resume", help="Continue an unfinished run of this configuration from "
                                         "its last checkpoint (data order, masks and RNG included).")] = False,
    restart: Annotated[bool, typer.Option("--restart", help="Discard an unfinished run of this configuration and "
                                          "start again.")] = False,
    experiment: Annotated[str | None, typer.Option("--experiment", callback=EXPERIMENT_CHECK, help="MLflow "
                                                   "experiment (default: bvr-pretrain).")] = None,
    config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
    data_dir: DataDirOpt = None, output_dir: OutputDirOpt = None,
) -> None:
    """Pretrain a BERT- or RoBERTa-style encoder from scratch (prepares the data first if needed).

    Logs to MLflow (./mlflow.db and ./mlartifacts unless MLFLOW_TRACKING_URI is set; browse with
    `mlflow ui --backend-store-uri sqlite:///mlflow.db`). A finished run with the same configuration is reused.
    """
    from bvr.formatting import literal, pretrain_summary
    from bvr.pretraining.run import pretrain
    from bvr.tracking import RunContext

    cfg = load(config, preset, set_, data_dir, output_dir)
    result = pretrain(cfg, context=RunContext(experiment=experiment), resume=resume, restart=restart)
    state = "reused the finished run" if result.reused else "finished"
    console.print(f"{state}: [bold]{literal(result.run_dir)}[/]", highlight=False, soft_wrap=True)
    console.plain("  " + pretrain_summary(result.metrics))
    console.print(f"next: bvr fill-mask {result.run_dir} \"Paris is the [MASK] of France.\"", markup=False)


def finetune_cmd(
    task: Annotated[str, typer.Option("--task", "-t", help=f"Task: {tasks_help()}.")],
    checkpoint: Annotated[Path, typer.Option("--checkpoint", help="A pretraining run folder, its model/ folder, or a "
                                             "Hugging Face BERT/RoBERTa folder.")],
    seeds: Annotated[int, typer.Option("--seeds", help="Fine-tuning seeds (0 to N-1), each its own MLflow run.")] = 5,
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    from_scratch: Annotated[bool, typer.Option("--from-scratch", help="No-pretraining control: a randomly "
                                               "initialised encoder of the checkpoint's shape.")] = False,
    arm: Annotated[str | None, typer.Option("--arm", callback=label_option("--arm", "an arm"), help="Arm name "
                                            "for MLflow (default: the checkpoint's name).")] = None,
    experiment: Annotated[str | None, typer.Option("--experiment", callback=EXPERIMENT_CHECK, help="MLflow "
                                                   "experiment (default: bvr-finetune).")] = None,
    data_dir: DataDirOpt = None,
    output_dir: OutputDirOpt = None,
    hparams: Annotated[Path | None, typer.Option("--hparams", hidden=True, help="Removed: use --config FILE with a "
                                                 "finetune: section.")] = None,
) -> None:
    """Fine-tune a checkpoint on one task over several seeds; print the median, spread and majority baseline.

    Hyperparameters are the config's finetune section (--preset, --config, --set finetune.learning_rate=3e-5 or
    finetune.per_task.TASK.KEY=VALUE; `bvr config show` prints them). Each seed is a nested MLflow run
    (ARM/finetune/TASK/seedN) under a parent run; runs that collapse to one class are flagged. Finished seeds with
    the same settings are reused.
    """
    if hparams is not None:
        raise BvrError("--hparams was removed", where="finetune",
                       hint=f"use --config FILE with a finetune: section holding the keys of {hparams}")
    from bvr.tasks.results import describe
    from bvr.tasks.run import FinetuneSetup, finetune
    from bvr.threads import use_threads
    from bvr.tracking import RunContext

    use_threads()  # the usable CPUs, shared among `bvr --jobs N`
    setup = FinetuneSetup(data_dir=data_dir, output_dir=output_dir or "outputs", preset=preset, overrides=set_ or (),
                          config_file=config)
    result = finetune(checkpoint, task, seeds=seeds, setup=setup, from_scratch=from_scratch,
                      context=RunContext(experiment=experiment, label=arm), progress=True)
    console.plain(describe(result), wrap=True)


def fill_mask_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="A pretraining run folder (outputs/runs/pretrain-*), its model/ "
                                                    "folder, or a Hugging Face BERT/RoBERTa folder.")],
    text: Annotated[str, typer.Argument(help="Text with one or more [MASK] (or <mask>) where a word is missing.")],
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="Predictions to show per mask.")] = 5,
) -> None:
    """Print the most likely tokens at each mask, to see what a checkpoint has learned."""
    from bvr.pretrained import fill_mask, load_pretrained

    if top_k < 1:
        raise BvrError(f"must be at least 1, got {top_k}", where="--top-k")

    predictions = fill_mask(load_pretrained(checkpoint), text, top_k=top_k)
    for n, preds in enumerate(predictions, start=1):
        shown = "  ".join(f"{p.token} ({p.probability:.3f})" for p in preds)
        console.plain(f"mask {n}: {shown}", wrap=True)


def export_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="A pretraining run folder or its model/ folder.")],
    out: Annotated[Path, typer.Argument(help="Folder to write (config.json, model.safetensors, tokenizer files).")],
    force: Annotated[bool, typer.Option("--force", help="Write into a folder that holds files bvr did not write "
                                        "(those of the names bvr writes are replaced, the others stay).")] = False,
) -> None:
    """Write a checkpoint as a Hugging Face folder that transformers' Auto classes load.

    bvr lists the files it writes in OUT/.bvr-written and replaces only those: a folder holding any other file
    needs --force. Each file is written beside its name and renamed into place; a symbolic link at one of the
    names is refused (the file it points to stays whole).
    """
    from bvr.config import load_config
    from bvr.pretrained import load_pretrained
    from bvr.pretraining.export import export_folder

    pretrained = load_pretrained(checkpoint)
    path = pretrained.folder / "bvr.yaml"  # the run's config: one bvr cannot read is refused before OUT is made
    saved = load_config(path).to_dict() if path.is_file() else {}
    check_writable(out, "model folder (OUT)")
    export_folder(pretrained.model, pretrained.folder, saved, out, force=force)
    console.plain(f"wrote {out} (load with transformers.AutoModelForMaskedLM.from_pretrained)")
