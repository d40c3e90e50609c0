"""The service's and the monitor's logic without databases: schedules, which workers a configuration makes, the
status roll-up and performance rating, the alert rules (the stuck rule on a clock of the test's), the alert
book's fired and resolved events, the webhook's retries, and the webhook URL kept out of every output."""

from __future__ import annotations

import copy
import datetime as dt
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparksync.config import AlertsConfig
from sparksync.errors import ConfigurationError
from sparksync.monitor import webhook as webhook_module
from sparksync.monitor.alerts import Alert, AlertBook, Evaluator
from sparksync.monitor.rollup import ORDER, rating, roll_up
from sparksync.monitor.webhook import Webhook
from sparksync.redaction import redact
from sparksync.schedule import CONTINUOUS_IDLE, parse_schedule
from sparksync.service.jobs import workers_of
from sparksync.topology import parse_topology

T0 = dt.datetime(2026, 11, 27, 6, 0, 0, tzinfo=dt.UTC)


def valid_data() -> dict:
    return {"publisher": {"name": "HQ", "database": "sqlite:///data/hq.db"},
            "publications": [{"name": "Sales", "articles": [{"table": "Customer"}]}],
            "subscriptions": [{"name": "S1", "publication": "Sales", "database": "sqlite:///data/s1.db"},
                              {"name": "S2", "publication": "Sales", "database": "sqlite:///data/s2.db"}]}


def one_problem(data: dict) -> str:
    with pytest.raises(ConfigurationError) as ei:
        parse_topology(data, Path("/tmp"))
    assert len(ei.value.problems) == 1, ei.value.problems
    return ei.value.problems[0]


def test_schedules():
    assert parse_schedule("continuous").next_run(T0, found_work=True) == T0
    assert parse_schedule("continuous").next_run(T0, found_work=False) == T0 + dt.timedelta(seconds=CONTINUOUS_IDLE)
    assert parse_schedule("every 30s").next_run(T0, False) == T0 + dt.timedelta(seconds=30)
    assert parse_schedule("every  5m").next_run(T0, True) == T0 + dt.timedelta(minutes=5)
    assert parse_schedule("every 1h").seconds == 3600
    cron = parse_schedule("*/10 * * * *")
    assert cron.kind == "cron" and cron.first_run(T0 + dt.timedelta(minutes=1)) == T0 + dt.timedelta(minutes=10)
    assert cron.next_run(T0 + dt.timedelta(minutes=10), True) == T0 + dt.timedelta(minutes=20)
    assert parse_schedule("every 5m").first_run(T0) == T0              # at once when the service starts
    for bad in ("sometimes", "every 0s", "every 5 d", "61 * * * *", "* * * *"):
        with pytest.raises(ValueError):
            parse_schedule(bad)


def test_agent_schedule_in_the_configuration():
    data = valid_data()
    data["publications"][0]["agent_schedule"] = "every fortnight"
    assert one_problem(data).startswith("publications[0] (Sales).agent_schedule: 'every fortnight' is not a schedule")
    data = valid_data()
    data["subscriptions"][0]["agent_schedule"] = "99 * * * *"
    assert "is not a valid cron expression" in one_problem(data)
    data = valid_data()
    data["alerts"] = {"expiry_fraction": 1.5}
    assert one_problem(data).startswith("alerts.expiry_fraction: ")
    data["alerts"] = {"webhook": "ftp://x"}
    assert one_problem(data).startswith("alerts.webhook: ")
    data = valid_data()
    data["server"] = {"monitor": "8470"}
    assert one_problem(data).startswith("server.monitor: ")


def test_workers_group_subscriptions_by_schedule(tmp_path):
    data = valid_data()
    assert workers_of(parse_topology(copy.deepcopy(data), tmp_path)) == []        # no schedule: no runs
    data["publications"][0]["agent_schedule"] = "every 30s"
    data["subscriptions"][1]["agent_schedule"] = "every 5m"
    (w,) = workers_of(parse_topology(data, tmp_path))
    assert w.name == "merge agent Sales"
    assert [(g.schedule.text, g.subscriptions) for g in w.groups] == [("every 30s", ("S1",)), ("every 5m", ("S2",))]


def sub(name: str, **kw) -> dict:
    return {"name": name, "publication": "P", "status": "active", "pending_download": 0, "pending_upload": 0,
            "failed_download": 0, "failed_upload": 0, **kw}


def status_of(*subs: dict, **pub) -> dict:
    return {"publications": [{"name": "P", "state": "published", "retention": 10, **pub}],
            "subscriptions": list(subs), "publisher": {}}


