"""The monitor is right when all is well: on the demo's own configuration (Sales merged every 30 s, Territories
every minute, Reports continuous, the web till expected every 15 minutes) a healthy round of its agents shows no
error and nothing performance critical, on the page and in the alerts: a change that waits for the next scheduled
run of its agent is not late, and a device that has not synced since is offline, not critical. The agents run
here in the test's process, one round each as ``serve`` would, the merge metadata's clock moved on between them
(tests/support/clock.py): no ``serve`` process, no Spark job (every round is small)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from sparksync.config import AlertsConfig, Topology
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.monitor import page
from sparksync.monitor.alerts import Evaluator
from sparksync.monitor.rollup import cadences_of, roll_up
from sparksync.monitor.view import build_view
from sparksync.monitor.watch import NoAgents
from sparksync.progress import silent
from sparksync.status import gather_status
from sparksync.topology import load_config
from sparksync.transactional.delivery.agent import DistributeOptions, DistributionAgent
from sparksync.transactional.distribution.logreader import READ_BATCH, read_publication
from tests.support.clock import advance
from tests.support.service import sql

pytestmark = pytest.mark.spark

RED = ("error", "performance critical")
ALERTS = AlertsConfig(latency_s=30)             # the rating's default threshold, as an alert too


class Demo:
    """The demo's topology as ``serve`` runs it, and the moves of a test: its agents' runs, the clock."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.topology: Topology = load_config(folder / "sparksync.toml")
        merge_subs = [s for s in self.topology.direct_subscriptions
                      if self.topology.publication(s.publication).kind == "merge"]
        self.urls = [self.topology.publisher_url] + [self.topology.subscriber_url(s) for s in merge_subs]
        (self.till,), = sql(folder / "hq.db", "SELECT subscription FROM MSweb_devices")   # the till that enrolled

    def merge(self, publication: str) -> None:
        subs = [s.name for s in self.topology.subscriptions_of(publication)]
        summary = MergeAgent(self.topology, None, silent).run(MergeOptions(subscriptions=subs))
        assert summary.ok, [e for s in summary.subscriptions for e in s.errors]

    def reports(self) -> None:
        read_publication(self.topology, "Reports", READ_BATCH, silent)
        run = DistributionAgent(self.topology, None, silent).run(DistributeOptions(["Reporting"]))
        assert all(s.ok for s in run.subscriptions), [s.message for s in run.subscriptions]

    def later(self, seconds: float) -> None:
        """Time passes for merge replication: every time its metadata recorded moves ``seconds`` back."""
        advance(self.urls, seconds / 86400)

    def rolled(self, alerts: AlertsConfig = ALERTS, scheduled: bool = True) -> tuple[dict, dict]:
        status = gather_status(self.topology)
        now = dt.datetime.now(dt.UTC)
        return status, roll_up(status, alerts, set(), now, cadences_of(self.topology) if scheduled else None)


def states(rollup: dict) -> dict[str, str]:
    return {name: r["state"] for kind in ("publications", "subscriptions") for name, r in rollup[kind].items()}


def test_a_healthy_round_of_the_demo_shows_no_red(service_demo):
    demo = Demo(service_demo)
    # t = -5 s: Territories' round; t = 0: an application writes at HQ (a Canada customer: for Canada, the till
    # and the stores), and Sales' round carries it to the stores; the log reader and the distribution agent run
    demo.merge("Territories")
    demo.later(5)
    sql(service_demo / "hq.db", "UPDATE Customer SET EmailAddress = 'rated@adventure-works.com' WHERE CustomerID = "
                                "(SELECT min(CustomerID) FROM Customer WHERE Territory = 'Canada')")
    demo.merge("Sales")
    demo.reports()
    # t = 25 s: Sales' next round, with nothing to carry; t = 30 s: an application writes at Store2
    demo.later(25)
    demo.merge("Sales")
    demo.reports()
    demo.later(5)
    sql(service_demo / "store2.db", "UPDATE Vendor SET Name = 'rated at Store2' WHERE rowid = "
                                    "(SELECT min(rowid) FROM Vendor)")
    demo.later(20)

    # t = 50 s: Canada's change has waited 50 s for Territories' run due at 55 s, Store2's for Sales' at 55 s
    status, rollup = demo.rolled()
    subs = rollup["subscriptions"]
    assert not {n: s for n, s in states(rollup).items() if s in RED}, rollup
    assert subs["Canada"]["latency_s"] >= 50 and subs["Canada"]["late_s"] == 0, subs["Canada"]
    store2 = next(e for e in status["subscriptions"] if e["name"] == "Store2")
    assert store2["pending_upload"] == 1 and store2["upload_in_open_generation"], store2
    assert subs["Store2"]["late_s"] == 0 and subs["Store2"]["rating"] == "excellent", subs["Store2"]
    assert subs[demo.till]["state"] in ("idle", "offline"), subs[demo.till]   # offline: the demo was built 15 min ago
    assert not Evaluator(ALERTS).evaluate(status, rollup, [], dt.datetime.now(dt.UTC))
    # the same state rated without the schedules (the whole wait counts): what the operator saw before
    _, unscheduled = demo.rolled(scheduled=False)
    assert unscheduled["subscriptions"]["Canada"]["state"] == "performance critical"
    assert unscheduled["publications"]["Territories"]["state"] == "performance critical"

    # t = 55 s: both merge agents' rounds; then the till stays away for 16 minutes while the agents keep up
    demo.merge("Territories")
    demo.merge("Sales")
    demo.reports()
    demo.later(16 * 60)
    status, rollup = demo.rolled()
    assert not {n: s for n, s in states(rollup).items() if s in RED}, rollup
    till = rollup["subscriptions"][demo.till]
    assert till["state"] == "offline" and till["latency_s"] > 15 * 60 and till["rating"] is None, till
    assert rollup["publications"]["Territories"]["state"] == "idle"
    assert not Evaluator(ALERTS).evaluate(status, rollup, [], dt.datetime.now(dt.UTC))

    # the page says the same: no red state, the till (enrolled into group Tills) offline since its last sync, counted
    # in its group and partition; a search for it finds it, with its last syncs
    html = page.render(build_view(demo.topology, NoAgents(), None, demo.till), ALERTS.latency_s, "main")
    shown = dict(re.findall(r'data-(?:publication|subscription)="([\w-]+)" data-state="([^"]+)"', html))
    assert set(shown) == {"Sales", "Territories", "Reports", "Store1", "Store2", "Store3", "Northwest", "Canada",
                          "Reporting"}
    assert not {n: s for n, s in shown.items() if s in RED}, shown
    assert "s-error" not in html and "s-performance-critical" not in html
    assert re.search(r'<tr data-group="Tills" data-state="offline" data-devices="1">', html), html
    assert re.search(r'<tr data-group="Tills" data-partition="[^"]+" data-state="offline" data-devices="1">', html), html
    device = re.search(rf'<tr data-device="{demo.till}" data-state="offline">.*?</tr>', html, re.S)
    assert device is not None and "offline</span> since" in device.group(0) and ">15m<" in device.group(0), html
    runs = re.search(rf'<tr class="runs" data-runs-of="{demo.till}">.*?</table>', html, re.S)
    assert runs is not None and 'data-status="succeeded"' in runs.group(0), html
