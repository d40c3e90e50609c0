"""``sparksync serve`` as the one long-lived service, on the demo's topology (SQLite files): the agents on their
schedules, the monitor's documents equal to the CLI's ``--json``, ``/metrics`` against ``status``, the monitor
read-only and guarded, a run that finds its lock held waiting for its slot, an alert at a local webhook that
fires and resolves. The page in a real browser is ``test_monitor_page.py``; SIGTERM and kill -9 mid-round
``tests/faults/test_service_stops.py``."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import tomllib
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from sparksync import locks
from sparksync.cli.app import app
from sparksync.config import AlertsConfig
from sparksync.dialects import connect
from sparksync.monitor.app import make_monitor_app
from sparksync.monitor.rollup import cadences_of, roll_up
from sparksync.monitor.watch import NoAgents, Watch
from sparksync.topology import load_config
from sparksync.web import tokens
from sparksync.web.listener import Listener
from tests.support.config import toml
from tests.support.service import Service, Webhook, break_replica, repair_replica, service_config, sql, wait_until
from tests.support.web import free_port

pytestmark = pytest.mark.spark

OPERATOR_TOKEN = "operator-token-for-the-tests-0123456789"


def steady(doc):
    """A document without what changes from one reading to the next (the reading's time, ages in seconds)."""
    if isinstance(doc, dict):
        return {k: steady(v) for k, v in doc.items() if k != "time" and not k.endswith("_age")}
    if isinstance(doc, list):
        return [steady(v) for v in doc]
    return doc


def cli_json(*args: str) -> object:
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def quiet(service_demo):
    """The monitor's app on a real listener over the demo, with no agent running (documents hold still), and a
    second one that requires the operator's token."""
    cfg = service_config(service_demo, name="quiet.toml")
    topology = load_config(cfg)
    servers = []
    urls = []
    for token in (None, OPERATOR_TOKEN):
        port = free_port()
        listener = Listener(make_monitor_app(topology, NoAgents(), None, token), "127.0.0.1", port, "monitor")
        listener.start("test monitor")
        server = listener.server
        servers.append(server)
        urls.append(f"http://127.0.0.1:{port}")
    yield cfg, urls[0], urls[1]
    for server in servers:
        server.should_exit = True


def test_api_documents_are_the_cli_json(quiet):
    cfg, url, _ = quiet
    for path, args in (("/api/status", ["status"]), ("/api/conflicts", ["conflicts"]),
                       ("/api/history", ["history"])):
        api = httpx.get(url + path, timeout=30).json()
        cli = cli_json(*args, "-c", str(cfg), "--json")
        assert steady(api) == steady(cli), path
    assert len(httpx.get(url + "/api/conflicts?publication=Sales", timeout=30).json()) == 5   # the demo's conflicts
    bad = httpx.get(url + "/api/conflicts?publication=Nope", timeout=30)
    assert bad.status_code == 400 and "Nope" in bad.json()["detail"]


def test_metrics_agree_with_status(quiet, service_demo):
    cfg, url, _ = quiet
    status = cli_json("status", "-c", str(cfg), "--json")
    text = httpx.get(url + "/metrics", timeout=30).text
    assert all(line.startswith(("# HELP sparksync_", "# TYPE sparksync_", "sparksync_")) for line in text.splitlines())
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    subs = status["subscriptions"] + status["transactional"]["subscriptions"]
    assert len(subs) == 7
    (device,) = [s for s in subs if s.get("group")]           # the demo's till, enrolled into Tills
    subs.remove(device)
    for s in status["subscriptions"]:
        if s is device:
            continue
        k = {"publication": s["publication"], "subscription": s["name"]}
        assert value("sparksync_pending_changes", direction="download", **k) == s["pending_download"]
        if s.get("pending_upload") is not None:
            assert value("sparksync_pending_changes", direction="upload", **k) == s["pending_upload"]
            assert value("sparksync_failed_changes", direction="download", **k) == s["failed_download"]
        assert value("sparksync_failed_changes", direction="upload", **k) == s["failed_upload"]
    (rep,) = status["transactional"]["subscriptions"]
    assert value("sparksync_pending_changes", direction="download", publication="Reports",
                 subscription="Reporting") == rep["pending_transactions"]
    rolled = roll_up(status, AlertsConfig(), set(), dt.datetime.now(dt.UTC),
                     cadences_of(load_config(cfg)))["subscriptions"]
    for s in subs:      # one roll-up state each, the one status's document gives; the demo's are healthy (no agent
        # runs here: what waits grows late; the till has not synced since the demo, maybe 15 minutes ago)
        states = {lbl["status"]: v for (n, lbls), v in samples.items() if n == "sparksync_subscription_status"
                  for lbl in [dict(lbls)] if lbl["subscription"] == s["name"]}
        assert sum(states.values()) == 1 and states[rolled[s["name"]]["state"]] == 1, (s["name"], states)
        assert rolled[s["name"]]["state"] in ("idle", "performance critical", "offline"), rolled[s["name"]]
    # an enrolled device has no series of its own: it is counted in its group and partition
    where = {"publication": "Territories", "group": "Tills", "partition": device["host_name"]}
    assert not [n for (n, lbls) in samples if dict(lbls).get("subscription") == device["name"]]
    counted = {dict(lbls)["status"]: v for (n, lbls), v in samples.items() if n == "sparksync_devices"}
    assert sum(counted.values()) == 1 and counted[rolled[device["name"]]["state"]] == 1, counted
    assert value("sparksync_devices_pending_changes", **where) == device["pending_download"]
    assert value("sparksync_devices_failed_changes", **where) == device["failed_upload"]
    # the counters are the history tables' sums, read independently here
    hq = service_demo / "hq.db"
    (till,), = sql(hq, "SELECT subscription FROM MSweb_devices")       # the demo's till enrolled into Tills
    for name in ("Store1", "Store2", "Canada", till):
        up, down, conflicts, runs = sql(hq, "SELECT sum(upload_inserts + upload_updates + upload_deletes), "
                                            "sum(download_inserts + download_updates + download_deletes), "
                                            "sum(upload_conflicts + download_conflicts), count(*) FROM MSmerge_sessions "
                                            "WHERE subscription = ?", (name,))[0]
        if name == till:
            assert value("sparksync_devices_rows_moved_total", **where, direction="upload") == up
            assert value("sparksync_devices_rows_moved_total", **where, direction="download") == down
            assert value("sparksync_devices_syncs_total", **where, outcome="all") == runs > 0
            continue
        pub = "Sales" if name.startswith("Store") else "Territories"
        assert value("sparksync_rows_moved_total", publication=pub, subscription=name, direction="upload") == up
        assert value("sparksync_rows_moved_total", publication=pub, subscription=name, direction="download") == down
        assert value("sparksync_conflicts_total", publication=pub, subscription=name) == conflicts
    assert value("sparksync_conflicts_total", publication="Sales", subscription="Store2") == 5
    # the example rules file asks only for metrics there are
    rules = (Path(__file__).resolve().parents[2] / "docs" / "examples" / "prometheus-rules.yml").read_text()
    exported = {name for name, _ in samples} | {f.name for f in text_string_to_metric_families(text)}
    assert set(re.findall(r"\bsparksync_[a-z_]+", rules)) <= exported


def test_the_monitor_is_read_only_and_needs_the_operators_token(quiet, service_demo):
    cfg, open_url, guarded = quiet
    for path in ("/", "/api/status", "/api/conflicts", "/api/history", "/metrics", "/healthz", "/elsewhere"):
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            r = httpx.request(method, open_url + path, timeout=10)
            assert r.status_code == 405 and r.headers["allow"] == "GET", (method, path, r.status_code)
    assert httpx.get(open_url + "/elsewhere", timeout=10).status_code == 404
    with connect(f"sqlite:///{service_demo / 'hq.db'}") as hq:
        till = hq.scalar("SELECT subscription FROM MSweb_devices")         # the demo's till, enrolled
        device_token = tokens.create(hq, till, rotate=True)
    basic = base64.b64encode(f"operator:{OPERATOR_TOKEN}".encode()).decode()
    for headers, expected in (({}, 401), ({"Authorization": "Bearer wrong-token-0123456789"}, 401),
                              ({"Authorization": f"Bearer {device_token}"}, 401),
                              ({"Authorization": f"Bearer {OPERATOR_TOKEN}"}, 200),
                              ({"Authorization": f"Basic {basic}"}, 200)):
        for path in ("/", "/api/status", "/metrics"):
            r = httpx.get(guarded + path, headers=headers, timeout=30)
            assert r.status_code == expected, (headers, path)
            assert OPERATOR_TOKEN not in r.text and device_token not in r.text
            if expected == 401:
                assert r.headers["www-authenticate"].startswith("Basic")
    assert httpx.get(guarded + "/healthz", timeout=10).status_code == 200
    assert httpx.post(guarded + "/api/status", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
                      timeout=10).status_code == 405
    # beyond loopback without a token, or with a short one, serve refuses to start, naming why
    wide = service_config(service_demo, name="wide.toml", server={"monitor": f"0.0.0.0:{free_port()}"})
    for env, needle in (({}, "[server] monitor"), ({"SPARKSYNC_OPERATOR_TOKEN": "short"}, "too short")):
        result = CliRunner().invoke(app, ["serve", "-c", str(wide)], env=env)
        assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output


def test_no_password_or_token_in_any_page_document_metric_or_alert(service_demo):
    """The redaction tests' URLs in the configuration (a password with a raw '@', one in a plain URL), a webhook
    whose path is its key, and the operator's token: none of them in anything the monitor serves or sends."""
    secrets = ("sec@retPW", "retPW", "hunter2", "XXXXhookkeyXXXX", OPERATOR_TOKEN)
    cfg = service_config(
        service_demo, name="secrets.toml", distributor={"database": "postgresql://postgres:hunter2@127.0.0.1:1/nowhere"},
        alerts={"webhook": "https://hooks.example.com/services/T0/B0/XXXXhookkeyXXXX", "latency_s": 0.001})
    data = tomllib.loads(cfg.read_text())
    data["subscriptions"].append({"name": "Remote", "publication": "Sales",
                                  "database": "postgresql://postgres:sec@retPW@127.0.0.1:1/nowhere"})
    cfg.write_text(toml(data))
    topology = load_config(cfg)
    sql(service_demo / "hq.db", "UPDATE Product SET ListPrice = ListPrice + 1 WHERE ProductID = "
                                "(SELECT min(ProductID) FROM Product)")     # waits for the stores (no agent runs yet)
    watch = Watch(topology, NoAgents())
    watch.evaluate()
    assert {a["alert"] for a in watch.active()} == {"latency"}, watch.active()
    port = free_port()
    listener = Listener(make_monitor_app(topology, NoAgents(), watch, OPERATOR_TOKEN), "127.0.0.1", port, "monitor")
    listener.start("secrets monitor")
    server = listener.server
    try:
        headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
        texts = [json.dumps(watch.active())]
        for path in ("/", "/?part=main", "/api/status", "/api/conflicts", "/api/history", "/metrics", "/healthz",
                     "/nowhere"):
            r = httpx.get(f"http://127.0.0.1:{port}{path}", headers=headers, timeout=30)
            assert r.status_code in (200, 404), (path, r.status_code, r.text[:500])
            texts.append(r.text)
        status = json.loads(texts[3])
        assert status["transactional"]["distributor"]["state"] == "unreachable"
        for text in texts:
            for secret in secrets:
                assert secret not in text
    finally:
        server.should_exit = True


def test_an_unreachable_publisher_is_said_on_the_page_the_api_and_as_an_alert(service_demo):
    cfg = service_config(service_demo, name="unreachable.toml")
    data = tomllib.loads(cfg.read_text())
    data["publisher"]["database"] = "postgresql://postgres:hunter2@127.0.0.1:1/nowhere"
    cfg.write_text(toml(data))
    topology = load_config(cfg)
    watch = Watch(topology, NoAgents())
    watch.evaluate()
    (alert,) = watch.active()
    assert alert["alert"] == "error" and alert["publication"] == "HQ" and "cannot read" in alert["message"]
    assert "hunter2" not in json.dumps(alert)
    port = free_port()
    listener = Listener(make_monitor_app(topology, NoAgents(), watch, None), "127.0.0.1", port, "monitor")
    listener.start("unreachable monitor")
    server = listener.server
    try:
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=30)
        assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
        assert 'id="unreadable"' in page.text and "127.0.0.1:1" in page.text and "hunter2" not in page.text
        part = httpx.get(f"http://127.0.0.1:{port}/?part=main", timeout=30)
        assert part.status_code == 503 and "<script" not in part.text and 'id="unreadable"' in part.text
        for path in ("/api/status", "/metrics"):
            r = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=30)
            assert r.status_code == 503 and r.json()["title"] == "unavailable" and "hunter2" not in r.text
        assert httpx.get(f"http://127.0.0.1:{port}/?part=../../etc", timeout=30).status_code == 400
        assert httpx.get(f"http://127.0.0.1:{port}/api/history?limit=-1", timeout=30).status_code == 400
        assert httpx.get(f"http://127.0.0.1:{port}/api/status", timeout=30,
                         headers={"Authorization": "Basic !!!"}).status_code == 503       # no token asked here
    finally:
        server.should_exit = True


