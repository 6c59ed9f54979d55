"""Fine-tuning on the fixture tasks with tiny checkpoints: data, heads and losses per task kind, exact metrics,
collapse flags, seeds as nested MLflow runs, the seed cache, the from-scratch control and the hyperparameter file."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from bvr.cache import fingerprint
from bvr.config import DataSettings
from bvr.errors import BvrError
from bvr.model import EncoderConfig, PretrainingModel
from bvr.pretrained import load_pretrained
from bvr.pretraining.export import export_model
from bvr.tasks.batching import LengthGroupedSampler
from bvr.tasks.data import load_task_data, loader
from bvr.tasks.evaluators import COLLAPSE_STD_RATIO
from bvr.tasks.glue_metrics import pearson, spearman
from bvr.tasks.kinds import KINDS
from bvr.tasks.module import build_model
from bvr.tasks.readers import READERS
from bvr.tasks.readers.squad_json import read_squad, references
from bvr.tasks.registry import TASK_FORMATS, TASK_KINDS, TASKS, get_task
from bvr.tasks.results import describe, spread
from bvr.tasks.run import FinetuneSetup, finetune, load_finetune_config
from bvr.tasks.source import EncoderSource
from bvr.tasks.splits import TaskData
from bvr.tasks.squad.metric import evaluate_v2, squad_scores
from bvr.tokenization import save_tokenizer, train_tokenizer, vocab_info
from bvr.tracking import RunContext, tracking_uri

FIXTURES = Path(__file__).parent / "fixtures"
EXPERIMENT = "test-finetune"


pytestmark = pytest.mark.usefixtures("one_thread")


# --- fixtures: a data folder and tiny checkpoints ---------------------------------------------------------------


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """The GLUE fixtures, the CoNLL sample as all three CoNLL splits, and only SQuAD's dev file (as offline)."""
    root = tmp_path_factory.mktemp("data")
    shutil.copytree(FIXTURES / "glue", root / "glue")
    (root / "conll2003").mkdir()
    for name in ("train.txt", "valid.txt", "test.txt"):
        shutil.copy(FIXTURES / "conll" / "sample.txt", root / "conll2003" / name)
    (root / "squad" / "v1.1").mkdir(parents=True)
    shutil.copy(FIXTURES / "squad" / "v1.1.json", root / "squad" / "v1.1" / "dev-v1.1.json")
    (root / "squad" / "v2.0").mkdir(parents=True)
    shutil.copy(FIXTURES / "squad" / "train-v2.0.json", root / "squad" / "v2.0" / "train-v2.0.json")
    shutil.copy(FIXTURES / "squad" / "v2.0.json", root / "squad" / "v2.0" / "dev-v2.0.json")
    return root


def _fixture_texts() -> list[str]:
    texts = [line for path in sorted((FIXTURES / "glue").rglob("*.tsv")) for line in path.read_text().splitlines()]
    texts += [line.split()[0] for line in (FIXTURES / "conll" / "sample.txt").read_text().splitlines() if line]
    squad = json.loads((FIXTURES / "squad" / "v1.1.json").read_text())
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            texts += [paragraph["context"], *(qa["question"] for qa in paragraph["qas"])]
    return texts


def make_checkpoint(folder: Path, family: str, *, sentence_head: bool) -> Path:
    """A randomly initialised 2-layer, 32-wide model and a tokenizer trained on the fixtures, as a HF folder."""
    tokenizer = train_tokenizer(family, _fixture_texts(), vocab_size={"bert": 300, "roberta": 400}[family],
                                min_frequency=1, show_progress=False)
    tokenizer_dir = save_tokenizer(tokenizer, family, folder / "tokenizer")
    vocab = vocab_info(tokenizer, family)
    torch.manual_seed(0)
    config = EncoderConfig(family=family, vocab_size=vocab.vocab_size, pad_token_id=vocab.pad_id, num_layers=2,
                           hidden_size=32, num_heads=4, intermediate_size=64)
    model = PretrainingModel(config, sentence_head=sentence_head)
    return export_model(model, tokenizer_dir, {"name": f"tiny-{family}"}, folder / "model")


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("bert"), "bert", sentence_head=True)


