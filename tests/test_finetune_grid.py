"""A fine-tuning grid: the selection split held out of training, the choice made on it alone, every point's runs in
MLflow, and a grid of one value that is the call without a grid (its cache folders, its scores, its runs)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from mlflow import MlflowClient

from bvr.config import DataSettings, FinetuneConfig
from bvr.errors import BvrError
from bvr.pretrained import load_pretrained
from bvr.tasks.data import load_task_data
from bvr.tasks.kinds import SELECTION
from bvr.tasks.registry import get_task
from bvr.tasks.results import SeedResult, describe
from bvr.tasks.run import FinetuneSetup, _seed_dirs, finetune, load_finetune_config
from bvr.tasks.selection import PointResult, choose, select
from bvr.tokenization import vocab_info
from bvr.tracking import RunContext, tracking_uri
from tests.test_finetune import make_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")
EXPERIMENT = "test-grid"
TINY = ["finetune.batch_size=8", "finetune.max_length=32", "finetune.epochs=1"]

_GOOD = ["a warm , funny film", "a quiet triumph", "worth the price", "a lovely , moving story", "great fun"]
_BAD = ["the plot goes nowhere", "dull , dull , dull", "a waste of time", "a tired , lazy mess", "painfully slow"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """An SST-2 folder of 120 numbered training sentences and 20 dev sentences, every one distinct."""
    root = tmp_path_factory.mktemp("grid-data")
    folder = root / "glue" / "SST-2"
    folder.mkdir(parents=True)
    rng = random.Random(0)

    def rows(n: int, prefix: str) -> str:
        lines = ["sentence\tlabel"]
        for i in range(n):
            label = rng.randrange(2)
            lines.append(f"{prefix} {i} : {rng.choice(_GOOD if label else _BAD)} \t{label}")
        return "\n".join(lines) + "\n"

    (folder / "train.tsv").write_text(rows(120, "train"), encoding="utf-8")
    (folder / "dev.tsv").write_text(rows(20, "dev"), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("grid-bert"), "bert", sentence_head=False)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grid-work")
    cwd = os.getcwd()
    os.chdir(folder)
    yield folder
    os.chdir(cwd)


def _load(bert: Path, data_dir: Path, **settings):
    pretrained = load_pretrained(bert)
    pad = vocab_info(pretrained.tokenizer, pretrained.family).pad_id
    return load_task_data(get_task("sst2"), data_dir, pretrained.tokenizer, pretrained.family, pad,
                          DataSettings(max_length=32, **settings))


# --- the configuration --------------------------------------------------------------------------------------------


def test_a_list_is_a_grid_of_every_pair_and_one_value_is_no_grid():
    grid = FinetuneConfig(learning_rate=[1e-4, 1e-3], epochs=[2, 3]).grid()
    assert [(p.learning_rate, p.epochs) for p in grid] == [(1e-4, 2), (1e-4, 3), (1e-3, 2), (1e-3, 3)]
    assert all(p.config.selection_examples == 2000 for p in grid)
    (only,) = FinetuneConfig(learning_rate=[1e-3]).grid()
    assert only.config.selection_examples == 0 and not FinetuneConfig(learning_rate=[1e-3]).is_grid
    assert "selection_examples" not in only.config.hashed()


@pytest.mark.parametrize(("value", "message"), [
    ("[]", "an empty grid"), ("[1e-3, 1e-3]", "repeats a value"), ("[1e-3, -1]", "must be positive"),
    ("[1e-3, .inf]", "finite"), ("[1e-3, fast]", "expected float"),
])
def test_a_bad_grid_is_refused_naming_the_key(value, message):
    with pytest.raises(BvrError, match=message) as err:
        load_finetune_config(get_task("sst2"), overrides=[f"finetune.learning_rate={value}"])
    assert "finetune.learning_rate" in str(err.value)


def test_a_grid_without_a_selection_split_is_refused():
    with pytest.raises(BvrError, match="needs held-out examples"):
        FinetuneConfig(learning_rate=[1e-4, 1e-3], selection_examples=0).grid()


# --- the selection split ------------------------------------------------------------------------------------------


def test_the_selection_split_is_held_out_of_training_before_the_cap_and_is_not_dev(bert, data_dir):
    data = _load(bert, data_dir, selection_examples=15, max_train_examples=40)
    selection, train, dev = data.evals[SELECTION], data.train, data.evals["dev"]
    texts = {name: {e.text_a for e in split.examples} for name, split in
             (("selection", selection), ("train", train), ("dev", dev))}
    assert len(selection) == 15 and len(train) == 40 and len(dev) == 20
    assert not texts["selection"] & texts["train"] and not texts["selection"] & texts["dev"]
    assert all(text.startswith("train ") for text in texts["selection"])  # drawn from the training file
    # the same draw every time; the cap draws the training subset from what is left
    again = _load(bert, data_dir, selection_examples=15, max_train_examples=40)
    assert [e.text_a for e in again.evals[SELECTION].examples] == [e.text_a for e in selection.examples]
    assert "15 training examples held out of training" in str(data.split_note)


def test_a_training_split_too_small_gives_a_share_and_says_so(bert, data_dir):
    data = _load(bert, data_dir, selection_examples=1000, selection_share=0.25)
    assert len(data.evals[SELECTION]) == 30 and len(data.train) == 90
    assert "at most 25% of a training split too small to spare 1,000" in str(data.split_note)
    with pytest.raises(BvrError, match="too few to hold some out") as err:
        _load(bert, data_dir, selection_examples=1000, selection_share=0.001)
    assert err.value.where == "finetune.selection_examples"


def test_no_selection_split_without_a_grid(bert, data_dir):
    data = _load(bert, data_dir)
    assert SELECTION not in data.evals and len(data.train) == 120 and data.split_note is None


# --- the choice ---------------------------------------------------------------------------------------------------


class _Guarded(dict):
    """Scores whose reported split raises when read."""

    def __getitem__(self, key: str) -> float:
        if key.startswith("dev/"):
            raise AssertionError(f"selection read the reported split ({key})")
        return super().__getitem__(key)


def _seed(seed: int, selection: float, dev: float) -> SeedResult:
    scores = _Guarded({"selection/accuracy": selection, "dev/accuracy": dev})
    return SeedResult(seed, scores, dict(scores), 1, False, 0.0)


def test_selection_never_reads_the_reported_split():
    grid = FinetuneConfig(learning_rate=[1e-4, 1e-3, 1e-2]).grid()
    # dev favours the first point by far; the selection split the second
    results = [PointResult(grid[0], [_seed(0, 0.60, 0.99), _seed(1, 0.62, 0.98)]),
               PointResult(grid[1], [_seed(0, 0.80, 0.50), _seed(1, 0.70, 0.51)]),
               PointResult(grid[2], [_seed(0, 0.50, 0.70), _seed(1, 0.90, 0.70)])]
    chosen = select(results, "accuracy", None)
    assert chosen.chosen == 1 and chosen.metric == "selection/accuracy"
    assert [p["median"] for p in chosen.points] == pytest.approx([0.61, 0.75, 0.70])
    assert chosen.chosen_point["name"] == "lr 1e-03, 3 epochs"


def test_the_median_decides_and_the_earliest_point_wins_a_tie():
    assert choose([[0.1, 0.9, 0.2], [0.5, 0.5, 0.5]]) == 1  # a mean would choose the first
    assert choose([[0.7, 0.7], [0.6, 0.8]]) == 0


# --- end to end ---------------------------------------------------------------------------------------------------


def _runs(workdir: Path) -> dict[str, list]:
    client = MlflowClient(tracking_uri(workdir))
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs: dict[str, list] = {}
    for run in client.search_runs([experiment.experiment_id]) if experiment else []:
        runs.setdefault(run.info.run_name, []).append(run)
    return runs


def test_a_grid_fits_every_point_under_its_own_run_and_reports_the_chosen_point(bert, data_dir, workdir):
    setup = FinetuneSetup(data_dir, workdir / "out", overrides=[
        *TINY, "finetune.learning_rate=[1e-4, 3e-3]", "finetune.selection_examples=30"])
    result = finetune(bert, "sst2", seeds=2, setup=setup, context=RunContext(experiment=EXPERIMENT))
    selection = result.selection
    assert selection is not None and [p["name"] for p in selection["points"]] == ["lr 1e-04, 1 epoch",
                                                                                   "lr 3e-03, 1 epoch"]
    medians = [p["median"] for p in selection["points"]]
    assert selection["chosen"] == max(range(2), key=lambda i: (medians[i], -i))
    chosen = selection["points"][selection["chosen"]]
    # the reported seeds are the chosen point's, and each was scored on both splits
    assert [seed.scores["selection/accuracy"] for seed in result.seeds] == chosen["scores"]
    assert all("dev/accuracy" in seed.scores for seed in result.seeds)
    assert result.chosen_point == chosen["name"] and f"{chosen['name']:>22}" in describe(result)

    runs = _runs(workdir)
    (call,) = runs["tiny-bert/finetune/sst2"]
    assert call.data.tags["bvr.grid_point"] == chosen["name"] and call.info.run_id == result.parent_run_id
    for i, point in enumerate(selection["points"]):
        (run,) = runs[f"tiny-bert/finetune/sst2/{point['name']}"]
        assert run.data.tags["mlflow.parentRunId"] == call.info.run_id
        assert run.data.tags["bvr.chosen"] == ("true" if i == selection["chosen"] else "false")
        assert run.data.metrics["selection/accuracy_median"] == pytest.approx(point["median"])
    seed_runs = runs["tiny-bert/finetune/sst2/seed0"]
    assert len(seed_runs) == 2  # one per point, each under its point's run
    assert {r.data.tags["bvr.grid_point"] for r in seed_runs} == {p["name"] for p in selection["points"]}
    assert {r.info.run_id for r in seed_runs} >= {result.seeds[0].run_id}

    again = finetune(bert, "sst2", seeds=2, setup=setup, context=RunContext(experiment=EXPERIMENT))
    assert all(seed.reused for seed in again.seeds) and again.selection == selection


def test_a_grid_of_one_value_is_the_call_without_a_grid(bert, data_dir, workdir):
    plain = FinetuneSetup(data_dir, workdir / "one", overrides=[*TINY, "finetune.learning_rate=1e-3"])
    listed = FinetuneSetup(data_dir, workdir / "one", overrides=[*TINY, "finetune.learning_rate=[1e-3]",
                                                                 "finetune.epochs=[1]"])
    first = finetune(bert, "sst2", seeds=1, setup=plain, context=RunContext(experiment=f"{EXPERIMENT}-one"))
    second = finetune(bert, "sst2", seeds=1, setup=listed, context=RunContext(experiment=f"{EXPERIMENT}-one"))
    assert second.seeds[0].reused and second.seeds[0].scores == first.seeds[0].scores  # the same cache folder
    assert first.selection is None and second.selection is None and "selection/accuracy" not in first.seeds[0].scores
    assert first.config == second.config and "selection_examples" not in first.config


def test_a_one_value_grid_keeps_the_cache_folders_of_the_code_before_grids():
    """The folder names :func:`bvr.tasks.run._seed_dirs` gave at c174927 (before grids), for the same inputs."""
    spec = get_task("sst2")
    for overrides in (["finetune.learning_rate=1e-3", "finetune.epochs=2"],
                      ["finetune.learning_rate=[1e-3]", "finetune.epochs=[2]"]):
        (point,) = load_finetune_config(spec, preset="tiny", overrides=overrides).grid()
        dirs = _seed_dirs(Path("/r"), spec, point.config, "abc", None, False, [0, 1])
        assert {seed: folder.name for seed, folder in dirs.items()} == {0: "sst2-seed0-4b465bb571bc",
                                                                        1: "sst2-seed1-bdf4c2319f34"}


def test_the_opening_line_names_the_grid_and_the_split_it_is_chosen_on(tmp_path):
    from bvr.ablation.plan import make_plan
    from bvr.runner.run import _finetune

    plan = make_plan("masking", preset="tiny", output_dir=tmp_path)
    assert _finetune(plan) == ("sst2 x 2 seeds at each of 4 points (lr 3e-04 to 1e-02), chosen per model on 2,000 "
                               "held-out training examples")
    plain = make_plan("masking", preset="tiny", output_dir=tmp_path, overrides=["finetune.learning_rate=1e-3"])
    assert _finetune(plain) == "sst2 x 2 seeds"
