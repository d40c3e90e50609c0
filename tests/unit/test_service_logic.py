"""The service's and the monitor's logic without databases: schedules, which workers a configuration makes, the
status roll-up and performance rating (relative to the agents' schedules; a web device offline past its
sync_interval), the alert rules (the stuck rule on a clock of the test's), the alert book's fired and resolved
events, the webhook's retries, and the webhook URL kept out of every output."""

from __future__ import annotations

import copy
import datetime as dt
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparksync.config import AlertsConfig
from sparksync.errors import ConfigurationError, SparkClusterUnavailable
from sparksync.monitor import webhook as webhook_module
from sparksync.monitor.alerts import Alert, AlertBook, Evaluator
from sparksync.monitor.rollup import ORDER, Cadence, cadences_of, rating, roll_up
from sparksync.monitor.webhook import Webhook
from sparksync.redaction import redact
from sparksync.schedule import CONTINUOUS_IDLE, parse_interval, parse_schedule
from sparksync.service.jobs import workers_of
from sparksync.spark.lazy import LazySpark
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
    # the latest a run starts after a moment, by the schedule alone: what a waiting change is rated against
    at = T0 + dt.timedelta(seconds=30)
    assert parse_schedule("continuous").latest_run_after(at) == at + dt.timedelta(seconds=CONTINUOUS_IDLE)
    assert parse_schedule("every 1m").latest_run_after(at) == at + dt.timedelta(minutes=1)
    assert cron.latest_run_after(at) == T0 + dt.timedelta(minutes=10)
    assert [parse_interval(t) for t in ("90s", "15m", "1.5 h", "1d")] == [90, 900, 5400, 86400]
    for bad in ("soon", "0m", "15", "every 15m", "-5m"):
        with pytest.raises(ValueError):
            parse_interval(bad)


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
    data["publications"][0]["validate_schedule"] = "never"
    assert workers_of(parse_topology(copy.deepcopy(data), tmp_path)) == []        # no schedule: no runs
    data["publications"][0]["agent_schedule"] = "every 30s"
    data["subscriptions"][1]["agent_schedule"] = "every 5m"
    (w,) = workers_of(parse_topology(data, tmp_path))
    assert w.name == "merge agent Sales"
    assert [(g.schedule.text, g.subscriptions) for g in w.groups] == [("every 30s", ("S1",)), ("every 5m", ("S2",))]
    del data["publications"][0]["validate_schedule"]             # by default: every hour, the direct subscriptions
    merge, validation = workers_of(parse_topology(data, tmp_path))
    assert validation.name == "validation Sales" and [(g.schedule.text, g.subscriptions) for g in validation.groups] \
        == [("every 1h", ("S1", "S2"))]


def sub(name: str, **kw) -> dict:
    return {"name": name, "publication": "P", "status": "active", "pending_download": 0, "pending_upload": 0,
            "failed_download": 0, "failed_upload": 0, **kw}


def status_of(*subs: dict, **pub) -> dict:
    return {"publications": [{"name": "P", "state": "published", "retention": 10, **pub}],
            "subscriptions": list(subs), "publisher": {}}


def ago(**kw) -> str:
    return (T0 - dt.timedelta(**kw)).isoformat()


def device(name: str, **kw) -> dict:
    """A web subscription's entry: its device synced ``kw["last_sync"]``, one minute ago by default."""
    return sub(name, transport="web", **{"last_sync": ago(minutes=1), **kw})


def test_the_roll_up_takes_the_worst_state_in_sql_servers_order():
    alerts = AlertsConfig(latency_s=60)
    soon = (T0 + dt.timedelta(days=1)).isoformat()          # 1 of 10 days of retention left
    st = status_of(sub("A", status="stopped", last_error="boom"), sub("B", oldest_pending_download_age=90.0),
                   sub("C", failed_upload=2), sub("D", status="expired", problems=["x"]), sub("E", expires_at=soon),
                   sub("F", status="not initialized"), sub("G"), sub("H"),
                   device("I", last_sync=ago(hours=2), oldest_pending_download_age=7200.0))
    r = roll_up(st, alerts, {("P", "G")}, T0)["subscriptions"]
    assert [r[n]["state"] for n in "ABCDEFGHI"] == ["error", "performance critical", "retrying", "expired",
                                                    "expiring soon", "uninitialized", "running", "idle", "offline"]
    assert list(ORDER) == [r[n]["state"] for n in "ABCDEFGHI"]
    assert r["A"]["why"] == "boom" and r["B"]["rating"] == "critical"
    # a publication is the worst of its subscriptions' and its own
    for worst_first in range(len(ORDER)):
        names = "ABCDEFGHI"[worst_first:]
        rolled = roll_up(status_of(*[s for s in st["subscriptions"] if s["name"] in names]), alerts, {("P", "G")}, T0)
        assert rolled["publications"]["P"]["state"] == [r[n]["state"] for n in "ABCDEFGHI"][worst_first]
    damaged = roll_up(status_of(sub("G"), state="damaged", problems=["triggers missing"]), alerts, set(), T0)
    assert damaged["publications"]["P"] == {"state": "error", "why": "triggers missing", "subscriptions": 1}


