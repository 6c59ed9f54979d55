"""A report and its MLflow views, looked at in a real browser (``bvr report NAME --browser-check DIR``).

With the report's links pointing at an ``mlflow ui`` for the store in use, :func:`check_in_browser` opens a copy
of ``report.html`` at 1,200 px in headless Chromium with a script that lists images that did not load and tables
wider than the text column (:func:`check_layout`); resolves every link into the UI through its REST API
(:func:`resolve_link`); and opens bvr's saved views and the parent run's page, each in a fresh profile, reading each
from the render its screenshot shows (:func:`check_ui`).
"""

from __future__ import annotations

import html
import json
import re
import tempfile
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from bvr.errors import BvrError
from bvr.fs import write_text
from bvr.ops.browser.chromium import UI_SETTLE_MS, UI_WINDOW, capture, dump_dom, http_get

REPORT_WIDTH = 1200

_CHECK_ID = "bvr-browser-check"
# Runs after the page has laid out: images that failed, tables wider than their column, a page wider than the window.
_CHECK_SCRIPT = """
<script>
window.addEventListener("load", () => {
  const width = document.documentElement.clientWidth;
  const broken = [...document.images].filter(i => !i.complete || i.naturalWidth === 0)
    .map(i => (i.getAttribute("alt") || i.src.slice(0, 60)));
  const overflowing = [...document.querySelectorAll("table")].map((t, index) => {
    const box = t.parentElement.getBoundingClientRect();
    const own = t.getBoundingClientRect();
    const head = [...t.querySelectorAll("th")].map(th => th.textContent).slice(0, 3).join(" | ");
    return {index, head, table: Math.round(own.width), column: Math.round(box.width),
            right: Math.round(own.right)};
  }).filter(t => t.table > t.column + 1 || t.right > width + 1);
  const out = document.createElement("pre");
  out.id = "CHECK_ID";
  out.textContent = JSON.stringify({width, pageWidth: document.documentElement.scrollWidth,
                                    images: document.images.length, broken, overflowing});
  document.body.appendChild(out);
});
</script>
""".replace("CHECK_ID", _CHECK_ID)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [value for key, value in attrs if key == "href" and value]


def page_links(html_text: str) -> list[str]:
    """Every ``href`` of the page, in order, without repeats."""
    parser = _Links()
    parser.feed(html_text)
    return list(dict.fromkeys(parser.hrefs))


_RUN_LINK = re.compile(r"#/experiments/(?P<experiment>[^/?]+)/runs/(?P<run>[0-9a-f]+)(\?.*)?$")
_VIEW_LINK = re.compile(r"#/experiments/(?P<experiment>[^/?]+)/runs\?(?P<query>.+)$")
_EXPERIMENT_LINK = re.compile(r"#/experiments/(?P<experiment>[^/?]+)(/runs)?(\?(?P<query>.*))?$")


def resolve_link(base: str, href: str) -> str | None:
    """Why a link into the MLflow UI at ``base`` does not resolve, or None when it does.

    A run link needs the run in the linked experiment; a saved view needs its tag on the experiment; an
    experiment link needs the experiment. The server's REST API answers (``/api/2.0/mlflow/...``).
    """
    fragment = href[len(base):].lstrip("/")
    if match := _RUN_LINK.search(fragment):
        status, body = http_get(f"{base}/api/2.0/mlflow/runs/get?run_id={match['run']}")
        if status != 200:
            return f"run {match['run']}: HTTP {status}"
        experiment = json.loads(body)["run"]["info"]["experiment_id"]
        return None if experiment == match["experiment"] else f"run {match['run']} is in experiment {experiment}"
    match = _VIEW_LINK.search(fragment) or _EXPERIMENT_LINK.search(fragment)
    if match is None:
        return f"not a run, view or experiment address: {href}"
    status, body = http_get(f"{base}/api/2.0/mlflow/experiments/get?experiment_id={match['experiment']}")
    if status != 200:
        return f"experiment {match['experiment']}: HTTP {status}"
    key = parse_qs(match["query"] or "").get("viewStateShareKey", [""])[0]
    if not key:
        return None
    from bvr.ops.views import saved_view

    tags = {t["key"]: t["value"] for t in json.loads(body)["experiment"].get("tags", [])}
    return None if saved_view(tags, key) is not None else f"no saved view {key!r} on the experiment"