@pytest.fixture(scope="module")
def hook():
    receiver = Webhook(fail_first=1)
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def service(service_demo, hook, tmp_path_factory):
    cfg = service_config(service_demo, name="serve.toml",
                         alerts={"interval_s": 0.5, "webhook": hook.url, "latency_s": 3600, "webhook_retries": 5})
    svc = Service(cfg, tmp_path_factory.mktemp("serve") / "serve.log").start()
    yield svc
    svc.stop()


def test_serve_runs_every_agent_on_its_schedule(service, service_demo):
    demo = service_demo
    sql(demo / "hq.db", "UPDATE Product SET ListPrice = 777.77 WHERE ProductID = (SELECT min(ProductID) FROM Product)")
    sql(demo / "store1.db", "UPDATE Vendor SET Name = 'renamed at Store1' WHERE rowid = (SELECT min(rowid) FROM Vendor)")
    for db in ("store1.db", "store2.db", "store3.db", "reporting.db"):
        wait_until(lambda db=db: sql(demo / db, "SELECT count(*) FROM Product WHERE ListPrice = 777.77")[0][0] == 1,
                   f"the publisher's change at {db}")
    for db in ("hq.db", "store2.db", "store3.db"):
        wait_until(lambda db=db: sql(demo / db, "SELECT count(*) FROM Vendor WHERE Name = 'renamed at Store1'")[0][0],
                   f"Store1's change at {db}")
    log = service.said("merge agent Sales: ")
    rounds = [float(t) for t in re.findall(r"merge agent Sales: [0-9,]+ row\(s\) in ([0-9.]+)s", log)]
    assert rounds and max(rounds) < 30
    assert "starting Spark" not in log           # small rounds: the service started no JVM
    history = service.get("/api/history").json()["runs"]
    agents = {(r["agent"], r["publication"]) for r in history if r["status"] == "succeeded"}
    assert {("merge agent", "Sales"), ("merge agent", "Territories"), ("log reader", "Reports"),
            ("distribution agent", "Reports")} <= agents
    status = service.get("/api/status").json()
    assert status["ok"], status["problems"]


