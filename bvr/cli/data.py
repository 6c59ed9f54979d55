"""``bvr config``, ``bvr tokenizer`` and ``bvr data``: show a configuration, train tokenizers, prepare the
pretraining data and look at it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bvr.cli.options import (
    EXPERIMENTS_HELP,
    FAMILIES_HELP,
    FORMATS_HELP,
    ConfigOpt,
    DataDirOpt,
    OutputDirOpt,
    Overrides,
    PresetOpt,
    SetOpt,
    ablation_plan,
    console,
    load,
)
from bvr.errors import BvrError
from bvr.formatting import literal


def config_show(
    ablation: Annotated[str | None, typer.Argument(help=f"An ablation ({EXPERIMENTS_HELP}, or an experiment file): "
                                                   "print its arms' resolved configurations, as `bvr ablate` runs "
                                                   "them with the same options.")] = None,
    config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
    data_dir: DataDirOpt = None, output_dir: OutputDirOpt = None,
) -> None:
    """Print the resolved configuration (defaults, preset, file and --set applied) as YAML, the finetune and
    evaluate sections included; with an ablation, each arm's, as `bvr ablate ABLATION` with the same options runs
    it (`bvr config show masking --preset tiny`: the main job).

    Without an ablation the preset is experiments/presets/PRESET.yaml; an ablation's own presets block adds to it.
    """
    import yaml

    if ablation is not None:  # each arm at the first pretraining seed (the others differ only in training.seed)
        plan = ablation_plan(ablation, preset, Overrides.of(config, set_), data_dir, output_dir)
        arms: dict[str, dict] = {}
        for arm in plan.arms:
            arms.setdefault(arm.arm, arm.config.to_dict())
        ab = plan.ablation
        shown = {"ablation": plan.name, "preset": plan.preset, "pretrain_seeds": ab.pretrain_seeds,
                 **({"control_seeds": ab.control_seeds} if ab.control_seeds else {}),
                 "models": [arm.label for arm in plan.arms], "finetune_tasks": plan.tasks,
                 "finetune_seeds": plan.seeds, "arms": arms}
        text = yaml.safe_dump(shown, sort_keys=False, default_flow_style=None, width=1_000_000)
    else:
        cfg = load(config, preset, set_, data_dir, output_dir)
        text = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
    console.plain(text, end="")


def tokenizer_train(config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
                    data_dir: DataDirOpt = None, output_dir: OutputDirOpt = None) -> None:
    """Read the corpus and train the configured tokenizer on its training documents (cached; reused when done).

    Choose the family with --set tokenizer.family={families} and the size with --set tokenizer.vocab_size=N.
    """
    from bvr.pretraining.prepare import prepare_corpus, prepare_tokenizer

    cfg = load(config, preset, set_, data_dir, output_dir)
    corpus_dir = prepare_corpus(cfg)
    tokenizer_dir = prepare_tokenizer(cfg, corpus_dir)
    _print_tokenizer_stats(tokenizer_dir)
    console.print(f"tokenizer: [bold]{literal(tokenizer_dir)}[/]  (next: bvr data prepare with the same options)",
                  highlight=False, soft_wrap=True)


tokenizer_train.__doc__ = (tokenizer_train.__doc__ or "").format(families=FAMILIES_HELP)  # None under -OO


def tokenizer_stats_cmd(
    tokenizer: Annotated[Path | None, typer.Argument(help="A tokenizer folder or tokenizer.json; default: the "
                                                     "configured one, trained if needed.")] = None,
    config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
    data_dir: DataDirOpt = None, output_dir: OutputDirOpt = None,
) -> None:
    """Tokens per word, unknown-token rate and share of the vocabulary used, on held-out documents."""
    from bvr.corpus import load_corpus
    from bvr.pretraining.prepare import prepare_corpus, prepare_tokenizer
    from bvr.tokenization import describe_stats, load_tokenizer, running_text, tokenizer_stats

    cfg = load(config, preset, set_, data_dir, output_dir)
    corpus_dir = prepare_corpus(cfg)
    if tokenizer is None:
        _print_tokenizer_stats(prepare_tokenizer(cfg, corpus_dir))
        return
    tok, family = load_tokenizer(tokenizer)
    documents = load_corpus(corpus_dir / "documents")["validation"]["sentences"]
    stats = tokenizer_stats(tok, (running_text(doc, family) for doc in documents))  # as the data stage encodes
    stats.update(family=family, vocab_size=tok.get_vocab_size(), held_out="validation documents")
    console.plain(describe_stats(stats), wrap=True)


def _print_tokenizer_stats(tokenizer_dir: Path) -> None:
    from bvr.tokenization import describe_stats

    stats = json.loads((tokenizer_dir / "tokenizer_stats.json").read_text())
    console.plain(describe_stats(stats), wrap=True)


def data_prepare(config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
                 data_dir: DataDirOpt = None, output_dir: OutputDirOpt = None) -> None:
    """Corpus → documents → tokenizer → tokenized documents → sequences of the configured input format.

    Every stage is cached under OUTPUT_DIR/cache in a folder named by a hash of its config, so a second run
    reuses it. Pick the format with --set data.input_format={formats}
    (the sentence objective with --set data.sentence_objective=none|nsp|sop; the packed formats need none).
    """
    from bvr.pretraining.prepare import prepare

    prepared = prepare(load(config, preset, set_, data_dir, output_dir))
    stats = prepared.stats()
    table = Table(title=f"prepared data in {literal(prepared.instances.parent)}")
    table.add_column("stage")
    table.add_column("folder", no_wrap=True)
    table.add_column("figures")
    corpus = stats.get("corpus", {})
    table.add_row("corpus", prepared.corpus.name,
                  f"{corpus.get('train_documents', '?')} train / {corpus.get('validation_documents', '?')} "
                  f"validation documents, {corpus.get('sentences', '?')} sentences"
                  + (f"; dropped {corpus['nul_bytes_dropped']} NUL bytes" if corpus.get("nul_bytes_dropped") else "")
                  + (f"; dropped {corpus['markup_sentences_dropped']} sentences of template markup"
                     if corpus.get("markup_sentences_dropped") else ""))
    tok = stats.get("tokenizer", {})
    table.add_row("tokenizer", prepared.tokenizer.name,
                  f"{tok.get('family')} {tok.get('vocab_size')}: {tok.get('tokens_per_word', 0):.3f} tokens/word, "
                  f"unknown {tok.get('unk_rate', 0):.4%}")
    table.add_row("tokenized", prepared.tokenized.name, "")
    inst = stats.get("instances", {})
    objective = inst.get("sentence_objective", "none")
    for split in ("train", "validation"):
        s = inst.get(split, {})
        labels = (f"; {objective.upper()} label 1 ({'swapped' if objective == 'sop' else 'NotNext'}) "
                  f"{s[f'{objective}_label_1']} of {s['sequences']}" if f"{objective}_label_1" in s else "")
        table.add_row(f"sequences ({split})", prepared.instances.name if split == "train" else "",
                      f"{s.get('sequences')} sequences, {s.get('tokens')} tokens, mean length {s.get('mean_length')}"
                      f"{labels}")
    console.print(table)
    console.print("next: [bold]bvr data show[/] with the same options shows masked sequences")


data_prepare.__doc__ = (data_prepare.__doc__ or "").format(formats=FORMATS_HELP)


def data_show(
    count: Annotated[int, typer.Option("--count", "-n", help="How many sequences to show.")] = 3,
    epoch: Annotated[int, typer.Option("--epoch", help="Epoch whose masks to show (static: copy epoch mod "
                                       "dupe_factor).")] = 0,
    config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
    data_dir: DataDirOpt = None, output_dir: OutputDirOpt = None,
) -> None:
    """Print the first prepared training sequences as the model sees them: masked, with their labels."""
    from bvr.pretraining.prepare import prepare
    from bvr.pretraining.show import render_examples

    if count < 1:  # before the data is prepared, which can take minutes
        raise BvrError(f"must be at least 1, got {count}", where="--count")
    if epoch < 0:
        raise BvrError(f"must be at least 0 (the first epoch), got {epoch}", where="--epoch")
    cfg = load(config, preset, set_, data_dir, output_dir)
    console.plain(render_examples(cfg, prepare(cfg), count=count, epoch=epoch), wrap=True)