@dataclass
class BrowserCheck:
    """What the browser found; :attr:`problems` is empty when the report passes."""

    report: Path
    width: int
    images: int = 0
    broken_images: list[str] = field(default_factory=list)
    overflowing_tables: list[dict[str, Any]] = field(default_factory=list)
    page_width: int = 0
    links: int = 0
    unresolved_links: dict[str, str] = field(default_factory=dict)
    run_page_shows_run: bool | None = None
    ui_modes: dict[str, str | None] = field(default_factory=dict)
    views_applied: dict[str, bool] = field(default_factory=dict)
    loading: dict[str, int] = field(default_factory=dict)
    """Page -> loading spinners still spinning after the wait."""
    blank_charts: dict[str, int] = field(default_factory=dict)
    """Page -> charts drawn without a line or bar."""
    long_numbers: dict[str, list[str]] = field(default_factory=dict)
    """Page -> numbers shown with more than :data:`MAX_DIGITS` decimals."""
    description: str | None = None
    """What the parent run's description shows: ``whole``, ``cut`` (behind "Show more") or ``none``."""
    screenshots: dict[str, str] = field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        found = [f"broken image: {name}" for name in self.broken_images]
        found += [f"table {t['index']} ({t['head']}) is {t['table']} px in a {t['column']} px column"
                  for t in self.overflowing_tables]
        if self.page_width > self.width:
            found.append(f"the page is {self.page_width} px wide in a {self.width} px window")
        found += [f"link {href}: {why}" for href, why in self.unresolved_links.items()]
        if self.run_page_shows_run is False:
            found.append("the MLflow UI did not show the linked run's page")
        found += [f"the MLflow UI showed {page} in {mode or 'no'} mode, not model training"
                  for page, mode in self.ui_modes.items() if mode != "model training"]
        found += [f"the {page} view did not apply (the UI did not open bvr's view as saved)"
                  for page, applied in self.views_applied.items() if not applied]
        found += [f"{page}: {n} loading spinner(s) after the wait" for page, n in self.loading.items() if n]
        found += [f"{page}: {n} blank chart(s)" for page, n in self.blank_charts.items() if n]
        found += [f"{page}: numbers with more than {MAX_DIGITS} decimals ({', '.join(numbers[:3])})"
                  for page, numbers in self.long_numbers.items() if numbers]
        if self.description in ("cut", "none"):
            found.append("the parent run's description is " + (
                "cut behind 'Show more' (the UI shows 100 px of it)" if self.description == "cut" else "missing"))
        return found

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "report": str(self.report), "problems": self.problems}


def check_layout(report_html: Path, width: int = REPORT_WIDTH) -> dict[str, Any]:
    """Open a copy of ``report_html`` with :data:`_CHECK_SCRIPT` added in Chromium at ``width`` px; its findings."""
    text = report_html.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="bvr-layout-") as tmp:
        probe = Path(tmp) / report_html.name
        probe.write_text(text.replace("</body>", _CHECK_SCRIPT + "</body>", 1), encoding="utf-8")
        dom = dump_dom(probe.as_uri(), window=(width, 900), settle_ms=5_000)
    found = re.search(rf'<pre id="{_CHECK_ID}">(.*?)</pre>', dom, re.S)
    if found is None:
        raise BvrError("the layout check did not run in Chromium", where=report_html,
                       hint="open the report in a browser and look for script errors")
    return json.loads(html.unescape(found.group(1)))


def check_in_browser(report_html: Path, base: str, out_dir: Path, *, experiment_id: str | None,
                     parent_run_id: str | None, width: int = REPORT_WIDTH) -> BrowserCheck:
    """Check ``report_html`` (rendered with links to the UI at ``base``) as the module says, and write the
    screenshots and ``check.json`` (the findings) into ``out_dir``."""
    report_html, out_dir = Path(report_html).resolve(), Path(out_dir)  # a file URI is absolute: `--browser-check d/`
    out_dir.mkdir(parents=True, exist_ok=True)
    check = BrowserCheck(report_html, width)
    layout = check_layout(report_html, width)
    check.images, check.broken_images = layout["images"], layout["broken"]
    check.overflowing_tables, check.page_width = layout["overflowing"], layout["pageWidth"]
    links = [href for href in page_links(report_html.read_text(encoding="utf-8")) if href.startswith(base)]
    check.links = len(links)
    for href in links:
        why = resolve_link(base, href)
        if why:
            check.unresolved_links[href] = why
    capture(report_html.as_uri(), out_dir / "report.png", window=(width, 2400), settle_ms=3_000)
    check.screenshots["report"] = str(out_dir / "report.png")
    if experiment_id is not None:
        check_ui(check, base, experiment_id, parent_run_id, out_dir)
    write_text(out_dir / "check.json", json.dumps(check.to_dict(), indent=2) + "\n")
    return check


RETRIES = 2
"""How many more times :func:`_settled` opens a page that has not settled, each with twice the wait before."""


