"""The one Lightning Trainer factory: pretraining and fine-tuning differ only in the arguments they pass.

Every Trainer here writes checkpoints whole or not at all (:class:`~bvr.checkpoints.AtomicCheckpointIO`), resolves
``auto`` precision for the machine (:func:`resolve_precision`), skips the sanity validation and the model summary,
and clips gradients by norm when ``grad_clip`` is not 0; :func:`training_logger` names its MLflow run, the same way
for pretraining and fine-tuning.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from rich.progress import Progress, TaskID, TextColumn

from bvr.checkpoints import AtomicCheckpointIO
from bvr.config import PRECISIONS
from bvr.errors import BvrError
from bvr.memory import keep_freed_memory
from bvr.progress import COLUMNS, bars
from bvr.signals import terminated_stop

if TYPE_CHECKING:
    from lightning.pytorch.loggers import MLFlowLogger

    from bvr.config import TrainingConfig
    from bvr.tracking import RunContext

LIGHTNING_NOISE = (
    ".*does not have many workers.*",  # a choice (num_workers), made for reproducibility on small CPU machines
    ".*smaller than the logging interval.*",  # short fine-tuning epochs: the loss is logged every step anyway
    ".*your dataloader is not resumable.*",  # the DataModule's own state restores the data position on resume
    ".*isinstance\\(treespec, LeafSpec\\)` is deprecated.*",  # Lightning calling a torch API torch deprecated
)
"""Warnings Lightning prints on every fit that say nothing about this run (messages as regular expressions)."""

SRUN_NOTICE = ".*The `srun` command is available on your system but is not used.*"
"""Lightning's notice at every Trainer made on a machine where SLURM is installed, outside a SLURM job step: bvr runs
on SLURM through its own launcher (``bvr ablate --launcher slurm``), where it is."""


@contextmanager
def quiet_fit() -> Iterator[None]:
    """Silence :data:`LIGHTNING_NOISE` (and only that) around ``trainer.fit``/``validate``, and pass on an interrupt
    as one (:func:`bvr.signals.terminated_stop`).

    Lightning answers Ctrl-C inside ``fit`` with its clean-up and then ``sys.exit(1)``, and SIGTERM by stopping
    after the current batch with a ``SystemExit`` of status 0; the interrupt comes out in their place, so that the
    callers' clean-up (MLflow runs ended KILLED, the ablation manifest saved) and the CLI's exit status see it.
    """
    with warnings.catch_warnings(), terminated_stop():
        for message in (*LIGHTNING_NOISE, SRUN_NOTICE):  # fit asks for SLURM again (the checkpoint connector)
            warnings.filterwarnings("ignore", message=message)
        yield


class TrainingBar(ProgressBar):
    """One rich bar over training (:data:`bvr.progress.COLUMNS`), the metrics logged with ``prog_bar=True`` beside
    it, drawn from Lightning's public ``ProgressBar`` hooks.

    A step-counted run (pretraining, ``steps=True``) counts optimiser steps up to ``max_steps`` across epochs and
    resumes, under "steps (epoch N)"; an epoch-counted one (fine-tuning) counts the batches of each epoch under
    "epoch N/M". Epochs are counted from 1, as people count them.
    """

    def __init__(self, *, steps: bool) -> None:
        super().__init__()
        self.steps, self.enabled = steps, True
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    @property
    def is_enabled(self) -> bool:
        return self.enabled

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.enabled:
            return
        if self.progress is None:
            self.progress = Progress(*COLUMNS, TextColumn("{task.fields[metrics]}", markup=False))
            self.progress.start()
        epoch = epoch_description(trainer.current_epoch, None if self.steps else trainer.max_epochs)
        if self.steps:
            description, completed = f"steps ({epoch})", trainer.global_step
            total = trainer.max_steps if trainer.max_steps > 0 else None
        else:
            description, completed, total = epoch, 0, trainer.num_training_batches
        if self.task is None:
            self.task = self.progress.add_task(description, total=total, completed=completed, metrics="")
        else:
            self.progress.reset(self.task, description=description, total=total, completed=completed)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.progress is not None and self.task is not None:
            completed = trainer.global_step if self.steps else batch_idx + 1
            self.progress.update(self.task, completed=completed, metrics=self.metrics(trainer))

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, metrics=self.metrics(trainer))

    def metrics(self, trainer: L.Trainer) -> str:
        """The logged ``prog_bar`` metrics, four significant digits (not the logger's version: no measurement)."""
        return " ".join(f"{k}={float(v):.4g}" for k, v in trainer.progress_bar_metrics.items())

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.stop()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self.stop()

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def epoch_description(current_epoch: int, max_epochs: int | None) -> str:
    """The epoch as people count it: from 1, of the configured number (none: no limit).

    >>> epoch_description(1, 2), epoch_description(0, -1)
    ('epoch 2/2', 'epoch 1')
    """
    return f"epoch {current_epoch + 1}" + (f"/{max_epochs}" if max_epochs and max_epochs > 0 else "")


def resolve_strategy(strategy: str, devices: int, num_nodes: int) -> str:
    """``auto`` is DDP over more than one process and Lightning's own choice on one; any other is kept.

    >>> resolve_strategy("auto", devices=2, num_nodes=1), resolve_strategy("auto", 1, 1)
    ('ddp', 'auto')
    """
    if strategy != "auto":
        return strategy
    return "ddp" if devices * num_nodes > 1 else "auto"


def check_accelerator(accelerator: str, key: str = "training.accelerator") -> None:
    """Refuse a GPU accelerator on a machine without one (``gpu``/``cuda`` without a CUDA device, ``mps`` without an
    Apple GPU), in words rather than Lightning's traceback, naming the config ``key`` that set it."""
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise BvrError(f"accelerator '{accelerator}' asked for, but this machine has no CUDA GPU",
                       where=key, hint="use auto (the GPU when there is one) or cpu")
    if accelerator == "mps" and not torch.backends.mps.is_available():
        raise BvrError("accelerator 'mps' asked for, but this machine has no Apple GPU", where=key,
                       hint="use auto or cpu")


def resolve_precision(precision: str, *, where: str = "precision") -> str:
    """The precision to give Lightning: ``auto`` is bf16-mixed on a GPU that has bf16, else 32-true.

    Any other value of :data:`PRECISIONS` is returned as it is; one not among them is refused, ``where`` naming the
    setting.

    >>> resolve_precision("16-mixed")
    '16-mixed'
    >>> resolve_precision("auto") in ("bf16-mixed", "32-true")
    True
    """
    if precision not in PRECISIONS:
        raise BvrError(f"'{precision}' is not one of auto, 32-true, bf16-mixed, 16-mixed", where=where)
    if precision != "auto":
        return precision
    return "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"


@dataclass(frozen=True)
class TrainerSettings:
    """How a Trainer runs: on what (precision, accelerator, processes), for how long, with what clipping and
    accumulation, and how often it logs, validates and checkpoints."""

    precision: str = "auto"  # auto: resolve_precision's
    accelerator: str = "auto"
    grad_clip: float = 0.0  # the gradient norm to clip at (0 clips nothing)
    log_every_steps: int = 50  # Lightning logs every so many steps
    max_steps: int = -1  # optimiser steps (-1: no limit)
    max_epochs: int = -1  # -1: no limit
    devices: int = 1  # processes per node
    num_nodes: int = 1
    strategy: str = "auto"  # auto: resolve_strategy's
    grad_accum: int = 1  # micro-batches per optimiser step
    val_every_steps: int | None = None  # validate every so many optimiser steps (None: after each epoch)
    checkpoint_every_steps: int | None = None  # write checkpoints/last.ckpt, the resumable state (None: never)

    @classmethod
    def of(cls, training: TrainingConfig) -> TrainerSettings:
        """A pretraining run's settings: its ``training`` section, counted in steps."""
        return cls(**{f.name: getattr(training, f.name) for f in dataclasses.fields(cls) if f.name != "max_epochs"})


def build_trainer(root: Path, settings: TrainerSettings, logger: Any, *, progress: bool,
                  sampler_per_rank: bool = False, step_progress_bar: bool = False,
                  callbacks: Sequence[L.Callback] = ()) -> L.Trainer:
    """A Lightning Trainer writing under ``root``, its ``default_root_dir`` (checkpoints go to ``root/checkpoints``),
    logging to ``logger`` (MLflow's, or False).

    ``progress`` shows a :class:`TrainingBar`, only on a terminal (:func:`bvr.progress.bars`), step-counted with
    ``step_progress_bar``. ``sampler_per_rank``: the data's sampler strides over the ranks itself, so Lightning must
    not replace it with a distributed one.
    """
    s = settings
    keep_freed_memory()  # steps reuse the heap instead of page-faulting it afresh (bvr.memory)
    check_accelerator(s.accelerator)
    extra: list[L.Callback] = []
    if s.checkpoint_every_steps is not None:
        extra.append(ModelCheckpoint(dirpath=root / "checkpoints", save_top_k=0, save_last=True,
                                     every_n_train_steps=s.checkpoint_every_steps))
    extra.extend(callbacks)
    progress = bars(progress)  # no bar in a file or a pipe: carriage returns and cursor codes there
    if progress:
        extra.append(TrainingBar(steps=step_progress_bar))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=SRUN_NOTICE)
        return L.Trainer(
            max_steps=s.max_steps,
            max_epochs=s.max_epochs,
            accumulate_grad_batches=s.grad_accum,
            gradient_clip_val=s.grad_clip or None,
            precision=resolve_precision(s.precision),
            accelerator=s.accelerator,
            devices=s.devices,
            num_nodes=s.num_nodes,
            strategy=resolve_strategy(s.strategy, s.devices, s.num_nodes),
            use_distributed_sampler=not sampler_per_rank,
            # Counted in micro-batches, so the interval is the steps times the accumulation.
            val_check_interval=s.val_every_steps * s.grad_accum if s.val_every_steps is not None else None,
            check_val_every_n_epoch=None if s.val_every_steps is not None else 1,
            num_sanity_val_steps=0,
            log_every_n_steps=s.log_every_steps,
            logger=logger,
            callbacks=extra,
            enable_checkpointing=s.checkpoint_every_steps is not None,
            enable_progress_bar=progress,
            enable_model_summary=False,
            default_root_dir=str(root),
            plugins=[AtomicCheckpointIO()],
        )


