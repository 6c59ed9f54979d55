"""The ``bvr`` command line: this module assembles :data:`app` from the commands of :mod:`bvr.cli.data` (config,
tokenizer, data), :mod:`bvr.cli.train` (pretrain, finetune, fill-mask, export), :mod:`bvr.cli.evaluate` (probe,
blimp), :mod:`bvr.cli.ablate` (ablate, report, status, pipeline) and :mod:`bvr.cli.ui` (ui), which share the options
of :mod:`bvr.cli.options`. Each command parses its options, then calls one function, importing the heavy modules
(torch, Lightning, MLflow) inside it, so ``bvr --help`` is fast.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Annotated, Any, NoReturn

import typer

from bvr.cache import check_distributed_env
from bvr.cli import ablate, data, evaluate, train, ui
from bvr.cli.options import err_console, state
from bvr.errors import BvrError
from bvr.formatting import literal
from bvr.memory import keep_freed_memory
from bvr.progress import silence_other_bars
from bvr.signals import Terminated, handle_sigterm
from bvr.threads import JOBS_ENV, jobs_from, quiet_waits
from bvr.write_checks import PRETRAIN_RESUME_HINT, RESUME_HINT, write_error

app = typer.Typer(
    name="bvr", no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode="rich",
    help="BERT vs RoBERTa: pretrain encoders under controlled ablations, fine-tune them, and compare with the papers.")
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
app.command("status")(ablate.status_cmd)
app.command("pipeline")(ablate.pipeline_cmd)
app.command("fill-mask")(train.fill_mask_cmd)
app.command("export")(train.export_cmd)
app.command("blimp")(evaluate.blimp_cmd)
app.command("ui")(ui.ui_cmd)


QUIET_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero", "mlflow")
"""Third-party loggers whose informational messages repeat for every run ("GPU available", Lightning's tips,
MLflow's "Creating initial MLflow database tables"); without --verbose only their warnings and errors show."""
SILENT_LOGGERS = ("mlflow.store.db.utils",)
"""Loggers that log an error with its traceback and then raise it: MLflow's SQL store, on every failed call (a full
disk: dozens of tracebacks before the one line). The raised error is bvr's one line; --verbose shows them."""


STAGED_COMMANDS = ("tokenizer", "data", "pretrain", "finetune", "ablate")
"""Commands that keep what they finished (prepared data, pretraining checkpoints, fine-tuning seeds, ablation
units): run again after an interrupt, they continue from there. The others have nothing to continue."""


@app.callback()
def _main(
    ctx: typer.Context,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also show Lightning's and MLflow's informational "
                                          "messages (hidden by default: they repeat for every run).")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback of an error; implies "
                                        "--verbose.")] = False,
    jobs: Annotated[int | None, typer.Option("--jobs", min=1, metavar="N", help="How many jobs share this machine's "
                                             "CPUs (this one included): each gets its share of threads "
                                             "(training.threads sets a count outright), and OpenMP's workers sleep "
                                             "while they wait. --jobs 1: this job has the machine alone, and its "
                                             "workers spin instead (faster alone, ruinous beside other work). Default: "
                                             "the BVR_JOBS variable, else all threads, sleeping workers.")] = None,
) -> None:
    state["debug"] = debug
    if jobs is not None:
        os.environ[JOBS_ENV] = str(jobs)  # the processes bvr starts (DDP ranks, DVC stages) share the same
    jobs_from()  # a bad BVR_JOBS is refused before any work
    check_distributed_env()  # so is a stray RANK, which would wait for a rank 0 that nothing started
    state["command"] = ctx.invoked_subcommand if ctx is not None else None  # None: called as a function
    keep_freed_memory()  # before anything allocates: training and scoring reuse freed memory (bvr.memory)
    quiet_waits()  # before torch loads OpenMP: workers sleep while they wait unless --jobs 1 (bvr.threads)
    silence_other_bars()  # one style of progress bar, bvr's (bvr.progress)
    if not (verbose or debug):
        import logging

        # MLflow sets its loggers' level when first imported (inside the commands), from this variable.
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        for name in SILENT_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)


PLAIN_METAVARS = {"bool": "", "str": "TEXT", "int": "N", "int range": "N", "float": "X", "float range": "X"}
"""What `--help` shows for a value of each Python type, where Typer would show the type's own name (``<str>``,
``<list[str]>``, ``<bool>`` beside a flag); paths show PATH, choices their values."""