@pytest.fixture(scope="module")
def roberta(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("roberta"), "roberta", sentence_head=False)


def task_data(task: str, checkpoint: Path, data_dir: Path, **settings) -> TaskData:
    pretrained = load_pretrained(checkpoint)
    pad = vocab_info(pretrained.tokenizer, pretrained.family).pad_id
    settings = {"max_length": 96, "stride": 16} | settings
    return load_task_data(get_task(task), data_dir, pretrained.tokenizer, pretrained.family, pad,
                          DataSettings(**settings))


# --- data -----------------------------------------------------------------------------------------------------


def test_every_task_kind_has_a_kind_and_every_format_a_reader():
    assert set(KINDS) == set(TASK_KINDS) and set(READERS) == set(TASK_FORMATS)
    assert {spec.kind for spec in TASKS.values()} == set(TASK_KINDS)
    assert {spec.format for spec in TASKS.values()} == set(TASK_FORMATS)


def test_pairs_use_the_template_and_the_cap_is_a_seeded_subset(bert, data_dir):
    data = task_data("rte", bert, data_dir, max_train_examples=2)
    assert [len(split) for split in (data.train, *data.evals.values())] == [2, 2]
    assert _same_train(data, task_data("rte", bert, data_dir, max_train_examples=2))
    assert any("a random 2 of 3 examples" in line for line in data.reports)
    assert any("read 3 of 3 rows" in line for line in data.reports)
    types = data.train.features["token_type_ids"][0]
    assert types[0] == 0 and types[-1] == 1  # [CLS] a [SEP] b [SEP]: the second segment has type 1
    batch = next(iter(loader(data, data.train, 2, seed=0)))
    assert batch["input_ids"].shape == batch["attention_mask"].shape == batch["token_type_ids"].shape
    assert batch["labels"].dtype == torch.long and batch["index"].tolist() in ([0, 1], [1, 0])


def _same_train(a: TaskData, b: TaskData) -> bool:
    return a.train.examples == b.train.examples and a.train.features == b.train.features


def test_pair_truncation_is_reported(bert, data_dir):
    data = task_data("rte", bert, data_dir, max_length=10)
    assert max(map(len, data.train.features["input_ids"])) == 10
    assert any("examples cut to 10 tokens" in line for line in data.reports)


def test_squad_without_a_training_file_splits_dev_by_article(roberta, data_dir):
    data = task_data("squad", roberta, data_dir)
    train_titles = {example.title for example in data.train.examples}
    dev_titles = {example.title for example in data.evals["dev"].examples}
    assert train_titles and dev_titles and not train_titles & dev_titles
    assert data.split_note.startswith("SQuAD split by article (seed 0, eval fraction 0.2)")


# --- every family: the loss falls when a handful of examples is overfitted --------------------------------------


def _mean_loss(model, family, batches) -> float:
    model.eval()
    with torch.no_grad():
        return sum(float(family.loss(model(batch), batch)) for batch in batches) / len(batches)


def test_length_grouped_batches_cover_every_example_once_and_pad_little():
    rng = torch.Generator().manual_seed(0)
    lengths = (torch.rand(1000, generator=rng) ** 3 * 60 + 4).long().tolist()  # skewed, as SST-2's phrases
    size = 32

    def padding(order: list[int]) -> float:
        batches = [order[i:i + size] for i in range(0, len(order), size)]
        padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
        return 1 - sum(lengths) / padded

    sampler = LengthGroupedSampler(lengths, size, seed=3, group=10)
    order = list(sampler)
    assert sorted(order) == list(range(1000)) and len(sampler) == 1000
    batches = [order[i:i + size] for i in range(0, 1000, size)]
    assert all([lengths[i] for i in b] == sorted((lengths[i] for i in b), reverse=True) for b in batches)
    assert len(batches[-1]) == 1000 % size  # the short batch is last, so the DataLoader cuts these very batches
    shuffled = torch.randperm(1000, generator=rng).tolist()
    assert padding(order) < padding(shuffled) / 3
    assert order == list(LengthGroupedSampler(lengths, size, seed=3, group=10))  # the same seed, the same order
    sampler.set_epoch(1)
    assert list(sampler) != order and sorted(sampler) == list(range(1000))  # a new epoch, a new order
    assert list(LengthGroupedSampler(lengths, size, seed=4, group=10)) != order


