"""The ``bvr`` command line. Each command parses its options, then calls one function; no logic lives here.

The commands live by job in :mod:`bvr.cli.data` (config, tokenizer, data), :mod:`bvr.cli.train` (pretrain,
finetune, fill-mask, export), :mod:`bvr.cli.evaluate` (probe, blimp) and :mod:`bvr.cli.ablate` (ablate, report,
pipeline), with their shared options in :mod:`bvr.cli.options`; this module assembles :data:`app` from them.
Every command imports the heavy modules (torch, Lightning, MLflow) inside its function, so ``bvr --help`` is fast.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Annotated, NoReturn

import typer
from rich.markup import escape

from bvr.cli import ablate, data, evaluate, train
from bvr.cli.options import err_console, state
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

config_app.command("show")(data.config_show)
tokenizer_app.command("train")(data.tokenizer_train)
tokenizer_app.command("stats")(data.tokenizer_stats_cmd)
data_app.command("prepare")(data.data_prepare)
data_app.command("show")(data.data_show)
app.command("pretrain")(train.pretrain_cmd)
app.command("finetune")(train.finetune_cmd)
app.command("probe")(evaluate.probe_cmd)
app.command("ablate")(ablate.ablate_cmd)
app.command("report")(ablate.report_cmd)
app.command("pipeline")(ablate.pipeline_cmd)
app.command("fill-mask")(train.fill_mask_cmd)
app.command("export")(train.export_cmd)
app.command("blimp")(evaluate.blimp_cmd)


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback of an error and Lightning's "
                                        "informational messages.")] = False,
) -> None:
    state["debug"] = debug
    if not debug:
        import logging

        # Lightning's per-run notices ("GPU available", tips) repeat for every seed; warnings still show.
        logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)


def main() -> None:
    """Entry point: run the app; a BvrError becomes one line on stderr and exit status 2; Ctrl-C exits 130 and SIGTERM
    during training 143, each with a line saying how to continue."""
    try:
        app()  # standalone mode: usage errors are printed by the parser and exit 2
    except BvrError as err:
        if state["debug"] or os.environ.get("BVR_DEBUG"):
            raise
        err_console.print(f"[bold red]error:[/] {escape(err.one_line())}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        _interrupted()
    except SystemExit as exit_:
        if exit_.code == 130 and isinstance(getattr(exit_.__context__, "__cause__", None), KeyboardInterrupt):
            _interrupted()  # typer turns Ctrl-C into a silent exit 130
        if _is_sigterm(exit_):
            _terminated()
        raise


def _interrupted() -> NoReturn:
    err_console.print("interrupted; run the same command again to continue from the finished stages")
    sys.exit(130)


def _is_sigterm(exit_: SystemExit) -> bool:
    """Whether Lightning stopped training on SIGTERM: it raises ``SIGTERMException``, a SystemExit whose status is 0,
    so a terminated run would look finished to a shell or a scheduler. Lightning is imported only by commands that
    train, so without it loaded this is no SIGTERM of Lightning's."""
    exceptions = sys.modules.get("lightning.pytorch.utilities.exceptions")
    return exceptions is not None and isinstance(exit_, exceptions.SIGTERMException)


def _terminated() -> NoReturn:
    err_console.print("terminated (SIGTERM) before the run finished; run the same command again to continue from the "
                      "finished stages (bvr pretrain: with --resume)", soft_wrap=True)
    sys.exit(128 + signal.SIGTERM)


__all__ = ["app", "main"]
