"""Statistics across seeds and the published numbers, checked against values worked out by hand."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from bvr.errors import BvrError
from bvr.report.published import ABLATIONS, COLUMNS, DEFAULT_PATH, load_published, published_effect
from bvr.report.stats import is_higher_better, summarize

# ---------------------------------------------------------------------------------------------- summaries


def test_quartiles_use_linear_interpolation():
    # numpy's default (linear, Hyndman-Fan type 7): q1 of [1, 2, 3, 4] sits at position 0.75 -> 1.75, where the
    # midpoint rule would give 1.5.
    s = summarize([4.0, 1.0, 3.0, 2.0])
    assert (s.n, s.median, s.q1, s.q3, s.iqr) == (4, 2.5, 1.75, 3.25, 1.5)
    assert (s.min, s.max, s.mean) == (1.0, 4.0, 2.5)


def test_median_of_five_seeds():
    # Sorted: 83.5 84.0 84.1 84.2 84.5; quartiles fall on positions 1 and 3, so no interpolation.
    s = summarize([84.0, 84.5, 83.5, 84.2, 84.1])
    assert (s.median, s.q1, s.q3) == (84.1, 84.0, 84.2)
    assert s.iqr == pytest.approx(0.2)
    assert s.mean == pytest.approx(84.06)


def test_one_value_has_no_spread():
    s = summarize([0.9])
    assert (s.n, s.median, s.iqr, s.min, s.max) == (1, 0.9, 0.0, 0.9, 0.9)


def test_no_value_gives_nan_not_a_crash():
    s = summarize([], collapsed=[])
    assert s.n == 0 and math.isnan(s.median) and math.isnan(s.mean)


# ---------------------------------------------------------------------------------------------- collapsed runs


def test_collapsed_runs_are_kept_and_counted():
    # leaving them out would flatter an arm that collapses more often
    s = summarize([0.90, 0.50, 0.88], collapsed=[False, True, False])
    assert (s.n, s.n_collapsed, s.median, s.min) == (3, 1, 0.88, 0.5)


def test_no_collapse_counts_none():
    assert summarize([0.9, 0.8]).n_collapsed == 0


def test_a_broken_value_is_refused():
    with pytest.raises(ValueError, match=r"values must be finite, got \[0.9, nan\]"):
        summarize([0.9, math.nan])


def test_collapsed_flags_must_match_values():
    with pytest.raises(ValueError, match="2 flags for 3 values"):
        summarize([0.9, 0.8, 0.7], collapsed=[False, True])


# ---------------------------------------------------------------------------------------------- directions


def test_metric_direction():
    assert is_higher_better("dev_matched/accuracy") and is_higher_better("dev/mcc")
    assert not is_higher_better("val/perplexity") and not is_higher_better("val/mlm_loss")


# ---------------------------------------------------------------------------------------------- published numbers


@pytest.fixture(scope="module")
def published():
    return load_published()


def test_published_file_loads_with_a_source_on_every_row(published):
    assert list(published.columns) == list(COLUMNS)
    assert published["source"].map(lambda s: isinstance(s, str) and bool(s.strip())).all()
    assert published["setting"].notna().all()
    assert set(published["ablation"]) == set(ABLATIONS)
    keys = ["ablation", "source", "arm", "task", "metric"]
    assert not published.duplicated(keys).any()


def _value(df, ablation, arm, task, metric, table=None):
    hit = df[(df.ablation == ablation) & (df.arm == arm) & (df.task == task) & (df.metric == metric)]
    if table is not None:
        hit = hit[hit.source.str.contains(table, regex=False)]
    assert len(hit) == 1
    return hit["value"].iloc[0]


def test_published_spot_values(published):
    # Table 1 static -> dynamic and Table 3's perplexities, as the papers print them.
    assert _value(published, "batch-size", "2k", "pretrain", "val/perplexity") == 3.68
    assert _value(published, "batch-size", "256", "pretrain", "val/perplexity") == 3.99
    assert _value(published, "masking", "dynamic", "sst2", "dev/accuracy") == 92.9
    assert _value(published, "masking", "static", "squad_v2", "dev/f1") == 78.3
    assert _value(published, "masking", "dynamic", "mnli", "dev_matched/accuracy") == 84.0
    # One from each of the other tables.
    assert _value(published, "nsp", "doc-sentences", "race", "dev/accuracy") == 65.6
    assert _value(published, "bert-table5", "ltr-no-nsp", "mrpc", "dev/accuracy") == 77.5
    assert _value(published, "mask-split", "mask100-same0-rnd0", "probe/conll2003", "dev/f1") == 94.0
    # SpanBERT Tables 6 and 7 (the span row is in both, with and without NSP) and ALBERT Table 5.
    assert _value(published, "span-masking", "whole-word", "squad_v2", "dev/f1") == 84.3
    assert _value(published, "span-masking", "span", "squad_v2", "dev/f1", table="Table 6") == 85.4
    assert _value(published, "span-masking", "span", "squad_v2", "dev/f1", table="Table 7") == 86.7
    assert _value(published, "span-masking", "span-sbo", "coreference", "dev/f1") == 79.0
    assert _value(published, "sentence-objective", "nsp", "pretrain", "val/sop_acc") == 52.0
    assert _value(published, "sentence-objective", "sop", "squad_v2", "dev/exact_match") == 77.1
    assert _value(published, "sentence-objective", "none", "race", "dev/accuracy") == 61.7


def test_published_directions(published):
    lower = published[published["higher_is_better"] == False]  # noqa: E712 (nullable boolean column)
    assert set(lower["metric"]) == {"val/perplexity"}


def test_published_dash_and_statement_rows(published):
    assert math.isnan(_value(published, "nsp", "xlnet-base-k7", "squad", "dev/f1"))  # a dash in the paper
    vocab = published[published["ablation"] == "vocab"]
    assert len(vocab) == 1 and math.isnan(vocab["value"].iloc[0]) and "slightly worse" in vocab["note"].iloc[0]


def test_published_effect_is_b_minus_a(published):
    assert published_effect(published, "masking", "static", "dynamic", "squad_v2", "dev/f1") == pytest.approx(0.4)
    assert published_effect(published, "masking", "static", "dynamic", "mnli", "dev_matched/accuracy") == (
        pytest.approx(-0.3))
    assert published_effect(published, "batch-size", "256", "2k", "pretrain", "val/perplexity") == pytest.approx(-0.31)
    assert published_effect(published, "nsp", "segment-pair", "xlnet-base-k7", "squad", "dev/f1") is None
    # The feature-based column of BERT Table 8, matched by the probe's task alone.
    assert published_effect(published, "mask-split", "mask80-same10-rnd10", "mask100-same0-rnd0", "probe/conll2003",
                            None) == pytest.approx(-0.9)


def test_published_effect_stays_within_one_table(published):
    # SpanBERT prints the span row twice: with NSP (Table 6, beside token masking) and without (Table 7, beside
    # SBO). Each effect is read inside the table that holds both arms, never across the two settings.
    assert published_effect(published, "span-masking", "token", "span", "squad_v2", "dev/f1") == pytest.approx(1.6)
    assert published_effect(published, "span-masking", "span", "span-sbo", "squad_v2", "dev/f1") == pytest.approx(0.1)
    assert published_effect(published, "span-masking", "whole-word", "span-sbo", "squad_v2", "dev/f1") is None
    assert published_effect(published, "masking", "static", "no-such-arm", "sst2", "dev/accuracy") is None


def _broken_copy(tmp_path: Path, old: str, new: str) -> tuple[Path, str]:
    text = DEFAULT_PATH.read_text(encoding="utf-8")
    assert old in text
    broken = tmp_path / "published.yaml"
    broken.write_text(text.replace(old, new, 1), encoding="utf-8")
    return broken, broken.read_text(encoding="utf-8")


def _line_of(text: str, fragment: str) -> int:
    return text[: text.index(fragment)].count("\n") + 1


def test_unknown_key_is_refused_with_file_line_and_key(tmp_path):
    path, text = _broken_copy(tmp_path, "        values: [78.7, 84.0, 92.9]", "        valuez: [78.7, 84.0, 92.9]")
    with pytest.raises(BvrError) as err:
        load_published(path)
    message = str(err.value)
    assert f"{path}:{_line_of(text, 'valuez')}" in message
    assert "unknown key 'tables[0].arms.dynamic.valuez'" in message


def test_missing_source_is_refused_with_file_and_key(tmp_path):
    path, text = _broken_copy(tmp_path, '    source: "RoBERTa (Liu et al., 2019), Table 3"\n', "")
    with pytest.raises(BvrError) as err:
        load_published(path)
    message = str(err.value)
    assert f"{path}:{_line_of(text, '- ablation: batch-size')}" in message
    assert "missing key 'tables[2].source'" in message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("values: [3.68, 85.2, 92.9]", "values: [3.68, 85.2]", "must list 3 values"),
        ("values: [3.68, 85.2, 92.9]", "values: [3.68, 85.2, high]", "not a number"),
        ("- ablation: masking", "- ablation: maskin", "unknown ablation 'maskin'"),
        ("  dynamic:\n", "  Dynamic:\n", "arm id 'Dynamic'"),
        ("      static:\n", "      dynamic:\n", "key 'tables\\[0\\].arms.dynamic' is given twice"),
    ],
)
def test_malformed_values_are_refused(tmp_path, old, new, expected):
    path, _ = _broken_copy(tmp_path, old, new)
    with pytest.raises(BvrError, match=expected):
        load_published(path)


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(BvrError, match="not found"):
        load_published(tmp_path / "absent.yaml")


# ---------------------------------------------------------------------------------------------- layering


def test_report_never_imports_training_code():
    forbidden = ("bvr.pretraining", "bvr.model", "bvr.tasks.module", "bvr.tasks.run")
    for path in (Path(__file__).resolve().parent.parent / "bvr" / "report").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        names += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        bad = [n for n in names if any(n == f or n.startswith(f"{f}.") for f in forbidden)]
        assert not bad, f"{path.name} imports {bad}"


def test_summary_values_are_plain_floats():
    # Reports put these in DataFrames and YAML: numpy scalars would leak into both.
    s = summarize(np.array([1.0, 2.0, 3.0]))
    assert all(type(v) is float for v in (s.median, s.q1, s.q3, s.iqr, s.min, s.max, s.mean))
