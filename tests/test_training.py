"""The shared training layer: AdamW's parameter groups, the schedule, precision, the non-finite-loss stop, the
Trainer factory, and the losses in bvr.model.losses."""

from __future__ import annotations

import ast
import io
import math
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from mlflow import MlflowClient
from rich.progress import Task
from torch import nn

from bvr.checkpoints import AtomicCheckpointIO
from bvr.errors import BvrError
from bvr.model.losses import IGNORE_INDEX, accuracy, cross_entropy
from bvr.tracking import RunContext, tracking_uri
from bvr.training import (
    NonFiniteLoss,
    TrainerSettings,
    adamw,
    build_trainer,
    check_finite,
    linear_schedule,
    parameter_groups,
    resolve_precision,
    resolve_strategy,
    training_logger,
)
from bvr.training.trainer import TrainingBar


class Tiny(nn.Module):
    """Parameter names as BERT's and RoBERTa's modules spell them."""

    def __init__(self) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(10, 4)
        self.dense = nn.Linear(4, 4)
        self.LayerNorm = nn.LayerNorm(4)
        self.layer_norm = nn.LayerNorm(4)
        self.scale = nn.Parameter(torch.ones(4))  # 1-D, no bias or LayerNorm in its name
        self.layer_norm_matrix = nn.Parameter(torch.ones(2, 2))  # 2-D, but named as a layer norm


def _names(model: nn.Module, params: list[nn.Parameter]) -> list[str]:
    by_id = {id(p): n for n, p in model.named_parameters()}
    return [by_id[id(p)] for p in params]


