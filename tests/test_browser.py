"""The report and the MLflow views in a real browser: headless Chromium against a real `mlflow ui`.

Skipped, with the reason, where no Chromium is installed (Debian: ``apt-get install chromium``). The store is the
report fixture's finished masking ablation (``tests/report_fixtures.py``); the server is started on a free loopback
port, and the report is rendered with its links pointing there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bvr.ops.browser.check import (
    BrowserCheck,
    check_in_browser,
    check_layout,
    check_ui,
    page_links,
    page_words,
    resolve_link,
    ui_mode,
)
from bvr.ops.browser.chromium import dump_dom, find_chromium, mlflow_ui
from bvr.ops.views import write_report_views
from bvr.report.render import render_report
from bvr.tracking import store_client, tracking_uri
from tests.report_fixtures import filled

pytestmark = pytest.mark.skipif(find_chromium() is None,
                                reason="no Chromium installed (apt-get install chromium, or set BVR_CHROMIUM)")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ONE_PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8"
             "AAAAASUVORK5CYII=")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    with filled(tmp_path_factory.mktemp("browser")) as store, mlflow_ui(tracking_uri(store.workdir)) as base:
        yield store, base


def test_the_report_passes_in_the_browser_and_every_link_resolves(served, tmp_path: Path, monkeypatch) -> None:
    store, base = served
    monkeypatch.chdir(tmp_path)  # relative paths, as `bvr report NAME --browser-check shots/` gives
    report = render_report(store.manifest, Path("masking"), workdir=store.workdir, ui_url=base,
                           write_views=write_report_views)
    html = report.html.relative_to(tmp_path) if report.html.is_absolute() else report.html
    check = check_in_browser(html, base, Path("shots"), experiment_id=store.experiment_id,
                             parent_run_id=store.parent_run_id)
    assert check.problems == []
    pages = ("effects", "scores-by-arm", "curves-by-arm", "parent-run")
    assert check.ui_modes == dict.fromkeys(pages, "model training")
    assert check.views_applied == {"effects": True, "scores-by-arm": True, "curves-by-arm": True}
    assert check.loading == check.blank_charts == dict.fromkeys(pages, 0)
    assert check.long_numbers == dict.fromkeys(pages, []) and check.description == "whole"
    assert check.images >= 3 and check.broken_images == [] and check.overflowing_tables == []
    links = [href for href in page_links(report.html.read_text()) if href.startswith(base)]
    runs = [href for href in links if "/runs/" in href]
    views = [href for href in links if "viewStateShareKey=" in href]
    assert check.links == len(links) and len(runs) > 50 and len(views) == 3  # every run of the report is linked
    assert check.run_page_shows_run is True
    for name in ("report", "effects", "scores-by-arm", "curves-by-arm", "parent-run"):
        data = Path(check.screenshots[name]).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 20_000, name  # a rendered page, not a blank one
    saved = json.loads((tmp_path / "shots" / "check.json").read_text())
    assert saved["problems"] == [] and saved["links"] == check.links


def _as_today(store) -> None:
    """Write the MLflow state bvr wrote before issue 27 (commit adf228a): views as bare states without a name,
    grouped by arm, over the per-seed runs; the headline's full sentences as the parent's description; effect
    estimates rounded to 4 decimals."""
    import time

    from mlflow.entities import Metric
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

    from bvr.report.analysis import analyse
    from bvr.report.collect import collect
    from bvr.report.headlines import headlines
    from bvr.report.numbers import effect_metrics
    from bvr.report.published import load_published

    client = store_client(tracking_uri(store.workdir))
    grouped = {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": "bvr.arm"}]}
    views = {"bvr-scores": {"searchFilter": "tags.`bvr.measure` LIKE '%'", "groupBy": grouped,
                            "selectedColumns": ["attributes.`Run Name`", "metrics.`score`"]},
             "bvr-curves": {"searchFilter": "tags.`bvr.stage` = 'pretrain'", "groupBy": grouped}}
    for key, state in views.items():
        client.set_experiment_tag(store.experiment_id, f"mlflow.sharedViewState.{key}", json.dumps(state))
    client.delete_experiment_tag(store.experiment_id, "mlflow.sharedViewState.bvr-effects")  # there was none
    a = analyse(collect(store.manifest, workdir=store.workdir), load_published())
    client.set_tag(store.parent_run_id, MLFLOW_RUN_NOTE, "\n".join(f"- {line}" for line in headlines(a)))
    now = int(time.time() * 1000) + 1000  # after the report's: the UI shows the latest
    # The fixture's estimates are whole numbers; a third added makes them read as a real run's do (3.5672).
    client.log_batch(store.parent_run_id, metrics=[Metric(k, round(v + 1 / 3, 4), now, 0)
                                                   for k, v in effect_metrics(a).items() if k.startswith("effect/")])


def test_the_check_fails_on_the_screens_of_before(served, tmp_path: Path) -> None:
    """What the issue saw, written as bvr wrote it, fails the check: the old address opens MLflow in GenAI mode in a
    fresh profile; bvr's views do not open as saved; the description is cut behind "Show more"; 4-decimal metrics."""
    store, base = served
    _as_today(store)
    before = page_words(dump_dom(f"{base}/#/experiments/{store.experiment_id}/runs?viewStateShareKey=bvr-scores"))
    assert ui_mode(before) == "genai"
    check = BrowserCheck(tmp_path / "report.html", 1200)
    check_ui(check, base, store.experiment_id, store.parent_run_id, tmp_path, retries=0)
    assert check.views_applied == {"effects": False, "scores-by-arm": False, "curves-by-arm": False}
    assert check.description == "cut" and len(check.long_numbers["parent-run"]) >= 10
    assert "the parent run's description is cut behind 'Show more' (the UI shows 100 px of it)" in check.problems
    assert any(p.startswith("parent-run: numbers with more than 3 decimals (") for p in check.problems)
    # (the effects view did not exist: its address without the view lands wherever the UI sends it)
    assert {page: check.ui_modes[page] for page in ("scores-by-arm", "curves-by-arm", "parent-run")} == dict.fromkeys(
        ("scores-by-arm", "curves-by-arm", "parent-run"), "model training")


def test_links_that_do_not_resolve_are_named(served) -> None:
    store, base = served
    experiment = store.experiment_id
    assert resolve_link(base, f"{base}/#/experiments/{experiment}/runs/{store.parent_run_id}") is None
    assert resolve_link(base, f"{base}/#/experiments/{experiment}/runs/{'0' * 32}").startswith(f"run {'0' * 32}: HTTP")
    assert resolve_link(base, f"{base}/#/experiments/999/runs/{store.parent_run_id}") == (
        f"run {store.parent_run_id} is in experiment {experiment}")
    assert resolve_link(base, f"{base}/#/experiments/{experiment}/runs?viewStateShareKey=nope") == (
        "no saved view 'nope' on the experiment")


def test_the_layout_check_finds_a_broken_image_and_a_wide_table(tmp_path: Path) -> None:
    cells = "".join(f"<td>{'x' * 40}{i}</td>" for i in range(30))
    page = tmp_path / "bad.html"
    page.write_text("<html><body style='max-width:1080px'><img alt='missing figure' src='nowhere.png'>"
                    f"<div><table style='white-space:nowrap'><tr><th>wide</th>{cells}</tr></table></div>"
                    f"<p><img alt='ok' src='{ONE_PIXEL}' width=1></p></body></html>")
    found = check_layout(page)
    assert found["broken"] == ["missing figure"]
    assert [t["index"] for t in found["overflowing"]] == [0] and found["overflowing"][0]["table"] > 3000
