"""``bvr probe`` and ``bvr blimp``: evaluate a pretrained encoder without fine-tuning it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bvr.cli.options import (
    ConfigOpt,
    DataDirOpt,
    PresetOpt,
    SetOpt,
    console,
    data_dir_or_env,
    folder_option,
    load,
    shorthands,
    tasks_help,
)
from bvr.config import PROBE_KINDS, SENTENCE_FEATURES, TOKEN_FEATURES
from bvr.errors import BvrError
from bvr.formatting import duration, literal
from bvr.fs import write_text

PROBE_TASKS_HELP = tasks_help(PROBE_KINDS)
"""The tasks a probe takes: every kind but span (:data:`bvr.config.PROBE_KINDS`)."""


def probe_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="A bvr run folder (pretrain-* or init-*), its model/ folder, or "
                                               "a Hugging Face BERT/RoBERTa folder.")],
    task: Annotated[str, typer.Option("--task", "-t", help=f"Task: {PROBE_TASKS_HELP}.")],
    seeds: Annotated[int | None, typer.Option("--seeds", help="Probe seeds 0 to N-1: shorthand for --set "
                                              "evaluate.probes.seeds=N (default 3); a seed only draws the training "
                                              "subsample (the encoder is frozen and the fit deterministic).")] = None,
    features: Annotated[list[str] | None, typer.Option("--features", "-f", help="Feature kinds to fit and print "
                                                       "(repeatable or comma-separated): "
                                                       f"{', '.join(SENTENCE_FEATURES)} for sentence tasks; "
                                                       f"{', '.join(TOKEN_FEATURES)} for tagging. Default: "
                                                       "all.")] = None,
    max_train_examples: Annotated[int | None, typer.Option("--max-train-examples", help="Shorthand for --set "
                                                           "evaluate.probes.max_train_examples=N: training examples "
                                                           "(sentences for conll2003) each seed draws from the "
                                                           "train file (default 4000; null: all).")] = None,
    max_eval_examples: Annotated[int | None, typer.Option("--max-eval-examples", help="Shorthand for --set "
                                                          "evaluate.probes.max_eval_examples=N: dev examples "
                                                          "scored, the same fixed subset for every model and seed "
                                                          "(default: all).")] = None,
    heldout_examples: Annotated[int | None, typer.Option("--heldout-examples", help="Shorthand for --set "
                                                         "evaluate.probes.heldout_examples=N: also set this many "
                                                         "training examples aside (the same for every model and "
                                                         "seed), train on the rest, and score on them too: a larger "
                                                         "test set than a small dev split.")] = None,
    from_scratch: Annotated[bool, typer.Option("--from-scratch", help="No-pretraining control: a randomly "
                                               "initialised encoder of the checkpoint's shape.")] = False,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write every score, the baseline and the "
                                                   "timings to this JSON file.")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bar over feature "
                                           "extraction (on a terminal only).")] = True,
    config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Linear probes on frozen features (BERT section 5.3): how much a task is linearly readable from an encoder.

    The encoder is run once, without gradients, and each example becomes a feature vector: the first token (cls),
    the mean over its tokens (mean) or the means of the last four layers concatenated (last4); for conll2003, each
    word's first sub-token (last, last4). A logistic regression (ridge for stsb) on standardised features, its L2
    strength chosen on 10% of the training examples held out, is scored on dev with the task's headline metric.
    Prints the median and every seed, in points, beside the majority-class baseline. Seeds and sample sizes are the
    configuration's evaluate.probes keys, as an ablation's probes have them.
    """
    from bvr.evaluation.probe import ProbeSample, describe, run_probe
    from bvr.pretrained import load_pretrained
    from bvr.threads import use_threads

    use_threads()  # the usable CPUs, shared among `bvr --jobs N`
    kinds = [kind.strip() for value in features for kind in value.split(",") if kind.strip()] if features else None
    flags = shorthands({"--seeds": ("evaluate.probes.seeds", seeds),
                        "--max-train-examples": ("evaluate.probes.max_train_examples", max_train_examples),
                        "--max-eval-examples": ("evaluate.probes.max_eval_examples", max_eval_examples),
                        "--heldout-examples": ("evaluate.probes.heldout_examples", heldout_examples)})
    with flags.located():
        probes = load(config, preset, [*flags.texts, *(set_ or [])], data_dir, None).evaluate.probes
    pretrained = load_pretrained(checkpoint, need_mlm_head=False)  # a probe reads the encoder only
    sample = ProbeSample(list(range(probes.seeds)), probes.max_train_examples, probes.max_eval_examples,
                         probes.heldout_examples)
    result = run_probe(pretrained, task, data_dir=data_dir, sample=sample, features=kinds, from_scratch=from_scratch,
                       progress=progress)
    console.plain(describe(result))  # a table: never wrapped
    if json_file is not None:
        write_text(json_file, json.dumps(result.to_dict(), indent=2) + "\n")
        console.plain(f"wrote {json_file}", wrap=True)


