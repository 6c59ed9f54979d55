"""Pretraining end to end on a generated corpus: the loss falls, MLflow holds the run, SIGKILL + --resume equals an
uninterrupted run, a non-finite loss stops cleanly, and the exported folder loads in transformers."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from mlflow import MlflowClient

from bvr import cache
from bvr.config import load_config
from bvr.errors import BvrError
from bvr.locks import holder, lock_path
from bvr.pretrained import fill_mask, load_pretrained
from bvr.pretraining import run as run_module
from bvr.pretraining.prepare import prepare
from bvr.pretraining.run import DEFAULT_EXPERIMENT, pretrain, run_dir_for
from bvr.tracking import find_runs, tracking_uri
from bvr.training import NonFiniteLoss
from tests.test_prepare import write_wiki_corpus

TINY = [
    "corpus.path=corpus/wiki", "corpus.validation_fraction=0.1", "tokenizer.vocab_size=400", "data.max_length=64",
    "data.shard_documents=50", "model.num_layers=2", "model.hidden_size=32", "model.num_heads=4",
    "model.intermediate_size=64", "training.batch_size=8", "training.learning_rate=3e-3", "training.warmup_steps=5",
    "training.val_every_steps=10", "training.checkpoint_every_steps=4", "training.log_every_steps=2",
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """60 generated articles: about 140 sequences of at most 64 tokens, 18 steps of 8 per epoch."""
    return write_wiki_corpus(tmp_path_factory.mktemp("data"), documents=60)


def config(data_dir: Path, out: Path, *overrides: str):
    return load_config(overrides=[*TINY, *overrides], extra={"data_dir": str(data_dir), "output_dir": str(out)})


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("work")
    cwd = os.getcwd()
    os.chdir(workdir)  # the default MLflow store lives in the working directory
    try:
        result = pretrain(config(data_dir, workdir / "out", "training.max_steps=40", "masking.mode=static",
                                 "masking.dupe_factor=2"), progress=False)
    finally:
        os.chdir(cwd)
    return workdir, result


def test_loss_falls_and_metrics_are_reported(trained):
    _, result = trained
    m = result.metrics
    assert m["steps"] == 40
    assert m["train/mlm_loss"] < 5.0 < 6.0  # starts near ln(400) = 6.0
    assert m["val/perplexity"] == pytest.approx(torch.tensor(m["val/mlm_loss"]).exp().item(), rel=1e-5)
    assert 0.0 <= m["val/nsp_acc"] <= 1.0
    assert m["tokens_seen"] > 40 * 8 * 20
    assert m["params_total"] == m["params_embedding"] + m["params_non_embedding"]
    # ~140 sequences, 40 steps of 8: a little over 2 epochs, so 3 started; static with 2 copies: one seen twice.
    assert 2.0 < m["epochs"] < 3.0
    assert m["mask_distinct_per_sequence"] == 2 and m["mask_max_times_seen"] == 2
    assert (result.run_dir / "DONE").is_file() and (result.model_dir / "model.safetensors").is_file()


def test_the_run_counts_its_vocabulary_and_its_tokens_in_words(trained, data_dir):
    """What the report's setup states of each arm, against the run's own data: how often the median non-special id
    occurs in the training sequences, the share under 10, and the tokens seen in words (the corpus's tokenized ids
    over its whitespace words), logged as run/* metrics with the steps taken."""
    import json

    import datasets
    import numpy as np
    import pyarrow.compute as pc

    from bvr.pretraining.prepare import load_instances
    from bvr.tokenization import load_tokenizer, vocab_info

    workdir, result = trained
    m = result.metrics
    prepared = prepare(config(data_dir, workdir / "out", "training.max_steps=40", "masking.mode=static",
                              "masking.dupe_factor=2"), progress=False)
    words = json.loads((prepared.corpus / "documents" / "corpus_stats.json").read_text())["words"]
    tokenized = datasets.load_from_disk(str(prepared.tokenized / "tokenized"))
    ids = sum(len(sentence_ids) for split in tokenized.values() for sentence_ids in split["token_ids"])
    assert m["ids_per_word"] == pytest.approx(ids / words, rel=1e-12) and 1.0 < m["ids_per_word"] < 3.0
    vocab = vocab_info(*load_tokenizer(prepared.tokenizer))
    fed = pc.list_flatten(load_instances(prepared)["train"].data.table["input_ids"]).to_numpy()
    counts = np.delete(np.bincount(fed, minlength=vocab.vocab_size), list(vocab.special_ids))
    assert m["id_occurrences_median"] == float(np.median(counts))
    assert m["id_rare_share"] == pytest.approx(float((counts < 10).mean()), rel=1e-12)
    text_share = counts.sum() / len(fed)
    assert m["words_seen"] == pytest.approx(m["tokens_seen"] * text_share / m["ids_per_word"], rel=1e-9)
    client = MlflowClient(tracking_uri(workdir))
    logged = client.get_run((result.run_dir / "mlflow_run_id").read_text().strip()).data.metrics
    assert logged["run/steps"] == 40
    for key in ("words_seen", "ids_per_word", "id_occurrences_median", "id_rare_share", "params_embedding",
                "params_non_embedding"):
        assert logged[f"run/{key}"] == pytest.approx(m[key], rel=1e-6), key


def test_mlflow_holds_metrics_params_and_artifacts(trained):
    workdir, result = trained
    client = MlflowClient(tracking_uri(workdir))
    run = client.get_run((result.run_dir / "mlflow_run_id").read_text().strip())
    names = sorted(d.dataset.name for d in run.inputs.dataset_inputs)  # the corpus and the sequences it trained on
    assert names == ["segment-pair sequences of 64", "wikiextractor corpus corpus/wiki"], names
    assert all(len(d.dataset.digest) == 12 for d in run.inputs.dataset_inputs)
    run_id = (result.run_dir / "mlflow_run_id").read_text().strip()
    run = client.get_run(run_id)
    assert run.info.run_name == "default/pretrain"
    assert run.data.tags["bvr.stage"] == "pretrain" and run.data.tags["bvr.arm"] == "default"
    assert run.data.params["masking.mode"] == "static"
    threads = torch.get_num_threads()  # as the run set it (bvr.threads), with the budget that decided it
    assert run.data.tags["bvr.threads"] == str(threads)
    assert run.data.tags["bvr.threads_budget"].startswith(f"threads {threads} (")
    history = client.get_metric_history(run_id, "train/mlm_loss")
    assert len(history) >= 10 and history[-1].value < history[0].value - 0.5
    for key in ("val/mlm_loss", "val/perplexity", "val/nsp_acc", "train/nsp_loss", "train/tokens_per_s", "lr",
                "system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"):
        assert client.get_metric_history(run_id, key), key  # system/*: the machine's load while it trained
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"config.yaml", "tokenizer", "data_stats.json", "metrics.json"} <= artifacts
    # The exported encoder is listed as the run's model, pointing at its folder (an external model: no copy).
    [model] = client.search_logged_models([run.info.experiment_id], filter_string=f"source_run_id = '{run_id}'")
    assert (model.name, model.model_type, str(model.status)) == ("default-encoder", "bvr-encoder", "READY")
    assert model.tags["bvr.model_dir"] == str(result.model_dir.resolve())
    assert model.params["model.num_layers"] == run.data.params["model.num_layers"]
    # Linked both ways: the run lists it under "Logged models"; its page describes it and shows the run's metrics.
    assert [o.model_id for o in client.get_run(run_id).outputs.model_outputs] == [model.model_id]
    assert model.tags["mlflow.note.content"].startswith("The encoder pretrained by run `default/pretrain` (")
    assert {m.key for m in client.get_logged_model(model.model_id).metrics} >= {"encoder/val_mlm_loss",
                                                                               "encoder/val_perplexity"}


def test_a_finished_run_is_reused(trained, data_dir):
    workdir, result = trained
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        again = pretrain(config(data_dir, workdir / "out", "training.max_steps=40", "masking.mode=static",
                                "masking.dupe_factor=2"), progress=False)
    finally:
        os.chdir(cwd)
    assert again.reused and again.run_dir == result.run_dir


def test_export_loads_in_transformers_with_the_same_outputs(trained):
    transformers = pytest.importorskip("transformers")
    _, result = trained
    ours = load_pretrained(result.run_dir)
    hf_model = transformers.AutoModelForMaskedLM.from_pretrained(result.model_dir).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(result.model_dir)
    batch = hf_tok(["the river city music", "a famous football club"], padding=True, return_tensors="pt")
    assert batch["input_ids"][0, 0].item() == ours.tokenizer.token_to_id("[CLS]")
    with torch.no_grad():
        expected = hf_model(**batch).logits
        hidden = ours.model.encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        got = ours.model.mlm_head(hidden)
    keep = batch["attention_mask"].bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-4, rtol=1e-4)


def test_fill_mask_predicts_at_each_mask(trained):
    _, result = trained
    predictions = fill_mask(load_pretrained(result.run_dir), "the [MASK] city music <mask>", top_k=3)
    assert len(predictions) == 2 and all(len(p) == 3 for p in predictions)
    assert all(0 < p.probability <= 1 for ps in predictions for p in ps)
    with pytest.raises(BvrError, match="no mask token"):
        fill_mask(load_pretrained(result.run_dir), "no mask here")


class KillAt(L.Callback):
    """SIGKILL this process right after optimiser step ``step`` (no clean-up, like a pre-empted job), or send it
    another signal (SIGTERM: what a scheduler sends first)."""

    def __init__(self, step: int, signum: int = signal.SIGKILL) -> None:
        self.step = step
        self.signum = signum

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


def _killed_run(cfg, workdir: Path, step: int) -> None:
    os.chdir(workdir)
    pretrain(cfg, progress=False, callbacks=[KillAt(step)])


@pytest.mark.parametrize("scheme", ["whole-word", "span"])  # token: tests/reliability/test_runs.py, through the CLI
def test_sigkill_then_resume_equals_an_uninterrupted_run(data_dir, tmp_path, monkeypatch, scheme):
    monkeypatch.chdir(tmp_path)
    # ~140 sequences: about 18 batches of 8 per epoch, so step 11 is mid-epoch of epoch 0 and the run crosses
    # into epoch 1 (a new order and, being static with 2 copies, the other mask copy).
    overrides = ["training.max_steps=26", "masking.mode=static", "masking.dupe_factor=2", f"masking.scheme={scheme}"]
    full = pretrain(config(data_dir, tmp_path / "a", *overrides), progress=False)

    cfg = config(data_dir, tmp_path / "b", *overrides)
    # A fresh interpreter (spawn): forking a process that already runs torch and MLflow threads can deadlock.
    child = multiprocessing.get_context("spawn").Process(target=_killed_run, args=(cfg, tmp_path, 11))
    child.start()
    child.join(300)
    assert child.exitcode == -signal.SIGKILL
    run_dir = next((tmp_path / "b" / "runs").glob("pretrain-*"))
    assert not (run_dir / "DONE").exists()
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 8

    with pytest.raises(BvrError, match="--resume"):
        pretrain(cfg, progress=False)
    resumed = pretrain(cfg, resume=True, progress=False)
    assert resumed.run_dir == run_dir
    assert 1.0 < resumed.metrics["epochs"] < 2.0
    a, b = weights(full.run_dir), weights(resumed.run_dir)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-6, rtol=1e-5, msg=key)
    for key in ("train/mlm_loss", "val/mlm_loss", "tokens_seen"):
        assert resumed.metrics[key] == pytest.approx(full.metrics[key], rel=1e-5), key


def test_a_run_stopped_after_its_last_step_resumes_with_its_losses(data_dir, tmp_path, monkeypatch):
    """Stopped after the last step's checkpoint, while exporting (the budget curve's SIGTERM did this): the resumed
    run takes no step, and still reports the final validation and training losses the whole run has."""
    monkeypatch.chdir(tmp_path)
    overrides = ["training.max_steps=6", "training.checkpoint_every_steps=3"]
    full = pretrain(config(data_dir, tmp_path / "a", *overrides), progress=False)
    cfg = config(data_dir, tmp_path / "b", *overrides)

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(run_module, "_export", stopped)
        with pytest.raises(KeyboardInterrupt):
            pretrain(cfg, progress=False)
    run_dir = next((tmp_path / "b" / "runs").glob("pretrain-*"))
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6
    resumed = pretrain(cfg, resume=True, progress=False)
    for key in ("train/mlm_loss", "val/mlm_loss", "val/perplexity", "tokens_seen"):
        assert resumed.metrics[key] == pytest.approx(full.metrics[key], rel=1e-5), key


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_token_batches_sigkill_then_resume_equals_an_uninterrupted_run(data_dir, tmp_path, monkeypatch, mode):
    """doc-sentences filled to 512 tokens a step (RoBERTa's dynamic batch): each step within one sequence of the
    budget, and a run killed mid-way then resumed ends with the same weights and metrics, masks static or dynamic."""
    monkeypatch.chdir(tmp_path)
    overrides = ["training.max_steps=26", f"masking.mode={mode}", "masking.dupe_factor=2",
                 "data.input_format=doc-sentences", "data.sentence_objective=none", "training.tokens_per_batch=512"]
    full = pretrain(config(data_dir, tmp_path / "a", *overrides), progress=False)
    assert 512 - 64 < full.metrics["tokens_seen"] / 26 <= 512
    assert full.metrics["epochs"] > 1.0  # the stream crossed into the next data epoch (and mask copy)

    resumed = killed_then_resumed(config(data_dir, tmp_path / "b", *overrides), tmp_path, 11)
    assert_same_weights(full.run_dir, resumed.run_dir)
    for key in ("train/mlm_loss", "val/mlm_loss", "tokens_seen", "epochs"):
        assert resumed.metrics[key] == pytest.approx(full.metrics[key], rel=1e-5), key


def killed_then_resumed(cfg, workdir: Path, step: int):
    """``cfg`` pretrained in a fresh interpreter killed by SIGKILL at ``step``, then resumed here."""
    child = multiprocessing.get_context("spawn").Process(target=_killed_run, args=(cfg, workdir, step))
    child.start()
    child.join(300)
    assert child.exitcode == -signal.SIGKILL
    return pretrain(cfg, resume=True, progress=False)


def assert_same_weights(a_dir: Path, b_dir: Path) -> None:
    a, b = weights(a_dir), weights(b_dir)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-6, rtol=1e-5, msg=key)


class PoisonAt(L.Callback):
    """Turn one weight into NaN before step ``step`` so its loss is not finite."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, *args) -> None:
        if trainer.global_step == self.step:
            with torch.no_grad():
                pl_module.model.encoder.embeddings.word_embeddings.weight.fill_(float("nan"))


def test_non_finite_loss_stops_with_a_clear_message_and_keeps_the_last_good_checkpoint(data_dir, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = config(data_dir, tmp_path / "out", "training.max_steps=20")
    with pytest.raises(NonFiniteLoss) as info:
        pretrain(cfg, progress=False, callbacks=[PoisonAt(6)])
    message = str(info.value)
    assert "not finite at step 6" in message and "last.ckpt" in message and "--resume" in message
    run_dir = next((tmp_path / "out" / "runs").glob("pretrain-*"))
    good = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert good["global_step"] == 4
    assert all(torch.isfinite(t).all() for t in good["state_dict"].values())


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_a_hugging_face_folder_is_a_starting_point(family, tmp_path):
    """A bert-base-uncased / roberta-base style folder (saved by transformers, no bvr files) loads in bvr."""
    transformers = pytest.importorskip("transformers")
    from bvr.tokenization import train_tokenizer

    text = [" ".join(WORDS_FOR_HF[(i * 7 + j) % len(WORDS_FOR_HF)] for j in range(12)) for i in range(300)]
    tok = train_tokenizer(family, text, vocab_size=300 if family == "bert" else 320, show_progress=False)
    specials = ({"unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                 "mask_token": "[MASK]"} if family == "bert" else
                {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
                 "cls_token": "<s>", "sep_token": "</s>", "mask_token": "<mask>"})
    hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **specials)
    pad = hf_tok.pad_token_id
    common = dict(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=37, pad_token_id=pad)
    if family == "bert":
        hf_model = transformers.BertForMaskedLM(transformers.BertConfig(max_position_embeddings=64, **common))
    else:
        hf_model = transformers.RobertaForMaskedLM(transformers.RobertaConfig(max_position_embeddings=66,
                                                                              type_vocab_size=1, **common))
    hf_model.eval().save_pretrained(tmp_path)
    hf_tok.save_pretrained(tmp_path)

    ours = load_pretrained(tmp_path)
    assert ours.family == family
    mask = "[MASK]" if family == "bert" else "<mask>"
    predictions = fill_mask(ours, f"the river {mask} music", top_k=2)
    batch = hf_tok([f"the river {mask} music"], return_tensors="pt")
    with torch.no_grad():
        expected = hf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    position = int((batch["input_ids"][0] == hf_tok.mask_token_id).nonzero()[0])
    best = int(expected[0, position].argmax())
    assert predictions[0][0].probability == pytest.approx(float(expected[0, position].softmax(-1)[best]), rel=1e-4)


WORDS_FOR_HF = "the a river city music player team season album film school church war army king".split()


def test_cli_fill_mask_and_export(trained, tmp_path):
    from typer.testing import CliRunner

    from bvr.cli import app

    _, result = trained
    runner = CliRunner()
    shown = runner.invoke(app, ["fill-mask", str(result.run_dir), "the [MASK] city", "-k", "2"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith("mask 1: ") and shown.output.count("(0.") == 2
    out = tmp_path / "exported"
    exported = runner.invoke(app, ["export", str(result.run_dir), str(out)])
    assert exported.exit_code == 0, exported.output
    assert {"config.json", "model.safetensors", "tokenizer.json", "bvr.yaml"} <= {p.name for p in out.iterdir()}
    again = load_pretrained(out)
    for key, value in load_pretrained(result.run_dir).model.state_dict().items():
        torch.testing.assert_close(again.model.state_dict()[key], value, msg=key)


def test_export_of_a_run_saved_with_data_nsp_is_refused_naming_the_line(trained, tmp_path):
    """A model folder whose bvr.yaml an older bvr wrote (data.nsp) is refused, naming the file, the line and what to
    write instead; nothing is exported."""
    import shutil

    import yaml
    from typer.testing import CliRunner

    from bvr.cli import app

    _, result = trained
    old = shutil.copytree(result.model_dir, tmp_path / "old")
    saved = yaml.safe_load((old / "bvr.yaml").read_text())
    assert saved["data"].pop("sentence_objective") == "nsp"
    saved["data"]["nsp"] = True
    (old / "bvr.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    line = next(i for i, text in enumerate((old / "bvr.yaml").read_text().splitlines(), 1) if "nsp: true" in text)
    exported = CliRunner().invoke(app, ["export", str(old), str(tmp_path / "exported")])
    assert exported.exit_code != 0
    flat = " ".join(f"{exported.output} {exported.exception}".split())
    assert f"bvr.yaml:{line}: data.nsp" in flat and "data.sentence_objective: nsp" in flat, exported.output
    assert not (tmp_path / "exported").exists()


def test_sop_pretraining_logs_sop_metrics_and_exports_its_head(data_dir, tmp_path, monkeypatch):
    """SOP trains the same 2-way head as NSP under its own metric names; the head is exported as BERT's
    seq_relationship, so the folder loads in transformers as BertForPreTraining (and as a bare encoder)."""
    transformers = pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    result = pretrain(config(data_dir, tmp_path / "out", "training.max_steps=12", "data.sentence_objective=sop"),
                      progress=False)
    m = result.metrics
    assert m["steps"] == 12 and 0.0 <= m["val/sop_acc"] <= 1.0 and m["train/sop_loss"] > 0
    assert not any("nsp" in key for key in m)
    client = MlflowClient(tracking_uri(tmp_path))
    run_id = (result.run_dir / "mlflow_run_id").read_text().strip()
    for key in ("train/sop_loss", "train/sop_acc", "val/sop_acc"):
        assert client.get_metric_history(run_id, key), key
    assert client.get_run(run_id).data.params["data.sentence_objective"] == "sop"
    stats = client.download_artifacts(run_id, "data_stats.json", str(tmp_path))
    assert '"sentence_objective": "sop"' in Path(stats).read_text()
    # max_steps 12 is not a multiple of val_every_steps 10: validation runs at step 10 and again at the end.
    steps = [m.step for m in client.get_metric_history(run_id, "val/mlm_loss")]  # the encoder's copy not among them
    assert len(steps) == 2 and steps[-1] == 12 and m["val/mlm_loss"] > 0
    hf = transformers.BertForPreTraining.from_pretrained(result.model_dir).eval()
    ours = load_pretrained(result.run_dir).model
    torch.testing.assert_close(hf.cls.seq_relationship.weight, ours.cls.seq_relationship.weight)
    assert transformers.AutoModel.from_pretrained(result.model_dir).pooler is not None


def test_a_token_budget_stops_the_run_early(data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = pretrain(config(data_dir, tmp_path / "out", "training.max_steps=50", "training.max_tokens=1500",
                             "data.input_format=full-sentences", "data.sentence_objective=none"), progress=False)
    # Full-sentence batches of 8 hold about 8 x 60 tokens, so 1,500 tokens take 4 steps, far short of 50.
    assert 1500 <= result.metrics["tokens_seen"] < 1500 + 8 * 64
    assert result.metrics["steps"] < 10


class FailAt(L.Callback):
    """Raise before optimiser step ``step``, as a crash would, after the checkpoint of an earlier step was written."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, *args) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("crashed")


def test_a_truncated_checkpoint_on_resume_is_one_line_naming_it_and_restart_trains_again(data_dir, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = config(data_dir, tmp_path / "out", "training.max_steps=8")
    with pytest.raises(RuntimeError, match="crashed"):
        pretrain(cfg, progress=False, callbacks=[FailAt(6)])
    last = next((tmp_path / "out" / "runs").glob("pretrain-*")) / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 4
    assert not list(last.parent.glob(".*tmp*"))  # the atomic writer left no temporary file
    with last.open("r+b") as file:  # as a full disk left it: the first part of the file
        file.truncate(last.stat().st_size // 2)
    with pytest.raises(BvrError) as info:
        pretrain(cfg, resume=True, progress=False)
    message = str(info.value)
    assert message.startswith(f"{last}: the checkpoint is damaged or incomplete") and "--restart" in message
    assert "\n" not in message
    assert pretrain(cfg, restart=True, progress=False).metrics["steps"] == 8


class HoldUntil(L.Callback):
    """Pause before the first optimiser step until ``release`` exists."""

    def __init__(self, release: Path) -> None:
        self.release = release

    def on_train_batch_start(self, trainer, *args) -> None:
        while not self.release.exists():
            time.sleep(0.05)


def _held_run(cfg, workdir: Path, release: Path) -> None:
    os.chdir(workdir)
    pretrain(cfg, progress=False, callbacks=[HoldUntil(release)])


def test_a_second_run_of_the_same_config_waits_for_the_first_and_reuses_it(data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = config(data_dir, tmp_path / "out", "training.max_steps=4", "training.warmup_steps=2")
    run_dir = run_dir_for(cfg, prepare(cfg, progress=False))
    release = tmp_path / "release"
    child = multiprocessing.get_context("spawn").Process(target=_held_run, args=(cfg, tmp_path, release))
    child.start()
    deadline = time.monotonic() + 300
    while holder(lock_path(run_dir)) != child.pid:  # the child is training into the run folder
        assert child.is_alive() and time.monotonic() < deadline
        time.sleep(0.1)
    waited_for = []

    def waiting(target: Path, pid: int | None) -> None:
        waited_for.append((target, pid))
        release.write_text("")  # this process now waits on the lock: let the child finish

    monkeypatch.setattr(cache, "_announce_wait", waiting)
    result = pretrain(cfg, progress=False)
    child.join(300)
    assert child.exitcode == 0 and waited_for == [(run_dir, child.pid)]
    assert result.reused and result.run_dir == run_dir and result.metrics["steps"] == 4
    assert list(find_runs(DEFAULT_EXPERIMENT, workdir=tmp_path)["status"]) == ["FINISHED"]  # trained once


def test_recipe_knobs_pre_norm_without_dropout(data_dir, tmp_path, monkeypatch):
    """model.norm=pre with training.dropout=false: trained without dropout, exported with the model section's rates
    (fine-tuning's) as bvr's pre-LayerNorm BERT; the run reports the unigram entropy of its validation tokens."""
    import json

    import numpy as np
    import pyarrow.compute as pc

    from bvr.pretraining.prepare import load_instances
    from bvr.tokenization import load_tokenizer, vocab_info

    monkeypatch.chdir(tmp_path)
    cfg = config(data_dir, tmp_path / "out", "training.max_steps=6", "model.norm=pre", "training.dropout=false")
    result = pretrain(cfg, progress=False)
    written = json.loads((result.model_dir / "config.json").read_text())
    assert (written["model_type"], written["hidden_dropout_prob"], written["attention_probs_dropout_prob"]) == (
        "bvr-bert-prelayernorm", 0.1, 0.1)
    assert load_pretrained(result.run_dir).model.config.norm == "pre"
    prepared = prepare(cfg, progress=False)
    ids = pc.list_flatten(load_instances(prepared)["validation"].data.table["input_ids"]).to_numpy()
    specials = vocab_info(*load_tokenizer(prepared.tokenizer)).special_ids
    _, counts = np.unique(ids[~np.isin(ids, specials)], return_counts=True)
    p = counts / counts.sum()
    assert result.metrics["val_unigram_entropy"] == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-12)

    default = config(data_dir, tmp_path / "out")
    same = config(data_dir, tmp_path / "out", "training.dropout=true")
    assert run_dir_for(default, prepared) == run_dir_for(same, prepared) != result.run_dir