def every(text: str, **kw) -> Cadence:
    return Cadence((parse_schedule(text),), **kw)


def rolled(entry: dict, cadence: Cadence | None, alerts: AlertsConfig | None = None, **pub) -> dict:
    """The roll-up of one subscription, its agents on ``cadence`` (None: no schedule), at T0."""
    return roll_up(status_of(entry, **pub), alerts or AlertsConfig(), set(), T0,
                   None if cadence is None else {entry["name"]: cadence})["subscriptions"][entry["name"]]


def test_a_change_is_late_only_past_the_scheduled_run_that_should_carry_it():
    """Threshold 30 s (the default). A change waits for the next run of each agent on its way: it is late from
    the latest that run can start, and only the time past it is rated."""
    minute = every("every 1m")
    on_time = rolled(sub("A", oldest_pending_download_age=50.0), minute)
    assert (on_time["state"], on_time["late_s"], on_time["rating"], on_time["latency_s"]) == ("idle", 0, "excellent", 50)
    assert rolled(sub("A", oldest_pending_download_age=50.0), None)["state"] == "performance critical"  # no schedule
    late = rolled(sub("A", oldest_pending_upload_age=100.0), minute)
    assert (late["state"], late["late_s"]) == ("performance critical", 40)
    assert late["why"] == "40s past its scheduled run (latency 100s) >= threshold 30s"
    assert rolled(sub("A", oldest_pending_download_age=80.0), minute)["rating"] == "fair"       # 20 s of 30
    # continuous: 5 s after it arrived
    assert rolled(sub("A", oldest_pending_download_age=20.0), every("continuous"))["late_s"] == 20 - CONTINUOUS_IDLE
    # cron */10: the first time of the expression after the change arrived (T0 is 06:00:00)
    cron = every("*/10 * * * *")
    at = T0 + dt.timedelta(minutes=10, seconds=20)
    for age, expected in ((590.0, 20.0), (640.0, 620.0)):              # arrived 06:00:30 / 05:59:40
        r = roll_up(status_of(sub("A", oldest_pending_download_age=age)), AlertsConfig(), set(), at, {"A": cron})
        assert r["subscriptions"]["A"]["late_s"] == expected
    # transactional: the log reader, then the distribution agent; an unread change waits for the log reader only
    tx = Cadence((parse_schedule("continuous"), parse_schedule("every 30s")), (parse_schedule("continuous"),))
    assert rolled(sub("R", oldest_pending_age=34.0), tx)["late_s"] == 0
    assert rolled(sub("R", oldest_pending_age=34.0), tx, oldest_unread_age=34.0)["late_s"] == 29
    # a change in the open generation came after the agent's last successful run for it (which found it empty):
    # its generation's time (when it was opened) says nothing of when the change came
    opened_long_ago = sub("A", oldest_pending_download_age=500.0, last_success=ago(seconds=20))
    assert rolled(opened_long_ago, minute)["late_s"] == 440
    assert rolled({**opened_long_ago, "download_in_open_generation": True}, minute)["late_s"] == 0
    assert rolled({**opened_long_ago, "download_in_open_generation": True, "last_success": ago(seconds=70)},
                  minute)["late_s"] == 10


def test_the_latency_alert_follows_the_rating():
    ev = Evaluator(AlertsConfig(latency_s=30))
    minute = {"A": every("every 1m")}

    def latency_alerts(age: float) -> list[Alert]:
        st = status_of(sub("A", oldest_pending_download_age=age))
        return [a for a in ev.evaluate(st, roll_up(st, ev.config, set(), T0, minute), [], T0) if a.name == "latency"]

    assert not latency_alerts(50.0) and not latency_alerts(89.0)
    (alert,) = latency_alerts(95.0)
    assert alert.message == "subscription A: its oldest waiting change is 35s late (it has waited 95s; threshold 30s)"
    st = status_of(device("T", last_sync=ago(hours=3), oldest_pending_download_age=9000.0))
    assert not ev.evaluate(st, roll_up(st, ev.config, set(), T0), [], T0)           # offline: not late, no alert