def test_training_batches_group_lengths_and_evaluation_runs_longest_first(bert, data_dir):
    data = task_data("sst2", bert, data_dir)
    train = list(loader(data, data.train, 4, seed=0))
    assert sorted(i for b in train for i in b["index"].tolist()) == list(range(len(data.train.examples)))
    evaluation = next(iter(data.evals.values()))
    widths = [b["input_ids"].shape[1] for b in loader(data, evaluation, 4)]
    assert widths == sorted(widths, reverse=True)



@pytest.mark.parametrize(("task", "checkpoint"),
                         [("sst2", "bert"), ("stsb", "bert"), ("conll2003", "bert"), ("squad", "roberta")])
def test_loss_falls_when_overfitting(task, checkpoint, data_dir, request):
    folder = request.getfixturevalue(checkpoint)
    data = task_data(task, folder, data_dir)
    torch.manual_seed(0)
    model = build_model(EncoderSource(load_pretrained(folder), from_scratch=False).build(0), data, 0)
    family = KINDS[data.spec.kind]
    batches = list(loader(data, data.train, 8, seed=0))
    before = _mean_loss(model, family, batches)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(25):
        for batch in batches:
            optimizer.zero_grad()
            family.loss(model(batch), batch).backward()
            optimizer.step()
    assert _mean_loss(model, family, batches) < 0.5 * before


def test_classification_head_starts_from_the_checkpoints_pooler(bert, data_dir):
    pretrained = load_pretrained(bert)
    pooler = pretrained.model.encoder.pooler.dense.weight.detach().clone()
    model = build_model(EncoderSource(pretrained, from_scratch=False).build(0), task_data("sst2", bert, data_dir), 0)
    assert torch.equal(model.head.pooler.dense.weight, pooler) and model.encoder.pooler is None


def _start(folder: Path, from_scratch: bool, task: str, data_dir: Path, seed: int):
    """What ``_train_seed`` builds for ``seed``: the model, the first two training batches, then a draw of the global
    generator (what dropout draws from next)."""
    import lightning as L

    from bvr.tasks.module import OptimSettings, make_module

    data = task_data(task, folder, data_dir)
    L.seed_everything(seed, workers=True, verbose=False)
    module = make_module(EncoderSource(load_pretrained(folder), from_scratch).build(seed), data,
                         OptimSettings(learning_rate=1e-4), seed)
    batches = list(loader(data, data.train, 4, seed=seed))[:2]
    return module.model, batches, torch.rand(8)