def plain_metavars(command: Any) -> None:
    """Give every option and argument of ``command`` (a Typer group or command, and its subcommands) a metavar a
    user reads: ``TEXT``, ``N``, ``PATH``, nothing beside an on/off flag, unless it has one already."""
    from typer.core import TyperArgument, TyperOption

    ctx = command.context_class(command)
    for param in command.get_params(ctx):  # --help included
        if not isinstance(param, TyperOption | TyperArgument):
            continue
        if isinstance(param, TyperOption) and param.metavar is not None:
            continue
        label = param.display_type(ctx).strip("<>")
        inner = label[5:-1] if label.startswith("list[") else label
        plain = PLAIN_METAVARS.get(inner, "PATH" if inner in ("path", "file", "directory") else inner.upper()
                                   if "|" not in inner else inner)
        if isinstance(param, TyperOption):
            param.metavar = plain
        else:  # Typer shows an argument's type beside its name, ignoring the metavar
            param.display_type_rich = lambda ctx, text=plain: text or None  # type: ignore[method-assign]
    for sub in getattr(command, "commands", {}).values():
        plain_metavars(sub)


def main() -> None:
    """Entry point: run the app with the exit statuses of the README's table.

    0: done; 2: a user error (a :class:`~bvr.errors.BvrError`, or a write that failed for want of disk space or
    permission, :func:`~bvr.write_checks.write_error`), one line on stderr, or a usage error; 130: interrupted
    (Ctrl-C), 143: terminated (SIGTERM), each with the line saying how to continue; 1: an unexpected error, with
    its traceback.
    """
    state["command"] = None
    try:
        with handle_sigterm():
            command = typer.main.get_command(app)
            plain_metavars(command)
            command()  # standalone mode: usage errors are printed by the parser and exit 2
    except BvrError as err:
        _user_error(err)
    except KeyboardInterrupt as interrupt:
        _interrupted(interrupt)
    except SystemExit as exit_:
        # Lightning's own exits on Ctrl-C and SIGTERM come out of every fit as interrupts (bvr.training.quiet_fit).
        if exit_.code == 130 and isinstance(getattr(exit_.__context__, "__cause__", None), KeyboardInterrupt):
            _interrupted(exit_.__context__.__cause__)  # typer turns Ctrl-C into a silent exit 130
        raise
    except Exception as err:
        error = write_error(err)
        if error is None and "mlflow" in sys.modules:  # else not MLflow's error: no need to import it to say so
            from bvr.tracking import server_failure

            error = server_failure(err)
        if error is None or _debug():
            raise
        _user_error(error)


def _debug() -> bool:
    return bool(state["debug"] or os.environ.get("BVR_DEBUG"))


def _user_error(err: BvrError) -> NoReturn:
    """Print ``err`` as one line and exit 2 (with ``--debug`` or ``BVR_DEBUG``: raise it, with its traceback). Its
    hint to run the same command again after a full disk (:data:`RESUME_HINT`) says, for ``bvr pretrain``, to add
    --resume: without it, that command refuses the unfinished run it left."""
    if state["command"] == "pretrain" and err.hint == RESUME_HINT:
        err.hint = PRETRAIN_RESUME_HINT
    if _debug():
        raise err
    err_console.print(f"[bold red]error:[/] {literal(err.one_line())}", highlight=False, soft_wrap=True)
    sys.exit(2)


def _interrupted(interrupt: BaseException) -> NoReturn:
    """Say how to continue (:func:`continue_line`); exit 130 after Ctrl-C, 143 after SIGTERM (128 + the signal's
    number)."""
    terminated = isinstance(interrupt, Terminated)
    err_console.print(continue_line(state["command"], terminated=terminated), soft_wrap=True, markup=False)
    sys.exit(128 + (interrupt.signum if terminated else signal.SIGINT))


def continue_line(command: str | None, *, terminated: bool) -> str:
    """The line an interrupted ``command`` ends with: a command of :data:`STAGED_COMMANDS` continues from its
    finished stages (``bvr pretrain`` with ``--resume``); any other is simply run again.

    >>> continue_line("config", terminated=False)
    'interrupted; run the same command again'
    """
    if command not in STAGED_COMMANDS:
        return f"{'terminated (SIGTERM)' if terminated else 'interrupted'}; run the same command again"
    stopped = "terminated (SIGTERM) before the run finished" if terminated else "interrupted"
    resume = " (bvr pretrain: with --resume)" if command == "pretrain" else ""
    return f"{stopped}; run the same command again to continue from the finished stages{resume}"


__all__ = ["app", "main"]
