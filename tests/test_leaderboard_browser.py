"""The leaderboard pages of the published and smoke profiles in a real browser: headless Chromium
(Debian's chromium and chromium-driver, which .ci/run installs) opens each page from the file system
with the network switched off, sorts by the mean rank under each protocol, filters to one family,
switches the score columns' protocol, searches, and reads the first rows back; they must be the
rows of mean_ranks.csv and of the score CSVs (smoke: 02's tbt_scores.csv and 03's
direct_scores.csv; published, which has no 02 or 03: the published all_results.json), in the order
the page claims. No request may leave the file. A screenshot of each page is written beside it
(``outputs/<profile>/leaderboard.png``) for review. Then what a reader relies on (issue 53): each model's
position under both protocols and the chart of them, the CSV download equal to the table shown, the
sort / filter / protocol kept across a reload, a phone's 390 px without overlapping boxes, and one figure
numbering on the leaderboard and figures.html. Without a browser the module skips, in one line saying
why."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time

import pandas as pd
import pytest

from lib import metadata, paths, published, store
from runner import leaderboard, run

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1500,1000")
FIRST = 5                       # rows read back after each step
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def _missing() -> str | None:
    """Why the browser test cannot run here (decided before any profile is built), or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "browser test: selenium is not installed (`make venv` installs the test extras)"
    if not (CHROMIUM and CHROMEDRIVER):
        return ("browser test: no headless Chromium here (Debian's chromium and chromium-driver; .ci/run installs "
                "them: apt-get install chromium chromium-driver)")
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_missing() is not None, reason=str(_missing()))]


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module, its network emulated offline, its requests logged."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile_dir = tempfile.mkdtemp(prefix="chromium-")
    options.add_argument(f"--user-data-dir={profile_dir}")
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                               "downloadThroughput": 0, "uploadThroughput": 0})
    yield driver
    driver.quit()
    shutil.rmtree(profile_dir, ignore_errors=True)


@pytest.fixture
def page(request):
    """The page of profile ``request.param`` as `make all` writes it, at the end of a run of the profile
    (published: its analyses; smoke: 01-03 of the shared smoke run, then 04, cached where an earlier
    module ran it)."""
    profile = request.param
    if profile == "published":
        request.getfixturevalue("published_analyses")
    else:
        request.getfixturevalue("smoke")
        run.run_profile(profile, stages=["04"])
    return profile, paths.profile_dir(profile) / leaderboard.PAGE


# --------------------------------------------------------------------------- what the CSVs say
def _expected_ranks(profile: str, protocol: str, models: list[str] | None = None, descending: bool = False):
    """(model, mean rank) of mean_ranks.csv under ``protocol`` in the page's order: by mean rank, ties by
    model id, missing last."""
    table = pd.read_csv(paths.stage_dir(profile, "04_rank_agreement") / leaderboard.RANKS)
    table = table[table["protocol"] == protocol]
    if models is not None:
        table = table[table["model"].isin(models)]
    by_id = table.sort_values("model")
    order = by_id.sort_values("mean_rank", ascending=not descending, kind="stable")
    return list(zip(order["model"], order["mean_rank"]))


def _scores(profile: str, protocol: str, benchmark: str) -> dict[str, float]:
    """A benchmark's scores as the profile's CSVs hold them; published: the paper's file."""
    if profile == "published":
        raw = json.loads(published.results_path().read_text())
        return {m: float(v) for m, v in raw[protocol][benchmark].items()}
    name = {store.TBT: "02_finetune/tbt_scores.csv", store.DIRECT: "03_direct_eval/direct_scores.csv"}[protocol]
    table = pd.read_csv(paths.profile_dir(profile) / name)
    table = table[table["benchmark"] == benchmark]
    return dict(zip(table["model"], table["score"].astype(float)))


