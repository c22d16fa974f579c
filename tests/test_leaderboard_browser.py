"""The leaderboard pages of the published and smoke profiles in a real browser: headless Chromium
(Debian's chromium and chromium-driver, which .ci/run installs) opens each page from the file system
with the network switched off, sorts by the mean rank under each protocol, filters to one family,
switches the score columns' protocol, searches, and reads the first rows back; they must be the
rows of mean_ranks.csv and of the score CSVs (smoke: 02's tbt_scores.csv and 03's
direct_scores.csv; published, which has no 02 or 03: the published all_results.json), in the order
the page claims. No request may leave the file. A screenshot of each page is written beside it
(``outputs/<profile>/leaderboard.png``) for review. Without a browser the module skips, in one line
saying why."""

from __future__ import annotations

import json
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
    return driver.execute_script("return [...document.querySelectorAll('#rows tr')].map((tr) => tr.dataset.model)")


def _sort(driver, key: str) -> None:
    driver.find_element("css selector", f"th[data-key='{key}'] button.sort").click()


def _choose(driver, select_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", select_id)).select_by_value(value)


def _open(driver, page):
    driver.get_log("performance")                    # what the browser did before this page is not its
    driver.get(page.resolve().as_uri())
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