def check_ui(check: BrowserCheck, base: str, experiment_id: str, parent_run_id: str | None, out_dir: Path, *,
             retries: int = RETRIES) -> None:
    """Open bvr's saved views and the parent run's page in the MLflow UI at ``base``; record in ``check`` what each
    shows, whether each view applied (the UI names it in "Views" and shows its
    :attr:`~bvr.tracking.ui.SavedView.marker`) and whether the parent's description is whole; a page still loading
    is opened again (:func:`_settled`)."""
    from bvr.tracking.ui import SAVED_VIEWS, ui_address, view_url

    for view in SAVED_VIEWS:
        dom = _settled(view_url(base, experiment_id, view.key), out_dir / f"{view.page}.png", retries=retries)
        words = _read_ui_page(check, view.page, dom)
        check.screenshots[view.page] = str(out_dir / f"{view.page}.png")
        check.views_applied[view.page] = view.name in words and view.marker in words
    if parent_run_id is None:
        return
    dom = _settled(ui_address(base, experiment_id, parent_run_id), out_dir / "parent-run.png", height=1800,
                   retries=retries)
    check.screenshots["parent-run"] = str(out_dir / "parent-run.png")
    status, body = http_get(f"{base}/api/2.0/mlflow/runs/get?run_id={parent_run_id}")  # the page may show its name
    name = json.loads(body)["run"]["info"].get("run_name", parent_run_id) if status == 200 else parent_run_id
    check.run_page_shows_run = parent_run_id in dom or name in dom
    check.description = description_state(_read_ui_page(check, "parent-run", dom))


def _settled(url: str, out: Path, *, height: int = UI_WINDOW[1], retries: int = RETRIES) -> str:
    """:func:`capture` of ``url``, again with a longer wait while it shows a spinner or a cut description."""
    settle = UI_SETTLE_MS
    dom = capture(url, out, window=(UI_WINDOW[0], height), settle_ms=settle)
    for _ in range(retries):
        if not spinners(dom) and description_state(page_words(dom)) != "cut":
            break
        settle *= 2
        dom = capture(url, out, window=(UI_WINDOW[0], height), settle_ms=settle)
    return dom


def _read_ui_page(check: BrowserCheck, page: str, dom: str) -> list[str]:
    """Record a page's mode, spinners, blank charts and over-long numbers in ``check``; return its words."""
    words = page_words(dom)
    check.ui_modes[page] = ui_mode(words)
    check.loading[page] = spinners(dom)
    check.blank_charts[page] = blank_charts(dom)
    check.long_numbers[page] = long_numbers(words)
    return words


MAX_DIGITS = 3
"""The most decimals the report prints (a loss in nats); a number shown with more is unrounded."""
_SPINNER = re.compile(r'class="[^"]*-spin-spinning')
_LONG_NUMBER = re.compile(rf"[-+−]?\d+\.\d{{{MAX_DIGITS + 1},}}")


def spinners(dom: str) -> int:
    """Loading spinners still spinning in a DOM dump of the MLflow UI (its components mark them ``*-spin-spinning``).

    >>> spinners('<div class="du-bois-light-spin du-bois-light-spin-spinning"></div><div class="x-spin"></div>')
    1
    """
    return len(_SPINNER.findall(dom))


def blank_charts(dom: str) -> int:
    """Charts (Plotly's ``js-plotly-plot``) in a DOM dump that draw no trace: no line, bar or point.

    >>> blank_charts('<div class="js-plotly-plot"><g class="trace scatter"></g></div><div class="js-plotly-plot">')
    1
    """
    return sum('class="trace ' not in chart for chart in dom.split('class="js-plotly-plot"')[1:])


def long_numbers(words: list[str]) -> list[str]:
    """The words that are a number with more than :data:`MAX_DIGITS` decimals ('53.81343283582089'), in order.

    >>> long_numbers(["53.8", "7.217", "53.81343283582089", "-0.1113", "v1.2.3", "1.5e-07"])
    ['53.81343283582089', '-0.1113']
    """
    return [w for w in words if _LONG_NUMBER.fullmatch(w)]


def description_state(words: list[str]) -> str | None:
    """What a run page shows of its description: ``whole``, ``cut`` (a "Show more" under it: the UI shows 100 px),
    ``none`` ("No description"), or None when the page has no description box (it did not load)."""
    if "Description" not in words:
        return None
    box = words[words.index("Description") + 1:]
    ends = [i for i, w in enumerate(box) if re.fullmatch(r"(Metrics|Parameters|Tags|Artifacts) \(\d+\)", w)]
    box = box[:ends[0]] if ends else box
    if box[:1] == ["No description"]:
        return "none"
    return "cut" if "Show more" in box else "whole"

def page_words(dom: str) -> list[str]:
    """The visible text of a DOM dump, one entry per text node (scripts and styles left out)."""
    text = re.sub(r"<script.*?</script>|<style.*?</style>", " ", dom, flags=re.S)
    return [piece.strip() for piece in html.unescape(re.sub(r"<[^>]+>", "\n", text)).split("\n")
            if piece.strip()]


def ui_mode(words: list[str]) -> str | None:
    """The MLflow UI's mode on a page, read from its sidebar: ``model training`` or ``genai``; None when neither
    sidebar is there (the page did not load)."""
    if "Model registry" in words:
        return "model training"
    if "Judges" in words or "Agent versions" in words:
        return "genai"
    return None