def test_a_run_that_finds_its_lock_held_waits_for_the_next_slot(service):
    """A manual command holds Territories' merge lock: the service's runs are skipped, saying who holds it, and
    none is recorded as failed; once it is released the next slot's run succeeds."""
    topology = load_config(service.config)
    start = len(service.text())
    with locks.hold(topology, "merge", ["Territories"], wait=30):
        wait_until(lambda: "trying again at the next slot" in service.text()[start:], "a skipped run in the log")
        released = dt.datetime.now(dt.UTC)
    line = next(ln for ln in service.text()[start:].splitlines() if "next slot" in ln)
    assert "merge agent Territories" in line and "held by merge" in line and f"pid {os.getpid()}" in line

    def ran_after() -> list[dict]:
        runs = service.get("/api/history").json()["runs"]
        return [r for r in runs if r["agent"] == "merge agent" and r["publication"] == "Territories"
                and dt.datetime.fromisoformat(r["start_time"]) > released]

    assert all(r["status"] == "succeeded" for r in wait_until(ran_after, "a Territories run after the lock"))
    runs = service.get("/api/history").json()["runs"]
    assert not [r for r in runs if r["publication"] == "Territories" and r["status"] == "failed"]
    assert service.get("/healthz").status_code == 200


def test_an_alert_reaches_the_webhook_and_resolves(service, service_demo, hook):
    store3 = service_demo / "store3.db"
    break_replica(store3)
    try:
        firing = wait_until(lambda: hook.events("error", "Store3"), "the error alert of Store3 at the webhook")
        assert firing[0]["status"] == "firing" and "Store3" in firing[0]["message"] and firing[0]["since"]
        assert hook.attempts > len(hook.bodies)        # the first POST was answered 500: it was sent again
        metric = 'sparksync_alert_firing{alert="error",group="",publication="Sales",subscription="Store3"} 1.0'
        wait_until(lambda: metric in service.get("/metrics").text, "the alert in /metrics")
        page = service.get("/").text
        assert 'data-alert="error"' in page and 'data-subscription="Store3" data-state="error"' in page
        sql(service_demo / "hq.db", "UPDATE Product SET ListPrice = 555.55 WHERE ProductID = "
                                    "(SELECT max(ProductID) FROM Product)")
        for healthy in ("store1.db", "store2.db"):         # one broken subscriber stops no other
            wait_until(lambda db=healthy: sql(service_demo / db, "SELECT count(*) FROM Product WHERE ListPrice = "
                                                                 "555.55")[0][0] == 1, f"the change at {healthy}")
        assert sql(store3, "SELECT count(*) FROM Product WHERE ListPrice = 555.55") == [(0,)]
    finally:
        repair_replica(store3)
    resolved = wait_until(lambda: [e for e in hook.events("error", "Store3") if e["status"] == "resolved"],
                          "the resolved message of Store3's alert")
    assert resolved[0]["since"] == firing[0]["since"]
    wait_until(lambda: sql(store3, "SELECT count(*) FROM Product WHERE ListPrice = 555.55")[0][0] == 1,
               "the change made while Store3 was broken, at Store3")
    assert len(hook.events("error", "Store3")) == 2           # each once