@pytest.mark.parametrize("task", ["sst2", "conll2003"])
def test_head_init_and_data_order_are_the_same_for_every_encoder_at_a_seed(bert, roberta, data_dir, task):
    """A pretrained-like encoder with a pooler (NSP) and a random one from scratch, fine-tuned with seed 3: the head's
    output layer starts bit-identical, the first batches are the same, and the global generator dropout draws from
    is where seed_everything left it; another seed draws another head. The fresh pooler (from scratch: no
    pretrained one) is the one a checkpoint without a pooler gets."""
    arm, arm_batches, arm_next = _start(bert, False, task, data_dir, seed=3)
    control, control_batches, control_next = _start(bert, True, task, data_dir, seed=3)
    assert not torch.equal(arm.encoder.embeddings.word_embeddings.weight,
                           control.encoder.embeddings.word_embeddings.weight)
    assert torch.equal(arm.head.out.weight, control.head.out.weight)
    assert torch.equal(arm.head.out.bias, control.head.out.bias)
    for a, b in zip(arm_batches, control_batches, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(arm_next, control_next)
    other, _, _ = _start(bert, True, task, data_dir, seed=4)
    assert not torch.equal(other.head.out.weight, control.head.out.weight)
    if task == "sst2":
        assert torch.equal(arm.head.pooler.dense.weight, load_pretrained(bert).model.encoder.pooler.dense.weight)
        assert not torch.equal(arm.head.pooler.dense.weight, control.head.pooler.dense.weight)
        # roberta's tiny checkpoint has no pooler (no NSP): it gets the fresh pooler the control gets (same width)
        no_pooler, _, _ = _start(roberta, False, task, data_dir, seed=3)
        assert torch.equal(no_pooler.head.pooler.dense.weight, control.head.pooler.dense.weight)
        assert torch.equal(no_pooler.head.out.weight, control.head.out.weight)


# --- metrics on known predictions, and collapse ---------------------------------------------------------------


def _logits_for(classes: list[int], n: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(classes), n).float()


def test_classification_metrics_are_exact_over_batches(bert, data_dir):
    evaluator = KINDS["classification"].evaluator(task_data("mrpc", bert, data_dir), "dev")
    for preds, labels in (([1, 1], [1, 0]), ([0, 0], [1, 0])):
        evaluator.update(_logits_for(preds, 2), {"labels": torch.tensor(labels)})
    assert evaluator.compute() == {"accuracy": 0.5, "f1": 0.5, "accuracy_f1": 0.5}
    assert not evaluator.collapsed()


def test_regression_metrics_are_exact(bert, data_dir):
    evaluator = KINDS["regression"].evaluator(task_data("stsb", bert, data_dir), "dev")
    evaluator.update(torch.tensor([1.0, 2.0, 3.0]), {"labels": torch.tensor([2.0, 4.0, 7.0])})
    values = evaluator.compute()
    # float32 torchmetrics against the float64 definitions, to float32's precision
    assert values["pearson"] == pytest.approx(pearson([1, 2, 3], [2, 4, 7]), abs=1e-5)
    assert values["spearman"] == pytest.approx(spearman([1, 2, 3], [2, 4, 7]), abs=1e-5)
    assert values["pearson_spearman"] == pytest.approx((values["pearson"] + values["spearman"]) / 2, abs=1e-12)


def test_entity_f1_is_exact_on_first_sub_tokens(bert, data_dir):
    evaluator = KINDS["tagging"].evaluator(task_data("conll2003", bert, data_dir), "dev")
    ids = {tag: i for i, tag in enumerate(get_task("conll2003").label_names)}
    gold = [-100, ids["B-PER"], -100, ids["I-PER"], ids["O"], ids["B-LOC"], -100]
    predicted = [ids["O"], ids["B-PER"], ids["O"], ids["I-PER"], ids["O"], ids["B-ORG"], ids["O"]]
    evaluator.update(_logits_for(predicted, len(ids))[None], {"labels": torch.tensor([gold])})
    # gold PER and LOC; predicted PER and ORG: one of two right either way
    assert evaluator.compute() == {"f1": 0.5, "precision": 0.5, "recall": 0.5}


def test_perfect_span_scores_decode_to_the_answers(roberta, data_dir):
    data = task_data("squad", roberta, data_dir)
    split = data.evals["dev"]
    evaluator = KINDS["span"].evaluator(data, "dev")
    width = max(map(len, split.features["input_ids"]))
    logits = torch.full((len(split), width, 2), -10.0)
    for row, (start, end) in enumerate(zip(split.features["start_positions"], split.features["end_positions"],
                                           strict=True)):
        logits[row, start, 0] = logits[row, end, 1] = 10.0
    evaluator.update(logits, {"index": torch.arange(len(split))})
    assert evaluator.compute() == {"exact_match": 100.0, "f1": 100.0}


def test_constant_predictors_are_flagged_as_collapsed(bert, data_dir):
    classifier = KINDS["classification"].evaluator(task_data("sst2", bert, data_dir), "dev")
    classifier.update(_logits_for([1, 1, 1], 2), {"labels": torch.tensor([0, 1, 0])})
    assert classifier.collapsed()
    regressor = KINDS["regression"].evaluator(task_data("stsb", bert, data_dir), "dev")
    regressor.update(torch.full((3,), 2.5) + torch.tensor([0.0, 1e-4, -1e-4]), {"labels": torch.tensor([0.0, 2, 5])})
    assert regressor.collapsed() and regressor.spread()[0] < COLLAPSE_STD_RATIO
    regressor.reset()
    regressor.update(torch.tensor([0.5, 2.0, 4.0]), {"labels": torch.tensor([0.0, 2, 5])})
    assert not regressor.collapsed()


def test_an_all_o_tagger_and_an_empty_answerer_are_flagged_as_collapsed(bert, roberta, data_dir):
    tagger = KINDS["tagging"].evaluator(task_data("conll2003", bert, data_dir), "dev")
    ids = {tag: i for i, tag in enumerate(get_task("conll2003").label_names)}
    gold = [ids["B-PER"], ids["I-PER"], ids["O"], ids["B-LOC"]]
    # Every word O: no entity predicted, the all-O baseline.
    all_o = _logits_for([ids["O"]] * 4, len(ids))[None]
    tagger.update(all_o, {"labels": torch.tensor([gold])})
    assert tagger.compute()["f1"] == 0.0 and tagger.collapsed()
    tagger.reset()
    tagger.update(_logits_for([ids["B-PER"], ids["I-PER"], ids["O"], ids["O"]], len(ids))[None],
                  {"labels": torch.tensor([gold])})
    assert tagger.compute()["f1"] == pytest.approx(2 / 3) and not tagger.collapsed()
    data = task_data("squad", roberta, data_dir)
    split = data.evals["dev"]
    spans = KINDS["span"].evaluator(data, "dev")
    width = max(map(len, split.features["input_ids"]))
    logits = torch.full((len(split), width, 2), -10.0)
    logits[:, 0, :] = 10.0  # every window points at its first token, the start of the question: no answer found
    spans.update(logits, {"index": torch.arange(len(split))})
    spans.compute()
    assert spans.collapsed()


def test_spread_of_seeds():
    assert spread([4.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 4.0, "q1": 1.5, "q3": 3.0, "iqr": 1.5}


# --- end to end: seeds as nested MLflow runs, the cache, the control arm ----------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The default MLflow store lives in the working directory."""
    folder = tmp_path_factory.mktemp("work")
    cwd = os.getcwd()
    os.chdir(folder)
    yield folder
    os.chdir(cwd)


def _runs(workdir: Path) -> list:
    client = MlflowClient(tracking_uri(workdir))
    experiment = client.get_experiment_by_name(EXPERIMENT)
    return client.search_runs([experiment.experiment_id]) if experiment else []


TINY = ["finetune.epochs=2", "finetune.batch_size=2", "finetune.learning_rate=1e-3", "finetune.max_length=64"]


@pytest.fixture(scope="module")
def rte_run(bert, data_dir, workdir):
    return finetune(bert, "rte", seeds=2, setup=FinetuneSetup(data_dir, workdir / "out", overrides=TINY),
                    context=RunContext(experiment=EXPERIMENT))


def test_seeds_are_nested_runs_with_tags_and_metrics(rte_run, workdir, bert, data_dir):
    result = rte_run
    assert [seed.seed for seed in result.seeds] == [0, 1] and result.main_key == "dev/accuracy"
    assert all([entry["epoch"] for entry in seed.history] == [1, 2] for seed in result.seeds)
    assert all(seed.scores == seed.history[-1]["scores"] for seed in result.seeds)
    runs = {run.info.run_name: run for run in _runs(workdir)}
    parent = runs["tiny-bert/finetune/rte"]
    assert parent.info.run_id == result.parent_run_id and "dev/accuracy_median" in parent.data.metrics
    # One metric name for the headline in points, on the task's run (median over seeds) and each seed's.
    assert parent.data.metrics["score"] == pytest.approx(100 * parent.data.metrics["dev/accuracy_median"])
    for seed in result.seeds:
        run = runs[f"tiny-bert/finetune/rte/seed{seed.seed}"]
        tags = run.data.tags
        assert tags["mlflow.parentRunId"] == parent.info.run_id and run.info.run_id == seed.run_id
        assert (tags["bvr.task"], tags["bvr.seed"], tags["bvr.arm"], tags["bvr.stage"]) == (
            "rte", str(seed.seed), "tiny-bert", "finetune")
        assert tags["bvr.checkpoint"] == str(bert) and tags["bvr.collapsed"] == json.dumps(seed.collapsed)
        metrics = run.data.metrics
        assert metrics["dev/accuracy"] == pytest.approx(seed.scores["dev/accuracy"])
        assert metrics["score"] == pytest.approx(100 * seed.scores["dev/accuracy"])
        # The task's files are the run's datasets, with their content fingerprint (MLflow's Dataset column).
        inputs = {d.dataset.name: d for d in run.inputs.dataset_inputs}
        assert set(inputs) == {"rte train", "rte dev"}
        assert inputs["rte train"].dataset.digest == fingerprint(data_dir / "glue" / "RTE" / "train.tsv")[:36]
        assert [t.value for t in inputs["rte dev"].tags] == ["eval"]
        assert metrics["baseline/dev/accuracy"] == result.info.baseline["dev/accuracy"] == 0.5
        assert metrics["best/dev/accuracy"] >= metrics["dev/accuracy"] and metrics["best/epoch"] in (1.0, 2.0)
        history = MlflowClient(tracking_uri(workdir)).get_metric_history(run.info.run_id, "dev/accuracy")
        assert len(history) == 2
    text = describe(result)
    assert "median" in text and "trivial baseline: dev/accuracy 50.0" in text and "read 3 of 3 rows" in text


def test_a_second_call_reuses_finished_seeds(rte_run, bert, data_dir, workdir):
    before = len(_runs(workdir))
    again = finetune(bert, "rte", seeds=3, setup=FinetuneSetup(data_dir, workdir / "out", overrides=TINY),
                     context=RunContext(experiment=EXPERIMENT))
    assert [seed.reused for seed in again.seeds] == [True, True, False]
    assert [s.scores for s in again.seeds[:2]] == [s.scores for s in rte_run.seeds]
    assert len(_runs(workdir)) == before + 2  # a parent and the one new seed
    cached = finetune(bert, "rte", seeds=[1, 2], setup=FinetuneSetup(data_dir, workdir / "out", overrides=TINY),
                      context=RunContext(experiment=EXPERIMENT))
    assert all(seed.reused for seed in cached.seeds) and cached.parent_run_id is None
    assert len(_runs(workdir)) == before + 2 and "2 seed(s) reused" in describe(cached)
    # a seed is a function of its inputs: trained again elsewhere (another folder and experiment: in this one, its
    # run would be found and its result read back), it gives the same scores
    fresh = finetune(bert, "rte", seeds=[0], setup=FinetuneSetup(data_dir, workdir / "elsewhere", overrides=TINY),
                     context=RunContext(experiment=f"{EXPERIMENT}-elsewhere"))
    assert not fresh.seeds[0].reused and fresh.seeds[0].history == rte_run.seeds[0].history


def test_a_data_file_edited_in_place_is_trained_on_again(bert, data_dir, workdir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(data_dir / "glue" / "RTE", data / "glue" / "RTE")

    def run():
        return finetune(bert, "rte", seeds=1, setup=FinetuneSetup(data, tmp_path / "out", overrides=TINY),
                        context=RunContext(experiment=EXPERIMENT)).seeds[0]

    first = run()
    assert run().reused  # unchanged files: the cached result
    dev = data / "glue" / "RTE" / "dev.tsv"
    dev.write_text(dev.read_text().replace("\tnot_entailment", "\tentailment"))  # labels fixed, same path
    again = run()
    assert not again.reused and again.run_id != first.run_id


def test_from_scratch_control_arm_runs_and_is_tagged(bert, data_dir, workdir):
    result = finetune(bert, "stsb", seeds=1, setup=FinetuneSetup(data_dir, workdir / "out", overrides=TINY),
                      from_scratch=True, context=RunContext(experiment=EXPERIMENT))
    assert result.arm == "tiny-bert-scratch" and result.main_key == "dev/pearson_spearman"
    run = MlflowClient(tracking_uri(workdir)).get_run(result.seeds[0].run_id)
    assert run.data.tags["bvr.from_scratch"] == "true" and run.info.run_name == "tiny-bert-scratch/finetune/stsb/seed0"
    assert "no-pretraining control" in describe(result)


def test_span_and_tagging_run_end_to_end_and_keep_the_split(roberta, data_dir, workdir):
    overrides = [*TINY, "finetune.max_length=96", "finetune.stride=16"]
    squad = finetune(roberta, "squad", seeds=1, setup=FinetuneSetup(data_dir, workdir / "out", overrides=overrides),
                     context=RunContext(experiment=EXPERIMENT))
    run = MlflowClient(tracking_uri(workdir)).get_run(squad.seeds[0].run_id)
    assert run.data.tags["bvr.data_split"] == squad.info.split_note and "split: SQuAD split" in describe(squad)
    assert set(squad.seeds[0].scores) == {"dev/exact_match", "dev/f1"}
    assert run.data.metrics["score"] == pytest.approx(squad.seeds[0].scores["dev/f1"])  # SQuAD logs points
    # v1.1 keeps its predictions (no na_probs), and they re-score to the logged numbers.
    predictions = json.loads((_seed_folder(workdir, "squad") / "predictions.json").read_text(encoding="utf-8"))
    refs = references([e for e in read_squad(data_dir / "squad" / "v1.1" / "dev-v1.1.json")[0] if e.id in predictions])
    assert len(refs) == len(predictions) and not (_seed_folder(workdir, "squad") / "na_probs.json").exists()
    assert squad_scores(predictions, refs, "1.1")["f1"] == squad.seeds[0].scores["dev/f1"]
    # max_steps ends the run inside its first epoch: the final evaluation still happens.
    conll = finetune(roberta, "conll2003", seeds=1,
                     setup=FinetuneSetup(data_dir, workdir / "out", overrides=[*TINY, "finetune.max_steps=1"]),
                     context=RunContext(experiment=EXPERIMENT))
    assert conll.seeds[0].history[-1]["step"] == 1
    assert set(conll.seeds[0].scores) == {f"{split}/{m}" for split in ("dev", "test") for m in ("f1", "precision",
                                                                                                 "recall")}


def _seed_folder(workdir: Path, task: str) -> Path:
    (folder,) = (workdir / "out" / "finetune").glob(f"{task}-seed0-*")
    return folder


def test_squad_v2_saves_files_that_rescore_to_the_logged_numbers(roberta, data_dir, workdir):
    overrides = [*TINY, "finetune.max_length=96", "finetune.stride=16", "finetune.null_threshold_heldout=0.5"]
    result = finetune(roberta, "squad_v2", seeds=1, setup=FinetuneSetup(data_dir, workdir / "out", overrides=overrides),
                      context=RunContext(experiment=EXPERIMENT))
    seed = result.seeds[0]
    folder = _seed_folder(workdir, "squad_v2")
    predictions = json.loads((folder / "predictions.json").read_text(encoding="utf-8"))
    na_probs = json.loads((folder / "na_probs.json").read_text(encoding="utf-8"))
    refs = references(read_squad(FIXTURES / "squad" / "v2.0.json")[0])
    assert set(predictions) == set(na_probs) == set(refs) and all(0.0 <= p <= 1.0 for p in na_probs.values())
    rescored = evaluate_v2(predictions, na_probs, refs)
    logged = {key.removeprefix("dev/"): value for key, value in seed.scores.items() if key.startswith("dev/")}
    for key in ("HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1", "NoAns_total",
                "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh", "total"):
        assert logged[key] == rescored[key], key
    assert (logged["exact_match"], logged["f1"]) == (rescored["exact"], rescored["f1"])
    client = MlflowClient(tracking_uri(workdir))
    run = client.get_run(seed.run_id)
    assert {"predictions.json", "na_probs.json"} <= {item.path for item in client.list_artifacts(seed.run_id)}
    assert run.data.metrics["dev/best_f1"] == rescored["best_f1"] and run.data.metrics["dev/HasAns_total"] == 2
    # The threshold was chosen on the held-out training articles, which were scored but not trained on.
    heldout = [line for line in result.info.split_note.split("; ") if line.startswith("null threshold chosen on")]
    assert heldout and "heldout/best_f1" in seed.scores
    assert float(run.data.params["squad.null_threshold"]) == logged["null_threshold"]
    assert run.data.params["squad.null_threshold_source"].startswith("best F1 on the ")
    assert run.data.metrics["squad/all_empty"] == float(logged["empty_share"] >= 0.95)


# --- the fine-tuning section of the config --------------------------------------------------------------------


def test_shipped_presets_resolve_for_every_task():
    for name, spec in TASKS.items():
        cfg = load_finetune_config(spec)
        tiny = load_finetune_config(spec, preset="tiny", overrides=["finetune.epochs=1"])
        assert cfg.max_train_examples is None and tiny.max_train_examples is not None and tiny.epochs == 1
        assert cfg.max_length == (384 if spec.kind == "span" else 128), name


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("finetune:\n  epochs: 2\n  per_task:\n    rte:\n      learnin_rate: 1e-5\n",
         r"cfg.yaml:5: finetune.per_task.rte.learnin_rate: unknown key. did you mean "
         r"'finetune.per_task.rte.learning_rate'"),
        ("finetune:\n  per_task:\n    rtee:\n      epochs: 1\n",
         r"finetune.per_task: unknown task 'rtee'. did you mean 'rte'"),
        ("finetune:\n  epoch: 1\n", r"cfg.yaml:2: finetune.epoch: unknown key. did you mean 'finetune.epochs'"),
        ("finetune:\n  epochs: many\n", r"cfg.yaml:2: finetune.epochs: expected int"),
        ("finetune:\n  per_task:\n    squad:\n      stride: -1\n",
         r"cfg.yaml:4: finetune.per_task.squad.stride: must be non-negative"),
        # experiments/finetune.yaml's layout is gone: its keys say where they moved.
        ("defaults:\n  epochs: 1\n", r"cfg.yaml:1: defaults: 'defaults:' is the old experiments/finetune.yaml form: "
                                     r"put its keys under finetune:"),
        ("tasks:\n  rte:\n    epochs: 1\n", r"cfg.yaml:1: tasks: .* put a task's keys under finetune.per_task.TASK"),
    ],
)
def test_bad_keys_in_the_file_name_file_line_and_key(tmp_path, text, message):
    with pytest.raises(BvrError, match=message):
        load_finetune_config(get_task("rte"), config_file=_write(tmp_path, text))


def test_bad_preset_and_override_are_refused():
    with pytest.raises(BvrError, match="unknown preset 'huge'.*known presets: base, large, small, tiny"):
        load_finetune_config(get_task("rte"), preset="huge")
    with pytest.raises(BvrError, match=r"--set finetune.warmup_fraction=2: finetune.warmup_fraction: must be in "):
        load_finetune_config(get_task("rte"), overrides=["finetune.warmup_fraction=2"])
    with pytest.raises(BvrError, match="learning_rate is a fine-tuning setting: use finetune.learning_rate"):
        load_finetune_config(get_task("rte"), overrides=["learning_rate=1e-5"])


def test_layers_apply_in_order_and_per_task_within_a_layer(tmp_path):
    squad, rte = get_task("squad"), get_task("rte")
    # The task's own default (384) gives way to the preset's finetune.max_length, then to its per_task value.
    assert load_finetune_config(squad, preset="tiny").max_length == 256
    assert load_finetune_config(rte, preset="tiny").max_length == 128
    # A later layer's finetune.KEY wins over an earlier layer's per_task value ...
    file = _write(tmp_path, "finetune:\n  max_length: 200\n")
    assert load_finetune_config(squad, preset="tiny", config_file=file).max_length == 200
    # ... and within one layer per_task wins over finetune.KEY.
    file = _write(tmp_path, "finetune:\n  max_length: 200\n  per_task:\n    squad: {max_length: 300}\n")
    assert load_finetune_config(squad, preset="tiny", config_file=file).max_length == 300
    assert load_finetune_config(rte, preset="tiny", config_file=file).max_length == 200
    assert load_finetune_config(squad, overrides=["finetune.per_task.squad.stride=32"]).stride == 32


def test_trivial_baselines_of_tagging_and_spans(bert, roberta, data_dir):
    """All-'O' tagging finds no entity (F1 0); answering nothing scores 0 on SQuAD v1.1."""
    conll = task_data("conll2003", bert, data_dir)
    assert KINDS["tagging"].baseline(conll) == {f"{split}/{m}": 0.0 for split in conll.evals
                                                   for m in ("f1", "precision", "recall")}
    squad = task_data("squad", roberta, data_dir)
    baseline = KINDS["span"].baseline(squad)
    assert baseline["dev/exact_match"] == 0.0 and baseline["dev/f1"] == 0.0
    assert "answers nothing" in KINDS["span"].baseline_note(squad)