def test_the_roll_up_takes_the_worst_state_in_sql_servers_order():
    alerts = AlertsConfig(latency_s=60)
    soon = (T0 + dt.timedelta(days=1)).isoformat()          # 1 of 10 days of retention left
    st = status_of(sub("A", status="stopped", last_error="boom"), sub("B", oldest_pending_download_age=90.0),
                   sub("C", failed_upload=2), sub("D", status="expired", problems=["x"]), sub("E", expires_at=soon),
                   sub("F", status="not initialized"), sub("G"), sub("H"))
    r = roll_up(st, alerts, {("P", "G")}, T0)["subscriptions"]
    assert [r[n]["state"] for n in "ABCDEFGH"] == ["error", "performance critical", "retrying", "expired",
                                                   "expiring soon", "uninitialized", "running", "idle"]
    assert r["A"]["why"] == "boom" and r["B"]["rating"] == "critical"
    # a publication is the worst of its subscriptions' and its own
    for worst_first in range(len(ORDER)):
        names = "ABCDEFGH"[worst_first:]
        rolled = roll_up(status_of(*[s for s in st["subscriptions"] if s["name"] in names]), alerts, {("P", "G")}, T0)
        assert rolled["publications"]["P"]["state"] == [r[n]["state"] for n in "ABCDEFGH"][worst_first]
    damaged = roll_up(status_of(sub("G"), state="damaged", problems=["triggers missing"]), alerts, set(), T0)
    assert damaged["publications"]["P"] == {"state": "error", "why": "triggers missing", "subscriptions": 1}


def test_performance_rating_bands():
    assert [rating(v, 100) for v in (0, 24.9, 25, 49, 50, 74, 75, 99, 100, 500)] == \
        ["excellent", "excellent", "good", "good", "fair", "fair", "poor", "poor", "critical", "critical"]


def test_the_stuck_rule_needs_a_backlog_that_makes_no_progress():
    ev = Evaluator(AlertsConfig(stuck_minutes=10))
    st = status_of(sub("A", pending_download=5, publisher_sentgen=3))

    def stuck(status, minutes):
        alerts = ev.evaluate(status, roll_up(status, ev.config, set(), T0), [], T0 + dt.timedelta(minutes=minutes))
        return [a for a in alerts if a.name == "stuck"]

    assert not stuck(st, 0) and not stuck(st, 9)
    assert "5 change(s) wait" in stuck(st, 10)[0].message
    moved = status_of(sub("A", pending_download=7, publisher_sentgen=4))       # new changes, but it moved
    assert not stuck(moved, 11) and not stuck(moved, 20) and stuck(moved, 21)
    assert not stuck(status_of(sub("A", pending_download=0, publisher_sentgen=4)), 40)    # nothing waits


def test_run_rules_take_each_agents_last_run():
    ev = Evaluator(AlertsConfig(merge_duration_s=60, min_rows_per_s=100))
    runs = [{"agent": "merge agent", "publication": "P", "subscription": "A", "seconds": 90.0, "rows": 50},
            {"agent": "merge agent", "publication": "P", "subscription": "A", "seconds": 1.0, "rows": 5000},
            {"agent": "distribution agent", "publication": "T", "subscription": "R", "seconds": 10.0, "rows": 5000}]
    alerts = ev.evaluate(status_of(), roll_up(status_of(), ev.config, set(), T0), runs, T0)
    assert sorted((a.name, a.subscription) for a in alerts) == [("duration", "A"), ("throughput", "A")]


def test_the_alert_book_says_fired_once_and_resolved_once():
    book = AlertBook()
    a = Alert("latency", "P", "A", "slow")
    assert [e.status for e in book.update([a], T0)] == ["firing"]
    assert book.update([Alert("latency", "P", "A", "slower")], T0 + dt.timedelta(seconds=5)) == []
    assert book.active()[0]["message"] == "slower" and book.active()[0]["since"] == T0.isoformat()
    (resolved,) = book.update([], T0 + dt.timedelta(seconds=9))
    assert resolved.status == "resolved" and resolved.to_dict()["since"] == T0.isoformat()
    assert book.update([], T0 + dt.timedelta(seconds=10)) == []


class _Receiver:
    def __init__(self, answers: list[int]):
        self.answers, self.bodies = list(answers), []
        self.done = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(receiver.answers.pop(0) if receiver.answers else 204)
                self.end_headers()
                if not receiver.answers:
                    receiver.done.set()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/T000/B000/secretpathkey"


def test_the_webhook_retries_with_backoff_and_gives_up_on_a_refusal(monkeypatch):
    monkeypatch.setattr(webhook_module, "MAX_BACKOFF", 0.05)
    receiver = _Receiver([500, 503, 204, 400])
    said: list[str] = []
    hook = Webhook(AlertsConfig(webhook=receiver.url, webhook_retries=3), said.append)
    hook.start()
    book = AlertBook()
    hook.post(book.update([Alert("error", "P", "A", "boom")], T0))
    hook.post(book.update([], T0))
    hook.stop(grace=10)
    assert [b["status"] for b in receiver.bodies] == ["firing"] * 3 + ["resolved"]     # 500, 503, then taken
    assert (hook.sent, hook.failed) == (1, 1)                        # the 400 is not tried again
    assert "did not take the resolved error alert" in said[0] and "HTTP 400" in said[0]
    receiver.server.shutdown()


def test_a_webhook_url_never_appears_in_output(tmp_path):
    data = valid_data()
    data["alerts"] = {"webhook": "https://hooks.example.com/services/T000/B000/XXXXsecretXXXX"}
    parse_topology(data, tmp_path)
    text = redact("posting to https://hooks.example.com/services/T000/B000/XXXXsecretXXXX failed")
    assert "XXXXsecretXXXX" not in text and "hooks.example.com" in text
