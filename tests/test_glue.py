"""GLUE readers on small fixtures with each file's quirks, and metrics against hand-computed values."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import warnings
from pathlib import Path

import pytest
import torch

from bvr.errors import BvrError
from bvr.tasks.glue_metrics import (
    PLAIN_METRICS,
    MulticlassMatthewsCorrelation,
    UndefinedMetricWarning,
    accuracy,
    average_ranks,
    baseline_note,
    f1,
    main_score,
    majority_baseline,
    majority_prediction,
    make_metrics,
    matthews_corrcoef,
    pearson,
    spearman,
)
from bvr.tasks.readers import task_file
from bvr.tasks.readers.common import Example
from bvr.tasks.readers.hub import hub_sentences
from bvr.tasks.readers.tsv import read_tsv
from bvr.tasks.registry import GLUE_TASKS, get_task

DATA = Path(__file__).parent / "fixtures"
GLUE = DATA / "glue"


def _write(tmp_path: Path, text: str, name: str = "file.tsv") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


# ---------------------------------------------------------------------------------------------------------------
# Readers on the fixtures
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", GLUE_TASKS)
def test_every_split_of_every_task_reads_cleanly(name):
    spec = get_task(name)
    for split in spec.splits:
        examples, report = read_tsv(spec, task_file(spec, DATA, split.file))
        assert report.skipped == 0 and report.read == report.rows == len(examples) > 0
        assert all(example.text_a and (example.text_b is None) == (len(spec.text_fields) == 1) for example in examples)
        if spec.label_names is not None:
            assert all(isinstance(e.label, int) and 0 <= e.label < spec.num_labels for e in examples)


def test_cola_has_no_header_and_dev_no_final_newline():
    assert not (GLUE / "CoLA/dev.tsv").read_bytes().endswith(b"\n")  # the quirk under test is still in the fixture
    train, _ = read_tsv(get_task("cola"), GLUE / "CoLA/train.tsv")
    dev, report = read_tsv(get_task("cola"), GLUE / "CoLA/dev.tsv")
    assert train[0] == Example("The cat slept on the warm stone.", None, 1, 1)  # line 1 is data, not a header
    assert [e.label for e in train] == [1, 0, 1, 0, 1, 0, 1]
    assert (report.rows, dev[-1]) == (4, Example("That the sun rose surprised nobody.", None, 1, 4))


def test_sst2_trailing_spaces_are_stripped():
    examples, _ = read_tsv(get_task("sst2"), GLUE / "SST-2/dev.tsv")
    assert examples[0] == Example("never quite finds its feet", None, 0, 2)


def test_mrpc_bom_and_unbalanced_quotes():
    assert (GLUE / "MRPC/train.tsv").read_bytes().startswith(b"\xef\xbb\xbf")
    examples, report = read_tsv(get_task("mrpc"), GLUE / "MRPC/train.tsv")
    assert report.rows == 4 and [e.label for e in examples] == [1, 0, 1, 0]
    assert examples[0].text_a == 'The mayor said "the bridge will open in May.'
    # A quote opened in one field and closed in the next: a CSV reader would merge the two fields.
    assert (examples[2].text_a, examples[2].text_b) == ('He called it "a fair deal', 'and a good one" for the town.')


def test_word_labels_map_to_ids_in_spec_order():
    rte, _ = read_tsv(get_task("rte"), GLUE / "RTE/train.tsv")
    mnli, _ = read_tsv(get_task("mnli"), GLUE / "MNLI/dev_matched.tsv")
    assert [e.label for e in rte] == [0, 1, 0]  # entailment, not_entailment, entailment
    assert [e.label for e in mnli] == [0, 2]  # gold_label, not label1..label5
    assert mnli[0].text_b == "He did not win the race."


def test_numeric_and_word_labels_are_equivalent(tmp_path):
    path = _write(tmp_path, "index\tsentence1\tsentence2\tlabel\n0\ta\tb\t1\n1\tc\td\tnot_entailment\n")
    examples, _ = read_tsv(get_task("rte"), path)
    assert [e.label for e in examples] == [1, 1]


def test_stsb_scores_and_columns_by_name():
    examples, _ = read_tsv(get_task("stsb"), GLUE / "STS-B/train.tsv")
    assert [e.label for e in examples] == [5.0, 4.2, 1.0, 0.0]
    assert examples[0].text_a == "A dog runs in the park." and examples[0].text_b == "A dog is running in a park."


def test_line_ends_and_odd_separators(tmp_path):
    # CRLF line ends are tolerated; a vertical tab or U+2028 inside a sentence is text, not a line break.
    path = _write(tmp_path, "sentence\tlabel\r\nfirst\x0bpart \t1\r\nsecond\u2028part\t0\r\n")
    examples, report = read_tsv(get_task("sst2"), path)
    assert report.rows == 2 and [e.text_a for e in examples] == ["first\x0bpart", "second\u2028part"]


# ---------------------------------------------------------------------------------------------------------------
# Readers: bad input
# ---------------------------------------------------------------------------------------------------------------


def test_unknown_label_names_file_and_line(tmp_path):
    path = _write(tmp_path, "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tc\td\tmaybe\n")
    with pytest.raises(BvrError, match="unknown label 'maybe'") as caught:
        read_tsv(get_task("rte"), path)
    assert caught.value.where == f"{path}:3"


@pytest.mark.parametrize(("name", "row", "message"), [
    ("sst2", "text\t2", "unknown label '2'"),
    ("stsb", "\t".join(["0"] * 9 + ["5.5"]), r"outside \[0, 5\]"),
    ("stsb", "\t".join(["0"] * 9 + ["high"]), "not a number"),
])
def test_bad_labels_fail(tmp_path, name, row, message):
    header = {"sst2": "sentence\tlabel", "stsb": "\t".join(["c"] * 7 + ["sentence1", "sentence2", "score"])}[name]
    path = _write(tmp_path, f"{header}\n{row}\n")
    with pytest.raises(BvrError, match=message) as caught:
        read_tsv(get_task(name), path)
    assert caught.value.where == f"{path}:2"


def test_short_long_and_blank_rows_are_counted(tmp_path):
    rows = ["0\t1\t2\tq1?\tq2?\t0", "1\t3\t4\tbroken question", "2\t5\t6\tq3?\tq4?\t1", "", "3\t7\t8\tq5\tq6\t0\textra"]
    path = _write(tmp_path, "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n" + "\n".join(rows) + "\n")
    examples, report = read_tsv(get_task("qqp"), path, max_skipped_share=0.8)
    assert [e.line for e in examples] == [2, 4]
    assert (report.rows, report.read, report.skipped) == (5, 2, 3)
    assert report.reasons == {"fewer than 6 columns": 1, "blank line": 1, "more than 6 columns": 1}
    assert report.first_lines == {"fewer than 6 columns": [3], "blank line": [5], "more than 6 columns": [6]}
    assert report.summary().startswith(f"{path}: read 2 of 5 rows, skipped 3 (fewer than 6 columns: 1 at line 3;")


@pytest.mark.parametrize(("bad", "fails"), [(1, False), (2, True)])
def test_more_than_one_percent_bad_rows_fails(tmp_path, bad, fails):
    rows = [f"sentence {i}\t1" for i in range(100)] + ["no label column"] * bad
    path = _write(tmp_path, "sentence\tlabel\n" + "\n".join(rows))
    if not fails:
        assert read_tsv(get_task("sst2"), path)[1].skipped == 1  # 1 of 101 rows: under 1%
        return
    with pytest.raises(BvrError, match="2 of 102 rows could not be parsed, more than 1%") as caught:
        read_tsv(get_task("sst2"), path)
    assert caught.value.where == str(path)


def test_missing_column_names_the_header(tmp_path):
    path = _write(tmp_path, "index\tsentence\n0\tA test sentence without a label.\n")  # an unlabelled test file
    with pytest.raises(BvrError, match="no column 'label'.*index, sentence") as caught:
        read_tsv(get_task("sst2"), path)
    assert caught.value.where == f"{path}:1"


def test_missing_empty_and_undecodable_files(tmp_path):
    with pytest.raises(BvrError, match="no such file.*--data-dir"):
        task_file(get_task("rte"), tmp_path, "dev.tsv")
    with pytest.raises(BvrError, match="empty"):
        read_tsv(get_task("sst2"), _write(tmp_path, ""))
    (tmp_path / "latin1.tsv").write_bytes(b"sentence\tlabel\ncaf\xe9\t1\n")
    with pytest.raises(BvrError, match="not UTF-8") as caught:
        read_tsv(get_task("sst2"), tmp_path / "latin1.tsv")
    assert caught.value.where.endswith("latin1.tsv:2")


def test_no_data_folder_and_no_hub_says_what_to_pass():
    # A dataset id that cannot exist, so the test never depends on what the local hub cache holds.
    spec = dataclasses.replace(get_task("rte"), hub_id="bvr-tests/no-such-dataset")
    with pytest.raises(BvrError, match="could not be loaded from the Hugging Face hub.*--data-dir.*BVR_DATA_DIR"):
        hub_sentences(spec, "train")


# ---------------------------------------------------------------------------------------------------------------
# Metrics: plain definitions against hand-computed values
# ---------------------------------------------------------------------------------------------------------------


def test_accuracy_and_f1_by_hand():
    preds, targets = [1, 1, 1, 0, 0, 0], [1, 1, 0, 1, 0, 0]  # TP 2, FP 1, FN 1, TN 2
    assert accuracy(preds, targets) == 4 / 6
    assert f1(preds, targets) == 2 * 2 / (2 * 2 + 1 + 1)


def test_f1_with_no_positive_predicted_is_zero():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # defined (TP = 0, FN > 0): no warning
        assert f1([0, 0, 0], [1, 0, 1]) == 0.0
    with pytest.warns(UndefinedMetricWarning):
        assert f1([0, 0], [0, 0]) == 0.0  # no positive anywhere: undefined


def test_mcc_by_hand():
    preds, targets = [1, 1, 1, 0, 0], [1, 1, 0, 1, 0]  # TP 2, FP 1, FN 1, TN 1
    assert matthews_corrcoef(preds, targets) == pytest.approx((2 * 1 - 1 * 1) / math.sqrt(3 * 3 * 2 * 2))
    # Three classes, confusion [[2,0,0],[0,2,0],[0,1,1]]: (5*6 - 12) / sqrt((36 - 14) * (36 - 12)).
    assert matthews_corrcoef([0, 1, 1, 0, 1, 2], [0, 1, 2, 0, 1, 2]) == pytest.approx(18 / math.sqrt(22 * 24))


def test_mcc_is_zero_when_a_class_is_absent():
    assert matthews_corrcoef([1, 1, 1, 1], [1, 0, 1, 0]) == 0.0  # constant prediction
    assert matthews_corrcoef([1, 0, 1, 0], [1, 1, 1, 1]) == 0.0  # constant target
    assert matthews_corrcoef([1, 1], [1, 1]) == 0.0  # both constant: scikit-learn gives 0, not 1


def test_correlations_by_hand():
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(15 / math.sqrt(228), abs=1e-12)
    # Ties share average ranks: [1, 2.5, 2.5, 4] against [1, 3, 2, 4] gives 4.5 / sqrt(4.5 * 5).
    assert average_ranks([1, 2, 2, 3]) == [1.0, 2.5, 2.5, 4.0]
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(3 / math.sqrt(10), abs=1e-12)


@pytest.mark.parametrize("metric", [pearson, spearman])
def test_correlation_with_constant_input_is_zero_with_warning(metric):
    with pytest.warns(UndefinedMetricWarning, match="undefined; reported as 0"):
        assert metric([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == 0.0


def test_plain_metrics_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(0)
    preds = [rng.randint(0, 5) / 2 for _ in range(200)]  # few distinct values: many ties
    targets = [p + rng.gauss(0, 1) if i % 3 else float(rng.randint(0, 5)) for i, p in enumerate(preds)]
    assert pearson(preds, targets) == pytest.approx(stats.pearsonr(preds, targets)[0], abs=1e-12)
    assert spearman(preds, targets) == pytest.approx(stats.spearmanr(preds, targets)[0], abs=1e-12)
    assert average_ranks(preds) == pytest.approx(list(stats.rankdata(preds)))


def test_plain_metrics_match_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    rng = random.Random(1)
    preds, targets = [rng.randint(0, 1) for _ in range(100)], [rng.randint(0, 1) for _ in range(100)]
    assert f1(preds, targets) == pytest.approx(sk.f1_score(targets, preds))
    assert matthews_corrcoef(preds, targets) == pytest.approx(sk.matthews_corrcoef(targets, preds))


# ---------------------------------------------------------------------------------------------------------------
# Metrics: torchmetrics objects against the plain definitions
# ---------------------------------------------------------------------------------------------------------------


def _collection_values(name: str, preds: list, targets: list) -> dict[str, float]:
    """Feed a task's collection in two batches, as a validation loop would."""
    spec = get_task(name)
    dtype = torch.float32 if spec.kind == "regression" else torch.long
    collection = make_metrics(spec, prefix="dev/")
    half = len(preds) // 2
    for part in (slice(0, half), slice(half, None)):
        collection.update(torch.tensor(preds[part], dtype=dtype), torch.tensor(targets[part], dtype=dtype))
    return {key: value.item() for key, value in collection.compute().items()}