def test_only_weight_matrices_are_decayed_and_groups_keep_the_models_order():
    model = Tiny()
    decayed, plain = parameter_groups(model.named_parameters(), weight_decay=0.01)
    assert decayed["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    order = [name for name, _ in model.named_parameters()]
    decay_names = {"word_embeddings.weight", "dense.weight"}
    plain_names = {"dense.bias", "LayerNorm.weight", "LayerNorm.bias", "layer_norm.weight", "layer_norm.bias", "scale",
                   "layer_norm_matrix"}
    assert _names(model, decayed["params"]) == [name for name in order if name in decay_names]
    assert _names(model, plain["params"]) == [name for name in order if name in plain_names]


def test_schedule_by_hand():
    # warm-up of 10 steps to the peak, then linear decay over the remaining 100 to 0.
    factor = linear_schedule(warmup_steps=10, max_steps=110)
    assert factor(0) == pytest.approx(0.1)
    assert factor(4) == pytest.approx(0.5)
    assert factor(9) == 1.0  # the warm-up's last step reaches the peak
    assert factor(10) == 1.0  # (110 - 10) / 100
    assert factor(60) == pytest.approx(0.5)  # half-way through the decay
    assert factor(109) == pytest.approx(0.01)
    assert factor(110) == 0.0 and factor(150) == 0.0  # the end, and past it: never negative


def test_schedule_without_warmup_starts_at_the_peak():
    factor = linear_schedule(warmup_steps=0, max_steps=4)
    assert [factor(step) for step in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]


def test_adamw_steps_its_schedule_per_optimiser_step():
    model = Tiny()
    configured = adamw(model.named_parameters(), learning_rate=1e-3, weight_decay=0.1, betas=[0.9, 0.98], eps=1e-6,
                       warmup_steps=4, max_steps=12)
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    assert configured["lr_scheduler"]["interval"] == "step"
    assert isinstance(optimizer, torch.optim.AdamW)
    assert [group["weight_decay"] for group in optimizer.param_groups] == [0.1, 0.0]
    assert all(group["betas"] == (0.9, 0.98) and group["eps"] == 1e-6 for group in optimizer.param_groups)
    lrs = []
    for _ in range(13):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    expected = [0.25, 0.5, 0.75, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0.0]
    assert lrs == pytest.approx([1e-3 * f for f in expected])


def test_precision_passes_explicit_values_and_resolves_auto(monkeypatch):
    for value in ("32-true", "bf16-mixed", "16-mixed", "32"):
        assert resolve_precision(value) == value
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_precision("auto") == "32-true"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert resolve_precision("auto") == "32-true"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert resolve_precision("auto") == "bf16-mixed"


def test_an_unknown_precision_names_the_setting():
    with pytest.raises(BvrError) as info:
        resolve_precision("bf16", where="training.precision")
    assert info.value.where == "training.precision" and "'bf16' is not one of" in info.value.message


def test_a_finite_loss_passes_and_its_values_are_not_computed():
    def values() -> str:
        raise AssertionError("only for the message")

    check_finite(torch.tensor(2.5), 7, what="training loss", hint="h", values=values)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_loss_raises_naming_the_step_the_values_and_the_hint(bad):
    with pytest.raises(NonFiniteLoss) as info:
        check_finite(torch.tensor(bad), 7, what="training loss", hint="lower the learning rate",
                     values=lambda: "mlm_loss=nan")
    error = info.value
    assert isinstance(error, BvrError) and error.where == "training" and error.hint == "lower the learning rate"
    assert error.message == ("the training loss is not finite at step 7 (mlm_loss=nan); training stopped before "
                             "this step changed any weight")


def test_strategy_is_ddp_only_over_several_processes():
    assert resolve_strategy("auto", devices=1, num_nodes=1) == "auto"
    assert resolve_strategy("auto", devices=2, num_nodes=1) == "ddp"
    assert resolve_strategy("auto", devices=1, num_nodes=2) == "ddp"
    assert resolve_strategy("deepspeed", devices=1, num_nodes=1) == "deepspeed"


def test_a_step_counted_trainer_checkpoints_and_validates_every_n_steps(tmp_path):
    settings = TrainerSettings(precision="32-true", accelerator="cpu", grad_clip=1.0, log_every_steps=5, max_steps=40,
                               grad_accum=3, val_every_steps=10, checkpoint_every_steps=20)
    trainer = build_trainer(tmp_path, settings, False, progress=False, sampler_per_rank=True)
    assert trainer.max_steps == 40 and trainer.max_epochs == -1
    assert trainer.accumulate_grad_batches == 3 and trainer.gradient_clip_val == 1.0
    assert trainer.val_check_interval == 30 and trainer.check_val_every_n_epoch is None  # counted in micro-batches
    checkpoints = [c for c in trainer.callbacks if isinstance(c, ModelCheckpoint)]
    assert len(checkpoints) == 1 and checkpoints[0].dirpath == str(tmp_path / "checkpoints")
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    assert trainer.num_sanity_val_steps == 0 and not trainer._accelerator_connector.use_distributed_sampler


def test_an_epoch_counted_trainer_writes_no_checkpoint_and_validates_each_epoch(tmp_path):
    settings = TrainerSettings(precision="32-true", accelerator="cpu", log_every_steps=5, max_epochs=3)
    trainer = build_trainer(tmp_path, settings, False, progress=False)
    assert trainer.max_epochs == 3 and trainer.max_steps == -1
    assert trainer.gradient_clip_val is None and trainer.accumulate_grad_batches == 1
    assert trainer.check_val_every_n_epoch == 1 and trainer.checkpoint_callback is None
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)


def test_cross_entropy_and_accuracy_read_only_the_labelled_targets():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0]], requires_grad=True)
    targets = torch.tensor([0, 2, IGNORE_INDEX])
    loss = cross_entropy(logits, targets)
    assert torch.equal(loss, F.cross_entropy(logits[:2], targets[:2]))
    assert float(accuracy(logits, targets)) == 0.5 and not accuracy(logits, targets).requires_grad


def test_no_labelled_target_is_a_zero_loss_in_the_graph_not_nan():
    logits = torch.randn(3, 4, requires_grad=True)
    targets = torch.full((3,), IGNORE_INDEX)
    loss = cross_entropy(logits, targets)
    loss.backward()
    assert loss.item() == 0.0 and not math.isnan(loss.item())
    assert torch.equal(logits.grad, torch.zeros(3, 4))
    assert float(accuracy(logits, targets)) == 0.0


def test_a_training_run_is_named_and_tagged_by_its_parts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default store lives in the working directory
    context = RunContext(experiment="bvr-training", ablation="masking", label="bert")
    logger = training_logger(context, stage="finetune", task="rte", seed=2, extra={"bvr.checkpoint": "ckpt"})
    logger.log_metrics({"train/loss": 1.0}, step=0)
    logger.finalize("success")
    run = MlflowClient(tracking_uri(tmp_path)).get_run(logger.run_id)
    assert run.info.run_name == "bert/finetune/rte/seed2"
    tags = run.data.tags
    assert tags["bvr.arm"] == "bert" and tags["bvr.stage"] == "finetune" and tags["bvr.task"] == "rte"
    assert tags["bvr.seed"] == "2" and tags["bvr.ablation"] == "masking" and tags["bvr.checkpoint"] == "ckpt"


