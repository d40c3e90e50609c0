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
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def state(name: str) -> str | None:
        rows = browser.find_elements(By.CSS_SELECTOR, f'tr[data-subscription="{name}"]')
        return rows[0].get_attribute("data-state") if rows else None

    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    browser.get(service.monitor + "/?refresh=1")
    assert "sparksync monitor" in browser.title
    wait.until(lambda d: state("Store2") in ("idle", "running"))
    # the page refreshes itself (its script fetches its main part again and puts it in place)
    wait.until(lambda d: d.find_element(By.ID, "monitor").get_attribute("data-refreshed"))
    # the chart of tracer token latencies (serve posts one a second here)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#latency-chart polyline.series"))
    series = browser.find_element(By.CSS_SELECTOR, "#latency-chart polyline.series")
    assert series.get_attribute("data-series") == "Reports/Reporting" and series.get_attribute("points")

    break_replica(service_demo / "store2.db")
    try:
        wait.until(lambda d: state("Store2") == "error")
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-subscription="Store2"]')
        assert "MSmerge_genhistory" in row.text          # the reason, on the row
        assert browser.find_elements(By.CSS_SELECTOR, 'tr[data-publication="Sales"][data-state="error"]')
        browser.save_screenshot(str(tmp_path / "monitor-error.png"))
    finally:
        repair_replica(service_demo / "store2.db")
    wait.until(lambda d: state("Store2") in ("idle", "running"))
    assert browser.find_elements(By.CSS_SELECTOR, 'tr[data-publication="Sales"]')[0].get_attribute("data-state") \
        in ("idle", "running")
    browser.save_screenshot(str(tmp_path / "monitor.png"))
    assert (tmp_path / "monitor.png").stat().st_size > 10_000
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