CLASSIFICATION_CASES = [
    ([1, 1, 1, 0, 0, 0], [1, 1, 0, 1, 0, 0]),
    ([1, 1, 1, 1], [1, 0, 1, 0]),  # constant prediction: torchmetrics' own MCC says 0.41 here
    ([1, 1, 1, 1], [1, 1, 1, 1]),  # one class everywhere: torchmetrics' own MCC says 1
    ([0, 0, 0, 0], [1, 0, 1, 0]),  # no positive predicted: F1 0
]


@pytest.mark.parametrize(("preds", "targets"), CLASSIFICATION_CASES)
@pytest.mark.parametrize("name", ["cola", "mrpc"])
def test_binary_torchmetrics_match_definitions(name, preds, targets):
    values = _collection_values(name, preds, targets)
    expected = {f"dev/{metric}": PLAIN_METRICS[metric](preds, targets) for metric in get_task(name).metrics}
    assert values == pytest.approx(expected, abs=1e-7)


def test_multiclass_mcc_object_matches_definition():
    metric = MulticlassMatthewsCorrelation(3)
    metric.update(torch.tensor([0, 1, 1, 0, 1, 2]), torch.tensor([0, 1, 2, 0, 1, 2]))
    assert metric.compute().item() == pytest.approx(18 / math.sqrt(22 * 24))
    metric.reset()
    metric.update(torch.tensor([1, 1]), torch.tensor([1, 1]))
    assert metric.compute().item() == 0.0


