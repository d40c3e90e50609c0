"""Configuration of transactional replication: the distributor, article commands and filters,
subscription knobs, and the rules between them (each problem with its key path)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from sparksync.errors import ConfigurationError
from sparksync.topology import parse_topology


def data() -> dict:
    return copy.deepcopy({
        "distributor": {"database": "sqlite:///distribution.db"},
        "publisher": {"name": "HQ", "database": "postgresql://postgres@127.0.0.1:5432/hq"},
        "publications": [{
            "name": "Purchasing", "kind": "transactional",
            "articles": [{"table": "Purchasing.Vendor", "ins_cmd": "CALL sp_MSins_PurchasingVendor",
                          "upd_cmd": "SCALL sp_MSupd_PurchasingVendor", "del_cmd": "CALL sp_MSdel_PurchasingVendor",
                          "filter": "ActiveFlag = 1",
                          "columns": ["VendorID", "AccountNumber", "Name", "CreditRating", "ActiveFlag"]}],
        }],
        "subscriptions": [{"name": "Reporting", "publication": "Purchasing",
                           "database": "postgresql://postgres@127.0.0.1:5432/reporting",
                           "commit_batch_size": 100, "commit_batch_threshold": 1000, "subscription_streams": 4,
                           "skip_errors": ["2601", "2627", "20598"]}],
    })


def problems(d: dict) -> list[str]:
    with pytest.raises(ConfigurationError) as ei:
        parse_topology(d, Path("/tmp"))
    return ei.value.problems


def test_the_issue_example_parses():
    topo = parse_topology(data(), Path("/tmp"))
    pub = topo.publication("Purchasing")
    assert pub.kind == "transactional"
    a = pub.articles[0]
    assert (a.ins_cmd, a.upd_cmd, a.del_cmd) == ("CALL sp_MSins_PurchasingVendor", "SCALL sp_MSupd_PurchasingVendor",
                                                 "CALL sp_MSdel_PurchasingVendor")
    assert a.filter == "ActiveFlag = 1" and a.columns[0] == "VendorID"
    s = topo.subscription("Reporting")
    assert (s.commit_batch_size, s.commit_batch_threshold, s.subscription_streams, s.skip_errors) == \
        (100, 1000, 4, ["2601", "2627", "20598"])
    assert topo.distributor.max_distretention == 72.0
    assert topo.distributor_url == "sqlite:///" + str(Path("/tmp/distribution.db").resolve())


def test_defaults():
    d = data()
    d["subscriptions"][0] = {"name": "Reporting", "publication": "Purchasing", "database": "sqlite:///r.db"}
    d["publications"][0]["articles"] = [{"table": "Vendor"}]
    topo = parse_topology(d, Path("/tmp"))
    s = topo.subscription("Reporting")
    assert (s.commit_batch_size, s.commit_batch_threshold, s.subscription_streams, s.subscription_streams_threshold,
            s.skip_errors) == (1000, 10_000, 1, 5000, [])


def test_a_transactional_publication_needs_a_distributor():
    d = data()
    del d["distributor"]
    assert any(p.startswith("distributor: required key is missing") and "Purchasing" in p for p in problems(d))


@pytest.mark.parametrize("key,value,expect", [
    ("upd_cmd", "DCALL sp_x", "unknown call syntax 'DCALL'"),
    ("ins_cmd", "SCALL sp_x", "SCALL cannot be used for inserts"),
    ("del_cmd", "MCALL sp_x", "MCALL cannot be used for deletes"),
    ("upd_cmd", "SCALL", "use 'SCALL procedure_name'"),
    ("upd_cmd", "SQL extra", "SQL takes no procedure name"),
    ("ins_cmd", 'CALL sp"x', "not allowed"),
])
def test_bad_commands_are_refused_with_their_key_path(key, value, expect):
    d = data()
    d["publications"][0]["articles"][0][key] = value
    (p,) = problems(d)
    assert p.startswith("publications[0] (Purchasing).articles[0] (Purchasing.Vendor): ") and expect in p, p


def test_merge_keys_on_a_transactional_article_and_the_reverse():
    d = data()
    d["publications"][0]["articles"][0]["column_tracking"] = True
    (p,) = problems(d)
    assert "column_tracking is for merge publications" in p
    d = data()
    d["publications"][0]["kind"] = "merge"
    d["publications"][0]["articles"] = [{"table": "Vendor", "columns": ["x"]}]
    assert any("columns is for transactional publications" in p for p in problems(d))
    d["publications"][0]["articles"] = [{"table": "Vendor", "filter": "x = HOST_NAME()",
                                         "join_filters": [{"parent": "Vendor", "clause": "a.x = b.x"}]}]
    assert not [p for p in problems(d) if "filter" in p]      # row and join filters are merge keys too
    d["publications"][0]["kind"] = "transactional"
    assert any("join_filters is for merge publications" in p for p in problems(d))


def test_subscription_keys_of_the_other_kind():
    d = data()
    d["subscriptions"][0]["priority"] = 10
    d["subscriptions"][0]["subscriber_type"] = "global"
    ps = problems(d)
    assert any(p.startswith("subscriptions[0] (Reporting): priority, subscriber_type are for merge subscriptions")
               for p in ps), ps


def test_sqlite_subscribers_have_no_procedures_and_one_writer():
    d = data()
    d["subscriptions"][0]["database"] = "sqlite:///reporting.db"
    ps = problems(d)
    assert "subscriptions[0] (Reporting).subscription_streams: a SQLite subscriber has one writer at a time; use 1" in ps
    assert any("ins_cmd 'CALL sp_MSins_PurchasingVendor': this subscriber has no stored procedures; use \"SQL\"" in p
               for p in ps), ps
    d["subscriptions"][0]["subscription_streams"] = 1
    for op in ("ins", "upd", "del"):
        d["publications"][0]["articles"][0][f"{op}_cmd"] = "SQL"
    parse_topology(d, Path("/tmp"))


@pytest.mark.parametrize("field,value,expect", [
    ("commit_batch_size", 0, "greater than or equal to 1"),
    ("commit_batch_threshold", 1_000_001, "less than or equal to 1000000"),
    ("subscription_streams_threshold", -1, "greater than or equal to 0"),
    ("subscription_streams", 65, "less than or equal to 64"),
    ("skip_errors", ["dup"], "is not an error number"),
])
def test_subscription_knob_ranges(field, value, expect):
    d = data()
    d["subscriptions"][0][field] = value
    ps = problems(d)
    assert any(p.startswith(f"subscriptions[0] (Reporting).{field}") and expect in p for p in ps), ps


def test_columns_and_filter_shapes():
    d = data()
    d["publications"][0]["articles"][0]["columns"] = ["VendorID", "vendorid"]
    assert any("a column is listed twice" in p for p in problems(d))
    d = data()
    d["publications"][0]["articles"][0]["filter"] = "  "
    assert any("filter: empty" in p for p in problems(d))


def test_distributor_retention_and_database_rules():
    d = data()
    d["distributor"]["min_distretention"] = 100
    assert any("min_distretention cannot be larger than max_distretention" in p for p in problems(d))
    d = data()
    d["distributor"]["database"] = "postgresql://postgres@127.0.0.1:5432/reporting"
    assert "subscriptions[0] (Reporting).database: is the distribution database" in problems(d)


def test_each_agent_serves_the_subscriptions_of_its_kind():
    d = data()
    d["publications"].append({"name": "Sales", "articles": [{"table": "Customer"}]})
    d["subscriptions"].append({"name": "Store1", "publication": "Sales", "database": "sqlite:///store1.db"})
    topo = parse_topology(d, Path("/tmp"))
    served = topo.subscriptions_by_publication("transactional", None)
    assert [(p.name, [s.name for s in subs]) for p, subs in served] == [("Purchasing", ["Reporting"])]
    served = topo.subscriptions_by_publication("merge", ["Store1"])
    assert [(p.name, [s.name for s in subs]) for p, subs in served] == [("Sales", ["Store1"])]
    with pytest.raises(ConfigurationError, match="subscription Store1 belongs to merge publication Sales, "
                                                 "not a transactional one"):
        topo.subscriptions_by_publication("transactional", ["Store1"])
    with pytest.raises(ConfigurationError, match="subscription Reporting belongs to transactional publication "
                                                 "Purchasing, not a merge one"):
        topo.subscriptions_by_publication("merge", ["Reporting"])
    from sparksync.cli.common import check_subscriptions  # the commands name the one to use
    with pytest.raises(ConfigurationError, match="Purchasing; use 'sparksync distribute'"):
        check_subscriptions(topo, ["Reporting"], "merge", other_command="distribute")
    with pytest.raises(ConfigurationError, match="no subscription named 'Nope'"):
        topo.subscriptions_by_publication("merge", ["Nope"])
