"""The console (GET /, gateway/server/console.html) in a real headless browser: Debian's
chromium driven by its chromedriver through selenium. The page loads, takes the token, shows a
registered query, shows a match arriving, rejects a broken query with its line and column,
and registers a query. Screenshots are kept in build/test-artifacts/console/.

When chromium or its driver is missing the test installs them with apt-get (a root shell with
the Debian archive reachable, as in CI); when that is impossible it fails saying so."""
import pathlib
import shutil
import subprocess

import pytest

from raycep.gateway.client import connect

from cluster_helpers import PAIR, make_stream, read_all, send_in_slices

TOKEN = "c0ns0le"
ARTIFACTS = pathlib.Path(__file__).resolve().parents[2] / "build" / "test-artifacts" / "console"
WAIT = 30


@pytest.fixture(scope="module")
def browser():
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        done = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends",
                               "chromium", "chromium-driver"], capture_output=True, text=True,
                              timeout=900)
        if done.returncode != 0:
            pytest.fail("the console test needs Debian's chromium and chromium-driver and "
                        f"could not install them: {done.stderr.strip()[-500:]}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(WAIT)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def _wait(driver, predicate, what: str):
    from selenium.webdriver.support.ui import WebDriverWait
    try:
        return WebDriverWait(driver, WAIT, poll_frequency=0.2).until(lambda d: predicate(d))
    except Exception:
        driver.save_screenshot(str(ARTIFACTS / "failed.png"))
        raise AssertionError(f"the console did not {what} (screenshot: failed.png)") from None


def test_console_shows_queries_and_matches_and_checks_queries(make_cluster, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    cluster = make_cluster(token=TOKEN)
    client = connect(cluster.url, token=TOKEN)
    client.register(PAIR, name="pair")

    browser.get(cluster.url + "/")
    assert browser.title == "raycep console"
    _wait(browser, lambda d: "token" in d.find_element(By.ID, "status").text,
          "say that the token is missing")
    token = browser.find_element(By.ID, "token")
    token.send_keys(TOKEN, Keys.TAB)                      # change: kept for the tab
    row = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-query="pair"]'),
                "show the registered query")[0]
    assert "keyed" in row.text and "running" in row.text
    browser.save_screenshot(str(ARTIFACTS / "1-query.png"))

    events = make_stream(300, 4, 5, 0.0, gaps=(0.25, 0.5))
    send_in_slices(client, events)
    stored = len(read_all(client, "pair"))
    assert stored > 0
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'li.match[data-query="pair"]'),
          "show a match arriving")
    _wait(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, 'tr[data-query="pair"] td.matches').text == f"{stored:,}",
        "count the matches stored")
    browser.save_screenshot(str(ARTIFACTS / "2-matches.png"))

    text = browser.find_element(By.ID, "query-text")
    text.send_keys("PATTERN SEQ(A a, B b)\nWHERE a.x >> 1 WITHIN 5 seconds")
    browser.find_element(By.ID, "add-query").click()
    error = _wait(browser, lambda d: d.find_element(By.ID, "add-error").text,
                  "show the syntax error")
    assert error.startswith("line 2, column ")
    assert [q["id"] for q in client.queries()] == ["pair"]          # nothing registered
    browser.save_screenshot(str(ARTIFACTS / "3-syntax-error.png"))

    text.clear()
    text.send_keys("PATTERN SEQ(A a, C c) WHERE [k] AND c.x > a.x WITHIN 5 seconds")
    browser.find_element(By.ID, "query-name").send_keys("ac")
    browser.find_element(By.ID, "add-query").click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-query="ac"]'),
          "show the query registered from the page")
    assert [q["id"] for q in client.queries()] == ["pair", "ac"]
    assert browser.find_element(By.ID, "add-error").text == ""
    browser.save_screenshot(str(ARTIFACTS / "4-registered.png"))
