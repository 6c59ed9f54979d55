"""SQuAD v2.0 under bad input and degenerate models: a run answering "" (nearly) everywhere is flagged collapsed
with one line on stderr and ``squad/all_empty``; a bad null-threshold setting or a held-out slice that cannot be
drawn is refused in one line naming the key."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from bvr import cli
from bvr.config import DataSettings
from bvr.errors import BvrError
from bvr.tasks.data import load_task_data
from bvr.tasks.evaluators import EMPTY_COLLAPSE_SHARE, SpanEvaluator
from bvr.tasks.readers.squad_json import SquadExample
from bvr.tasks.registry import get_task
from bvr.tasks.splits import SplitData
from bvr.tracking import RunContext

FIXTURES = Path(__file__).parents[1] / "fixtures" / "squad"
CONTEXT = "alpha bravo charlie"
OFFSETS = [None, (0, 5), (6, 11), (12, 19)]  # window: CLS, then the three context words


def _split(n: int) -> SplitData:
    """``n`` answerable questions, one four-token window each."""
    examples = [SquadExample(f"q{i}", "T", CONTEXT, "?", (("bravo", 6),)) for i in range(n)]
    features = {"input_ids": [[0, 1, 2, 3]] * n, "example_index": list(range(n)), "offsets": [OFFSETS] * n}
    return SplitData("dev", examples, features)


def _evaluator(n: int, answered: int) -> SpanEvaluator:
    """A v2.0 evaluator that has seen ``answered`` windows point at "bravo" and the rest at CLS (no answer)."""
    evaluator = SpanEvaluator(get_task("squad_v2"), _split(n), "2.0")
    logits = torch.full((n, 4, 2), -5.0)
    logits[:, 0, :] = 5.0  # null score 10 against a best span of 0: no answer
    logits[:answered, 2, :] = 8.0  # span score 16: answer "bravo"
    evaluator.update(logits, {"index": torch.arange(n)})
    return evaluator


def test_nearly_all_empty_answers_collapse_with_a_warning_and_a_metric():
    evaluator = _evaluator(20, answered=1)  # 19 of 20 empty: 95%
    scores = evaluator.compute()
    assert scores["empty_share"] == EMPTY_COLLAPSE_SHARE == 0.95 and scores["f1"] == pytest.approx(5.0)
    assert evaluator.collapsed()
    record = evaluator.record()
    assert record.metrics == {"squad/all_empty": 1.0}
    assert record.warning == ("dev: 95% of the answers are empty (no answer): the run collapsed to the "
                              "answer-nothing baseline")
    assert record.params["squad.null_threshold"] == "0.0"
    assert record.params["squad.null_threshold_source"] == "0, BERT's default: not tuned on any data"
    assert json.loads(record.files["predictions.json"]) == {f"q{i}": "bravo" if i == 0 else "" for i in range(20)}


def test_mostly_empty_answers_are_not_a_collapse():
    evaluator = _evaluator(20, answered=2)  # 18 of 20 empty: 90%
    evaluator.compute()
    assert not evaluator.collapsed()
    record = evaluator.record()
    assert record.metrics == {"squad/all_empty": 0.0} and record.warning is None


# A null threshold far below any score difference: every question is answered "".
ANSWER_NOTHING = ["finetune.epochs=1", "finetune.batch_size=2", "finetune.max_length=96", "finetune.stride=16",
                  "finetune.null_threshold=-1000"]


@pytest.fixture
def answering_nothing(tmp_path, monkeypatch) -> Path:
    """A tiny RoBERTa checkpoint, and SQuAD v2.0's fixture in ``tmp_path/data``; the working folder is ``tmp_path``.
    Fine-tuned with :data:`ANSWER_NOTHING`, it answers "" to every question."""
    from tests.test_finetune import make_checkpoint

    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data" / "squad" / "v2.0"
    data.mkdir(parents=True)
    shutil.copy(FIXTURES / "v2.0.json", data / "dev-v2.0.json")
    return make_checkpoint(tmp_path / "ckpt", "roberta", sentence_head=False)


@pytest.mark.usefixtures("one_thread")
def test_a_run_answering_nothing_is_tagged_collapsed_end_to_end(tmp_path, answering_nothing):
    from mlflow import MlflowClient

    from bvr.tasks.results import describe
    from bvr.tasks.run import FinetuneSetup, finetune
    from bvr.tracking import tracking_uri

    setup = FinetuneSetup(tmp_path / "data", tmp_path / "out", overrides=ANSWER_NOTHING)
    result = finetune(answering_nothing, "squad_v2", seeds=1, setup=setup,
                      context=RunContext(experiment="reliability-squad"))
    seed = result.seeds[0]
    run = MlflowClient(tracking_uri(tmp_path)).get_run(seed.run_id)
    assert seed.collapsed and run.data.tags["bvr.collapsed"] == "true"
    assert run.data.metrics["squad/all_empty"] == 1.0 and seed.scores["dev/empty_share"] == 1.0
    assert run.data.params["squad.null_threshold"] == "-1000.0"
    assert run.data.params["squad.null_threshold_source"] == "finetune.null_threshold, fixed by the configuration"
    assert "collapsed: 1 of 1 seeds (0)" in describe(result)


@pytest.mark.usefixtures("one_thread")
def test_a_collapsed_seed_is_one_bvr_line_on_stderr(bvr, tmp_path, answering_nothing):
    """Not a Python ``UserWarning`` with its file, line and source line."""
    settings = [arg for setting in ANSWER_NOTHING for arg in ("--set", setting)]
    code, _, err = bvr("finetune", "--task", "squad_v2", "--checkpoint", answering_nothing, "--seeds", "1",
                       "--data-dir", tmp_path / "data", "--output-dir", tmp_path / "out", *settings)
    assert code == 0
    assert err == ("squad_v2 seed 0: dev: 100% of the answers are empty (no answer): the run collapsed to the "
                   "answer-nothing baseline\n")


def _run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["bvr", *args])
    with pytest.raises(SystemExit) as info:
        cli.main()
    return info.value.code, capsys.readouterr().err


@pytest.mark.parametrize(("setting", "message"), [
    ("finetune.null_threshold_heldout=1.5",
     "error: --set finetune.null_threshold_heldout=1.5: finetune.null_threshold_heldout: must be in [0, 1) "
     "(0: no held-out slice)"),
    ("finetune.null_threshold=.inf",
     "error: --set finetune.null_threshold=.inf: finetune.null_threshold: must be a finite number"),
])
def test_bad_null_threshold_settings_are_refused_in_one_line(monkeypatch, capsys, tmp_path, setting, message):
    code, err = _run_cli(monkeypatch, capsys, "finetune", "--task", "squad_v2", "--checkpoint", str(tmp_path),
                         "--seeds", "1", "--set", setting)
    assert code == 2 and err.strip() == message


def test_a_held_out_slice_needs_two_training_articles(tmp_path):
    folder = tmp_path / "squad" / "v2.0"
    folder.mkdir(parents=True)
    content = json.loads((FIXTURES / "train-v2.0.json").read_text(encoding="utf-8"))
    content["data"] = content["data"][:1]
    (folder / "train-v2.0.json").write_text(json.dumps(content), encoding="utf-8")
    shutil.copy(FIXTURES / "v2.0.json", folder / "dev-v2.0.json")
    with pytest.raises(BvrError) as caught:
        load_task_data(get_task("squad_v2"), tmp_path, None, "roberta", 1, DataSettings(null_threshold_heldout=0.2))
    assert caught.value.one_line() == (
        "finetune.null_threshold_heldout: the training side has 1 article(s), too few to hold some out. "
        "set it to 0 (null_threshold is then used) or give a training file with more articles")