def training_logger(context: RunContext, *, stage: str, task: str | None = None, seed: int | None = None,
                    extra: Mapping[str, Any] | None = None, run_id: str | None = None) -> MLFlowLogger:
    """The Lightning logger of one training run in the working directory's store.

    The run goes to the context's experiment, nested under its parent run; it is named ``LABEL/STAGE[/TASK][/seedN]``
    (:func:`bvr.tracking.run_name`) and tagged with the same parts, the context's tags and ``extra``
    (:func:`bvr.tracking.run_tags`); ``run_id`` reopens a resumed run (:func:`bvr.logger.make_logger`). The context
    comes with its experiment and label filled in (:meth:`bvr.tracking.RunContext.with_defaults`).
    """
    # Imported here: MLflow is needed to log, not to train, so the model and Trainer code import without it (the
    # GPU check runs on machines that have torch and Lightning only).
    from bvr.logger import make_logger
    from bvr.tracking import run_name, run_tags

    assert context.experiment and context.label, "training_logger needs a context with its defaults filled in"
    return make_logger(context.experiment, run_name=run_name(context.label, stage, task, seed),
                       tags=run_tags(context, stage=stage, task=task, seed=seed, extra=extra),
                       parent_run_id=context.parent_run_id, workdir=Path.cwd(), run_id=run_id)