def test_a_web_device_past_its_sync_interval_is_offline_not_critical():
    quarter = Cadence.device(900)
    away = rolled(device("T", last_sync=ago(minutes=16), oldest_pending_download_age=960.0), quarter)
    assert away == {"publication": "P", "state": "offline", "late_s": None, "rating": None, "latency_s": 960,
                    "why": "offline since 2026-11-27 05:44:00 UTC (expected to sync every 15m)",
                    "offline_since": ago(minutes=16), "expires_in_s": None}
    # within its interval, rated against it like a scheduled agent
    near = rolled(device("T", last_sync=ago(minutes=14), oldest_pending_download_age=840.0), quarter)
    assert (near["state"], near["late_s"], near["rating"]) == ("idle", 0, "excellent")
    # it synced, yet a change older than its interval and the threshold still waits for it: late
    synced = rolled(device("T", oldest_pending_download_age=1000.0), quarter)
    assert (synced["state"], synced["why"]) == ("performance critical", "100s past its expected sync (every 15m) "
                                                                        "(latency 1000s) >= threshold 30s")
    # the states that say more still apply: a failed sync, changes to retry, retention running out
    gone = {"last_sync": ago(days=9), "oldest_pending_download_age": 9 * 86400.0}
    assert rolled(device("T", status="stopped", last_error="boom", **gone), quarter)["state"] == "error"
    assert rolled(device("T", failed_upload=1, **gone), quarter)["state"] == "retrying"
    assert rolled(device("T", expires_at=(T0 + dt.timedelta(days=1)).isoformat(), **gone), quarter)["state"] == \
        "expiring soon"
    # without the configuration's cadences, a device is expected every 15 minutes; with a month, it is on time
    assert rolled(device("T", **gone), None)["state"] == "offline"
    assert rolled(device("T", **gone), Cadence.device(30 * 86400))["state"] == "idle"
    # an offline device does not colour its publication
    both = roll_up(status_of(sub("S"), device("T", **gone)), AlertsConfig(), set(), T0)
    assert both["publications"]["P"]["state"] == "idle" and both["subscriptions"]["T"]["state"] == "offline"


def test_sync_interval_and_cadences_in_the_configuration(tmp_path):
    data = valid_data()
    data["publications"][0]["agent_schedule"] = "every 30s"
    data["publications"].append({"name": "Reports", "kind": "transactional", "articles": [{"table": "Customer"}]})
    data["distributor"] = {"database": "sqlite:///data/dist.db"}
    data["subscriptions"] += [
        {"name": "Till", "publication": "Sales", "transport": "web"},
        {"name": "Van", "publication": "Sales", "transport": "web", "sync_interval": "2h"},
        {"name": "R1", "publication": "Reports", "database": "sqlite:///data/r1.db", "agent_schedule": "every 1m"}]
    topology = parse_topology(copy.deepcopy(data), tmp_path)
    assert [s.sync_interval_s for s in topology.web_subscriptions_of("Sales")] == [900, 7200]
    c = cadences_of(topology)
    assert c["S1"] == every("every 30s") and c["Till"] == Cadence.device(900) and c["Van"].sync_interval_s == 7200
    # R1: its log reader runs on its publication's schedule, or the first of its subscriptions'; then R1's own
    assert c["R1"] == Cadence((parse_schedule("every 1m"),) * 2, (parse_schedule("every 1m"),))
    assert [(w.agent, w.groups[0].schedule.text) for w in workers_of(topology) if w.publication == "Reports"][:2] == \
        [("log reader", "every 1m"), ("distribution agent", "every 1m")]
    bad = copy.deepcopy(data)
    bad["subscriptions"][3]["sync_interval"] = "soon"
    assert one_problem(bad).startswith("subscriptions[3] (Van).sync_interval: 'soon' is not a duration")
    bad = copy.deepcopy(data)
    bad["subscriptions"][0]["sync_interval"] = "15m"
    assert one_problem(bad) == ("subscriptions[0] (S1): sync_interval is for web subscriptions (a device that syncs "
                                "when it wants); the agents of a direct subscription run on its agent_schedule")


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


