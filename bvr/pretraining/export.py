"""A pretraining run's model as a Hugging Face folder: built (:func:`build_model`), written (:func:`export_model`),
and, where that folder was damaged after the run finished, written again from the run's last checkpoint
(:func:`export_again`) rather than trained again."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch

from bvr.checkpoints import check_checkpoint, weights_only_load
from bvr.config import Config, dump_config
from bvr.errors import BvrError
from bvr.fs import atomic_open, claim, not_written_by_bvr, refuse_link, replace_dir, temp_sibling
from bvr.model import EncoderConfig, PretrainingModel
from bvr.model.hf import SAFETENSORS_FILE, export_hf, read_hf_weights
from bvr.model.hf_config import CONFIG_FILE
from bvr.tokenization import load_tokenizer, vocab_info


def build_model(cfg: Config, vocab) -> PretrainingModel:
    """A freshly initialised encoder and heads for ``cfg`` (seeded by training.seed)."""
    L.seed_everything(cfg.training.seed, workers=True, verbose=False)
    encoder_cfg = EncoderConfig.from_model(cfg.model, vocab_size=vocab.vocab_size, pad_token_id=vocab.pad_id)
    if not cfg.training.dropout:  # trained without dropout; export_model writes the model section's rates back
        encoder_cfg = dataclasses.replace(encoder_cfg, dropout=0.0, attention_dropout=0.0)
    # NSP and SOP: one 2-way head.
    return PretrainingModel(encoder_cfg, sentence_head=cfg.data.sentence_objective != "none")


CHECKPOINT_BYTES_PER_PARAMETER = 12  # each parameter three times in float32: the weight and AdamW's two moments
EXPORT_BYTES_PER_PARAMETER = 4  # the exported model holds the float32 weights


def pretraining_bytes(parameters: int, checkpoints: bool) -> int:
    """The disk a pretraining run needs free: a checkpoint (when it writes any: the next one is written whole
    beside the last before replacing it) and the exported model.

    >>> pretraining_bytes(1_000_000, checkpoints=True), pretraining_bytes(1_000_000, checkpoints=False)
    (16000000, 4000000)
    """
    return parameters * (EXPORT_BYTES_PER_PARAMETER + (CHECKPOINT_BYTES_PER_PARAMETER if checkpoints else 0))


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "bvr_tokenizer.json")
"""The tokenizer's files a model folder carries, those the tokenizer folder holds."""


def export_names(tokenizer_dir: Path, folder: Path) -> list[str]:
    """The files :func:`export_model` writes into ``folder`` with the tokenizer of ``tokenizer_dir``, unless one is a
    symbolic link there (:func:`bvr.fs.refuse_link`)."""
    tokenizer = [name for name in TOKENIZER_FILES if (Path(tokenizer_dir) / name).exists()]
    names = [CONFIG_FILE, SAFETENSORS_FILE, *tokenizer, "bvr.yaml"]
    for name in names:
        refuse_link(Path(folder) / name)
    return names


def export_model(model: PretrainingModel, tokenizer_dir: Path, cfg: Config | dict[str, Any], out_dir: Path) -> Path:
    """Write a Hugging Face folder: weights and config.json, the tokenizer files, and bvr.yaml (our config).

    Each file is written beside its name and renamed into place; a symbolic link at a name is refused, never
    written through. The folder's dropout rates are the ``model`` section's, also where pretraining ran without
    dropout (``training.dropout``): they are fine-tuning's."""
    config = model.config
    if not isinstance(cfg, dict):
        config = dataclasses.replace(config, dropout=cfg.model.dropout, attention_dropout=cfg.model.attention_dropout)
    export_names(tokenizer_dir, out_dir)  # links refused before anything is written
    export_hf(model, config, out_dir)
    for name in TOKENIZER_FILES:
        source = Path(tokenizer_dir) / name
        if source.exists():
            with atomic_open(Path(out_dir) / name, "wb") as file:
                file.write(source.read_bytes())
    dump_config(cfg if isinstance(cfg, dict) else cfg.to_dict(), Path(out_dir) / "bvr.yaml")
    return Path(out_dir)


def export_folder(model: PretrainingModel, tokenizer_dir: Path, cfg: dict[str, Any], out_dir: Path, *,
                  force: bool = False) -> Path:
    """``bvr export``: :func:`export_model` into a folder of the user's, named in its ``.bvr-written``
    (:func:`bvr.fs.claim`) before the files are written. A symbolic link at a name bvr writes is refused, and so,
    without ``force``, is a file there that bvr did not write; with ``force`` bvr's files replace those of their
    names and the others stay."""
    out_dir = Path(out_dir)
    names = export_names(tokenizer_dir, out_dir)
    foreign = not_written_by_bvr(out_dir)
    if foreign and not force:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3:,} more" if len(foreign) > 3 else "")
        raise BvrError(f"the folder holds files bvr export did not write ({shown})", where=out_dir,
                       hint="export into a new or empty folder, or pass --force to write there anyway (bvr's files "
                            "replace those of their names; the others stay)")
    claim(out_dir, names, "bvr export")
    return export_model(model, tokenizer_dir, cfg, out_dir)


def model_problem(model_dir: Path) -> str | None:
    """What is wrong with a finished run's exported model, or None: its config.json or weights cannot be read (a
    file cut short, edited or deleted since the run finished)."""
    try:
        json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return f"{model_dir / 'config.json'}: cannot be read ({type(err).__name__})"
    try:
        read_hf_weights(model_dir)
    except BvrError as err:
        return f"{err.where}: {err.message}" if err.where else err.message
    return None


def export_again(cfg: Config, tokenizer_dir: Path, run_dir: Path, problem: str) -> None:
    """Write ``run_dir/model`` again from ``run_dir/checkpoints/last.ckpt``, saying so in one line on stderr.

    The checkpoint holds the weights of the run's last step, which the folder held (the same bytes: caches keyed
    on the folder's content are reused). A checkpoint missing, damaged or of an earlier step than the run's last is
    refused: the model can then only be had by training the run again (the hint says how).
    """
    last = run_dir / "checkpoints" / "last.ckpt"
    hint = f"remove {run_dir} to train this run again"
    if not last.is_file():
        raise BvrError(f"{problem}; and the run's last checkpoint is missing", where=run_dir, hint=hint)
    check_checkpoint(last)
    steps = int(json.loads((run_dir / "metrics.json").read_text()).get("steps", -1))
    with weights_only_load(last):
        checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    if checkpoint.get("global_step") != steps:
        raise BvrError(f"{problem}; and the run's last checkpoint is of step {checkpoint.get('global_step')}, not of "
                       f"its last step {steps}", where=run_dir, hint=hint)
    model_dir = run_dir / "model"
    tmp = temp_sibling(model_dir)  # written beside model/, then swapped in whole
    shutil.rmtree(tmp, ignore_errors=True)  # left by a process of this PID that was killed
    model = build_model(cfg, vocab_info(*load_tokenizer(tokenizer_dir)))
    model.load_state_dict({key.removeprefix("model."): value for key, value in checkpoint["state_dict"].items()
                           if key.startswith("model.")})
    export_model(model, tokenizer_dir, cfg, tmp)
    if (run_dir / "config.yaml").is_file():  # the run's own record (its folders as they were when it trained)
        shutil.copy(run_dir / "config.yaml", tmp / "bvr.yaml")
    replace_dir(tmp, model_dir)
    print(f"{problem}; the model was written again from {last} (the run is not trained again)", file=sys.stderr,
          flush=True)
