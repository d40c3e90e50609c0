"""The monitor's page in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``, installed
by scripts/ensure-services) driven by Selenium against ``sparksync serve`` on the demo's topology. A subscription
turns to error after its database is broken and back after it is repaired, on the page as it refreshes itself;
the latency chart is drawn; the browser logs no error; a screenshot is kept in the test's folder."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.support.service import Service, break_replica, repair_replica, service_config

pytestmark = pytest.mark.spark

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser():
    missing = [p for p in (CHROMIUM, DRIVER) if not shutil.which(p)]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service as DriverService
    except ImportError:
        missing.append("selenium (the test extra)")
    if missing:
        message = f"the browser test needs {', '.join(missing)} (scripts/ensure-services installs them)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,2200",
                "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=DriverService(DRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def service(service_demo, tmp_path_factory):
    svc = Service(service_config(service_demo, name="browser.toml", alerts={"interval_s": 0.5}),
                  tmp_path_factory.mktemp("browser") / "serve.log").start()
    yield svc
    svc.stop()


def test_the_page_follows_a_subscription_into_error_and_back(browser, service, service_demo, tmp_path):
    from selenium.webdriver.support.ui import WebDriverWait

    def js(script: str, *args):
        """Read the page in one script: the page replaces its main part every second, so an element found in
        one call may be gone by the next (what a stale element reference is)."""
        return browser.execute_script(script, *args)

    def state(name: str) -> str | None:
        return js("var r = document.querySelector('tr[data-subscription=\"' + arguments[0] + '\"]');"
                  "return r ? r.getAttribute('data-state') : null;", name)

    def text(selector: str) -> str | None:
        return js("var r = document.querySelector(arguments[0]); return r ? r.textContent : null;", selector)

    def attribute(selector: str, name: str) -> str | None:
        return js("var r = document.querySelector(arguments[0]); return r ? r.getAttribute(arguments[1]) : null;",
                  selector, name)

    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    browser.get(service.monitor + "/?refresh=1")
    assert "sparksync monitor" in browser.title
    wait.until(lambda d: state("Store2") in ("idle", "running"))
    # the page refreshes itself (its script fetches its main part again and puts it in place)
    wait.until(lambda d: attribute("#monitor", "data-refreshed"))
    # the chart of tracer token latencies (serve posts one a second here)
    wait.until(lambda d: attribute("#latency-chart polyline.series", "points"))
    assert attribute("#latency-chart polyline.series", "data-series") == "Reports/Reporting"

    break_replica(service_demo / "store2.db")
    try:
        wait.until(lambda d: state("Store2") == "error")
        assert "MSmerge_genhistory" in (text('tr[data-subscription="Store2"]') or "")     # the reason, on the row
        assert attribute('tr[data-publication="Sales"]', "data-state") == "error"
        browser.save_screenshot(str(tmp_path / "monitor-error.png"))
    finally:
        repair_replica(service_demo / "store2.db")
    wait.until(lambda d: state("Store2") in ("idle", "running"))
    wait.until(lambda d: attribute('tr[data-publication="Sales"]', "data-state") in ("idle", "running"))
    browser.save_screenshot(str(tmp_path / "monitor.png"))
    assert (tmp_path / "monitor.png").stat().st_size > 10_000
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def test_a_search_finds_an_enrolled_device_and_the_refresh_keeps_it(browser, service, service_demo):
    """The demo's till is enrolled into device group Tills: the page counts it in its group and partition, never as a
    row of its own; typed into the search box, its name finds it, with its last syncs, and the page's refreshes keep
    showing it (the script asks for the same search)."""
    import sqlite3

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with sqlite3.connect(service_demo / "hq.db") as hq:
        (till,), = hq.execute("SELECT subscription FROM MSweb_devices").fetchall()

    def js(script: str, *args):
        return browser.execute_script(script, *args)

    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    browser.get(service.monitor + "/?refresh=1")
    wait.until(lambda d: js("return document.querySelector('tr[data-group=\"Tills\"]') !== null"))
    assert not js("return document.querySelector('tr[data-device=\"' + arguments[0] + '\"]') !== null", till)
    box = browser.find_element(By.CSS_SELECTOR, "#search input[name=q]")
    box.send_keys(till[-6:])
    box.submit()
    found = "var r = document.querySelector('tr[data-device=\"' + arguments[0] + '\"]'); return r ? r.textContent : null;"
    wait.until(lambda d: js(found, till))
    assert "Tills" in js(found, till)
    assert js("return document.querySelector('tr[data-runs-of=\"' + arguments[0] + '\"]') !== null", till)
    before = js("return document.getElementById('monitor').getAttribute('data-refreshed')")
    wait.until(lambda d: js("return document.getElementById('monitor').getAttribute('data-refreshed')") not in
               (None, before))
    assert js(found, till), "the refreshed page lost the search"
    assert js("return document.querySelector('#search input[name=q]').value") == till[-6:]
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