class NoticedLock:
    """A lock that says when a second thread waits for it."""

    def __init__(self):
        self._lock, self.waited = threading.Lock(), threading.Event()

    def __enter__(self):
        if not self._lock.acquire(blocking=False):
            self.waited.set()
            self._lock.acquire()
        return self

    def __exit__(self, *exc):
        self._lock.release()


def test_a_failed_spark_start_is_the_answer_of_the_rounds_that_waited_for_it():
    """The service's first round starts Spark on a cluster that gives it no executor; a second round asks
    meanwhile: it gets the same error, without waiting for the cluster again. A round asking later tries again."""
    starting, give_up, calls = threading.Event(), threading.Event(), []

    def factory():
        calls.append(len(calls))
        if len(calls) > 1:
            return "session"
        starting.set()
        give_up.wait(30)
        raise SparkClusterUnavailable("Spark master spark://m:7077 gave this application no executor in 60 s")

    shared = LazySpark(factory)
    shared._lock = NoticedLock()  # type: ignore[assignment]
    errors: list[Exception] = []

    def round_():
        try:
            shared.get()
        except SparkClusterUnavailable as e:
            errors.append(e)

    rounds = [threading.Thread(target=round_) for _ in range(2)]
    rounds[0].start()
    assert starting.wait(30)
    rounds[1].start()
    assert shared._lock.waited.wait(30)
    give_up.set()
    for t in rounds:
        t.join(30)
    assert len(errors) == 2 and errors[0] is errors[1] and calls == [0]
    assert shared.get() == "session" and calls == [0, 1]


def test_a_device_groups_devices_fire_one_alert_per_rule_and_roll_up_per_partition():
    """1,000 enrolled tills: 120 offline for 3 hours, 7 in error, the rest healthy. The alerts are one ``error`` and
    one ``offline`` of the group (12% offline for 2 h or more), never one per till; the roll-up counts them per
    group and partition, the worst first; a till configured by hand still alerts on its own."""
    from sparksync.monitor.fleet import Fleet

    tills = []
    for i in range(1000):
        kw: dict = {"group": "Tills", "host_name": f"store-{i % 50}", "sync_interval_s": 900.0}
        if i < 120:
            kw["last_sync"] = ago(hours=3)
        elif i < 127:
            kw.update(status="stopped", last_error="disk full")
        tills.append(device(f"till-{i}", **kw))
    st = status_of(*tills, device("till-by-hand", status="stopped", last_error="boom"))
    config = AlertsConfig(devices_offline_percent=10)
    rollup = roll_up(st, config, set(), T0)
    alerts = Evaluator(config).evaluate(st, rollup, [], T0)
    by = {(a.name, a.group, a.subscription): a for a in alerts}
    assert set(by) == {("error", "Tills", None), ("offline", "Tills", None), ("error", None, "till-by-hand")}, by
    assert "7 of 1,000 device(s) in error" in by["error", "Tills", None].message
    assert "disk full" in by["error", "Tills", None].message
    assert by["offline", "Tills", None].message.startswith("12% of Tills offline for 2 h or more (120 of 1,000")
    assert len({a.key for a in alerts}) == len(alerts)
    # below the threshold: no offline alert
    assert not [a for a in Evaluator(AlertsConfig(devices_offline_percent=15)).evaluate(st, rollup, [], T0)
                if a.name == "offline"]
    fleet = Fleet.of(st["subscriptions"], rollup["subscriptions"])
    tally = fleet.groups["Tills"]
    assert tally.devices == 1000 and tally.states == {"offline": 120, "error": 7, "idle": 873}
    assert tally.worst == "error" and tally.why.startswith("till-120: ")
    worst = fleet.worst_partitions(3)
    assert [t.worst for _, _, t in worst] == ["error"] * 3 and len(fleet.partitions) == 50
    assert sum(t.devices for t in fleet.partitions.values()) == 1000


def test_an_enrolled_device_expires_by_its_groups_retention():
    """A device group that keeps its devices 3 days in a publication that keeps subscriptions 10: a till quiet for 5
    hours is offline, not expiring soon (2.8 days of 3 are left); one quiet for 2.5 days is expiring soon."""
    def till(hours: float) -> dict:
        last = T0 - dt.timedelta(hours=hours)
        return device(f"till-{hours}", group="Tills", retention=3, last_sync=last.isoformat(),
                      expires_at=(last + dt.timedelta(days=3)).isoformat())
    rolled = roll_up(status_of(till(5), till(60)), AlertsConfig(), set(), T0)["subscriptions"]
    assert rolled["till-5"]["state"] == "offline" and rolled["till-60"]["state"] == "expiring soon", rolled