# --------------------------------------------------------------------------- driving the page
def _rows(driver, key: str, n: int = FIRST) -> list[tuple[str, float]]:
    """The first ``n`` rows shown: (model id, the value of the cell of column ``key``)."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#rows tr')].slice(0, arguments[1]).map((tr) => {"
        " const td = tr.querySelector(`td[data-key='${arguments[0]}']`);"
        " return [tr.dataset.model, td && td.dataset.value !== undefined ? Number(td.dataset.value) : null]; })",
        key, n)


def _shown(driver) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#rows tr[data-model]')]"
                                 ".map((tr) => tr.dataset.model)")


def _sort(driver, key: str) -> None:
    driver.find_element("css selector", f"th[data-key='{key}'] button.sort").click()


def _choose(driver, select_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", select_id)).select_by_value(value)


def _open(driver, page):
    driver.get_log("performance")                    # what the browser did before this page is not its
    driver.get(page.resolve().as_uri())
    _ready(driver, page)


def _ready(driver, page) -> None:
    deadline = time.time() + 10
    while driver.execute_script("return document.body && document.body.dataset.ready") != "1":
        assert time.time() < deadline, f"{page}: the table was not built within 10 s"
        time.sleep(0.05)


def _requests(driver) -> list[str]:
    """The URLs the page asked for that could leave the machine or read a file (the browser's own
    chrome:// icons and data: URIs are neither: Chromium 150 logs both)."""
    events = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
    urls = [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]
    return [u for u in urls if u.split(":", 1)[0] in ("http", "https", "ws", "wss", "ftp", "file")]


@pytest.mark.parametrize("page", ["published", "smoke"], indirect=True)
def test_the_page_sorts_filters_and_shows_the_csvs_numbers_offline(browser, page):
    profile, page = page
    _open(browser, page)
    browser.save_screenshot(str(page.with_suffix(".png")))          # as it opens: for review
    n_models = len(pd.read_csv(paths.stage_dir(profile, "04_rank_agreement") / leaderboard.RANKS)
                   .query("protocol == @store.TBT"))
    assert len(_shown(browser)) == n_models

    # sorted by the mean rank under each protocol: the first rows are mean_ranks.csv's, to the digit
    for protocol in (store.DIRECT, store.TBT):
        _sort(browser, f"rank:{protocol}")
        assert _rows(browser, f"rank:{protocol}") == [list(r) for r in _expected_ranks(profile, protocol)[:FIRST]]

    # one family (the largest), still by train-before-test mean rank; a second click reverses
    meta = metadata.models_frame(_shown(browser), paths.store_dir(profile))
    family = meta["family"].value_counts().index[0]
    members = sorted(meta.index[meta["family"] == family])
    _choose(browser, "family", family)
    assert sorted(_shown(browser)) == members
    want = _expected_ranks(profile, store.TBT, members)
    assert _rows(browser, f"rank:{store.TBT}", len(members)) == [list(r) for r in want]
    _sort(browser, f"rank:{store.TBT}")
    assert _rows(browser, f"rank:{store.TBT}", 1) == [list(_expected_ranks(profile, store.TBT, members, True)[0])]
    _choose(browser, "family", "")

    # a benchmark's scores, best first, under direct evaluation; the switch to train-before-test re-sorts
    # the same column under it: each time the CSV's values (written to 6 digits) and order
    bench = browser.execute_script("return document.querySelector(\"th[data-key^='score:']\").dataset.key.slice(6)")
    for protocol in (store.DIRECT, store.TBT):
        browser.find_element("css selector", f"#protocol input[value='{protocol}']").find_element("xpath", "..").click()
        if protocol == store.DIRECT:
            _sort(browser, f"score:{bench}")
        csv = _scores(profile, protocol, bench)
        best = sorted(csv.items(), key=lambda kv: (-kv[1], kv[0]))[:FIRST]
        shown = _rows(browser, f"score:{bench}")
        assert [m for m, _ in shown] == [m for m, _ in best], (protocol, bench)
        assert [float(f"{v:.6g}") for _, v in shown] == [float(f"{v:.6g}") for _, v in best]

    # the search box keeps the rows whose name holds the text
    needle = _shown(browser)[0].split("/")[-1][:4].lower()
    search = browser.find_element("id", "search")
    search.send_keys(needle)
    assert _shown(browser) and all(needle in m.lower() for m in _shown(browser))

    # nothing but the page itself was requested, and the script raised nothing
    assert set(_requests(browser)) <= {page.resolve().as_uri()}, _requests(browser)
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


# --------------------------------------------------------------------------- what a reader relies on (issue 53)
def _positions(profile: str, protocol: str) -> dict[str, int]:
    """Each model's place in the order of mean_ranks.csv's mean ranks (1 = best, equal means share)."""
    table = pd.read_csv(paths.stage_dir(profile, "04_rank_agreement") / leaderboard.RANKS)
    table = table[table["protocol"] == protocol]
    return dict(zip(table["model"], table["mean_rank"].rank(method="min").astype(int)))


def _table(driver) -> list[list[str]]:
    """The table as shown: the header's names and every row's cell texts, in order."""
    return driver.execute_script(
        "return [[...document.querySelectorAll('#board thead tr:last-child th')].map((th) => th.dataset.csv),"
        " ...[...document.querySelectorAll('#rows tr[data-model]')]"
        ".map((tr) => [...tr.children].map((td) => td.textContent))]")


@pytest.mark.parametrize("page", ["published", "smoke"], indirect=True)
def test_positions_chart_csv_and_url_state(browser, page, tmp_path):
    import csv

    profile, page = page
    _open(browser, page)
    before, after = _positions(profile, store.DIRECT), _positions(profile, store.TBT)

    # each row: its position under direct evaluation -> under train-before-test ("16 -> 2")
    cells = browser.execute_script(
        f"return [...document.querySelectorAll(\"#rows td[data-key='move:{store.TBT}']\")].map((td) =>"
        " [td.closest('tr').dataset.model, Number(td.dataset.from), Number(td.dataset.to), td.textContent])")
    assert len(cells) == len(after)
    for model, a, b, text in cells:
        assert (a, b) == (before[model], after[model]) and text.startswith(f"{a} \u2192 {b}"), (model, text)

    # the chart: one line per model, its ends at the two positions (top = 1), in its family's colour
    lines = browser.execute_script(
        "return [...document.querySelectorAll('#slope g.model')].map((g) => { const l = g.querySelector('line');"
        " return [g.dataset.model, Number(l.getAttribute('y1')), Number(l.getAttribute('y2'))]; })")
    assert sorted(m for m, _, _ in lines) == sorted(after)
    for model, y1, y2 in lines:
        assert y1 - lines[0][1] == pytest.approx((before[model] - before[lines[0][0]]) * 13, abs=1e-6)
        assert (y2 - lines[0][2]) == pytest.approx((after[model] - after[lines[0][0]]) * 13, abs=1e-6)

    # the CSV download: the table as shown, filtered and sorted, cell for cell
    browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    family = metadata.models_frame(_shown(browser), paths.store_dir(profile))["family"].value_counts().index[0]
    _choose(browser, "family", family)
    _sort(browser, f"move:{store.TBT}")
    browser.find_element("id", "csv").click()
    deadline = time.time() + 10
    while not list(tmp_path.glob("*.csv")):
        assert time.time() < deadline, "no CSV downloaded within 10 s"
        time.sleep(0.1)
    with next(tmp_path.glob("*.csv")).open(newline="", encoding="utf-8") as fh:
        assert list(csv.reader(fh)) == _table(browser)

    # the state is in the URL: a reload shows the same protocol, filter, order and rows
    browser.find_element("css selector", f"#protocol input[value='{store.DIRECT}']").find_element("xpath", "..").click()
    shown, url = _table(browser), browser.current_url
    assert "family=" in url and f"protocol={store.DIRECT}" in url and f"sort=move%3A{store.TBT}" in url
    browser.refresh()
    _ready(browser, page)
    assert browser.current_url == url and _table(browser) == shown
    assert browser.find_element("css selector", f"#protocol input[value='{store.DIRECT}']").is_selected()

    # a search nothing matches says so
    browser.find_element("id", "search").send_keys("no-such-model-anywhere")
    assert _shown(browser) == [] and "No model matches" in browser.find_element("id", "no-match").text
    browser.get("about:blank")


def _boxes(driver, selector: str) -> list[dict]:
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].filter((e) => e.getClientRects().length).map((e) => {"
        " const r = e.getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,"
        " text: e.textContent.slice(0, 30)}; })", selector)


def _overlapping(boxes: list[dict]) -> list[tuple[str, str]]:
    return [(a["text"], b["text"]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if min(a["right"], b["right"]) - max(a["left"], b["left"]) > 1
            and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > 1]


@pytest.mark.parametrize("page", ["published", "smoke"], indirect=True)
def test_a_phone_of_390_px_and_one_figure_numbering(browser, page):
    profile, page = page
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    try:
        _open(browser, page)
        width, height = browser.execute_script("return [innerWidth, innerHeight]")
        assert width == 390
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width    # no sideways page
        for selector in (".filters > *", "#protocol label", ".legend .chip", ".figures li", "header p", "#slope svg"):
            boxes = _boxes(browser, selector)
            assert boxes, selector
            assert all(b["left"] >= -1 and b["right"] <= width + 1 for b in boxes), (selector, boxes)
            if selector != "header p":
                assert _overlapping(boxes) == [], selector
        controls = _boxes(browser, ".controls")[0]
        sticky = browser.execute_script("return getComputedStyle(document.querySelector('.controls')).position")
        assert sticky != "sticky" or controls["bottom"] - controls["top"] < 0.3 * height
        model = _boxes(browser, "#rows td.model")[0]
        assert model["right"] - model["left"] <= 0.4 * width
        board = browser.execute_script(
            "return [...document.querySelectorAll('.figures li')].map((li) => [li.value, li.querySelector('a').hash])")

        sheet = page.with_name("figures.html")
        browser.get(sheet.resolve().as_uri())
        assert browser.execute_script("return document.querySelector(\"meta[name=viewport]\") !== null")
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width
        imgs = _boxes(browser, "figure img")
        assert imgs and all(b["right"] <= width + 1 for b in imgs)
        numbers = browser.execute_script(
            "return [...document.querySelectorAll('figure')].map((f) => [Number(f.querySelector('figcaption b')"
            ".textContent.match(/Figure (\\d+)\\./)[1]), '#' + f.id])")
        assert sorted(board) == sorted(numbers) and len(numbers) >= 5
        if profile == "published":          # the README's headline figure by the same number
            from runner.docblocks import HEADLINE

            said = int(re.search(r"Figure (\d+) of `outputs/published/figures.html`",
                                 (paths.ROOT / "README.md").read_text()).group(1))
            anchor = f"#{HEADLINE[1]}-{HEADLINE[2].split('/')[-1].removesuffix('.png')}"
            assert [said, anchor] in numbers
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