def test_quiet_fit_silences_only_lightnings_noise():
    import warnings

    from bvr.training import quiet_fit

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_fit():
            warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)`",
                          FutureWarning, stacklevel=1)
            warnings.warn("The 'train_dataloader' does not have many workers which may be a bottleneck.", UserWarning,
                          stacklevel=1)
            warnings.warn("The `srun` command is available on your system but is not used. HINT: ...", UserWarning,
                          stacklevel=1)  # a machine with SLURM installed, outside a job step (bvr launches its own)
            warnings.warn("the loss went up", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["the loss went up"]


def test_a_gpu_accelerator_without_a_gpu_is_one_line(tmp_path, monkeypatch):
    import torch

    from bvr.errors import BvrError
    from bvr.training import build_trainer

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(BvrError, match="accelerator 'gpu' asked for, but this machine has no CUDA GPU") as err:
        build_trainer(tmp_path, TrainerSettings(accelerator="gpu", log_every_steps=1), False, progress=False)
    assert err.value.where == "training.accelerator" and "cpu" in err.value.hint


class _Steps(L.LightningModule):
    """Four batches an epoch of a one-weight regression, enough for a step-counted bar to cross epochs."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Linear(1, 1)

    def training_step(self, batch, batch_idx):
        loss = self.w(batch[0]).pow(2).mean()
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(8, 1)), batch_size=2)


class _Terminal(io.StringIO):
    """Standard output that says it is a terminal: rich draws its bars into it."""

    def isatty(self) -> bool:
        return True


def _bar_trainer(tmp_path, *, sampler_per_rank: bool = False, step_progress_bar: bool = False,
                 **settings) -> L.Trainer:
    chosen = TrainerSettings(precision="32-true", accelerator="cpu", log_every_steps=1, **settings)
    return build_trainer(tmp_path, chosen, False, progress=True, sampler_per_rank=sampler_per_rank,
                         step_progress_bar=step_progress_bar)


def test_without_a_terminal_no_bar_is_drawn(tmp_path, capfd):
    """A bar redrawn in a file is carriage returns and cursor codes (the main job's log held 1,647 and 240)."""
    trainer = _bar_trainer(tmp_path, max_steps=6, sampler_per_rank=True, step_progress_bar=True)
    assert trainer.progress_bar_callback is None
    trainer.fit(_Steps())
    out, err = capfd.readouterr()
    assert "\r" not in out + err and "\x1b" not in out + err and "steps" not in out + err


def test_the_step_bar_counts_steps_to_max_steps_across_epochs_and_a_resume(tmp_path, monkeypatch):
    """Lightning's bar restarts each epoch and has no total after a mid-epoch resume ("2/?"); the step bar shows
    global_step / max_steps throughout, under the epoch counted from 1."""
    monkeypatch.setattr(sys, "stdout", _Terminal())

    def fit(max_steps: int, ckpt: str | None = None) -> Task:
        trainer = _bar_trainer(tmp_path, max_steps=max_steps, checkpoint_every_steps=1, sampler_per_rank=True,
                               step_progress_bar=True)
        bar = trainer.progress_bar_callback
        assert isinstance(bar, TrainingBar) and bar.steps
        trainer.fit(_Steps(), ckpt_path=ckpt)
        return bar.progress.tasks[bar.task]

    first = fit(6)  # one epoch and a half
    assert (first.completed, first.total, first.description) == (6, 6, "steps (epoch 2)")
    assert first.fields["metrics"].startswith("loss=")  # what the module logs with prog_bar=True, beside the bar
    assert "v_num" not in sys.stdout.getvalue()  # the logger's version is no measurement
    resumed = fit(10, str(tmp_path / "checkpoints" / "last.ckpt"))  # resumed mid-epoch at step 6
    assert (resumed.completed, resumed.total, resumed.description) == (10, 10, "steps (epoch 3)")


def test_the_epoch_bar_counts_epochs_as_configured(tmp_path, monkeypatch):
    """Lightning's bar said "Epoch 1/1" in the last of two epochs; fine-tuning's says "epoch 2/2"."""
    monkeypatch.setattr(sys, "stdout", _Terminal())
    trainer = _bar_trainer(tmp_path, max_epochs=2)
    bar = trainer.progress_bar_callback
    assert isinstance(bar, TrainingBar) and not bar.steps
    trainer.fit(_Steps())
    task = bar.progress.tasks[bar.task]
    assert (task.description.strip(), task.completed, task.total) == ("epoch 2/2", 4, 4)
    assert "Epoch" not in sys.stdout.getvalue()


def test_bf16_mixed_with_fused_adamw_clips_the_gradients(tmp_path):
    """Lightning refuses to clip around a fused optimiser under mixed precision; bf16 has no loss scaler, so the
    modules clip themselves (clip_unscaled). Without it the first step raises (on a GPU, where bf16-mixed is the
    default, every pretraining)."""
    from bvr.config import TrainingConfig
    from bvr.model import EncoderConfig, PretrainingModel
    from bvr.pretraining.run import PretrainingModule
    from bvr.training import build_trainer
    from tests.test_gpu import synthetic_loader

    torch.manual_seed(0)
    config = EncoderConfig(family="bert", vocab_size=200, hidden_size=32, num_layers=1, num_heads=2,
                           intermediate_size=64, pad_token_id=0)
    module = PretrainingModule(PretrainingModel(config), TrainingConfig(learning_rate=1e-3, warmup_steps=0,
                                                                         max_steps=2))
    settings = TrainerSettings(precision="bf16-mixed", accelerator="cpu", grad_clip=0.5, log_every_steps=1, max_steps=2)
    trainer = build_trainer(tmp_path, settings, False, progress=False)
    trainer.fit(module, train_dataloaders=synthetic_loader(2, batch_size=4))
    assert trainer.global_step == 2 and trainer.optimizers[0].defaults["fused"]
    for p in module.parameters():
        p.grad = torch.full_like(p, 3.0)
    module.configure_gradient_clipping(trainer.optimizers[0], 0.5, "norm")
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in module.parameters()]))
    assert norm.item() == pytest.approx(0.5, rel=1e-5)


def _lightning_private_names() -> set[str]:
    """The private names (``_x``, not ``__x__``) of the Lightning objects bvr touches: Trainer and its loops,
    modules, data modules, callbacks and progress bars, made as bvr makes them."""
    from lightning.pytorch.callbacks import ProgressBar, RichProgressBar

    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, accelerator="cpu")
    objects = [trainer, trainer.fit_loop, trainer.fit_loop.epoch_loop, trainer.strategy, L.LightningModule(),
               L.LightningDataModule(), L.Callback(), ModelCheckpoint(), ProgressBar(), RichProgressBar()]
    return {name for obj in objects for name in dir(obj) if name.startswith("_") and not name.endswith("__")}


def _private_uses(source: str, private: set[str]) -> list[str]:
    """Where ``source`` reads a Lightning private name (``obj._x``), overrides one (``def _x``), or walks the
    Trainer's loops (``fit_loop``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and (node.attr in private or node.attr == "fit_loop"):
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ClassDef):  # a method of that name overrides Lightning's
            found += [f"line {f.lineno}: def {f.name}" for f in node.body
                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name in private]
    return found


def test_bvr_uses_no_private_lightning_api():
    """Private names and the loops' internals change without notice between Lightning releases, and a changed one
    breaks a run silently (a step counted wrong, a resume at the wrong batch)."""
    private = _lightning_private_names()
    assert {"_should_accumulate", "_get_train_description", "_update"} <= private
    root = Path(__file__).resolve().parent.parent / "bvr"
    used = {str(path.relative_to(root)): uses for path in sorted(root.rglob("*.py"))
            if (uses := _private_uses(path.read_text(encoding="utf-8"), private))}
    assert used == {}
    caught = ("class Bar:\n    def on_train_batch_end(self):\n"
              "        self.trainer.fit_loop.epoch_loop._should_accumulate()\n"
              "    def _get_train_description(self, epoch):\n        return ''\n"
              "def _version():\n    return 1\n")
    assert sorted(_private_uses(caught, private)) == ["line 3: ._should_accumulate", "line 3: .fit_loop",
                                                      "line 4: def _get_train_description"]