def test_multiclass_accuracy():
    preds, targets = [0, 1, 2, 2, 1, 0], [0, 1, 1, 2, 1, 2]
    assert _collection_values("mnli", preds, targets) == {"dev/accuracy": pytest.approx(4 / 6)}


def test_correlation_torchmetrics_match_definitions():
    preds, targets = [0.5, 1.0, 1.0, 2.5, 4.0, 4.0, 3.0, 5.0], [0.0, 1.2, 2.0, 2.0, 3.8, 5.0, 3.0, 4.6]
    values = _collection_values("stsb", preds, targets)
    assert values == pytest.approx({"dev/pearson": pearson(preds, targets), "dev/spearman": spearman(preds, targets)},
                                   abs=1e-6)  # torchmetrics accumulates in float32


def test_correlation_torchmetrics_zero_for_constant_prediction():
    with pytest.warns(UndefinedMetricWarning):
        values = _collection_values("stsb", [2.0] * 4, [0.0, 1.0, 4.0, 5.0])
    assert values == {"dev/pearson": 0.0, "dev/spearman": 0.0}


def test_main_score_averages_main_metrics():
    assert main_score(get_task("stsb"), {"pearson": 0.9, "spearman": 0.8}) == pytest.approx(0.85)
    assert main_score(get_task("cola"), {"mcc": 0.5, "accuracy": 0.8}) == 0.5


