"""An experiment's ``published:`` naming a table reports/published.yaml does not hold is refused at its line: it
used to be accepted, and the comparison with the paper silently dropped from the report."""

from __future__ import annotations

import pytest

from bvr.ablation.declare import PUBLISHED_TABLES
from bvr.ablation.loading import load_ablation
from bvr.errors import BvrError
from bvr.report.published import load_published
from tests.test_ablate import EXPERIMENT


def test_an_unknown_published_table_is_refused_at_its_line(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.replace("published: {ablation: masking}", "published: {ablation: maskng}"))
    with pytest.raises(BvrError) as info:
        load_ablation(path)
    assert str(info.value) == (f"{path}:2: published: no published table 'maskng' in reports/published.yaml. "
                               f"name one of {', '.join(PUBLISHED_TABLES)}, or write published: null")


def test_every_table_that_may_be_named_is_in_the_shipped_file():
    assert set(load_published()["ablation"]) == set(PUBLISHED_TABLES)
    path_ok = load_ablation("masking")
    assert path_ok.published == {"ablation": "masking"}