def blimp_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="A pretraining run folder (outputs/runs/pretrain-*), its model/ "
                                                    "folder, or a Hugging Face BERT/RoBERTa folder.")],
    data_dir: Annotated[Path | None, typer.Option("--data-dir", envvar="BVR_DATA_DIR",
                                                  callback=folder_option("data folder (--data-dir)"),
                                                  help="Data folder holding blimp/ (data/*.jsonl and "
                                                  "models_summary.jsonl), or the BLiMP folder itself. Env: "
                                                  "BVR_DATA_DIR.")] = None,
    per_paradigm: Annotated[int | None, typer.Option("--per-paradigm", "-n", help="Shorthand for --set "
                                                     "evaluate.blimp.per_paradigm=N: score a fixed subsample of N "
                                                     "pairs per paradigm (default 100; null: all 1,000). The same "
                                                     "--seed gives every model the same pairs.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Shorthand for --set evaluate.blimp.seed=N: which "
                                             "subsample --per-paradigm takes (default 0).")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the metrics, each paradigm and every "
                                                  "pair's scores and correctness (for paired comparisons between "
                                                  "models) to this JSON file.")] = None,
    config: ConfigOpt = None, preset: PresetOpt = None, set_: SetOpt = None,
) -> None:
    """Zero-shot BLiMP: how often the model prefers the grammatical sentence of each of 67 paradigms' minimal pairs.

    Each sentence is scored by its pseudo-log-likelihood (Salazar et al. 2020: mask each token in turn, sum the
    log-probabilities of the true tokens); a pair is right when the good sentence scores strictly higher (ties are
    wrong). Prints the macro accuracy (mean over paradigms, as the BLiMP paper reports it) beside the paper's 5-gram,
    LSTM, Transformer-XL and GPT-2 and chance (50%), then the accuracy per linguistic term. The full set is 134,000
    sentences; the default, evaluate.blimp.per_paradigm (100 pairs per paradigm, as an ablation scores), a tenth.
    """
    from bvr.evaluation.blimp import evaluate_blimp
    from bvr.pretrained import load_pretrained
    from bvr.threads import use_threads

    use_threads()  # the usable CPUs, shared among `bvr --jobs N`
    flags = shorthands({"--per-paradigm": ("evaluate.blimp.per_paradigm", per_paradigm),
                        "--seed": ("evaluate.blimp.seed", seed)})
    with flags.located():
        blimp = load(config, preset, [*flags.texts, *(set_ or [])], None, None).evaluate.blimp
    per_paradigm, seed = blimp.per_paradigm, blimp.seed
    folder = data_dir_or_env(data_dir)
    if folder is None:
        raise BvrError("no data folder: BLiMP is read from DATA_DIR/blimp/data/*.jsonl", where="--data-dir",
                       hint="pass --data-dir PATH or set BVR_DATA_DIR")
    pretrained = load_pretrained(checkpoint)
    result = evaluate_blimp(pretrained, folder, per_paradigm=per_paradigm, seed=seed, progress=True)
    model = pretrained.folder.parent if pretrained.folder.name == "model" else pretrained.folder  # a run: its name
    _print_blimp(result, model.resolve().name, per_paradigm, seed)
    if json_out is not None:
        write_text(json_out, json.dumps(result.to_dict(), indent=1) + "\n")
        console.plain(f"wrote {json_out}", wrap=True)


def _print_blimp(result, name: str, per_paradigm: int | None, seed: int) -> None:
    """The sample, the macro accuracy beside the published models' and chance, then the accuracy per term."""
    from bvr.evaluation.blimp import CHANCE

    sample = f"{per_paradigm} per paradigm, seed {seed}" if per_paradigm else "all pairs"
    rate = result.sentences / result.seconds if result.seconds else float("nan")
    console.plain(f"BLiMP: {len(result.pairs):,} pairs in {len(result.paradigm_accuracy)} paradigms ({sample}); "
                  f"{result.sentences:,} sentences scored in {duration(result.seconds)} ({rate:.0f} sentences/s)",
                  wrap=True)
    published = list(result.published.items())
    macro = Table(title="macro accuracy (mean over paradigms)")
    macro.add_column("model")
    macro.add_column("accuracy", justify="right")
    macro.add_row(literal(name), f"{result.summary().macro:.1%}")
    for model, summary in published:
        macro.add_row(f"{literal(model)} (published)", f"{summary.macro:.1%}")
    macro.add_row("chance", f"{CHANCE:.1%}")
    console.print(macro)
    table = Table(title="accuracy per linguistic term (mean over its paradigms)")
    table.add_column("term", no_wrap=True, min_width=max(map(len, result.term_accuracy)))  # narrow the numbers instead
    table.add_column("paradigms", justify="right")
    table.add_column("this model", justify="right", overflow="fold")  # the macro table gives its name
    for model, _ in published:
        table.add_column(literal(model), justify="right", overflow="fold")
    terms = list(result.paradigm_terms.values())
    for term, accuracy in result.term_accuracy.items():
        theirs = (f"{s.terms[term]:.1%}" if term in s.terms else "—" for _, s in published)
        table.add_row(literal(term), str(terms.count(term)), f"{accuracy:.1%}", *theirs)
    console.print(table)
    console.plain(f"micro accuracy (over pairs) {result.micro_accuracy:.1%}"
                  + ("; published models: all 1,000 pairs of the same paradigms" if published else
                     "; no models_summary.jsonl found, so no published figures"), wrap=True)