# ---------------------------------------------------------------------------------------------------------------
# The majority baseline
# ---------------------------------------------------------------------------------------------------------------


def test_majority_baseline_classification_by_hand():
    values = majority_baseline(get_task("mrpc"), [1, 1, 0], [0, 0, 1, 1, 1])  # predicts 1: TP 3, FP 2
    assert values == pytest.approx({"accuracy": 0.6, "f1": 0.75, "accuracy_f1": 0.675})
    assert majority_baseline(get_task("cola"), [0, 1, 1], [0, 1, 1]) == pytest.approx(
        {"mcc": 0.0, "accuracy": 2 / 3})


def test_majority_ties_go_to_the_lowest_id():
    assert majority_prediction(get_task("rte"), [1, 0, 1, 0]) == 0


def test_regression_baseline_predicts_the_mean_and_reports_zero():
    spec = get_task("stsb")
    assert majority_prediction(spec, [1.0, 2.0, 4.5]) == 2.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # undefined by construction: no warning leaks out
        values = majority_baseline(spec, [1.0, 2.0, 4.5], [0.0, 3.0, 5.0])
    assert values == {"pearson": 0.0, "spearman": 0.0, "pearson_spearman": 0.0}
    assert "shown as 0" in baseline_note(spec, [1.0, 2.0, 4.5])


def test_baseline_note_names_the_class():
    note = baseline_note(get_task("cola"), [0, 1, 1, 1])
    assert note.startswith("predicts 'acceptable' (the training majority, 75.0%)") and "mcc is undefined" in note


# ---------------------------------------------------------------------------------------------------------------
# The real files, when a data folder is given (BVR_DATA_DIR)
# ---------------------------------------------------------------------------------------------------------------

REAL_COUNTS = {"cola": (8551, 1043), "sst2": (67349, 872), "mrpc": (3668, 408), "rte": (2490, 277),
               "stsb": (5749, 1500)}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(REAL_COUNTS))
def test_real_glue_files(name):
    if not os.environ.get("BVR_DATA_DIR"):
        pytest.skip("set BVR_DATA_DIR to a data folder holding glue/ to read the real files")
    spec = get_task(name)
    train, train_report = read_tsv(spec, task_file(spec, Path(os.environ["BVR_DATA_DIR"]), "train.tsv"))
    dev, dev_report = read_tsv(spec, task_file(spec, Path(os.environ["BVR_DATA_DIR"]), "dev.tsv"))
    assert (len(train), len(dev)) == REAL_COUNTS[name]
    assert train_report.skipped == dev_report.skipped == 0
